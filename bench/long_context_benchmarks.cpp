// Long-context efficiency (issue 16; the PHA paper's headline): whole models of one parameter
// count (~7.89 M, d = 256, vocabulary 256) from T = 1024 to 8192, with the batch sized so that
// every step holds the same number of tokens (B·T = tokens):
//
//   pha             PHA, 4 blocks of GSS ‖ GQA 8/2 × 32 ‖ Dual-FFN (1024 + 256), the paper's defaults
//                   for GSS (F = 4d, H = 256, N = 512)
//   pha[attn+ffn]   attention-only, the same block: PHA's attention and Dual-FFN branches, norms,
//                   mixer and DeepNorm, without GSS; its primary FFN widened to 3200 to take the
//                   GSS parameters (so it differs from PHA by exactly the GSS branch)
//   transformer     attention-only, GPT-NeoX: 10 layers of MHA 8 × 32 + MLP 996 (width matched,
//                   depth set by the parameter count)
//   ecp             10 ECP blocks, segments m = 256, MHA 8 × 32, FFN 997
//   ssm-tf          [SSM, TF] × 6: Mamba-1 (expand 2, N = 16) then NeoX with a sliding window
//                   of 256 keys, MLP 1150
//
// Benchmarks (real time; the build's default execution space only — these are whole-model
// runs of seconds each, and Serial would add compile time but no information):
//   long_context_train/<model>/T:<t>/tokens:<n>     zero_grad + forward + backward + AdamW step
//   long_context_forward/<model>/T:<t>/tokens:<n>   forward with the loss (LanguageModel::evaluate)
//   long_context_decode/<model>/position:<p>        one token (LanguageModel::prefill of 1) after p
//                                                   tokens; every iteration decodes position p
//                                                   (state restored from a snapshot, untimed).
//                                                   No p is a multiple of ECP's m: the ring's shift,
//                                                   once per m tokens, is not in these times
// Counters:
//   tokens/s                  tokens per second of the step
//   peak_workspace_bytes      the arena's exact high-water mark (activations + scratch)
//   peak:<group>              the bytes each group of allocation labels held at that peak
//                             (gss, attention, ffn, mamba, norms, composition, head, other)
//   parameter_bytes, gradient_bytes, optimizer_bytes   values, gradients, AdamW's m and v (fp32)
//   parameters                the parameter count
//   flops:<branch>, entries:<branch>   the forward cost of each branch kind summed over the
//                             model (matrix products and FFTs, 2 per multiply-add; score
//                             entries visible under the branch's scheme, × B × heads)
//   us_per_token              decoding: microseconds per token at that position
// The table, plot and ratios: scripts/long_context.py (docs/results.md). The smoke run in
// ctest (bench/CMakeLists.txt) takes T = 256 with 256 tokens and position 64.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <hybridseq/core.hpp>
#include <hybridseq/kernels/dss.hpp>
#include <hybridseq/models.hpp>
#include <hybridseq/train/adamw.hpp>

#include "registry.hpp"
#include "support/timing.hpp"
#include "support/tokens.hpp"

