// GSS benchmarks (float, B = 1, every host execution space):
//   gss_mix/<fft|scan>/<fwd|bwd>/T:<t>   the DSS mixing alone (discretise + mix), H = 256, N = 512:
//                                        the measurement behind DssAlgorithm's default.
//   gss_fwd|gss_bwd/E:256/T:<t>          the whole branch at E = 256 with the reference defaults
//                                        (F = 1024, H = 256, N = 512), T = 256 … 8192; the T = 8192
//                                        forward carries cost_vs_T2048 = t(8192) / t(2048), both
//                                        timed in that benchmark (≤ 4 is linear).
//   gss_fwd_scan/E:256/T:<t>             the branch with mixing = scan, for comparison.
//   gss_step/E:256/B:<b>                 decoding: one token per sequence per call.
//   gss_prefill/E:256/T:<t>              a prompt from a fresh state (FFT path + state by GEMM).
// Counters: tokens/s, FLOP/s (the model in `Flops` below: GEMMs, FFTs, pointwise spectra,
// the recurrence; norms and activations are left out), peak_workspace_bytes (the arena's
// exact high-water mark: saved activations + scratch).
// Measuring note: on the 2-core development VM (Xeon, CPU model 207) OpenBLAS 0.3.21 detects
// "Prescott" and runs SSE3 sgemm kernels 3x slower; the numbers in kernels/dss.hpp were taken
// with OPENBLAS_CORETYPE=SkylakeX, best of 3 runs on otherwise idle cores.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include <hybridseq/core.hpp>
#include <hybridseq/kernels/dss.hpp>
#include <hybridseq/layers/gss.hpp>

#include "registry.hpp"
#include "support/timing.hpp"

namespace hybridseq::bench {
namespace {

constexpr layers::GssShape kShape = layers::gss_shape(256);  // E = 256, F = 1024, H = 256, N = 512
constexpr int E = kShape.d_model, F = kShape.d_gate, H = kShape.d_ssm, N = kShape.d_state;
using kernels::DssAlgorithm;

/// Counted floating-point operations (multiply and add count one each).
struct Flops {
  static double fft(double m) { return 2.5 * m * std::log2(m); }  // one real FFT of length M
  static double linears(double rows) {
    return 2.0 * rows * (double(E) * F + double(E) * H + double(H) * F + double(F) * E);
  }
  static double mix_forward(DssAlgorithm a, double b, double t) {
    if (a == DssAlgorithm::scan) return 11.0 * b * t * H * N;  // s ← a·s + u (7), Re(c̃·s) accumulated (4)
    const double m = double(kernels::dss_fft_size(std::int64_t(t))), half = m / 2 + 1;
    return 2.0 * t * 2 * N * H                             // K = V·C̃ᵀ
           + H * ((2 * b + 1) * fft(m) + 6.0 * b * half);  // K̂, û, (K̂·û)ˇ per channel
  }
  static double mix_backward(DssAlgorithm a, double b, double t) {
    if (a == DssAlgorithm::scan) return 37.0 * b * t * H * N;  // checkpoint pass 7, recompute 7, adjoint 23
    const double m = double(kernels::dss_fft_size(std::int64_t(t))), half = m / 2 + 1;
    return 2.0 * t * H * 4 * N                              // [dC̃ | dΛ] = dKᵀ·[V̄ | ℓV̄]
           + H * ((3 * b + 2) * fft(m) + 16.0 * b * half);  // K̂, dŷ, û; dû, dK̂ inverses
  }
  static double forward(DssAlgorithm a, double b, double t) { return linears(b * t) + mix_forward(a, b, t); }
  static double backward(DssAlgorithm a, double b, double t) { return 2 * linears(b * t) + mix_backward(a, b, t); }
};

// ---- the mixing alone --------------------------------------------------------------------

template <class Space>
class MixHarness {
 public:
  MixHarness(DssAlgorithm alg, int batch, int time)
      : alg_(alg),
        lre_("lre", N),
        lim_("lim", N),
        d_("d", H),
        glre_("glre", N),
        glim_("glim", N),
        gd_("gd", H),
        cre_("cre", H, N),
        cim_("cim", H, N),
        gcre_("gcre", H, N),
        gcim_("gcim", H, N),
        u_("u", batch, time, H),
        y_("y", batch, time, H),
        dy_("dy", batch, time, H),
        du_("du", batch, time, H) {
    const Space exec{};
    core::fill(exec, lre_, core::Init::normal(1.0), 1, 1);
    core::fill(exec, lim_, core::Init::normal(1.0), 1, 2);
    core::fill(exec, core::flat(cre_), core::Init::normal(1.0), 1, 3);
    core::fill(exec, core::flat(cim_), core::Init::normal(1.0), 1, 4);
    core::fill(exec, d_, core::Init::normal(1.0), 1, 5);
    core::fill(exec, core::flat(u_), core::Init::normal(1.0), 1, 6);
    core::fill(exec, core::flat(dy_), core::Init::normal(1.0), 1, 7);
    forward();
    ws_.reset_peak();
  }

