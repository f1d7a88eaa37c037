// Forward and backward of every benchmark case (tests/cases) on every host execution space,
// plus raw OpenBLAS sgemm on the Linear shapes, so that `linear_fwd/...` carries the ratio
// `vs_openblas` measured in the same run.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

#include <hybridseq/core.hpp>
#include <hybridseq/layers.hpp>

#include "cases/primitive_cases.hpp"
#include "registry.hpp"
#include "support/bench_harness.hpp"
#include "support/timing.hpp"

namespace hybridseq::bench {
namespace {

/// Raw cblas_sgemm (no hybridseq code) on the Linear's shape (rows × in) · (out × in)ᵀ,
/// with as many BLAS threads as the execution space has.
template <class Space>
void raw_sgemm(const std::vector<float>& a, const std::vector<float>& b, std::vector<float>& c, std::int64_t rows,
               int in, int out) {
  openblas_set_num_threads(core::compat::concurrency(Space{}));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), out, in, 1.0f, a.data(), in, b.data(), in, 0.0f,
              c.data(), out);
}

template <class Space>
double sgemm_seconds(std::int64_t rows, int in, int out) {
  std::vector<float> a(rows * in, 0.5f), b(std::size_t(out) * in, 0.25f), c(rows * out);
  const double s = seconds_per_call<Space>([&] { raw_sgemm<Space>(a, b, c, rows, in, out); }, 5, 5);
  kernels::detail::blas_threads(-1);  // the facade must set its own count again
  return s;
}

template <class Case, class Space, bool Backward>
void layer_benchmark(benchmark::State& state) {
  Harness<Case, Space> h(1, Case::bench_time);
  const double rows = Case::bench_time;
  time_passes<Space, Backward>(state, h, rows);
  state.counters["FLOP/s"] = per_second((Backward ? 2.0 : 1.0) * Case::forward_flops(rows));
  state.counters["bytes/s"] = per_second(double(h.activation_bytes()));
}

/// linear_fwd/<in>x<out>/T:<t>: Linear forward with counter vs_openblas = its GFLOP/s over
/// raw sgemm's on the same shape and thread count, both measured here.
template <class Case, class Space>
void linear_forward_vs_sgemm(benchmark::State& state) {
  using L = typename Case::template Layer<float, Space>;
  Harness<Case, Space> h(1, Case::bench_time);
  for (auto _ : state) {
    h.forward();
    Space().fence();
  }
  const double rows = Case::bench_time, flops = Case::forward_flops(rows);
  const double linear_s = seconds_per_call<Space>([&] { h.forward(); }, 5, 5);
  const double gemm_s = sgemm_seconds<Space>(Case::bench_time, L::d_in, L::d_out);
  state.counters["FLOP/s"] = per_second(flops);
  state.counters["sgemm_GFLOP/s"] = flops / gemm_s * 1e-9;
  state.counters["linear_GFLOP/s"] = flops / linear_s * 1e-9;
  state.counters["vs_openblas"] = gemm_s / linear_s;
  state.counters["peak_workspace_bytes"] = double(h.peak_workspace_bytes());
}

template <class Space>
void sgemm_benchmark(benchmark::State& state) {
  const auto rows = state.range(0);
  const int in = int(state.range(1)), out = int(state.range(2));
  std::vector<float> a(rows * in, 0.5f), b(std::size_t(out) * in, 0.25f), c(rows * out);
  for (auto _ : state) raw_sgemm<Space>(a, b, c, rows, in, out);
  kernels::detail::blas_threads(-1);
  state.counters["FLOP/s"] = per_second(2.0 * double(rows) * in * out);
}

/// gemm/<op>/M:m/K:k/N:n: the GEMM facade (kernels::gemm: the library's micro-kernel at these
/// shapes; above its size threshold one single-threaded call per thread, each a part of C)
/// against one BLAS call threaded by OpenBLAS itself, on the same operands; op is NN, NT or TN
/// (A and B transposed or not), the shapes a text_lm training step multiplies. Counter
/// vs_blas_threads = OpenBLAS' time over the facade's, interleaved in this run (> 1: the facade
/// is faster).
template <class Space>
void gemm_vs_blas_threads(benchmark::State& state, bool ta, bool tb) {
  const std::int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  Tensor<float**, Space> a("a", ta ? k : m, ta ? m : k), b("b", tb ? n : k, tb ? k : n), c("c", m, n);
  core::fill(a, 0.5f);
  core::fill(b, 0.25f);
  const auto op = [](bool t) { return t ? kernels::Op::transpose : kernels::Op::none; };
  const auto facade = [&] { kernels::gemm(Space{}, op(ta), op(tb), 1.0f, a, b, 0.0f, c); };
  const auto threaded = [&] {
    openblas_set_num_threads(core::compat::concurrency(Space{}));
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
                1.0f, a.data(), int(a.extent(1)), b.data(), int(b.extent(1)), 0.0f, c.data(), int(n));
  };
  for (auto _ : state) facade();
  double ours = 1e30, blas = 1e30;
  for (int r = 0; r < 3; ++r) {  // interleaved: load from other processes hits both alike
    ours = std::min(ours, seconds_per_call<Space>(facade, 10, 3));
    blas = std::min(blas, seconds_per_call<Space>(threaded, 10, 3));
    kernels::detail::blas_threads(-1);  // the facade must set its own count again
  }
  state.counters["FLOP/s"] = per_second(2.0 * double(m) * double(n) * double(k));
  state.counters["vs_blas_threads"] = blas / ours;
}

