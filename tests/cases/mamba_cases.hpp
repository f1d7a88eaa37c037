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

/// Options with a short scan chunk, so that T = 7 and T = 13 span several chunks, the last one
/// partial, and backward recomputes from stored states.
template <class L>
typename L::Options mamba_options(int chunk) {
  typename L::Options o;
  o.scan_chunk = chunk;
  return o;
}

struct MambaSmall {
  template <class T, class S>
  using Layer = layers::Mamba<mamba_small, T, S>;
  static constexpr const char* name = "mamba";
  static constexpr const char* golden = "mamba";
  static constexpr int batch = 2, time = 7;
  template <class L>
  static typename L::Options options() {
    return mamba_options<L>(3);
  }
};
struct MambaT1 {
  template <class T, class S>
  using Layer = layers::Mamba<mamba_small, T, S>;
  static constexpr const char* name = "mamba_t1";
  static constexpr const char* golden = "mamba_t1";
  static constexpr int batch = 3, time = 1;
};
struct MambaT13 {
  template <class T, class S>
  using Layer = layers::Mamba<mamba_odd, T, S>;
  static constexpr const char* name = "mamba_t13";
  static constexpr const char* golden = "mamba_t13";
  static constexpr int batch = 2, time = 13;
  template <class L>
  static typename L::Options options() {
    return mamba_options<L>(4);
  }
};

/// The same layers against goldens produced by Hugging Face transformers' MambaMixer (its
/// torch path) on the same parameters and inputs as mamba / mamba_t13.
struct MambaHf {
  template <class T, class S>
  using Layer = layers::Mamba<mamba_small, T, S>;
  static constexpr const char* name = "mamba_hf";
  static constexpr const char* golden = "mamba_hf";
  static constexpr int batch = 2, time = 7;
  template <class L>
  static typename L::Options options() {
    return mamba_options<L>(3);
  }
};
struct MambaHfT13 {
  template <class T, class S>
  using Layer = layers::Mamba<mamba_odd, T, S>;
  static constexpr const char* name = "mamba_hf_t13";
  static constexpr const char* golden = "mamba_hf_t13";
  static constexpr int batch = 2, time = 13;
  template <class L>
  static typename L::Options options() {
    return mamba_options<L>(4);
  }
};

using MambaCases = CaseList<MambaSmall, MambaT1, MambaT13>;
using MambaHfCases = CaseList<MambaHf, MambaHfT13>;

}  // namespace hybridseq::cases