  void forward() {
    ws_.release({});
    const Space exec{};
    modes_ = kernels::allocate_dss_modes<float>(ws_, H, N);
    kernels::dss_discretize<float>(exec, lre_, lim_, cre_, cim_, modes_);
    if (alg_ == DssAlgorithm::fft) {
      k_ = ws_.template allocate<float**>("k", u_.extent(1), H);
      kernels::dss_kernel_forward<float>(exec, ws_, modes_, k_);
      kernels::dss_conv_fft_forward<float>(exec, ws_, k_, u_, d_, y_);
    } else {
      core::WorkspaceScope scope(ws_);
      auto sr = ws_.template allocate_zeroed<float***>("s", u_.extent(0), H, N);
      auto si = ws_.template allocate_zeroed<float***>("s", u_.extent(0), H, N);
      kernels::dss_scan_forward<float>(exec, modes_, d_, u_, y_, sr, si);
    }
  }

  void backward() {
    core::WorkspaceScope scope(ws_);
    const Space exec{};
    auto mg = kernels::allocate_dss_mode_grads<float>(ws_, H, N);
    if (alg_ == DssAlgorithm::fft) {
      auto dk = ws_.template allocate<float**>("dk", u_.extent(1), H);
      kernels::dss_conv_fft_backward<float>(exec, ws_, k_, u_, d_, dy_, du_, dk, gd_);
      kernels::dss_kernel_backward<float>(exec, ws_, modes_, dk, mg);
    } else {
      kernels::dss_scan_backward<float>(exec, ws_, modes_, d_, u_, dy_, du_, mg, gd_);
    }
    kernels::dss_discretize_backward<float>(exec, lre_, lim_, cre_, cim_, mg, glre_, glim_, gcre_, gcim_);
  }

  std::size_t peak_workspace_bytes() const { return ws_.peak_bytes(); }

 private:
  DssAlgorithm alg_;
  core::Workspace<Space> ws_;
  Tensor<float*, Space> lre_, lim_, d_, glre_, glim_, gd_;
  Tensor<float**, Space> cre_, cim_, gcre_, gcim_;
  Tensor<float***, Space> u_, y_, dy_, du_;
  kernels::DssModes<float, Space> modes_;
  Tensor<float**, Space> k_;
};

template <class Space, bool Backward>
void mix_benchmark(benchmark::State& state, DssAlgorithm alg, int time) {
  MixHarness<Space> h(alg, 1, time);
  time_passes<Space, Backward>(state, h, time);
  state.counters["FLOP/s"] =
      per_second(Backward ? Flops::mix_backward(alg, 1, time) : Flops::mix_forward(alg, 1, time));
}

// ---- the branch --------------------------------------------------------------------------

template <class Space>
class LayerHarness {
 public:
  using L = layers::Gss<kShape, float, Space>;

  LayerHarness(DssAlgorithm alg, int batch, int time)
      : layer_(options(alg)),
        x_("x", batch, time, E),
        dx_("dx", batch, time, E),
        y_("y", batch, time, E),
        dy_("dy", batch, time, E) {
    core::initialize(layer_, 42);
    core::fill(Space{}, core::flat(x_), core::Init::normal(1.0), 42, 1);
    core::fill(Space{}, core::flat(dy_), core::Init::normal(1.0), 42, 2);
    forward();  // backward needs a forward's Saved
    ws_.reset_peak();
  }

  static typename L::Options options(DssAlgorithm alg) {
    typename L::Options o;
    o.mixing = alg;
    return o;
  }

  void forward() {
    ws_.release({});
    layer_.forward(ws_, x_, y_, saved_);
  }
  void backward() {
    core::WorkspaceScope scope(ws_);
    layer_.backward(ws_, saved_, dy_, dx_);
  }
  std::size_t peak_workspace_bytes() const { return ws_.peak_bytes(); }