/// The float GELU the library runs (kernels::activation_forward/backward: a branch-free
/// normal CDF) against the libm formula it replaced (erff and expf per element, in the same
/// functor shape), both measured here on the same 2²² inputs in [−5, 5): counters
/// gelu_fwd_vs_libm, gelu_bwd_vs_libm (> 1: the library's is faster).
template <class Space>
struct LibmGelu {
  Tensor<const float*, Space> x;
  Tensor<float*, Space> y;
  bool backward;
  KOKKOS_FORCEINLINE_FUNCTION void operator()(std::int64_t i) const {
    const float cdf = 0.5f * (1.0f + std::erf(x(i) * 0.70710678f));
    if (backward)
      y(i) += cdf + x(i) * 0.39894228f * std::exp(-0.5f * x(i) * x(i));
    else
      y(i) = x(i) * cdf;
  }
};

template <class Space>
double gelu_seconds(Tensor<const float*, Space> x, Tensor<float*, Space> y, bool backward, bool libm) {
  constexpr auto gelu = kernels::Activation::gelu;
  return seconds_per_call<Space>(
      [&] {
        if (libm)
          Kokkos::parallel_for("bench::libm_gelu", Kokkos::RangePolicy<Space>(0, x.extent(0)),
                               LibmGelu<Space>{x, y, backward});
        else if (backward)
          kernels::activation_backward<gelu, float>(Space{}, x, x, y);  // dy = x: any values do
        else
          kernels::activation_forward<gelu, float>(Space{}, x, y);
      },
      5, 5);
}

template <class Space>
void gelu_vs_libm(benchmark::State& state) {
  const std::int64_t n = std::int64_t(1) << 22;
  Tensor<float*, Space> x("x", n), y("y", n);
  Kokkos::parallel_for(
      "bench::gelu_inputs", Kokkos::RangePolicy<Space>(0, n),
      KOKKOS_LAMBDA(std::int64_t i) { x(i) = float((i * 2654435761u) % 10000) / 1000.0f - 5.0f; });
  for (auto _ : state) benchmark::DoNotOptimize(gelu_seconds<Space>(x, y, false, false));
  for (const bool backward : {false, true}) {
    double ours = 1e30, libm = 1e30;
    for (int r = 0; r < 3; ++r) {  // interleaved: load from other processes hits both alike
      ours = std::min(ours, gelu_seconds<Space>(x, y, backward, false));
      libm = std::min(libm, gelu_seconds<Space>(x, y, backward, true));
    }
    state.counters[backward ? "gelu_bwd_vs_libm" : "gelu_fwd_vs_libm"] = libm / ours;
  }
}

template <class Space>
void register_space() {
  const std::string sfx = space_suffix<Space>();
  cases::for_each_case(cases::BenchCases{}, [&]<class Case>() {
    const std::string shape = std::string(Case::name) + "/T:" + std::to_string(Case::bench_time);
    benchmark::RegisterBenchmark(("fwd/" + shape + sfx).c_str(), layer_benchmark<Case, Space, false>)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("bwd/" + shape + sfx).c_str(), layer_benchmark<Case, Space, true>)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  });
  auto linear = [&]<class Case>(const char* shape) {
    benchmark::RegisterBenchmark(
        (std::string("linear_fwd/") + shape + "/T:" + std::to_string(Case::bench_time) + sfx).c_str(),
        linear_forward_vs_sgemm<Case, Space>)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  };
  linear.template operator()<cases::LinearBench256x768>("256x768");
  linear.template operator()<cases::LinearBench768x3072>("768x3072");
  benchmark::RegisterBenchmark(("gelu_vs_libm" + sfx).c_str(), gelu_vs_libm<Space>)
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  // (M, K, N) of text_lm's step: forward X·Wᵀ (NT), backward dY·W (NN) and dYᵀ·X (TN).
  const auto gemm = [&](const char* op, bool ta, bool tb, std::initializer_list<std::array<std::int64_t, 3>> shapes) {
    auto* b =
        benchmark::RegisterBenchmark(("gemm/" + std::string(op) + sfx).c_str(),
                                     [ta, tb](benchmark::State& state) { gemm_vs_blas_threads<Space>(state, ta, tb); })
            ->ArgNames({"M", "K", "N"})
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
    for (const auto& [m, k, n] : shapes) b->Args({m, k, n});
  };
  gemm("NT", false, true, {{2048, 128, 512}, {2048, 512, 128}, {2048, 128, 128}});
  gemm("NN", false, false, {{2048, 512, 128}, {2048, 128, 512}});
  gemm("TN", true, false, {{512, 2048, 128}, {128, 2048, 512}, {128, 2048, 128}});
  benchmark::RegisterBenchmark(("sgemm" + sfx).c_str(), sgemm_benchmark<Space>)
      ->ArgNames({"M", "K", "N"})
      ->Args({4096, 256, 768})
      ->Args({4096, 768, 3072})
      ->Args({2048, 2048, 2048})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

const Registration registration([] { for_each_host_space([]<class Space>() { register_space<Space>(); }); });

}  // namespace
}  // namespace hybridseq::bench
