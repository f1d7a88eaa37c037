#pragma once
// Case descriptions of the primitive layers: one line of configuration per case feeds the
// gradient check, the PyTorch golden comparison, the save/load round trip (tests/layers) and
// the microbenchmarks (bench/). ggml's test-backend-ops habit.
//
// A case is a struct with:
//   template <class T, class Space> using Layer = ...;   the layer under test
//   name        stable case name (also the benchmark family)
//   golden      golden file stem in tests/golden, or "" for none
//   batch, time extents for the gradient check and round trip
//   options()   runtime options (must match the golden's config)
// and optionally `forward(layer, ws, x, y, saved)` when the layer needs a non-default call.

#include <string_view>

#include <hybridseq/layers.hpp>

#include "case_list.hpp"

namespace hybridseq::cases {

using namespace hybridseq::layers;

template <class L, class Opt = typename L::Options>
Opt default_options() {
  return Opt{};
}

struct LinearBias {
  template <class T, class S>
  using Layer = Linear<LinearShape{5, 7, true}, T, S>;
  static constexpr const char* name = "linear_bias";
  static constexpr const char* golden = "linear_bias";
  static constexpr int batch = 2, time = 3;
};
struct LinearNoBias {
  template <class T, class S>
  using Layer = Linear<LinearShape{8, 3, false}, T, S>;
  static constexpr const char* name = "linear_nobias";
  static constexpr const char* golden = "linear_nobias";
  static constexpr int batch = 2, time = 3;
};
struct RmsNormCase {
  template <class T, class S>
  using Layer = RmsNorm<6, T, S>;
  static constexpr const char* name = "rmsnorm";
  static constexpr const char* golden = "rmsnorm";
  static constexpr int batch = 2, time = 3;
};
struct LayerNormCase {
  template <class T, class S>
  using Layer = LayerNorm<6, T, S>;
  static constexpr const char* name = "layernorm";
  static constexpr const char* golden = "layernorm";
  static constexpr int batch = 2, time = 3;
};
struct RopeFull {
  template <class T, class S>
  using Layer = Rope<RopeShape{3, 8, 8}, T, S>;
  static constexpr const char* name = "rope_full";
  static constexpr const char* golden = "rope_full";
  static constexpr int batch = 2, time = 5;
};
struct RopePartial {
  template <class T, class S>
  using Layer = Rope<RopeShape{2, 16, rotary_dim_for(16, 0.25)}, T, S>;
  static constexpr const char* name = "rope_partial";
  static constexpr const char* golden = "rope_partial";
  static constexpr int batch = 2, time = 5;
  template <class L>
  static typename L::Options options() {
    return {.base = 500.0};
  }
  // The golden continues a sequence: positions 3 .. 3 + T − 1.
  template <class L, class Ws, class X, class Y>
  static void forward(const L& layer, Ws& ws, X x, Y y, typename L::Saved& saved) {
    layer.forward_at(ws, x, y, saved, 3);
  }
};
template <Activation A, const char* Name>
struct ActivationCase {
  template <class T, class S>
  using Layer = ActivationLayer<A, 5, T, S>;
  static constexpr const char* name = Name;
  static constexpr const char* golden = Name;
  static constexpr int batch = 2, time = 3;
};
inline constexpr char gelu_name[] = "gelu", gelu_tanh_name[] = "gelu_tanh", silu_name[] = "silu",
                      softplus_name[] = "softplus";
struct FfnGelu {
  template <class T, class S>
  using Layer = Ffn<FfnShape{6, 10}, T, S>;
  static constexpr const char* name = "ffn_gelu";
  static constexpr const char* golden = "ffn_gelu";
  static constexpr int batch = 2, time = 3;
};
struct FfnSwiglu {
  template <class T, class S>
  using Layer = Ffn<swiglu(6, 8), T, S>;
  static constexpr const char* name = "ffn_swiglu";
  static constexpr const char* golden = "ffn_swiglu";
  static constexpr int batch = 2, time = 3;
};
struct DualFfnCase {
  template <class T, class S>
  using Layer = DualFfn<dual_ffn(6, 12, 4), T, S>;
  static constexpr const char* name = "dual_ffn";
  static constexpr const char* golden = "dual_ffn";
  static constexpr int batch = 2, time = 3;
};
struct EmbeddingCase {
  template <class T, class S>
  using Layer = Embedding<EmbeddingShape{11, 4}, T, S>;
  static constexpr const char* name = "embedding";
  static constexpr const char* golden = "embedding";
  static constexpr int batch = 2, time = 5;
};
struct LmHeadCase {
  template <class T, class S>
  using Layer = LmHeadLoss<LmHeadShape{6, 13}, T, S>;
  static constexpr const char* name = "lm_head_ce";
  static constexpr const char* golden = "lm_head_ce";
  static constexpr int batch = 2, time = 4;
  template <class L>
  static typename L::Options options() {
    return {.init_std = 0.5, .ignore_index = -100, .chunk_rows = 3};  // 3: chunks split rows unevenly
  }
};

// Larger shapes: odd extents, several LM-head chunks; no golden, gradient-checked on sampled
// entries and benchmarked.
struct LinearWide {
  template <class T, class S>
  using Layer = Linear<LinearShape{33, 17, true}, T, S>;
  static constexpr const char* name = "linear_33x17";
  static constexpr const char* golden = "";
  static constexpr int batch = 3, time = 7;
};
struct LmHeadWide {
  template <class T, class S>
  using Layer = LmHeadLoss<LmHeadShape{16, 50}, T, S>;
  static constexpr const char* name = "lm_head_ce_50";
  static constexpr const char* golden = "";
  static constexpr int batch = 3, time = 9;
  template <class L>
  static typename L::Options options() {
    return {.init_std = 0.3, .ignore_index = -1, .chunk_rows = 4};
  }
};

using PrimitiveCases =
    CaseList<LinearBias, LinearNoBias, RmsNormCase, LayerNormCase, RopeFull, RopePartial,
             ActivationCase<Activation::gelu, gelu_name>, ActivationCase<Activation::gelu_tanh, gelu_tanh_name>,
             ActivationCase<Activation::silu, silu_name>, ActivationCase<Activation::softplus, softplus_name>, FfnGelu,
             FfnSwiglu, DualFfnCase, EmbeddingCase, LmHeadCase, LinearWide, LmHeadWide>;

}  // namespace hybridseq::cases

