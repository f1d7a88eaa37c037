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

// 1.5·2²³: for |z| < 2²², z + magic has ulp 1, so the addition rounds z to the nearest
// integer k and leaves k (two's complement) in the low mantissa bits of the sum.
inline constexpr float round_magic = 12582912.0f;

/// p · 2^k for p ∈ [0.70, 1.42], where t = k + round_magic carries k in its low mantissa bits;
/// +0 for k < −125 (keeps results normal; also catches −inf and huge |k|).
KOKKOS_FORCEINLINE_FUNCTION float times_pow2(float p, float t) {
  const std::uint32_t tb = float_bits(t);
  // tb << 23 moves k's low 9 bits into the exponent field and shifts the rest out: adding it
  // to p's bits multiplies p by 2^k.
  const std::uint32_t scaled = float_bits(p) + (tb << 23);
  const std::int32_t k_min = static_cast<std::int32_t>(float_bits(round_magic)) - 126;
  const std::uint32_t keep = static_cast<std::int32_t>(tb) > k_min ? ~0u : 0u;
  return bits_float(scaled & keep);
}

/// `if_set` where `mask` is all ones, `if_clear` where it is 0: a select on the bits, which the
/// vectoriser if-converts (a float compare's select it would not, see above).
KOKKOS_FORCEINLINE_FUNCTION float select_bits(std::uint32_t mask, float if_set, float if_clear) {
  return bits_float((float_bits(if_set) & mask) | (float_bits(if_clear) & ~mask));
}
}  // namespace detail

/// 2^z for float z, branch-free: z = k + f with k = round(z), f ∈ [−½, ½]; 2^f by a degree-5
/// minimax polynomial (relative error 9.1e-8); k is added to the exponent bits.
/// Accuracy ≤ 2.5 ulp (2.06 measured) for z ∈ [−125, 127] (test_mamba.cpp checks every 2^-10
/// step). Results below 2^−125.5 are flushed to +0 instead of rounded to a subnormal (the
/// scan only needs them to vanish); z > 127 (overflow) is outside the domain.
KOKKOS_FORCEINLINE_FUNCTION float exp2_polynomial(float z) {
  const float t = z + detail::round_magic;
  const float k = t - detail::round_magic;
  const float f = z - k;
  float p = 1.3264726e-3f;
  p = p * f + 9.6715130e-3f;
  p = p * f + 5.5507336e-2f;
  p = p * f + 2.4022242e-1f;
  p = p * f + 6.9314700e-1f;
  p = p * f + 1.0f;
  return detail::times_pow2(p, t);
}

/// e^x for float x, branch-free: Cody–Waite reduction x = k·ln2 + r (ln2 split in two so that
/// k·ln2_hi is exact), e^r by a degree-5 minimax polynomial on [−ln2/2, ln2/2] (relative error
/// 1.0e-7), 2^k through the exponent bits. Accuracy ≤ 3 ulp for x ∈ [−86.6, 88.0]; below,
/// the result flushes to +0; above 88.0 is outside the domain.
KOKKOS_FORCEINLINE_FUNCTION float exp_cody_waite(float x) {
  const float t = x * 1.44269504088896341f + detail::round_magic;
  const float k = t - detail::round_magic;
  float r = x - k * 0.693359375f;  // ln2_hi: 9 significant bits, so k·ln2_hi is exact
  r = r - k * -2.12194440e-4f;     // ln2_lo = ln2 − ln2_hi
  float p = 8.3125252e-3f;
  p = p * r + 4.1890115e-2f;
  p = p * r + 1.6667114e-1f;
  p = p * r + 4.9999231e-1f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return detail::times_pow2(p, t);
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

/// Φ(x) = ½(1 + erf(x/√2)), the standard normal CDF, for float x, branch-free: the
/// Chebyshev fit of erfc(z) = t·e^(−z² + P(t)), t = 1/(1 + z/2), z = |x|/√2 ≥ 0 (Press et al.,
/// Numerical Recipes, `erfcc`: relative error below 1.2e-7 for every z), with e^ from
/// exp_cody_waite; Φ(x) = ½·erfc(z) for x < 0 (relative accuracy kept in the far tail, where
/// GELU's x·Φ(x) is tiny) and 1 − ½·erfc(z) otherwise. Accuracy (test_primitive_layers.cpp
/// checks it on a 2^-12 grid): relative (8 + 2x²) ulp for x < 0, the x² from rounding x²/2 in
/// the exponent; absolute 2.5e-7 for x ≥ 0.
KOKKOS_FORCEINLINE_FUNCTION float normal_cdf_polynomial(float x) {
  const float z = detail::bits_float(detail::float_bits(x) & 0x7fffffffu) * 0.70710678118654752440f;
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  const float half_erfc = 0.5f * t * exp_cody_waite(p - z * z);
  const std::uint32_t negative = 0u - (detail::float_bits(x) >> 31);  // all ones when x < 0
  return detail::select_bits(negative, half_erfc, 1.0f - half_erfc);
}

/// σ(v) = 1 / (1 + e^−v) for float v, branch-free: (v ≥ 0 ? 1 : e) / (1 + e) with e = e^−|v|,
/// so nothing overflows and v ≪ 0 keeps its relative accuracy. The select is on the sign bit.
KOKKOS_FORCEINLINE_FUNCTION float sigmoid_polynomial(float v) {
  const std::uint32_t vb = detail::float_bits(v);
  const float e = exp_cody_waite(detail::bits_float(vb | 0x80000000u));  // e^−|v|
  const std::uint32_t negative = static_cast<std::uint32_t>(static_cast<std::int32_t>(vb) >> 31);
  const float num = detail::select_bits(negative, e, 1.0f);
  return num / (1.0f + e);
}

/// softplus(v) = log(1 + e^v) = max(v, 0) + log1p(e^−|v|) for float v, branch-free
/// ((v + |v|)/2 is max(v, 0) exactly). Above v = 20 it equals v in float, as PyTorch's
/// threshold makes it.
KOKKOS_FORCEINLINE_FUNCTION float softplus_polynomial(float v) {
  const float a = detail::bits_float(detail::float_bits(v) & 0x7fffffffu);  // |v|
  return 0.5f * (v + a) + log1p_polynomial(exp_cody_waite(-a));
}

/// softplus(v) and its derivative σ(v), sharing e^−|v| (the selective scan needs both).
KOKKOS_FORCEINLINE_FUNCTION void softplus_and_sigmoid_polynomial(float v, float& sp, float& sig) {
  const std::uint32_t vb = detail::float_bits(v);
  const float a = detail::bits_float(vb & 0x7fffffffu);
  const float e = exp_cody_waite(-a);
  sp = 0.5f * (v + a) + log1p_polynomial(e);
  const std::uint32_t negative = static_cast<std::uint32_t>(static_cast<std::int32_t>(vb) >> 31);
  const float num = detail::select_bits(negative, e, 1.0f);
  sig = num / (1.0f + e);
}

/// e^x in inner loops: the branch-free polynomial for float, libm for double.
KOKKOS_FORCEINLINE_FUNCTION float exp_in_loop(float x) {
  return exp_cody_waite(x);
}
KOKKOS_FORCEINLINE_FUNCTION double exp_in_loop(double x) {
  return math::exp(x);
}

}  // namespace hybridseq::kernels
