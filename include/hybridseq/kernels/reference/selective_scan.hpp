#pragma once
/// \file
/// Naive selective-scan oracle: the recurrence of kernels/selective_scan.hpp written as plain
/// loops over (b, t, d, n) on the host, with std::exp and PyTorch's softplus. Backward keeps
/// every state h_t (B, T + 1, Di, N) and runs the reverse recurrence; nothing is chunked,
/// fused or vectorised. Views may be any host-accessible views (strided ones included).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace hybridseq::kernels::reference {

/// PyTorch's softplus (linear above 20) and its derivative.
template <class T>
T softplus(T v) {
  return v > T(20) ? v : std::log1p(std::exp(v));
}
template <class T>
T softplus_derivative(T v) {
  return v > T(20) ? T(1) : T(1) / (T(1) + std::exp(-v));
}

/// y (B, T, Di) = the selective scan of u with Δ = softplus(dt + dt_bias), A = −exp(A_log).
/// h (B, Di, N) holds the initial state on entry and the final state on exit.
template <class T, class U, class Dt, class Bias, class ALog, class Bm, class Cm, class DSkip, class H, class Y>
void selective_scan_forward(const U& u, const Dt& dt, const Bias& dt_bias, const ALog& a_log, const Bm& bm,
                            const Cm& cm, const DSkip& d_skip, const H& h, const Y& y) {
  const std::int64_t nb = u.extent(0), nt = u.extent(1), di = u.extent(2), ns = a_log.extent(1);
  std::vector<T> a(di * ns);  // A = −exp(A_log), formed once as in the definition
  for (std::int64_t d = 0; d < di; ++d)
    for (std::int64_t n = 0; n < ns; ++n) a[d * ns + n] = -std::exp(T(a_log(d, n)));
  for (std::int64_t b = 0; b < nb; ++b)
    for (std::int64_t t = 0; t < nt; ++t)
      for (std::int64_t d = 0; d < di; ++d) {
        const T delta = softplus<T>(T(dt(b, t, d)) + T(dt_bias(d)));
        const T x = u(b, t, d);
        T acc = 0;
        for (std::int64_t n = 0; n < ns; ++n) {
          const T hn = std::exp(delta * a[d * ns + n]) * T(h(b, d, n)) + delta * x * T(bm(b, t, n));
          h(b, d, n) = hn;
          acc += T(cm(b, t, n)) * hn;
        }
        y(b, t, d) = acc + T(d_skip(d)) * x;
      }
}

/// Backward of `selective_scan_forward` from a zero initial state, given dy (B, T, Di).
/// Accumulates (+=) du, ddt (gradient of the pre-bias dt), dBm, dCm, dA_log, dD, ddt_bias.
template <class T, class U, class Dt, class Bias, class ALog, class Bm, class Cm, class DSkip, class Dy, class Du,
          class Ddt, class DALog, class DBm, class DCm, class DDSkip, class DBias>
void selective_scan_backward(const U& u, const Dt& dt, const Bias& dt_bias, const ALog& a_log, const Bm& bm,
                             const Cm& cm, const DSkip& d_skip, const Dy& dy, const Du& du, const Ddt& ddt,
                             const DALog& da_log, const DBm& dbm, const DCm& dcm, const DDSkip& dd_skip,
                             const DBias& ddt_bias) {
  const std::int64_t nb = u.extent(0), nt = u.extent(1), di = u.extent(2), ns = a_log.extent(1);
  std::vector<T> a(di * ns);
  for (std::int64_t d = 0; d < di; ++d)
    for (std::int64_t n = 0; n < ns; ++n) a[d * ns + n] = -std::exp(T(a_log(d, n)));
  // hs[b][t][d][n] = h_{t−1}: index 0 is the zero initial state, index t + 1 is h_t.
  auto at = [&](std::int64_t b, std::int64_t t, std::int64_t d, std::int64_t n) {
    return ((b * (nt + 1) + t) * di + d) * ns + n;
  };
  std::vector<T> hs(nb * (nt + 1) * di * ns, T(0));
  for (std::int64_t b = 0; b < nb; ++b)
    for (std::int64_t t = 0; t < nt; ++t)
      for (std::int64_t d = 0; d < di; ++d) {
        const T delta = softplus<T>(T(dt(b, t, d)) + T(dt_bias(d)));
        for (std::int64_t n = 0; n < ns; ++n)
          hs[at(b, t + 1, d, n)] =
              std::exp(delta * a[d * ns + n]) * hs[at(b, t, d, n)] + delta * T(u(b, t, d)) * T(bm(b, t, n));
      }
  std::vector<T> dh(di * ns);
  for (std::int64_t b = 0; b < nb; ++b) {
    std::fill(dh.begin(), dh.end(), T(0));
    for (std::int64_t t = nt - 1; t >= 0; --t)
      for (std::int64_t d = 0; d < di; ++d) {
        const T v = T(dt(b, t, d)) + T(dt_bias(d));
        const T delta = softplus<T>(v);
        const T x = u(b, t, d), g = dy(b, t, d);
        T ddelta = 0, dx = g * T(d_skip(d));
        dd_skip(d) += g * x;
        for (std::int64_t n = 0; n < ns; ++n) {
          T& dhn = dh[d * ns + n];
          dhn += g * T(cm(b, t, n));
          dcm(b, t, n) += g * hs[at(b, t + 1, d, n)];
          const T decay = std::exp(delta * a[d * ns + n]);
          const T hprev = hs[at(b, t, d, n)];
          ddelta += dhn * (hprev * decay * a[d * ns + n] + x * T(bm(b, t, n)));
          da_log(d, n) += dhn * hprev * decay * delta * a[d * ns + n];  // ∂/∂A_log = ∂/∂A · A
          dbm(b, t, n) += dhn * delta * x;
          dx += dhn * delta * T(bm(b, t, n));
          dhn *= decay;
        }
        const T dv = ddelta * softplus_derivative<T>(v);
        du(b, t, d) += dx;
        ddt(b, t, d) += dv;
        ddt_bias(d) += dv;
      }
  }
}

}  // namespace hybridseq::kernels::reference
