// The ECP paper's cost comparison, measured: for T ∈ {1024, 2048, 4096, 8192}, each model's
// attention (every layer's attention kernel calls, forward) against full causal attention
// at the same T, in the same run. Configuration shared by all models: L = 4 layers,
// H = 8 heads × Dh = 64, segment / latents m = M = 256, s-Split segments of 256, compressed
// history c = (T − M)/4.
//
//   transformer        L × Causal(T)
//   ecp                L × EcpPairs<m>(T)
//   perceiver_ar       PerceiverCross<M>(T) + (L−1) × Causal(M)
//   double             L × [Bidirectional(T − M) + PerceiverCross<M>(T)]
//   s_split            L × [SSplit<256>(T − M) + PerceiverCross<M>(T)]
//   compressed_double  Bidirectional(T − M) + PerceiverCross<M>(T) + (L−1) × [Bidirectional(c) + PerceiverCross<M>(c +
//   M)]
//
// Counters:
//   entries_vs_causal  Σ visible score entries ÷ those of L × Causal(T) (exact, from the schemes)
//   entries_vs_n2      Σ visible entries ÷ L·T² — the paper's measure ("ECP: 12% of n²")
//   paper_blocks_vs_n2 ECP only: m × m blocks counted whole, (2Tm − m²)/T² = 12.1 % at (4096, 256)
//   time_vs_causal     measured time ÷ L × causal kernel time (tiles above the diagonal skipped)
//   time_vs_dense      measured time ÷ L × the time of all T² entries (what dense attention with
//                      a causal mask computes, as the reference PyTorch code does)
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <hybridseq/core.hpp>
#include <hybridseq/kernels/attention/attention.hpp>
#include <hybridseq/kernels/attention/segment_schemes.hpp>
#include <hybridseq/models/cost_model.hpp>

#include "registry.hpp"
#include "support/attention_problem.hpp"
#include "support/timing.hpp"

namespace hybridseq::bench {
namespace {

namespace att = kernels::attention;

constexpr int layers = 4, m = 256;

/// One attention kernel call of a model: `Scheme` over `keys` positions, `count` times.
template <class Space>
struct KernelCall {
  std::int64_t keys = 0, queries = 0, visible = 0, count = 1;
  void (*run)(const Space&, const att::AttentionArgs<float>&) = nullptr;
};

template <class Scheme, class Space>
KernelCall<Space> call(std::int64_t keys, std::int64_t count = 1) {
  return {keys, Scheme::query_count(keys), att::visible_entries<Scheme>(keys), count,
          [](const Space& exec, const att::AttentionArgs<float>& a) { att::forward(exec, a, Scheme::band); }};
}

template <class Space>
std::vector<KernelCall<Space>> plan(const std::string& model, std::int64_t t) {
  const std::int64_t h = t - m, c = h / 4;
  using Latent = att::PerceiverCross<m>;
  if (model == "transformer") return {call<att::Causal, Space>(t, layers)};
  if (model == "ecp") return {call<att::EcpPairs<m>, Space>(t, layers)};
  if (model == "perceiver_ar") return {call<Latent, Space>(t), call<att::Causal, Space>(m, layers - 1)};
  if (model == "double") return {call<att::Bidirectional, Space>(h, layers), call<Latent, Space>(t, layers)};
  if (model == "s_split") return {call<att::SSplit<256>, Space>(h, layers), call<Latent, Space>(t, layers)};
  if (model == "compressed_double")
    return {call<att::Bidirectional, Space>(h), call<Latent, Space>(t), call<att::Bidirectional, Space>(c, layers - 1),
            call<Latent, Space>(c + m, layers - 1)};
  fail<config_error>("hybridseq-bench ecp_family", "unknown model '", model, "'");
}

template <class Space>
double run_plan(const std::vector<KernelCall<Space>>& calls, const AttentionProblem<Space>& p) {
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& k : calls)
    for (std::int64_t i = 0; i < k.count; ++i) k.run(Space{}, p.args(k.keys, k.queries));
  Space().fence();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Seconds of one causal (or dense) layer at T, measured once per process and reused by every
/// model's ratio.
template <class Space, class Scheme>
double baseline_seconds(const AttentionProblem<Space>& p) {
  static std::map<std::int64_t, double> cache;
  auto it = cache.find(p.n);
  if (it != cache.end()) return it->second;
  const double s = seconds_per_call<Space>([&] { att::forward(Space{}, p.args(), Scheme::band); }, 1, 2);
  return cache[p.n] = s;
}

template <class Space>
void model_attention(benchmark::State& state, const std::string& model) {
  const std::int64_t t = state.range(0);
  const AttentionProblem<Space> p(t);
  const auto calls = plan<Space>(model, t);
  std::int64_t visible = 0;
  for (const auto& k : calls) visible += k.count * k.visible;
  const double causal = layers * baseline_seconds<Space, att::Causal>(p);
  const double dense = layers * baseline_seconds<Space, att::Bidirectional>(p);
  run_plan(calls, p);  // warm-up
  double total = 0;
  for (auto _ : state) {
    const double s = run_plan(calls, p);
    state.SetIterationTime(s);
    total += s;
  }
  const double secs = total / double(state.iterations());
  state.counters["entries_vs_causal"] = double(visible) / double(layers * att::visible_entries<att::Causal>(t));
  state.counters["entries_vs_n2"] = double(visible) / (double(layers) * double(t) * double(t));
  if (model == "ecp") state.counters["paper_blocks_vs_n2"] = models::cost::ecp_score_fraction(t, m);
  state.counters["time_vs_causal"] = secs / causal;
  state.counters["time_vs_dense"] = secs / dense;
}

template <class Space>
void register_space() {
  const std::string sfx = space_suffix<Space>();
  for (const char* model : {"transformer", "ecp", "perceiver_ar", "double", "s_split", "compressed_double"}) {
    benchmark::RegisterBenchmark(("ecp_family_attention/" + std::string(model) + sfx).c_str(),
                                 [model](benchmark::State& s) { model_attention<Space>(s, model); })
        ->Arg(1024)
        ->Arg(2048)
        ->Arg(4096)
        ->Arg(8192)
        ->ArgName("T")
        ->Unit(benchmark::kMillisecond)
        ->UseManualTime()
        ->Iterations(2);
  }
}

const Registration registration([] { for_each_host_space([]<class Space>() { register_space<Space>(); }); });

}  // namespace
}  // namespace hybridseq::bench
