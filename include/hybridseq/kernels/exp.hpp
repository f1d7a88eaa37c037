#pragma once
/// \file
/// Vectorisable float maths for inner loops (softmax, scans, gates), where libm calls block
/// vectorisation and `exp` dominates the cost. double always uses the libm functions
/// (reference precision for finite differences).

#include <cstdint>
#include <cstring>

#include "../core/kokkos_compat.hpp"

namespace hybridseq::kernels {

// ---------------------------------------------------------------------------------------------
// Vectorisable float maths. Every function is straight-line code (selects are done on integer
// bits, which the vectoriser if-converts; float compares under the default -ftrapping-math are
// not), so a loop that calls it vectorises.
// ---------------------------------------------------------------------------------------------

namespace detail {
KOKKOS_FORCEINLINE_FUNCTION std::uint32_t float_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
KOKKOS_FORCEINLINE_FUNCTION float bits_float(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
}  // namespace detail

/// 2^z for float z, branch-free: z = k + f with k = round(z), f ∈ [−½, ½]; 2^f by a degree-5
/// minimax polynomial (relative error 9.1e-8); k is added to the exponent bits.
/// Accuracy ≤ 2.5 ulp (2.06 measured) for z ∈ [−125, 127] (test_mamba.cpp checks every 2^-10
/// step). Results below 2^−125.5 are flushed to +0 instead of rounded to a subnormal (the
/// scan only needs them to vanish); z > 127 (overflow) is outside the domain.
KOKKOS_FORCEINLINE_FUNCTION float exp2_polynomial(float z) {
  // 1.5·2²³: for |z| < 2²², z + magic has ulp 1, so the addition rounds z to the nearest
  // integer k and leaves k (two's complement) in the low mantissa bits of the sum.
  constexpr float magic = 12582912.0f;
  const float t = z + magic;
  const float k = t - magic;
  const float f = z - k;
  float p = 1.3264726e-3f;
  p = p * f + 9.6715130e-3f;
  p = p * f + 5.5507336e-2f;
  p = p * f + 2.4022242e-1f;
  p = p * f + 6.9314700e-1f;
  p = p * f + 1.0f;
  const std::uint32_t tb = detail::float_bits(t);
  // tb << 23 moves k's low 9 bits into the exponent field and shifts the rest out: adding it
  // to p's bits multiplies p ∈ [0.70, 1.42] by 2^k.
  const std::uint32_t scaled = detail::float_bits(p) + (tb << 23);
  // k ≥ −125 keeps the result normal; below, flush (also catches z = −inf and huge |z|).
  const std::int32_t k_min = static_cast<std::int32_t>(detail::float_bits(magic)) - 126;
  const std::uint32_t keep = static_cast<std::int32_t>(tb) > k_min ? ~0u : 0u;
  return detail::bits_float(scaled & keep);
}

/// e^x for float x, branch-free: Cody–Waite reduction x = k·ln2 + r (ln2 split in two so that
/// k·ln2_hi is exact), e^r by a degree-5 minimax polynomial on [−ln2/2, ln2/2] (relative error
/// 1.0e-7), 2^k through the exponent bits. Accuracy ≤ 3 ulp for x ∈ [−86.6, 88.0]; below,
/// the result flushes to +0; above 88.0 is outside the domain.
KOKKOS_FORCEINLINE_FUNCTION float exp_cody_waite(float x) {
  constexpr float magic = 12582912.0f;
  const float t = x * 1.44269504088896341f + magic;
  const float k = t - magic;
  float r = x - k * 0.693359375f;  // ln2_hi: 9 significant bits, so k·ln2_hi is exact
  r = r - k * -2.12194440e-4f;     // ln2_lo = ln2 − ln2_hi
  float p = 8.3125252e-3f;
  p = p * r + 4.1890115e-2f;
  p = p * r + 1.6667114e-1f;
  p = p * r + 4.9999231e-1f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::uint32_t tb = detail::float_bits(t);
  const std::uint32_t scaled = detail::float_bits(p) + (tb << 23);
  const std::int32_t k_min = static_cast<std::int32_t>(detail::float_bits(magic)) - 126;
  const std::uint32_t keep = static_cast<std::int32_t>(tb) > k_min ? ~0u : 0u;
  return detail::bits_float(scaled & keep);
}

/// log(1 + u) for u ∈ [0, 1] as 2·atanh(s), s = u / (2 + u) ∈ [0, ⅓]: no cancellation for
/// small u (unlike log of 1 + u); the odd series to s¹⁵ leaves a relative error below 2e-9.
KOKKOS_FORCEINLINE_FUNCTION float log1p_polynomial(float u) {
  const float s = u / (2.0f + u);
  const float s2 = s * s;
  float p = 1.0f / 15;
  p = p * s2 + 1.0f / 13;
  p = p * s2 + 1.0f / 11;
  p = p * s2 + 1.0f / 9;
  p = p * s2 + 1.0f / 7;
  p = p * s2 + 1.0f / 5;
  p = p * s2 + 1.0f / 3;
  return 2.0f * (s + s * s2 * p);
}

/// e^x in inner loops: the branch-free polynomial for float, libm for double.
KOKKOS_FORCEINLINE_FUNCTION float exp_in_loop(float x) {
  return exp_cody_waite(x);
}
KOKKOS_FORCEINLINE_FUNCTION double exp_in_loop(double x) {
  return math::exp(x);
}

}  // namespace hybridseq::kernels
