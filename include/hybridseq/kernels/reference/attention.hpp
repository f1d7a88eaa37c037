#pragma once
/// \file
/// Naive attention oracle: the full masked score matrix per (batch, head), softmax, and the
/// textbook backward, accumulated in long double. Same arguments as the tiled kernels.

#include <cmath>
#include <cstdint>
#include <vector>

#include "../attention/attention.hpp"

namespace hybridseq::kernels::reference {

namespace detail {
template <class T>
std::vector<long double> probabilities(const attention::AttentionArgs<T>& a, const attention::Band& band,
                                       std::int64_t b, int h) {
  const int hk = h / (a.heads / a.kv_heads);
  std::vector<long double> p(a.tq * a.tk, 0.0L);
  for (std::int64_t i = 0; i < a.tq; ++i) {
    const std::int64_t t = a.q0 + i, kb = band.key_begin(t, a.tk), ke = band.key_end(t, a.tk);
    long double mx = -INFINITY;
    for (std::int64_t j = kb; j < ke; ++j) {
      long double s = 0;
      for (int d = 0; d < a.head_dim; ++d) s += (long double)a.q.row(b, i, h)[d] * a.k.row(b, j, hk)[d];
      p[i * a.tk + j] = s * a.alpha[h];
      mx = std::max(mx, p[i * a.tk + j]);
    }
    long double sum = 0;
    for (std::int64_t j = kb; j < ke; ++j) sum += (p[i * a.tk + j] = std::exp(p[i * a.tk + j] - mx));
    for (std::int64_t j = kb; j < ke; ++j) p[i * a.tk + j] /= sum;
    if (a.lse) a.lse[(b * a.heads + h) * a.tq + i] = T(mx + std::log(sum));
  }
  return p;
}
}  // namespace detail

/// O = softmax(masked α Q Kᵀ) V and LSE, on host memory.
template <class T>
void attention_forward(const attention::AttentionArgs<T>& a, const attention::Band& band) {
  for (std::int64_t b = 0; b < a.batch; ++b)
    for (int h = 0; h < a.heads; ++h) {
      const int hk = h / (a.heads / a.kv_heads);
      const auto p = detail::probabilities(a, band, b, h);
      for (std::int64_t i = 0; i < a.tq; ++i)
        for (int d = 0; d < a.head_dim; ++d) {
          long double acc = 0;
          for (std::int64_t j = 0; j < a.tk; ++j)
            acc += p[i * a.tk + j] * a.dropout_factor(b, h, i, j) * a.v.row(b, j, hk)[d];
          a.o.row(b, i, h)[d] = T(acc);
        }
    }
}

/// dQ, dK, dV (overwritten; dK/dV summed over the heads of a group) and ∂L/∂α per head.
template <class T>
void attention_backward(const attention::AttentionArgs<T>& a, const attention::AttentionGrads<T>& g,
                        const attention::Band& band, std::vector<long double>* dalpha = nullptr) {
  for (std::int64_t b = 0; b < a.batch; ++b)
    for (std::int64_t j = 0; j < a.tk; ++j)
      for (int hk = 0; hk < a.kv_heads; ++hk)
        for (int d = 0; d < a.head_dim; ++d) g.dk.row(b, j, hk)[d] = 0, g.dv.row(b, j, hk)[d] = 0;
  if (dalpha) dalpha->assign(a.heads, 0.0L);
  auto args = a;
  args.lse = nullptr;
  for (std::int64_t b = 0; b < a.batch; ++b)
    for (int h = 0; h < a.heads; ++h) {
      const int hk = h / (a.heads / a.kv_heads);
      const auto p = detail::probabilities(args, band, b, h);
      std::vector<long double> ds(a.tq * a.tk, 0.0L);
      for (std::int64_t i = 0; i < a.tq; ++i) {
        long double rowsum = 0;
        std::vector<long double> dp(a.tk, 0.0L);
        for (std::int64_t j = 0; j < a.tk; ++j) {
          for (int d = 0; d < a.head_dim; ++d) dp[j] += (long double)g.d_o.row(b, i, h)[d] * a.v.row(b, j, hk)[d];
          dp[j] *= a.dropout_factor(b, h, i, j);
          rowsum += p[i * a.tk + j] * dp[j];
        }
        for (std::int64_t j = 0; j < a.tk; ++j) ds[i * a.tk + j] = p[i * a.tk + j] * (dp[j] - rowsum);
      }
      for (std::int64_t i = 0; i < a.tq; ++i)
        for (int d = 0; d < a.head_dim; ++d) {
          long double acc = 0;
          for (std::int64_t j = 0; j < a.tk; ++j) acc += ds[i * a.tk + j] * a.k.row(b, j, hk)[d];
          g.dq.row(b, i, h)[d] = T(acc * a.alpha[h]);
        }
      for (std::int64_t j = 0; j < a.tk; ++j)
        for (int d = 0; d < a.head_dim; ++d) {
          long double dk = 0, dv = 0;
          for (std::int64_t i = 0; i < a.tq; ++i) {
            dk += ds[i * a.tk + j] * a.q.row(b, i, h)[d];
            dv += p[i * a.tk + j] * a.dropout_factor(b, h, i, j) * g.d_o.row(b, i, h)[d];
          }
          g.dk.row(b, j, hk)[d] += T(dk * a.alpha[h]);
          g.dv.row(b, j, hk)[d] += T(dv);
        }
      if (dalpha)
        for (std::int64_t i = 0; i < a.tq; ++i)
          for (std::int64_t j = 0; j < a.tk; ++j) {
            long double qk = 0;
            for (int d = 0; d < a.head_dim; ++d) qk += (long double)a.q.row(b, i, h)[d] * a.k.row(b, j, hk)[d];
            (*dalpha)[h] += ds[i * a.tk + j] * qk;
          }
    }
}

}  // namespace hybridseq::kernels::reference