namespace hybridseq::bench {
namespace {

namespace schemes = layers::schemes;
using Space = DefaultSpace;

constexpr int V = 256, D = 256, heads = 8, head_dim = 32, window = 256, segment = 256;

// ---- the models ------------------------------------------------------------------------------

constexpr models::PhaShape pha_shape = models::pha_shape(D, heads, 2);
constexpr models::PhaShape attention_only_shape = [] {
  models::PhaShape s = pha_shape;
  s.ffn_primary = 3200;
  return s;
}();
using AttentionFfn = models::PhaBranchList<models::pha_branch::Attention, models::pha_branch::DualFfn>;
constexpr layers::MambaShape mamba_shape{.d_model = D};

/// Forward cost of a model's branches of one kind (summed over its layers).
struct BranchCost {
  std::string branch;
  double entries = 0;  // visible score entries × B × heads
  double flops = 0;
};

/// Matrix-product and FFT FLOPs of each branch kind, forward, over (b, t); 2 per multiply-add.
/// Norms, softmax, activations and other element-wise work are O(B·T·D) and not counted.
namespace flops {
inline double linear(double rows, double in, double out) {
  return 2 * rows * in * out;
}
/// Q, K, V (kv heads of their own), the scores and P·V over `entries` per (row, head), W_o.
inline double attention(double b, double t, double h, double kv, double entries) {
  return linear(b * t, D, (h + 2 * kv) * head_dim) + 4 * b * h * head_dim * entries + linear(b * t, h * head_dim, D);
}
inline double ffn(double b, double t, double f) {
  return linear(b * t, D, f) + linear(b * t, f, D);
}
/// GSS: the four projections, the SSM kernel K = V·C̃ᵀ and the FFT convolution (2.5·M·log₂M
/// per real FFT of length M; as bench/gss_benchmarks.cpp counts it).
inline double gss(double b, double t) {
  const double e = D, f = pha_shape.gss_gate, h = pha_shape.gss_ssm, n = pha_shape.gss_state;
  const double m = double(kernels::dss_fft_size(std::int64_t(t))), fft = 2.5 * m * std::log2(m);
  return linear(b * t, e, f) + linear(b * t, e, h) + linear(b * t, h, f) + linear(b * t, f, e) + 2 * t * 2 * n * h +
         h * ((2 * b + 1) * fft + 6 * b * (m / 2 + 1));
}
/// Mamba-1: in_proj, the causal conv, x_proj, dt_proj, out_proj and the selective scan
/// (7 per state update: discretise, update, read out).
inline double mamba(double b, double t) {
  const double di = mamba_shape.expand * D, n = mamba_shape.d_state, r = layers::mamba_dt_rank(mamba_shape);
  return linear(b * t, D, 2 * di) + 2 * b * t * di * mamba_shape.d_conv + linear(b * t, di, r + 2 * n) +
         linear(b * t, r, di) + 7 * b * t * di * n + linear(b * t, di, D);
}
inline double head(double b, double t) {
  return linear(b * t, D, V);
}
}  // namespace flops

template <class Scheme>
double entries(double b, double t, double h) {
  return b * h * double(schemes::visible_entries<Scheme>(std::int64_t(t)));
}

/// `depth` attention layers of `Scheme` with `kv_heads` key/value heads: score entries and FLOPs.
template <class Scheme>
BranchCost attention_cost(int depth, double b, double t, int kv_heads) {
  return {"attention", depth * entries<Scheme>(b, t, heads),
          depth * flops::attention(b, t, heads, kv_heads, entries<Scheme>(1, t, 1))};
}

// Each model: its name, type, depth (Options::body.count) and its forward cost by branch.
struct PhaModel {
  static constexpr std::string_view name = "pha";
  using type = models::Pha<V, pha_shape, models::PhaLayout{}, float, Space>;
  static constexpr int depth = 4;
  static std::vector<BranchCost> costs(double b, double t) {
    return {{"gss", 0, depth * flops::gss(b, t)},
            attention_cost<schemes::Causal>(depth, b, t, pha_shape.kv_heads),
            {"ffn", 0, depth * flops::ffn(b, t, pha_shape.ffn_primary + pha_shape.ffn_auxiliary)},
            {"head", 0, flops::head(b, t)}};
  }
};

struct PhaAttentionOnlyModel {
  static constexpr std::string_view name = "pha[attn+ffn]";
  using type = models::Pha<V, attention_only_shape, models::PhaLayout{}, float, Space, AttentionFfn>;
  static constexpr int depth = 4;
  static std::vector<BranchCost> costs(double b, double t) {
    const auto s = attention_only_shape;
    return {attention_cost<schemes::Causal>(depth, b, t, s.kv_heads),
            {"ffn", 0, depth * flops::ffn(b, t, s.ffn_primary + s.ffn_auxiliary)},
            {"head", 0, flops::head(b, t)}};
  }
};

struct TransformerModel {
  static constexpr std::string_view name = "transformer";
  static constexpr int mlp = 996;
  using type = models::Transformer<V, models::NeoxShape{D, heads, head_dim, head_dim, mlp}, float, Space>;
  static constexpr int depth = 10;
  static std::vector<BranchCost> costs(double b, double t) {
    return {attention_cost<schemes::Causal>(depth, b, t, heads),
            {"ffn", 0, depth * flops::ffn(b, t, mlp)},
            {"head", 0, flops::head(b, t)}};
  }
};

struct EcpModel {
  static constexpr std::string_view name = "ecp";
  static constexpr int ffn = 997;
  using type = models::Ecp<V, models::EcpShape{D, heads, head_dim, segment, ffn}, float, Space>;
  static constexpr int depth = 10;
  static std::vector<BranchCost> costs(double b, double t) {
    using Scheme = schemes::EcpPairs<segment>;
    return {attention_cost<Scheme>(depth, b, t, heads),
            {"ffn", 0, depth * flops::ffn(b, t, ffn)},
            {"head", 0, flops::head(b, t)}};
  }
};

struct SsmTfModel {
  static constexpr std::string_view name = "ssm-tf";
  static constexpr int mlp = 1150;
  using type =
      models::Stack<V, models::MambaLayer<mamba_shape, float, Space>,
                    models::NeoxLayer<models::NeoxShape{D, heads, head_dim, head_dim, mlp, window}, float, Space>>;
  static constexpr int depth = 6;
  static std::vector<BranchCost> costs(double b, double t) {
    using Scheme = schemes::SlidingWindow<window>;
    return {{"mamba", 0, depth * flops::mamba(b, t)},
            attention_cost<Scheme>(depth, b, t, heads),
            {"ffn", 0, depth * flops::ffn(b, t, mlp)},
            {"head", 0, flops::head(b, t)}};
  }
};

/// The model at its depth, every KV cache large enough for the longest decode, initialised.
template <class Model>
struct Built {
  using M = typename Model::type;
  static typename M::Options options() {
    typename M::Options o;
    o.body.count = Model::depth;
    core::for_each_option<layers::AttentionOptions>(o, [](auto& a) { a.max_cache = 8192 + 64; });
    return o;
  }
  M model{options()};
  Built() { core::initialize(model, 16); }
};

// ---- measurement -----------------------------------------------------------------------------

/// Which group of the model an allocation label belongs to (its prefix before the first '.').
std::string label_group(std::string_view label) {
  static const std::map<std::string_view, std::string_view> groups{{"gss", "gss"},
                                                                   {"dss", "gss"},
                                                                   {"attention", "attention"},
                                                                   {"rope", "attention"},
                                                                   {"ecp", "attention"},
                                                                   {"ffn", "ffn"},
                                                                   {"dual_ffn", "ffn"},
                                                                   {"mamba", "mamba"},
                                                                   {"selective_scan", "mamba"},
                                                                   {"conv1d", "mamba"},
                                                                   {"rmsnorm", "norms"},
                                                                   {"layernorm", "norms"},
                                                                   {"parallel_block", "composition"},
                                                                   {"sequential_block", "composition"},
                                                                   {"residual", "composition"},
                                                                   {"deepnorm", "composition"},
                                                                   {"repeat", "composition"},
                                                                   {"segment_piece", "composition"},
                                                                   {"lm", "head"},
                                                                   {"lm_head", "head"}};
  const auto it = groups.find(label.substr(0, label.find('.')));
  return std::string(it == groups.end() ? "other" : it->second);
}

/// Token ids and next-token targets (B, T), a fixed pseudo-random pattern.
struct Tokens {
  Tensor<std::int32_t**, Space> ids, targets;
  Tokens(std::int64_t b, std::int64_t t) : ids("ids", b, t), targets("targets", b, t) {
    bench::fill_tokens<Space>(ids, V);
    bench::fill_tokens<Space>(targets, V, 1);  // the next token of the same pattern
  }
};

template <class Model>
void memory_counters(benchmark::State& state, typename Model::type& model, const core::Workspace<Space>& ws, double b,
                     double t) {
  const double params = double(core::parameter_count(model)), bytes = params * sizeof(float);
  state.counters["parameters"] = params;
  state.counters["parameter_bytes"] = bytes;
  state.counters["gradient_bytes"] = bytes;
  state.counters["optimizer_bytes"] = 2 * params * sizeof(float);  // AdamW's m and v, fp32
  state.counters["peak_workspace_bytes"] = double(ws.peak_bytes());
  std::map<std::string, double> groups;
  for (const auto& [label, held] : ws.peak_by_label()) groups[label_group(label)] += double(held);
  for (const auto& [group, held] : groups) state.counters["peak:" + group] = held;
  for (const auto& c : Model::costs(b, t)) {
    state.counters["flops:" + c.branch] = c.flops;
    if (c.entries > 0) state.counters["entries:" + c.branch] = c.entries;
  }
}

template <class Model, bool Train>
void step_benchmark(benchmark::State& state) {
  const std::int64_t t = state.range(0), b = state.range(1) / t;
  Built<Model> built;
  auto& model = built.model;
  const Tokens tokens(b, t);
  core::Workspace<Space> ws;
  if constexpr (Train) core::make_contiguous(model);  // as the Trainer does
  train::AdamW optimizer(model, train::AdamWOptions{});
  const auto step = [&] {
    if constexpr (Train) {
      core::zero_grad(model);
      model.train_step(ws, tokens.ids, tokens.targets);
      optimizer.step(1e-4);
    } else {
      benchmark::DoNotOptimize(model.evaluate(ws, tokens.ids, tokens.targets));
    }
    Space().fence();
  };
  for (auto _ : state) step();  // no warm-up: the first step's arena allocation is < 1 % of a step
  state.counters["tokens/s"] = per_second(double(b * t));
  memory_counters<Model>(state, model, ws, double(b), double(t));
}

template <class Model>
void decode_benchmark(benchmark::State& state) {
  const std::int64_t p = state.range(0);
  Built<Model> built;
  const auto& model = built.model;
  core::Workspace<Space> ws;
  auto st = model.make_state(1);
  const Tokens prompt(1, p), next(1, 1);
  Tensor<float***, Space> logits("logits", 1, p, V), logit("logit", 1, 1, V);
  model.prefill(ws, st, prompt.ids, logits);
  const auto at_p = model.snapshot(st);
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    model.prefill(ws, st, next.ids, logit);
    Space().fence();
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    model.restore(st, at_p);
  }
  state.counters["us_per_token"] =
      benchmark::Counter(1e-6, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// ---- registration ----------------------------------------------------------------------------

template <class Model>
void register_model(bool decode) {
  const std::string name(Model::name);
  const auto lengths = [](benchmark::internal::Benchmark* bm) {
    for (const int t : {1024, 2048, 4096, 8192}) bm->Args({t, 8192});
    bm->Args({256, 256})->ArgNames({"T", "tokens"})->Unit(benchmark::kMillisecond)->UseRealTime();
  };
  benchmark::RegisterBenchmark(("long_context_train/" + name).c_str(), step_benchmark<Model, true>)->Apply(lengths);
  benchmark::RegisterBenchmark(("long_context_forward/" + name).c_str(), step_benchmark<Model, false>)->Apply(lengths);
  if (!decode) return;
  auto* bm = benchmark::RegisterBenchmark(("long_context_decode/" + name).c_str(), decode_benchmark<Model>);
  for (const int p : {64, 1000, 2000, 4000, 8191}) bm->Arg(p);
  bm->ArgName("position")->Unit(benchmark::kMicrosecond)->UseManualTime();
}

const Registration registration([] {
  register_model<PhaModel>(true);
  register_model<PhaAttentionOnlyModel>(false);  // its decoding is PHA's without GSS's state
  register_model<TransformerModel>(true);
  register_model<EcpModel>(true);
  register_model<SsmTfModel>(true);
});

}  // namespace
}  // namespace hybridseq::bench
