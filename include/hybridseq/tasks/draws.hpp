#pragma once
/// \file
/// Sequential draws from one counter-based random stream, for the host-side task generators.

#include <cstdint>
#include <limits>

#include "../core/rng.hpp"

namespace hybridseq::tasks::detail {

/// The stream of example `index` at length `len`: distinct (index, len) pairs get unrelated
/// streams, so an example at length 60 is not the example at length 50 with ten tokens appended.
constexpr std::uint64_t example_stream(std::uint64_t index, int len) {
  return core::mix64(index + 0x632be59bd9b4e019ULL) ^
         core::mix64(static_cast<std::uint64_t>(len) + 0x8cb92ba72f3d8dd7ULL);
}

/// Draw n of a (seed, stream) pair is a pure function of (seed, stream, n): generators consume
/// draws in a fixed order, so an example is identical on every machine. Integers come from
/// rejection sampling on 64-bit words, never from std::uniform_int_distribution, whose output
/// is implementation-defined.
class Draws {
 public:
  constexpr Draws(std::uint64_t seed, std::uint64_t stream) : rng_(seed, stream) {}

  /// 64 random bits.
  constexpr std::uint64_t bits() { return rng_.bits(next_++); }
  /// Uniform in the open interval (0, 1).
  constexpr double uniform() { return rng_.uniform(next_++); }
  /// True with probability p (p = 0: never, p = 1: always, since uniform() is in (0, 1)).
  constexpr bool bernoulli(double p) { return uniform() < p; }
  /// Uniform integer in [0, n), n ≥ 1, without modulo bias: words at or above the largest
  /// multiple of n that fits are rejected (probability < n / 2⁶⁴).
  constexpr std::uint64_t below(std::uint64_t n) {
    const std::uint64_t limit = n * (std::numeric_limits<std::uint64_t>::max() / n);
    for (;;) {
      const std::uint64_t x = bits();
      if (x < limit) return x % n;
    }
  }
  /// Uniform int in [0, n), n ≥ 1.
  constexpr int below(int n) { return static_cast<int>(below(static_cast<std::uint64_t>(n))); }

 private:
  core::CounterRng rng_;
  std::uint64_t next_ = 0;
};

}  // namespace hybridseq::tasks::detail
