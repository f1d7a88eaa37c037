// Attention: the tiled kernel per segment scheme (forward, backward) against the machine's
// sgemm and against full causal attention in the same run, and the attention branch
// (projections included) for peak workspace and decoding.
//
// Counters:
//   GFLOP/s     4·visible·Dh·H per forward (QKᵀ and PV over the visible score entries);
//               backward counted as 2.5× forward (S recomputed, dV, dP, dQ, dK), as FlashAttention does
//   vs_sgemm    GFLOP/s ÷ raw cblas_sgemm 2048³ GFLOP/s on the same threads, same run
//   time_vs_full   time ÷ full-causal time at the same T, same run (sliding window, ECP)
#include <benchmark/benchmark.h>

#include <chrono>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <hybridseq/core.hpp>
#include <hybridseq/kernels/attention/attention.hpp>
#include <hybridseq/layers/attention.hpp>

#include "registry.hpp"
#include "support/attention_problem.hpp"
#include "support/timing.hpp"

namespace hybridseq::bench {
namespace {

namespace att = kernels::attention;

template <class Space>
using Problem = AttentionProblem<Space>;
constexpr int heads = Problem<Kokkos::Serial>::default_heads, head_dim = Problem<Kokkos::Serial>::default_head_dim;

template <class Space>
int threads() {
  return core::compat::concurrency(Space{});
}

/// Raw cblas_sgemm 2048³ GFLOP/s with the space's thread count, measured once per process.
template <class Space>
double sgemm_gflops() {
  static double cached = 0;
  if (cached > 0) return cached;
  const int n = 2048;
  std::vector<float> a(std::size_t(n) * n, 0.5f), b(std::size_t(n) * n, 0.25f), c(std::size_t(n) * n);
  openblas_set_num_threads(threads<Space>());
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  kernels::detail::blas_threads(-1);
  return cached = 2.0 * n * n * double(n) / best * 1e-9;
}

/// Seconds per call of each scheme's forward at each T, as measured by its own benchmark in
/// this run: full causal's entry is what `time_vs_full` divides by.
template <class Space>
std::map<std::pair<std::string, std::int64_t>, double>& measured() {
  static std::map<std::pair<std::string, std::int64_t>, double> m;
  return m;
}

/// The (B, H, Dh) a kernel benchmark runs at: the long-sequence default, or a text_lm training
/// step's attention (B = 16, 4 heads of 32 at T = 128: every tile there is on or next to the
/// band's edge).
struct Batch {
  std::int64_t batch;
  int heads, head_dim;
};
constexpr Batch long_sequence{1, heads, head_dim}, text_lm_step{16, 4, 32};

template <class Scheme, class Space, bool Backward, Batch Shape = long_sequence>
void kernel_benchmark(benchmark::State& state) {
  const std::int64_t t = state.range(0);
  Problem<Space> p(t, Shape.batch, Shape.heads, Shape.head_dim);
  const auto a = p.args();
  const auto g = p.grads();
  att::forward(Space{}, a, Scheme::band);  // backward reads O and LSE; also a warm-up
  Space().fence();
  double total = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    if constexpr (Backward)
      att::backward(Space{}, a, g, Scheme::band);
    else
      att::forward(Space{}, a, Scheme::band);
    Space().fence();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(s);
    total += s;
  }
  const double secs = total / double(state.iterations());
  const double flops = (Backward ? 2.5 : 1.0) * 4.0 * double(att::visible_entries<Scheme>(t)) * double(Shape.batch) *
                       Shape.head_dim * Shape.heads;
  state.counters["GFLOP/s"] = flops / secs * 1e-9;
  state.counters["visible_entries"] = double(att::visible_entries<Scheme>(t));
  state.counters["visible_vs_causal"] =
      double(att::visible_entries<Scheme>(t)) / double(att::visible_entries<att::Causal>(t));
  state.counters["vs_sgemm"] = flops / secs * 1e-9 / sgemm_gflops<Space>();
  if constexpr (!Backward && Shape.batch == long_sequence.batch) {
    measured<Space>()[{Scheme::name, t}] = secs;
    if constexpr (!std::is_same_v<Scheme, att::Causal>) {
      const auto full = measured<Space>().find({att::Causal::name, t});
      if (full != measured<Space>().end()) state.counters["time_vs_full"] = secs / full->second;
    }
  }
}

/// The attention branch (D = 512, H = 8, Dh = 64, GQA with 2 kv heads, RoPE): forward +
/// backward with the exact peak of its workspace, and decoding throughput.
template <class Scheme, class Space>
using Branch = layers::Attention<layers::AttentionShape{512, heads, 2, head_dim, head_dim}, Scheme, float, Space>;

template <class Scheme, class Space>
void branch_fwd_bwd(benchmark::State& state) {
  const std::int64_t t = state.range(0);
  Branch<Scheme, Space> layer;
  core::initialize(layer, 1);
  core::Workspace<Space> ws;
  Tensor<float***, Space> x("x", 1, t, 512), y("y", 1, t, 512), dy("dy", 1, t, 512), dx("dx", 1, t, 512);
  core::fill(Space{}, core::flat(x), core::Init::normal(1.0), 1, 1);
  core::fill(Space{}, core::flat(dy), core::Init::normal(1.0), 1, 2);
  for (auto _ : state) {
    core::WorkspaceScope scope(ws);
    typename Branch<Scheme, Space>::Saved saved;
    layer.forward(ws, x, y, saved);
    layer.backward(ws, saved, dy, dx);
    Space().fence();
  }
  state.counters["peak_workspace_bytes"] = double(ws.peak_bytes());
  state.counters["peak_bytes_per_token"] = double(ws.peak_bytes()) / double(t);
  state.counters["tokens/s"] = per_second(double(t));
}

template <class Scheme, class Space>
void branch_step(benchmark::State& state) {
  const std::int64_t t = state.range(0);
  Branch<Scheme, Space> layer;
  core::initialize(layer, 1);
  core::Workspace<Space> ws;
  auto cache = layer.make_state(1, t + 1);
  Tensor<float***, Space> x("x", 1, t, 512), y("y", 1, t, 512), x1("x1", 1, 1, 512), y1("y1", 1, 1, 512);
  core::fill(Space{}, core::flat(x), core::Init::normal(1.0), 1, 1);
  layer.prefill(ws, cache, x, y);
  for (auto _ : state) {
    layer.prefill(ws, cache, x1, y1);
    layer.truncate(cache, t);  // every step decodes position t against a cache of t tokens
    Space().fence();
  }
  state.counters["tokens/s"] = per_second(1.0);
}

template <class Space>
void register_space() {
  const std::string sfx = space_suffix<Space>();
  const auto lengths = [](benchmark::internal::Benchmark* b) {
    for (int t : {256, 1024, 4096, 8192}) b->Arg(t);
    b->ArgName("T")->Unit(benchmark::kMillisecond)->UseManualTime();
  };
  // Full causal first: the other schemes' time_vs_full divide by its time from this run.
  const auto kernels = [&]<bool Backward>() {
    const std::string kind = Backward ? "attention_bwd/" : "attention_fwd/";
    const auto add = [&]<class Scheme>(const char* scheme) {
      benchmark::RegisterBenchmark((kind + scheme + sfx).c_str(), kernel_benchmark<Scheme, Space, Backward>)
          ->Apply(lengths);
    };
    add.template operator()<att::Causal>("causal");
    add.template operator()<att::SlidingWindow<256>>("sliding_window:256");
    add.template operator()<att::EcpPairs<256>>("ecp:256");
  };
  kernels.template operator()<false>();
  kernels.template operator()<true>();
  // A text_lm training step's attention (text_lm's Transformer and ECP), forward and backward.
  const auto step_kernels = [&]<class Scheme>(const char* scheme) {
    for (const bool backward : {false, true})
      benchmark::RegisterBenchmark((std::string(backward ? "attention_bwd/" : "attention_fwd/") + scheme + sfx).c_str(),
                                   backward ? kernel_benchmark<Scheme, Space, true, text_lm_step>
                                            : kernel_benchmark<Scheme, Space, false, text_lm_step>)
          ->Arg(128)
          ->ArgName("T")
          ->Unit(benchmark::kMicrosecond)
          ->UseManualTime();
  };
  step_kernels.template operator()<att::Causal>("text_lm_causal:B16H4Dh32");
  step_kernels.template operator()<att::EcpPairs<32>>("text_lm_ecp:32:B16H4Dh32");
  benchmark::RegisterBenchmark(("attention_branch_fwd_bwd/causal" + sfx).c_str(), branch_fwd_bwd<att::Causal, Space>)
      ->Arg(1024)
      ->Arg(4096)
      ->Arg(8192)
      ->ArgName("T")
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark(("attention_step/causal" + sfx).c_str(), branch_step<att::Causal, Space>)
      ->Arg(256)
      ->Arg(1024)
      ->Arg(4096)
      ->Arg(8192)
      ->ArgName("T")
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
}

const Registration registration([] { for_each_host_space([]<class Space>() { register_space<Space>(); }); });

}  // namespace
}  // namespace hybridseq::bench
