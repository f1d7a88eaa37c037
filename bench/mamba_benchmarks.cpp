// Mamba-1 benchmarks on every host execution space:
//   mamba_fwd / mamba_bwd / mamba_step at D = 256 (Di = 512, N = 16, K = 4, R = 16), B = 1,
//     T ∈ {256, 1024, 4096}: tokens/s and peak_workspace_bytes; step runs after a prefill
//     of T tokens (its cost must not depend on T);
//   selective_scan_fwd / selective_scan_bwd alone at B = 1, T = 4096, Di = 512, N = 16, with
//     the naive scalar oracle (kernels/reference/selective_scan.hpp) timed in the same run:
//     ns_per_update (per (t, d, n) state update), state_updates/s, speedup_vs_reference.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

#include <hybridseq/core.hpp>
#include <hybridseq/layers/mamba.hpp>

#include "registry.hpp"
#include "support/bench_harness.hpp"
#include "support/scan_problem.hpp"
#include "support/timing.hpp"

namespace hybridseq::bench {
namespace {

// ---- the layer ------------------------------------------------------------------------------

inline constexpr layers::MambaShape mamba_bench_shape{.d_model = 256};

struct MambaBench {
  template <class T, class S>
  using Layer = layers::Mamba<mamba_bench_shape, T, S>;
};

template <class Space, bool Backward>
void mamba_layer(benchmark::State& state) {
  const int t = static_cast<int>(state.range(0));
  Harness<MambaBench, Space> h(1, t);
  time_passes<Space, Backward>(state, h, t);
}

template <class Space>
void mamba_step(benchmark::State& state) {
  using L = MambaBench::Layer<float, Space>;
  const int t = static_cast<int>(state.range(0));
  L layer;
  core::initialize(layer, 42);
  core::Workspace<Space> ws;
  Tensor<float***, Space> prompt("prompt", 1, t, L::d_in), prompt_y("prompt_y", 1, t, L::d_out);
  Tensor<float***, Space> x("x", 1, 1, L::d_in), y("y", 1, 1, L::d_out);
  core::fill(Space{}, core::flat(prompt), core::Init::normal(1.0), 42, 1);
  core::fill(Space{}, core::flat(x), core::Init::normal(1.0), 42, 2);
  auto st = layer.make_state(1);
  layer.prefill(ws, st, prompt, prompt_y);
  ws.reset_peak();
  for (auto _ : state) {
    layer.step(ws, st, x, y);
    Space().fence();
  }
  state.counters["tokens/s"] = per_second(1);
  state.counters["peak_workspace_bytes"] = double(ws.peak_bytes());
  state.counters["position"] = double(st.position);
}

// ---- the selective scan alone ---------------------------------------------------------------

template <class Space, bool Backward>
void selective_scan(benchmark::State& state) {
  ScanProblem<Space> in(1, static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  core::Workspace<Space> ws;
  in.forward();
  auto run = [&] {
    if constexpr (Backward) {
      core::WorkspaceScope scope(ws);
      in.backward(ws);
    } else {
      in.forward();
    }
  };
  for (auto _ : state) {
    run();
    Space().fence();
  }
  // Optimised and reference timings in the same run, best of several calls each.
  const double optimised = seconds_per_call<Space>(run, 3, 5);
  const double reference = seconds_per_call<Space>(
      [&] {
        if constexpr (Backward)
          in.reference_backward();
        else
          in.reference_forward();
      },
      1, 2);
  state.counters["ns_per_update"] = optimised / in.updates() * 1e9;
  state.counters["reference_ns_per_update"] = reference / in.updates() * 1e9;
  state.counters["state_updates/s"] = per_second(in.updates());
  state.counters["speedup_vs_reference"] = reference / optimised;
  state.counters["peak_workspace_bytes"] = double(ws.peak_bytes());
}

template <class Space>
void register_space() {
  const std::string sfx = space_suffix<Space>();
  const std::string shape = "/D:256/Di:512/N:16";
  for (int t : {256, 1024, 4096}) {
    const std::string tt = "/T:" + std::to_string(t);
    benchmark::RegisterBenchmark(("mamba_fwd" + shape + tt + sfx).c_str(), mamba_layer<Space, false>)
        ->Arg(t)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("mamba_bwd" + shape + tt + sfx).c_str(), mamba_layer<Space, true>)
        ->Arg(t)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("mamba_step" + shape + tt + sfx).c_str(), mamba_step<Space>)
        ->Arg(t)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
  benchmark::RegisterBenchmark(("selective_scan_fwd/B:1/T:4096/Di:512/N:16" + sfx).c_str(),
                               selective_scan<Space, false>)
      ->Args({4096, 512})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark(("selective_scan_bwd/B:1/T:4096/Di:512/N:16" + sfx).c_str(), selective_scan<Space, true>)
      ->Args({4096, 512})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

const Registration registration([] { for_each_host_space([]<class Space>() { register_space<Space>(); }); });

}  // namespace
}  // namespace hybridseq::bench