 private:
  L layer_;
  core::Workspace<Space> ws_;
  typename L::Saved saved_;
  Tensor<float***, Space> x_, dx_, y_, dy_;
};

template <class Space, bool Backward>
void layer_benchmark(benchmark::State& state, DssAlgorithm alg, int time) {
  LayerHarness<Space> h(alg, 1, time);
  time_passes<Space, Backward>(state, h, time);
  state.counters["FLOP/s"] = per_second(Backward ? Flops::backward(alg, 1, time) : Flops::forward(alg, 1, time));
  if (!Backward && time == 8192) {
    // Both times measured here, the same way, so the ratio is not skewed by filters or by
    // which benchmarks ran before; interleaved, best of 5 each, so that load from other
    // processes hits both alike.
    LayerHarness<Space> h2048(alg, 1, 2048);
    double t8192 = 1e30, t2048 = 1e30;
    for (int r = 0; r < 5; ++r) {
      t8192 = std::min(t8192, seconds_per_call<Space>([&] { h.forward(); }, 1, 1));
      t2048 = std::min(t2048, seconds_per_call<Space>([&] { h2048.forward(); }, 4, 1));
    }
    state.counters["cost_vs_T2048"] = t8192 / t2048;
  }
}

// ---- decoding ----------------------------------------------------------------------------

template <class Space>
void step_benchmark(benchmark::State& state, int batch) {
  using L = layers::Gss<kShape, float, Space>;
  L layer;
  core::initialize(layer, 42);
  core::Workspace<Space> ws;
  auto st = layer.make_state(batch);
  Tensor<float***, Space> x("x", batch, 1, E), y("y", batch, 1, E);
  core::fill(Space{}, core::flat(x), core::Init::normal(1.0), 42, 1);
  layer.step(ws, st, x, y);
  ws.reset_peak();
  for (auto _ : state) {
    layer.step(ws, st, x, y);
    Space().fence();
  }
  // Per token: the four projections and the recurrence (11 flops per state element).
  state.counters["FLOP/s"] = per_second(Flops::linears(batch) + 11.0 * batch * H * N);
  state.counters["tokens/s"] = per_second(batch);
  state.counters["peak_workspace_bytes"] = double(ws.peak_bytes());
}

template <class Space>
void prefill_benchmark(benchmark::State& state, int time) {
  using L = layers::Gss<kShape, float, Space>;
  L layer;
  core::initialize(layer, 42);
  core::Workspace<Space> ws;
  Tensor<float***, Space> x("x", 1, time, E), y("y", 1, time, E);
  core::fill(Space{}, core::flat(x), core::Init::normal(1.0), 42, 1);
  // One state, reset by restore (a copy of B·H·N complex values) rather than re-made: making
  // a state allocates, and its zero-fill would run on the default (OpenMP) space.
  auto st = layer.make_state(1);
  const auto fresh = layer.snapshot(st);
  for (auto _ : state) {
    layer.restore(st, fresh);
    layer.prefill(ws, st, x, y);
    Space().fence();
  }
  // The FFT forward plus the state advance (a GEMM (H × T)·(T × 2N)); a fresh state has no readout.
  state.counters["FLOP/s"] = per_second(Flops::forward(DssAlgorithm::fft, 1, time) + 2.0 * time * H * 2 * N);
  state.counters["tokens/s"] = per_second(time);
  state.counters["peak_workspace_bytes"] = double(ws.peak_bytes());
}

template <class Space>
void register_space() {
  const std::string sfx = space_suffix<Space>();
  const int times[] = {256, 1024, 2048, 4096, 8192};
  for (const DssAlgorithm alg : {DssAlgorithm::fft, DssAlgorithm::scan})
    for (const int t : times) {
      const std::string shape = std::string(kernels::name_of(alg)) + "/T:" + std::to_string(t);
      benchmark::RegisterBenchmark(("gss_mix/" + shape + "/fwd" + sfx).c_str(), mix_benchmark<Space, false>, alg, t)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
      benchmark::RegisterBenchmark(("gss_mix/" + shape + "/bwd" + sfx).c_str(), mix_benchmark<Space, true>, alg, t)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  for (const int t : times) {
    const std::string shape = "/E:256/T:" + std::to_string(t);
    benchmark::RegisterBenchmark(("gss_fwd" + shape + sfx).c_str(), layer_benchmark<Space, false>, DssAlgorithm::fft, t)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("gss_bwd" + shape + sfx).c_str(), layer_benchmark<Space, true>, DssAlgorithm::fft, t)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  for (const int t : {2048, 8192})
    benchmark::RegisterBenchmark(("gss_fwd_scan/E:256/T:" + std::to_string(t) + sfx).c_str(),
                                 layer_benchmark<Space, false>, DssAlgorithm::scan, t)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  for (const int b : {1, 8})
    benchmark::RegisterBenchmark(("gss_step/E:256/B:" + std::to_string(b) + sfx).c_str(), step_benchmark<Space>, b)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  benchmark::RegisterBenchmark(("gss_prefill/E:256/T:2048" + sfx).c_str(), prefill_benchmark<Space>, 2048)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

const Registration registration([] { for_each_host_space([]<class Space>() { register_space<Space>(); }); });

}  // namespace
}  // namespace hybridseq::bench
