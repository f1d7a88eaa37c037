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
#include <hybridseq/kernels/reference/selective_scan.hpp>
#include <hybridseq/kernels/selective_scan.hpp>
#include <hybridseq/layers/mamba.hpp>

#include "registry.hpp"
#include "support/bench_harness.hpp"
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

constexpr int scan_n = 16;

template <class Space>
struct ScanInputs {
  int b, t, di;
  Tensor<float***, Space> u, dt, bc, dy, y, du, ddt, dbc;  // bc: (B, T, 2N), B | C
  Tensor<float*, Space> dt_bias, d_skip, dd_skip, ddt_bias;
  Tensor<float**, Space> a_log, da_log;
  Tensor<float****, Space> chunks;

  ScanInputs(int b_, int t_, int di_)
      : b(b_),
        t(t_),
        di(di_),
        u("u", b_, t_, di_),
        dt("dt", b_, t_, di_),
        bc("bc", b_, t_, 2 * scan_n),
        dy("dy", b_, t_, di_),
        y("y", b_, t_, di_),
        du("du", b_, t_, di_),
        ddt("ddt", b_, t_, di_),
        dbc("dbc", b_, t_, 2 * scan_n),
        dt_bias("dt_bias", di_),
        d_skip("D", di_),
        dd_skip("dD", di_),
        ddt_bias("ddt_bias", di_),
        a_log("A_log", di_, scan_n),
        da_log("dA_log", di_, scan_n),
        chunks("chunks", b_, kernels::scan_chunks(t_, kernels::scan_default_chunk), di_, scan_n) {
    const Space exec{};
    core::fill(exec, core::flat(u), core::Init::normal(1.0), 7, 1);
    core::fill(exec, core::flat(dt), core::Init::normal(1.0, -2.0), 7, 2);  // Δ mostly 0.05 … 0.7
    core::fill(exec, core::flat(bc), core::Init::normal(1.0), 7, 3);
    core::fill(exec, core::flat(dy), core::Init::normal(1.0), 7, 4);
    core::fill(exec, core::flat(dt_bias), core::Init::normal(0.1), 7, 5);
    core::fill(exec, core::flat(d_skip), core::Init::ones(), 7, 6);
    core::fill(exec, core::flat(a_log), core::Init::log_index(scan_n), 7, 7);
    exec.fence();
  }
  template <class V>
  static auto cols(const V& v, int begin) {
    return Kokkos::subview(v, Kokkos::ALL, Kokkos::ALL, std::make_pair(begin, begin + scan_n));
  }
  void forward() {
    kernels::selective_scan_forward<scan_n, float>(Space{}, u, dt, dt_bias, a_log, cols(bc, 0), cols(bc, scan_n),
                                                   d_skip, {}, y, chunks, {});
  }
  void backward(core::Workspace<Space>& ws) {
    kernels::selective_scan_backward<scan_n, float>(Space{}, ws, u, dt, dt_bias, a_log, cols(bc, 0), cols(bc, scan_n),
                                                    d_skip, chunks, dy, du, ddt, da_log, cols(dbc, 0),
                                                    cols(dbc, scan_n), dd_skip, ddt_bias);
  }
  void reference_forward() {
    Tensor<float***, Space> h("h", b, di, scan_n);
    kernels::reference::selective_scan_forward<float>(u, dt, dt_bias, a_log, cols(bc, 0), cols(bc, scan_n), d_skip, h,
                                                      y);
  }
  void reference_backward() {
    kernels::reference::selective_scan_backward<float>(u, dt, dt_bias, a_log, cols(bc, 0), cols(bc, scan_n), d_skip, dy,
                                                       du, ddt, da_log, cols(dbc, 0), cols(dbc, scan_n), dd_skip,
                                                       ddt_bias);
  }
  double updates() const { return double(b) * t * di * scan_n; }
};

template <class Space, bool Backward>
void selective_scan(benchmark::State& state) {
  ScanInputs<Space> in(1, static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
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