namespace hybridseq::cases {

// Benchmark shapes (GPT-2-small widths). Also gradient-checked at (batch, time) so the
// configurations the benchmarks time are the configurations the tests verify.
struct LinearBench256x768 {
  template <class T, class S>
  using Layer = Linear<LinearShape{256, 768, true}, T, S>;
  static constexpr const char* name = "linear/256x768";
  static constexpr const char* golden = "";
  static constexpr int batch = 1, time = 2, bench_time = 4096;
  static constexpr double forward_flops(double rows) { return 2.0 * rows * 256 * 768; }
};
struct LinearBench768x3072 {
  template <class T, class S>
  using Layer = Linear<LinearShape{768, 3072, true}, T, S>;
  static constexpr const char* name = "linear/768x3072";
  static constexpr const char* golden = "";
  static constexpr int batch = 1, time = 2, bench_time = 4096;
  static constexpr double forward_flops(double rows) { return 2.0 * rows * 768 * 3072; }
};
struct RmsNormBench {
  template <class T, class S>
  using Layer = RmsNorm<768, T, S>;
  static constexpr const char* name = "rmsnorm/768";
  static constexpr const char* golden = "";
  static constexpr int batch = 1, time = 2, bench_time = 4096;
  static constexpr double forward_flops(double rows) { return 4.0 * rows * 768; }
};
struct FfnBench {
  template <class T, class S>
  using Layer = Ffn<FfnShape{768, 3072}, T, S>;
  static constexpr const char* name = "ffn_gelu/768x3072";
  static constexpr const char* golden = "";
  static constexpr int batch = 1, time = 2, bench_time = 1024;
  static constexpr double forward_flops(double rows) { return 4.0 * rows * 768 * 3072; }
};
struct SwigluBench {
  template <class T, class S>
  using Layer = Ffn<swiglu(768, 2048), T, S>;
  static constexpr const char* name = "ffn_swiglu/768x2048";
  static constexpr const char* golden = "";
  static constexpr int batch = 1, time = 2, bench_time = 1024;
  static constexpr double forward_flops(double rows) { return 6.0 * rows * 768 * 2048; }
};
struct LmHeadBench {
  template <class T, class S>
  using Layer = LmHeadLoss<LmHeadShape{768, 8192}, T, S>;
  static constexpr const char* name = "lm_head_ce/768x8192";
  static constexpr const char* golden = "";
  static constexpr int batch = 1, time = 2, bench_time = 1024;
  static constexpr double forward_flops(double rows) { return 2.0 * rows * 768 * 8192; }
};

using BenchCases = CaseList<LinearBench256x768, LinearBench768x3072, RmsNormBench, FfnBench, SwigluBench, LmHeadBench>;

}  // namespace hybridseq::cases
