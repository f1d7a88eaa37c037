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

using LinearBias = ShapedCase<Linear, LinearShape{5, 7, true}, "linear_bias", 2, 3>;
using LinearNoBias = ShapedCase<Linear, LinearShape{8, 3, false}, "linear_nobias", 2, 3>;
using RmsNormCase = ShapedCase<RmsNorm, 6, "rmsnorm", 2, 3>;
using LayerNormCase = ShapedCase<LayerNorm, 6, "layernorm", 2, 3>;
using RopeFull = ShapedCase<Rope, RopeShape{3, 8, 8}, "rope_full", 2, 5>;
struct RopePartial : ShapedCase<Rope, RopeShape{2, 16, rotary_dim_for(16, 0.25)}, "rope_partial", 2, 5> {
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
template <Activation A>
struct ActivationOf5 {
  template <class T, class S>
  using Layer = ActivationLayer<A, 5, T, S>;
};
template <Activation A, CaseName Name>
struct ActivationCase : LayerCase<ActivationOf5<A>::template Layer, Name, 2, 3> {};  // not an alias: see ShapedCase
using FfnGelu = ShapedCase<Ffn, FfnShape{6, 10}, "ffn_gelu", 2, 3>;
using FfnSwiglu = ShapedCase<Ffn, swiglu(6, 8), "ffn_swiglu", 2, 3>;
using DualFfnCase = ShapedCase<DualFfn, dual_ffn(6, 12, 4), "dual_ffn", 2, 3>;
using EmbeddingCase = ShapedCase<Embedding, EmbeddingShape{11, 4}, "embedding", 2, 5>;
struct LmHeadCase : ShapedCase<LmHeadLoss, LmHeadShape{6, 13}, "lm_head_ce", 2, 4> {
  template <class L>
  static typename L::Options options() {
    return {.init_std = 0.5, .ignore_index = -100, .chunk_rows = 3};  // 3: chunks split rows unevenly
  }
};

// Larger shapes: odd extents, several LM-head chunks; no golden, gradient-checked on sampled
// entries and benchmarked.
using LinearWide = ShapedCase<Linear, LinearShape{33, 17, true}, "linear_33x17", 3, 7, false>;
struct LmHeadWide : ShapedCase<LmHeadLoss, LmHeadShape{16, 50}, "lm_head_ce_50", 3, 9, false> {
  template <class L>
  static typename L::Options options() {
    return {.init_std = 0.3, .ignore_index = -1, .chunk_rows = 4};
  }
};

using PrimitiveCases =
    CaseList<LinearBias, LinearNoBias, RmsNormCase, LayerNormCase, RopeFull, RopePartial,
             ActivationCase<Activation::gelu, "gelu">, ActivationCase<Activation::gelu_tanh, "gelu_tanh">,
             ActivationCase<Activation::silu, "silu">, ActivationCase<Activation::softplus, "softplus">, FfnGelu,
             FfnSwiglu, DualFfnCase, EmbeddingCase, LmHeadCase, LinearWide, LmHeadWide>;

}  // namespace hybridseq::cases

namespace hybridseq::cases {

// Benchmark shapes (GPT-2-small widths). Also gradient-checked at (batch, time) so the
// configurations the benchmarks time are the configurations the tests verify.
/// A benchmark case: checked at (1, 2), timed at `BenchTime` rows; `FlopsPerRow` for FLOP/s.
template <template <auto, class, class> class L, auto Shape, CaseName Name, int BenchTime, double FlopsPerRow>
struct BenchCase : ShapedCase<L, Shape, Name, 1, 2, false> {
  static constexpr int bench_time = BenchTime;
  static constexpr double forward_flops(double rows) { return FlopsPerRow * rows; }
};
using LinearBench256x768 = BenchCase<Linear, LinearShape{256, 768, true}, "linear/256x768", 4096, 2.0 * 256 * 768>;
using LinearBench768x3072 = BenchCase<Linear, LinearShape{768, 3072, true}, "linear/768x3072", 4096, 2.0 * 768 * 3072>;
using RmsNormBench = BenchCase<RmsNorm, 768, "rmsnorm/768", 4096, 4.0 * 768>;
using FfnBench = BenchCase<Ffn, FfnShape{768, 3072}, "ffn_gelu/768x3072", 1024, 4.0 * 768 * 3072>;
using SwigluBench = BenchCase<Ffn, swiglu(768, 2048), "ffn_swiglu/768x2048", 1024, 6.0 * 768 * 2048>;
using LmHeadBench = BenchCase<LmHeadLoss, LmHeadShape{768, 8192}, "lm_head_ce/768x8192", 1024, 2.0 * 768 * 8192>;

using BenchCases = CaseList<LinearBench256x768, LinearBench768x3072, RmsNormBench, FfnBench, SwigluBench, LmHeadBench>;

}  // namespace hybridseq::cases
