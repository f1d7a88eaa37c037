#pragma once
/// \file
/// Naive DSS oracle on host views, in long double, straight from the definition: the kernel
/// K materialised mode by mode, the causal convolution as a direct O(L²) sum, and the
/// gradients as explicit sums of partial derivatives of K (no adjoint recurrences, no
/// complex-gradient conventions), so that it checks the optimised kernels independently.
///   Λ_n = −exp(λre_n) + i·exp(λim_n),  w_n = (e^{Λ_n} − 1)/Λ_n,
///   K_h[ℓ] = Re Σ_n C_{h,n} w_n e^{Λ_n ℓ},   y_h[t] = Σ_{s≤t} K_h[t−s] u_h[s] + D_h u_h[t].

#include <cmath>
#include <complex>
#include <cstdint>
#include <vector>

#include "../../core/spaces.hpp"

namespace hybridseq::kernels::reference {

namespace detail {
using cld = std::complex<long double>;

template <class V>
cld dss_lambda(const V& lambda_re, const V& lambda_im, std::int64_t n) {
  return cld(-std::exp(static_cast<long double>(lambda_re(n))), std::exp(static_cast<long double>(lambda_im(n))));
}
}  // namespace detail

/// K (L, H) with K(ℓ, h) = Re Σ_n C̃_{h,n} e^{Λ_n ℓ}.
template <class V1, class V2, class VK>
void dss_kernel(const V1& lambda_re, const V1& lambda_im, const V2& c_re, const V2& c_im, const VK& k) {
  using detail::cld;
  const std::int64_t len = k.extent(0), hh = c_re.extent(0), nn = c_re.extent(1);
  for (std::int64_t l = 0; l < len; ++l)
    for (std::int64_t h = 0; h < hh; ++h) {
      long double acc = 0;
      for (std::int64_t n = 0; n < nn; ++n) {
        const cld lam = detail::dss_lambda(lambda_re, lambda_im, n);
        const cld w = (std::exp(lam) - 1.0L) / lam;
        const cld c(c_re(h, n), c_im(h, n));
        acc += std::real(c * w * std::exp(lam * static_cast<long double>(l)));
      }
      k(l, h) = static_cast<typename VK::value_type>(acc);
    }
}

/// y (B, L, H) = causal_conv(K, u) + D ⊙ u, by the direct sum.
template <class V1, class V2, class VD, class VU, class VY>
void dss_forward(const V1& lambda_re, const V1& lambda_im, const V2& c_re, const V2& c_im, const VD& d, const VU& u,
                 const VY& y) {
  const std::int64_t bb = u.extent(0), len = u.extent(1), hh = u.extent(2);
  std::vector<long double> k(static_cast<std::size_t>(len * hh));
  Kokkos::View<long double**, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> kv(k.data(), len, hh);
  dss_kernel(lambda_re, lambda_im, c_re, c_im, kv);
  for (std::int64_t b = 0; b < bb; ++b)
    for (std::int64_t t = 0; t < len; ++t)
      for (std::int64_t h = 0; h < hh; ++h) {
        long double acc = static_cast<long double>(d(h)) * u(b, t, h);
        for (std::int64_t s = 0; s <= t; ++s) acc += kv(t - s, h) * u(b, s, h);
        y(b, t, h) = static_cast<typename VY::value_type>(acc);
      }
}

/// Backward of `dss_forward` for L = Σ y ⊙ dy: du and every parameter gradient (+=).
template <class V1, class V2, class VD, class VU, class VG1, class VG2, class VGD, class VDU>
void dss_backward(const V1& lambda_re, const V1& lambda_im, const V2& c_re, const V2& c_im, const VD& d, const VU& u,
                  const VU& dy, const VDU& du, const VG1& g_lambda_re, const VG1& g_lambda_im, const VG2& g_c_re,
                  const VG2& g_c_im, const VGD& g_d) {
  using detail::cld;
  const std::int64_t bb = u.extent(0), len = u.extent(1), hh = u.extent(2), nn = c_re.extent(1);
  std::vector<long double> k(static_cast<std::size_t>(len * hh)), dk(static_cast<std::size_t>(len * hh), 0.0L);
  Kokkos::View<long double**, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> kv(k.data(), len, hh);
  dss_kernel(lambda_re, lambda_im, c_re, c_im, kv);
  // ∂L/∂u[b,s,h] = D dy[b,s,h] + Σ_{t≥s} K[t−s] dy[b,t,h];  ∂L/∂K[ℓ,h] = Σ_b Σ_{t≥ℓ} dy[b,t,h] u[b,t−ℓ,h]
  for (std::int64_t h = 0; h < hh; ++h) {
    long double gd = 0;
    for (std::int64_t b = 0; b < bb; ++b)
      for (std::int64_t s = 0; s < len; ++s) {
        long double acc = static_cast<long double>(d(h)) * dy(b, s, h);
        for (std::int64_t t = s; t < len; ++t) acc += kv(t - s, h) * dy(b, t, h);
        du(b, s, h) += static_cast<typename VDU::value_type>(acc);
        gd += static_cast<long double>(dy(b, s, h)) * u(b, s, h);
        for (std::int64_t l = 0; l <= s; ++l)
          dk[static_cast<std::size_t>(l * hh + h)] += static_cast<long double>(dy(b, s, h)) * u(b, s - l, h);
      }
    g_d(h) += static_cast<typename VGD::value_type>(gd);
  }
  // K[ℓ,h] = Re f, f = C w(Λ) e^{Λℓ}: ∂K/∂C_re = Re(w e^{Λℓ}), ∂K/∂C_im = −Im(w e^{Λℓ}),
  // ∂K/∂Λ_re = Re f′, ∂K/∂Λ_im = −Im f′ with f′ = C (w′ + ℓ w) e^{Λℓ}, w′ = (Λe^Λ − e^Λ + 1)/Λ².
  for (std::int64_t n = 0; n < nn; ++n) {
    const cld lam = detail::dss_lambda(lambda_re, lambda_im, n);
    const cld e = std::exp(lam);
    const cld w = (e - 1.0L) / lam;
    const cld dw = (lam * e - e + 1.0L) / (lam * lam);
    long double glr = 0, gli = 0;
    for (std::int64_t h = 0; h < hh; ++h) {
      const cld c(c_re(h, n), c_im(h, n));
      long double gcr = 0, gci = 0;
      for (std::int64_t l = 0; l < len; ++l) {
        const long double g = dk[static_cast<std::size_t>(l * hh + h)];
        const long double ll = static_cast<long double>(l);
        const cld z = std::exp(lam * ll);
        gcr += g * std::real(w * z);
        gci -= g * std::imag(w * z);
        const cld fp = c * (dw + ll * w) * z;
        glr += g * std::real(fp);
        gli -= g * std::imag(fp);
      }
      g_c_re(h, n) += static_cast<typename VG2::value_type>(gcr);
      g_c_im(h, n) += static_cast<typename VG2::value_type>(gci);
    }
    // Λ_re = −exp(λre), Λ_im = exp(λim)
    g_lambda_re(n) += static_cast<typename VG1::value_type>(glr * -std::exp(static_cast<long double>(lambda_re(n))));
    g_lambda_im(n) += static_cast<typename VG1::value_type>(gli * std::exp(static_cast<long double>(lambda_im(n))));
  }
}

}  // namespace hybridseq::kernels::reference
