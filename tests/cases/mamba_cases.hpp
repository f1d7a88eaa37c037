#pragma once
// Case descriptions of the Mamba-1 branch (same form as primitive_cases.hpp): each feeds the
// double gradient check, the PyTorch golden comparison and the save/load round trip
// (tests/branches/test_mamba.cpp); the benchmark shapes live in bench/mamba_benchmarks.cpp.

#include <hybridseq/layers/mamba.hpp>

#include "primitive_cases.hpp"

namespace hybridseq::cases {

/// D = 8, N = 4, Di = 16, K = 4, R = 2: the shape of mamba*.safetensors.
inline constexpr layers::MambaShape mamba_small{.d_model = 8, .d_state = 4, .expand = 2, .d_conv = 4, .dt_rank = 2};
/// Odd N, K = 3, default dt_rank (⌈6/16⌉ = 1), projection biases on, no conv bias.
inline constexpr layers::MambaShape mamba_odd{
    .d_model = 6, .d_state = 3, .expand = 2, .d_conv = 3, .dt_rank = 0, .conv_bias = false, .bias = true};

/// A short scan chunk, so that T = 7 and T = 13 span several chunks, the last one partial,
/// and backward recomputes from stored states.
template <layers::MambaShape Shape, CaseName Name, int Batch, int Time, int ScanChunk>
struct MambaChunkedCase : ShapedCase<layers::Mamba, Shape, Name, Batch, Time> {
  template <class Layer>
  static typename Layer::Options options() {
    typename Layer::Options o;
    o.scan_chunk = ScanChunk;
    return o;
  }
};

using MambaSmall = MambaChunkedCase<mamba_small, "mamba", 2, 7, 3>;
using MambaT1 = ShapedCase<layers::Mamba, mamba_small, "mamba_t1", 3, 1>;
using MambaT13 = MambaChunkedCase<mamba_odd, "mamba_t13", 2, 13, 4>;

/// The same layers against goldens produced by Hugging Face transformers' MambaMixer (its
/// torch path) on the same parameters and inputs as mamba / mamba_t13.
using MambaHf = MambaChunkedCase<mamba_small, "mamba_hf", 2, 7, 3>;
using MambaHfT13 = MambaChunkedCase<mamba_odd, "mamba_hf_t13", 2, 13, 4>;

using MambaCases = CaseList<MambaSmall, MambaT1, MambaT13>;
using MambaHfCases = CaseList<MambaHf, MambaHfT13>;

}  // namespace hybridseq::cases
