#pragma once
// Case descriptions of the GSS branch (same contract as primitive_cases.hpp): each feeds the
// gradient check, the PyTorch golden comparison and the save/load round trip in
// tests/branches/test_gss.cpp. Every shape is run through both mixing algorithms against the
// same golden file, so the FFT path and the recurrence are each checked against PyTorch.

#include <hybridseq/layers/gss.hpp>

#include "primitive_cases.hpp"

namespace hybridseq::cases {

template <int B, int T, int KernelChunk, int ScanChunk, kernels::DssAlgorithm A, const char* Name, const char* Golden>
struct GssCase {
  // E=6, F=8, H=5, N=4: every width different, none a multiple of the 8-lane mode loop.
  template <class TT, class S>
  using Layer = layers::Gss<layers::GssShape{6, 8, 5, 4}, TT, S>;
  static constexpr const char* name = Name;
  static constexpr const char* golden = Golden;
  static constexpr int batch = B, time = T;
  template <class L>
  static typename L::Options options() {
    typename L::Options o;
    o.norm_eps = 1e-5;  // the goldens' LayerNorm eps
    o.mixing = A;
    o.kernel_chunk = KernelChunk;
    o.scan_chunk = ScanChunk;
    return o;
  }
};

inline constexpr char gss_name[] = "gss", gss_scan_name[] = "gss_scan", gss_t17_name[] = "gss_t17",
                      gss_t17_scan_name[] = "gss_t17_scan", gss_t1_name[] = "gss_t1",
                      gss_t1_scan_name[] = "gss_t1_scan";
inline constexpr char gss_golden[] = "gss", gss_t17_golden[] = "gss_t17", gss_t1_golden[] = "gss_t1";

using kernels::DssAlgorithm;
// B=2, T=7: one Vandermonde chunk (256 > T); the scan checkpoints every ⌈√7⌉ = 3 steps.
using GssSmall = GssCase<2, 7, 256, 0, DssAlgorithm::fft, gss_name, gss_golden>;
using GssSmallScan = GssCase<2, 7, 256, 0, DssAlgorithm::scan, gss_scan_name, gss_golden>;
// B=2, T=17: Vandermonde chunks of 5 (4 chunks, the last partial); scan chunks of 4 (5 chunks, last of 1).
using GssT17 = GssCase<2, 17, 5, 0, DssAlgorithm::fft, gss_t17_name, gss_t17_golden>;
using GssT17Scan = GssCase<2, 17, 5, 4, DssAlgorithm::scan, gss_t17_scan_name, gss_t17_golden>;
// B=3, T=1: a single token, the smallest FFT (M = 4).
using GssT1 = GssCase<3, 1, 256, 0, DssAlgorithm::fft, gss_t1_name, gss_t1_golden>;
using GssT1Scan = GssCase<3, 1, 256, 0, DssAlgorithm::scan, gss_t1_scan_name, gss_t1_golden>;

using GssCases = CaseList<GssSmall, GssSmallScan, GssT17, GssT17Scan, GssT1, GssT1Scan>;

}  // namespace hybridseq::cases
