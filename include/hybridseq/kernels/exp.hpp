#pragma once
/// \file
/// A branch-free exponential that compilers vectorise, for the inner loops of softmax and
/// scans, where `exp` dominates and the libm call blocks vectorisation.
///
/// float: Cody–Waite range reduction x = n·ln2 + r, |r| ≤ ln2/2, then the degree-6 Cephes
/// polynomial for e^r (max error about 2 ulp over the clamped range), scaled by 2ⁿ through
/// the exponent bits. Inputs are clamped to [−87.3, 88.7]: results below FLT_MIN come out as
/// ≈1e-38 instead of a subnormal or 0, which is harmless where the result is summed with
/// terms ≥ 1 (softmax) or multiplies a state (scans). double falls back to math::exp.

#include <cstdint>
#include <cstring>

#include "../core/kokkos_compat.hpp"

namespace hybridseq::kernels {

KOKKOS_INLINE_FUNCTION float exp_polynomial(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  const float n = static_cast<float>(static_cast<int>(x * 1.44269504088896341f + (x >= 0 ? 0.5f : -0.5f)));
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

KOKKOS_INLINE_FUNCTION double exp_polynomial(double x) { return math::exp(x); }

}  // namespace hybridseq::kernels
