// The machine's own limits, so that every FLOP/s and bytes/s counter of this bench (and the
// PyTorch comparison, bench/vs_pytorch.py) can be read as a fraction of what the cores can do:
//
//   yardstick/fma_peak/isa:<isa>/space:<S>/threads:<n>   FLOP/s of independent fused
//       multiply-adds on registers (no memory traffic), every thread of the space at once; the
//       copy for each ISA this CPU runs (kernels::host_isa, capped by limit_isa): the largest is
//       the float peak that % of peak refers to.
//   yardstick/stream_triad/space:<S>/threads:<n>         bytes/s of STREAM's triad
//       a[i] = b[i] + s·c[i] over three arrays of 128 MiB each (far beyond the last-level
//       cache), counted as STREAM counts it: 3 × 4 bytes per element (no write-allocate).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include <Kokkos_Core.hpp>

#include <hybridseq/core.hpp>
#include <hybridseq/kernels/isa.hpp>

#if HYBRIDSEQ_ISA_DISPATCH
#include <immintrin.h>
#endif

#include "registry.hpp"
#include "support/timing.hpp"

namespace hybridseq::bench {
namespace {

// Accumulators per thread: enough independent chains to cover the FMA latency of every port
// (two ports × four cycles on current x86 cores need ≥ 8) and few enough to stay in registers
// (16 vector registers without AVX-512).
constexpr int chains = 12;
constexpr std::int64_t fma_rounds = 1 << 20;

/// `fma_rounds` rounds of `chains` vector FMAs (2 FLOPs per float lane) on registers; the result
/// is returned so that the compiler keeps the work.
float fma_loop_baseline(float seed) {
  // SSE2 has no FMA: a multiply and an add per lane, as the baseline copies of our kernels do.
  float acc[chains][4];
  for (int c = 0; c < chains; ++c)
    for (int l = 0; l < 4; ++l) acc[c][l] = seed + float(c + l);
  const float a = 0.999999f, b = 1e-7f;
  for (std::int64_t r = 0; r < fma_rounds; ++r)
    for (int c = 0; c < chains; ++c)
      for (int l = 0; l < 4; ++l) acc[c][l] = acc[c][l] * a + b;
  float s = 0;
  for (int c = 0; c < chains; ++c)
    for (int l = 0; l < 4; ++l) s += acc[c][l];
  return s;
}

#if HYBRIDSEQ_ISA_DISPATCH
// (Without -ffast-math the compiler can neither merge the rounds nor drop them: the result is
// used. An asm barrier per round would push the accumulators to memory.)
[[HYBRIDSEQ_TARGET_AVX2]] float fma_loop_avx2(float seed) {
  __m256 acc[chains];
  for (int c = 0; c < chains; ++c) acc[c] = _mm256_set1_ps(seed + float(c));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (std::int64_t r = 0; r < fma_rounds; ++r)
    for (int c = 0; c < chains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  __m256 s = acc[0];
  for (int c = 1; c < chains; ++c) s = _mm256_add_ps(s, acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  return lanes[0] + lanes[7];
}
[[HYBRIDSEQ_TARGET_AVX512]] float fma_loop_avx512(float seed) {
  __m512 acc[chains];
  for (int c = 0; c < chains; ++c) acc[c] = _mm512_set1_ps(seed + float(c));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (std::int64_t r = 0; r < fma_rounds; ++r)
    for (int c = 0; c < chains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  __m512 s = acc[0];
  for (int c = 1; c < chains; ++c) s = _mm512_add_ps(s, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  return lanes[0] + lanes[15];
}
#endif

/// Float lanes of one vector FMA (or multiply + add) of `isa`.
int lanes_of(kernels::Isa isa) {
  return isa == kernels::Isa::avx512 ? 16 : isa == kernels::Isa::avx2 ? 8 : 4;
}

float fma_loop(kernels::Isa isa, float seed) {
#if HYBRIDSEQ_ISA_DISPATCH
  if (isa == kernels::Isa::avx512) return fma_loop_avx512(seed);
  if (isa == kernels::Isa::avx2) return fma_loop_avx2(seed);
#endif
  return fma_loop_baseline(seed);
}

template <class Space>
void fma_peak(benchmark::State& state, kernels::Isa isa) {
  const int threads = core::compat::concurrency(Space{});
  Kokkos::View<float*, Kokkos::HostSpace> sink("fma_sink", threads);
  for (auto _ : state) {
    Kokkos::parallel_for("yardstick.fma_peak", Kokkos::RangePolicy<Space, Kokkos::Schedule<Kokkos::Static>>(0, threads),
                         [=](int i) { sink(i) = fma_loop(isa, float(i)); });
    Space().fence();
  }
  benchmark::DoNotOptimize(sink.data());
  state.counters["FLOP/s"] = per_second(2.0 * double(fma_rounds) * chains * lanes_of(isa) * threads);
}

template <class Space>
void stream_triad(benchmark::State& state) {
  constexpr std::int64_t n = std::int64_t(1) << 25;  // 128 MiB per array
  using Array = Kokkos::View<float*, Kokkos::HostSpace>;
  Array a(Kokkos::view_alloc(Kokkos::WithoutInitializing, "triad_a"), n);
  Array b(Kokkos::view_alloc(Kokkos::WithoutInitializing, "triad_b"), n);
  Array c(Kokkos::view_alloc(Kokkos::WithoutInitializing, "triad_c"), n);
  using Policy = Kokkos::RangePolicy<Space, Kokkos::Schedule<Kokkos::Static>>;
  // First touch by the threads that later stream each part (one memory node per thread's part).
  Kokkos::parallel_for("yardstick.stream_init", Policy(0, n), [=](std::int64_t i) { a(i) = 0, b(i) = 1, c(i) = 2; });
  Space().fence();
  const float s = 3;
  for (auto _ : state) {
    Kokkos::parallel_for("yardstick.stream_triad", Policy(0, n), [=](std::int64_t i) { a(i) = b(i) + s * c(i); });
    Space().fence();
  }
  benchmark::DoNotOptimize(a.data());
  state.counters["bytes/s"] = per_second(3.0 * sizeof(float) * double(n));
}

template <class Space>
void register_space() {
  const std::string sfx = space_suffix<Space>();
  for (const auto isa : {kernels::Isa::baseline, kernels::Isa::avx2, kernels::Isa::avx512}) {
    if (isa > kernels::host_isa()) continue;
    std::string name = kernels::isa_name(isa);
    std::replace(name.begin(), name.end(), '+', '_');  // "avx2_fma": a name that is its own filter regex
    benchmark::RegisterBenchmark(("yardstick/fma_peak/isa:" + name + sfx).c_str(), fma_peak<Space>, isa)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  benchmark::RegisterBenchmark(("yardstick/stream_triad" + sfx).c_str(), stream_triad<Space>)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

const Registration registration([] { for_each_host_space([]<class Space>() { register_space<Space>(); }); });

}  // namespace
}  // namespace hybridseq::bench
