#pragma once
// Timing helpers shared by every benchmark file: the name suffix that records the execution
// space and its thread count, and a fenced best-of-N wall-clock timer for ratios measured
// inside one benchmark (Google Benchmark does not expose its own timer to user counters).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string>

#include <hybridseq/core/kokkos_compat.hpp>

namespace hybridseq::bench {

template <class Space>
std::string space_suffix() {
  return std::string("/space:") + Space::name() + "/threads:" + std::to_string(core::compat::concurrency(Space{}));
}

/// Seconds per call of `f`: the best of `repeats` fenced batches of `iters` calls, after one
/// warm-up call.
template <class Space, class F>
double seconds_per_call(F&& f, int iters, int repeats = 3) {
  double best = 1e30;
  f();
  Space().fence();
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) f();
    Space().fence();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters);
  }
  return best;
}

/// A counter of `amount` (FLOP, bytes, tokens) per iteration, reported per second.
inline benchmark::Counter per_second(double amount) {
  return benchmark::Counter(amount, benchmark::Counter::kIsIterationInvariantRate);
}

/// The benchmark loop of a layer harness: `h.forward()` or, with Backward, `h.backward()` once
/// per iteration, fenced; then tokens/s for `tokens` per pass and the harness's arena peak.
template <class Space, bool Backward, class Harness>
void time_passes(benchmark::State& state, Harness& h, double tokens) {
  for (auto _ : state) {
    if constexpr (Backward)
      h.backward();
    else
      h.forward();
    Space().fence();
  }
  state.counters["tokens/s"] = per_second(tokens);
  state.counters["peak_workspace_bytes"] = double(h.peak_workspace_bytes());
}

}  // namespace hybridseq::bench
