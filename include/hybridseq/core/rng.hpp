#pragma once
/// \file
/// Deterministic, counter-based random numbers and parameter initialisers.
///
/// Element i of a stream is a pure function of (seed, stream, i), so a tensor filled in
/// parallel gets the same values whatever the execution space or thread count: fixed seeds
/// give identical parameters on Serial and OpenMP (and on a GPU). The mixer is SplitMix64's
/// finaliser (Steele, Lea, Flood 2014), applied to a Weyl sequence keyed by seed and stream.

#include <cmath>
#include <cstdint>
#include <string_view>

#include "spaces.hpp"

namespace hybridseq::core {

/// SplitMix64 finaliser: a bijective avalanche mix of 64 bits.
KOKKOS_INLINE_FUNCTION constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// FNV-1a of a string: turns a parameter's dotted name into a stream id, so its values do
/// not depend on the order in which parameters are visited.
constexpr std::uint64_t stream_of(std::string_view name) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

/// A counter-based generator: cheap to copy into kernels, no mutable state.
struct CounterRng {
  std::uint64_t key;

  KOKKOS_INLINE_FUNCTION constexpr CounterRng(std::uint64_t seed, std::uint64_t stream)
      : key(mix64(seed ^ mix64(stream + 0x9e3779b97f4a7c15ULL))) {}

  /// 64 random bits for counter i.
  KOKKOS_INLINE_FUNCTION constexpr std::uint64_t bits(std::uint64_t i) const {
    return mix64(key + (i + 1) * 0x9e3779b97f4a7c15ULL);
  }
  /// Uniform in the open interval (0, 1), 53 bits of resolution.
  KOKKOS_INLINE_FUNCTION constexpr double uniform(std::uint64_t i) const {
    return (static_cast<double>(bits(i) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  }
  /// Standard normal for counter i (Box–Muller over counters 2i and 2i+1).
  KOKKOS_INLINE_FUNCTION double normal(std::uint64_t i) const {
    const double u1 = uniform(2 * i), u2 = uniform(2 * i + 1);
    return math::sqrt(-2.0 * math::log(u1)) * math::cos(6.283185307179586 * u2);
  }
};

/// How a parameter is initialised. Set by the layer that owns the parameter, from its
/// runtime options; applied by `initialize` through the parameter visitor.
struct Init {
  enum class Kind {
    zeros,
    ones,
    constant,
    normal,
    uniform,
    log_index,
    inverse_softplus_log_uniform
  } kind = Kind::zeros;
  double a = 0;  // normal: mean; uniform: low; constant: value; log_index: period; inv. softplus: low
  double b = 0;  // normal: std;  uniform: high; inv. softplus: high
  double c = 0;  // inverse_softplus_log_uniform: floor

  static constexpr Init zeros() { return {Kind::zeros, 0, 0}; }
  static constexpr Init ones() { return {Kind::ones, 0, 0}; }
  static constexpr Init constant(double v) { return {Kind::constant, v, 0}; }
  static constexpr Init normal(double std, double mean = 0) { return {Kind::normal, mean, std}; }
  static constexpr Init uniform(double lo, double hi) { return {Kind::uniform, lo, hi}; }
  /// Element i is log(1 + (i mod period)): S4D-real / Mamba's A_log, whose row d is
  /// log(1..N) so that A = −exp(A_log) = −(1..N) (Gu et al. 2022, Mamba `A_log` init).
  static constexpr Init log_index(std::int64_t period) { return {Kind::log_index, static_cast<double>(period), 0}; }
  /// Element i is softplus⁻¹(dt), dt = max(floor, exp(U(log lo, log hi))): Mamba's dt_proj.bias,
  /// which makes softplus(bias) start log-uniform in [lo, hi] (Gu & Dao 2023, `dt_init`).
  static constexpr Init inverse_softplus_log_uniform(double lo, double hi, double floor) {
    return {Kind::inverse_softplus_log_uniform, lo, hi, floor};
  }
};

namespace detail {
template <class View>
struct FillInit {
  using T = typename View::non_const_value_type;
  View out;
  CounterRng rng;
  Init init;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    double v = 0;
    switch (init.kind) {
      case Init::Kind::zeros:
        v = 0;
        break;
      case Init::Kind::ones:
        v = 1;
        break;
      case Init::Kind::constant:
        v = init.a;
        break;
      case Init::Kind::normal:
        v = init.a + init.b * rng.normal(i);
        break;
      case Init::Kind::uniform:
        v = init.a + (init.b - init.a) * rng.uniform(i);
        break;
      case Init::Kind::log_index: {
        const auto period = static_cast<std::int64_t>(init.a);
        v = math::log(1.0 + static_cast<double>(period > 0 ? i % period : i));
        break;
      }
      case Init::Kind::inverse_softplus_log_uniform: {
        const double log_lo = math::log(init.a), log_hi = math::log(init.b);
        double dt = math::exp(log_lo + (log_hi - log_lo) * rng.uniform(i));
        dt = dt < init.c ? init.c : dt;
        v = dt + math::log(-math::expm1(-dt));  // softplus⁻¹(dt) = log(eᵈᵗ − 1), stable for small dt
        break;
      }
    }
    out(i) = static_cast<T>(v);
  }
};
}  // namespace detail

/// Fills a rank-1 view according to `init`, element i from counter i of (seed, stream).
template <ExecutionSpace Space, class View>
void fill(const Space& exec, const View& out, const Init& init, std::uint64_t seed, std::uint64_t stream) {
  static_assert(View::rank == 1, "hybridseq::core::fill: takes a flat view (core::flat(tensor))");
  Kokkos::parallel_for("hybridseq::core::fill", Kokkos::RangePolicy<Space>(exec, 0, out.extent(0)),
                       detail::FillInit<View>{out, CounterRng(seed, stream), init});
}

}  // namespace hybridseq::core
