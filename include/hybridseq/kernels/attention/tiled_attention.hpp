#pragma once
/// \file
/// Tiled attention with online softmax (FlashAttention-2, Dao 2023), forward and backward,
/// for any banded segment scheme (segment_schemes.hpp) and grouped-query heads.
///
/// Memory is O(T·D): forward keeps only the per-row log-sum-exp; backward recomputes each
/// score tile from Q, K and the saved LSE. Never a T×T matrix. Which key tiles a query tile
/// visits is decided by the scheme at compile time: fully masked tiles are skipped, tiles on
/// a band edge are masked inside, interior tiles run unmasked. Tile products go through
/// `host_gemm` (one BLAS call per tile on the calling thread).
///
/// Backward runs two passes, so that no gradient is accumulated by two threads:
///   pass 1, one task per (batch, kv head, key tile):  dV += Pᵀ dO,  dK += α dSᵀ Q̂
///   pass 2, one task per (batch, head, query tile):   dQ += α dS K̂
/// with P = exp(S − LSE), dS = P ⊙ (dO Vᵀ − Δ), Δ = rowsum(dO ⊙ O). Recomputing S in both
/// passes costs 7 tile GEMMs instead of 5, and buys determinism without atomics.
///
/// Dropout on the probabilities (FlashAttention's way): forward multiplies each probability
/// tile by its mask after the row sums (the log-sum-exp stays the undropped one), backward
/// regenerates the mask from the counter RNG (core/dropout.hpp): dV += (P ⊙ M)ᵀ dO and
/// dS = P ⊙ (M ⊙ dO Vᵀ − Δ), where M holds 1/(1 − p) or 0 and Δ = rowsum(dO ⊙ O) as before.
///
/// Layout: Q/K/V/O rows are addressed through `HeadRows` (pointer + batch/time/head strides,
/// head dim contiguous), so the kernel reads Q, K, V straight out of the fused QKV
/// projection and out of a decoding KV cache without copies.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "../../core/dropout.hpp"
#include "../../core/spaces.hpp"
#include "../exp.hpp"
#include "../gemm.hpp"
#include "segment_schemes.hpp"

namespace hybridseq::kernels::attention {

/// Rows of a (B, T, H, Dh) tensor stored with arbitrary batch/time/head strides.
template <class T>
struct HeadRows {
  T* data = nullptr;
  std::int64_t batch_stride = 0, time_stride = 0, head_stride = 0;
  KOKKOS_INLINE_FUNCTION T* row(std::int64_t b, std::int64_t t, std::int64_t h) const {
    return data + b * batch_stride + t * time_stride + h * head_stride;
  }
};

/// Everything the kernels read and write. Queries are positions q0 .. q0 + Tq − 1 of a
/// sequence whose keys are positions 0 .. Tk − 1.
template <class T>
struct AttentionArgs {
  HeadRows<const T> q, k, v;  // (B, Tq, H, Dh), (B, Tk, Hkv, Dh) ×2
  HeadRows<T> o;              // (B, Tq, H, Dh)
  T* lse = nullptr;           // (B, H, Tq) log-sum-exp of each query row's scores
  const T* alpha = nullptr;   // (H) score multiplier per head (1/√Dh, or the cosine temperature)
  std::int64_t batch = 0, tq = 0, tk = 0, q0 = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;
  core::DropoutMask dropout{};  // on the probabilities; element ((b·H + h)·Tq + i)·Tk + j

  /// The dropout mask's factor of score (b, h, query row i, key j).
  KOKKOS_INLINE_FUNCTION T dropout_factor(std::int64_t b, int h, std::int64_t i, std::int64_t j) const {
    return dropout.template factor<T>(((std::uint64_t(b) * heads + h) * tq + i) * tk + j);
  }
};

/// Gradients for backward (dq, dk, dv are overwritten, not accumulated).
template <class T>
struct AttentionGrads {
  HeadRows<const T> d_o;  // (B, Tq, H, Dh)
  HeadRows<T> dq, dk, dv;
  T* delta = nullptr;   // (B, H, Tq) scratch: rowsum(dO ⊙ O)
  T* dalpha = nullptr;  // (B, H, n_query_tiles) partial Σ dS ⊙ S / α, or nullptr
};

inline constexpr int tile_q = 64;
inline constexpr int tile_k = 64;

namespace detail {

template <class Space>
using TeamMember = typename Kokkos::TeamPolicy<Space>::member_type;

template <class T>
KOKKOS_INLINE_FUNCTION T neg_inf() {
  return -std::numeric_limits<T>::infinity();
}

/// First query index whose band reaches past key `k0` / last whose band starts before `k1`.
template <class Scheme>
KOKKOS_INLINE_FUNCTION std::int64_t first_query_seeing(std::int64_t k0, std::int64_t q0, std::int64_t tq,
                                                       std::int64_t n) {
  std::int64_t lo = 0, hi = tq;  // first i with key_end(q0 + i) > k0
  while (lo < hi) {
    const std::int64_t mid = (lo + hi) / 2;
    if (Scheme::key_end(q0 + mid, n) > k0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}
template <class Scheme>
KOKKOS_INLINE_FUNCTION std::int64_t end_query_seeing(std::int64_t k1, std::int64_t q0, std::int64_t tq,
                                                     std::int64_t n) {
  std::int64_t lo = 0, hi = tq;  // first i with key_begin(q0 + i) ≥ k1
  while (lo < hi) {
    const std::int64_t mid = (lo + hi) / 2;
    if (Scheme::key_begin(q0 + mid, n) >= k1)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/// A score tile S = α Q Kᵀ (rows × cols, leading dimension tile_k), unmasked.
template <class Scheme, class T>
void score_tile(const AttentionArgs<T>& a, std::int64_t b, int h, int hk, std::int64_t i0, std::int64_t rows,
                std::int64_t k0, std::int64_t cols, T* s) {
  host_gemm<T>(Op::none, Op::transpose, rows, cols, a.head_dim, a.alpha[h], a.q.row(b, i0, h), a.q.time_stride,
               a.k.row(b, k0, hk), a.k.time_stride, T(0), s, tile_k);
}

template <class Scheme, class T>
KOKKOS_INLINE_FUNCTION bool tile_is_interior(std::int64_t p_first, std::int64_t p_last, std::int64_t k0,
                                             std::int64_t cols, std::int64_t n) {
  return k0 >= Scheme::key_begin(p_last, n) && k0 + cols <= Scheme::key_end(p_first, n);
}

/// P = exp(S − lse) in place, masked entries 0.
template <class Scheme, class T>
void probabilities(T* s, const T* lse_row, std::int64_t p0, std::int64_t rows, std::int64_t k0, std::int64_t cols,
                   std::int64_t n, bool interior) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* sr = s + r * tile_k;
    const T l = lse_row[r];
    if (interior) {
      for (std::int64_t c = 0; c < cols; ++c) sr[c] = exp_in_loop(sr[c] - l);
    } else {
      const std::int64_t kb = Scheme::key_begin(p0 + r, n) - k0, ke = Scheme::key_end(p0 + r, n) - k0;
      for (std::int64_t c = 0; c < cols; ++c) sr[c] = (c >= kb && c < ke) ? exp_in_loop(sr[c] - l) : T(0);
    }
  }
}

/// dS = P ⊙ (dP ⊙ M − Δ) in place on the tile dP = dO Vᵀ (M: the dropout factors, or 1).
template <class T>
void scores_gradient(const AttentionArgs<T>& a, const AttentionGrads<T>& g, std::int64_t b, int h, std::int64_t i0,
                     std::int64_t rows, std::int64_t k0, std::int64_t cols, const T* p, T* dp) {
  const T* delta = g.delta + (b * a.heads + h) * a.tq + i0;
  for (std::int64_t r = 0; r < rows; ++r) {
    T* dr = dp + r * tile_k;
    const T* pr = p + r * tile_k;
    if (a.dropout.active())
      for (std::int64_t c = 0; c < cols; ++c) dr[c] *= a.dropout_factor(b, h, i0 + r, k0 + c);
    for (std::int64_t c = 0; c < cols; ++c) dr[c] = pr[c] * (dr[c] - delta[r]);
  }
}

/// Forward: one task per (batch, head, query tile).
template <class Scheme, class T, class Space>
struct Forward {
  AttentionArgs<T> a;
  std::int64_t n_qtiles;

  static std::size_t scratch_bytes(int head_dim) {
    return sizeof(T) * (std::size_t(tile_q) * tile_k + std::size_t(tile_q) * head_dim + 2 * tile_q);
  }

  void operator()(const TeamMember<Space>& team) const {
    const std::int64_t task = team.league_rank();
    const std::int64_t qt = task % n_qtiles, bh = task / n_qtiles;
    const int h = int(bh % a.heads);
    const std::int64_t b = bh / a.heads;
    const int hk = h / (a.heads / a.kv_heads);
    const int dh = a.head_dim;
    const std::int64_t n = a.tk, i0 = qt * tile_q, rows = std::min<std::int64_t>(tile_q, a.tq - i0);
    const std::int64_t p_first = a.q0 + i0, p_last = p_first + rows - 1;

    T* s = static_cast<T*>(team.team_shmem().get_shmem(sizeof(T) * tile_q * tile_k));
    T* acc = static_cast<T*>(team.team_shmem().get_shmem(sizeof(T) * tile_q * dh));
    T* m = static_cast<T*>(team.team_shmem().get_shmem(sizeof(T) * tile_q));
    T* l = static_cast<T*>(team.team_shmem().get_shmem(sizeof(T) * tile_q));
    for (std::int64_t r = 0; r < rows; ++r) m[r] = neg_inf<T>(), l[r] = 0;
    std::fill(acc, acc + rows * dh, T(0));

    const std::int64_t kb = Scheme::key_begin(p_first, n), ke = Scheme::key_end(p_last, n);
    for (std::int64_t k0 = kb / tile_k * tile_k; k0 < ke; k0 += tile_k) {
      const std::int64_t cols = std::min<std::int64_t>(tile_k, n - k0);
      score_tile<Scheme>(a, b, h, hk, i0, rows, k0, cols, s);
      const bool interior = tile_is_interior<Scheme, T>(p_first, p_last, k0, cols, n);
      for (std::int64_t r = 0; r < rows; ++r) {
        T* sr = s + r * tile_k;
        std::int64_t c0 = 0, c1 = cols;
        if (!interior) {
          c0 = std::clamp<std::int64_t>(Scheme::key_begin(p_first + r, n) - k0, 0, cols);
          c1 = std::clamp<std::int64_t>(Scheme::key_end(p_first + r, n) - k0, 0, cols);
        }
        T mx = m[r];
        for (std::int64_t c = c0; c < c1; ++c) mx = sr[c] > mx ? sr[c] : mx;
        if (mx == neg_inf<T>()) {  // nothing visible in this tile for this row
          std::fill(sr, sr + cols, T(0));
          continue;
        }
        const T correction = math::exp(m[r] - mx);
        T sum = 0;
        for (std::int64_t c = 0; c < c0; ++c) sr[c] = 0;
        for (std::int64_t c = c0; c < c1; ++c) sr[c] = exp_in_loop(sr[c] - mx);  // vectorises
        for (std::int64_t c = c0; c < c1; ++c) sum += sr[c];
        for (std::int64_t c = c1; c < cols; ++c) sr[c] = 0;
        if (a.dropout.active())  // after the row sum: the normaliser is the undropped one
          for (std::int64_t c = c0; c < c1; ++c) sr[c] *= a.dropout_factor(b, h, i0 + r, k0 + c);
        l[r] = l[r] * correction + sum;
        m[r] = mx;
        if (correction != T(1)) {
          T* ar = acc + r * dh;
          for (int d = 0; d < dh; ++d) ar[d] *= correction;
        }
      }
      host_gemm<T>(Op::none, Op::none, rows, dh, cols, T(1), s, tile_k, a.v.row(b, k0, hk), a.v.time_stride, T(1), acc,
                   dh);
    }
    T* lse = a.lse + (b * a.heads + h) * a.tq + i0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const T inv = T(1) / l[r];
      T* out = a.o.row(b, i0 + r, h);
      for (int d = 0; d < dh; ++d) out[d] = acc[r * dh + d] * inv;
      lse[r] = m[r] + math::log(l[r]);
    }
  }
};

/// Δ = rowsum(dO ⊙ O), one entry per (b, h, query).
template <class T, class Space>
struct Delta {
  AttentionArgs<T> a;
  AttentionGrads<T> g;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t idx) const {
    const std::int64_t i = idx % a.tq, bh = idx / a.tq;
    const int h = int(bh % a.heads);
    const std::int64_t b = bh / a.heads;
    const T* o = a.o.row(b, i, h);
    const T* d = g.d_o.row(b, i, h);
    T s = 0;
    for (int j = 0; j < a.head_dim; ++j) s += o[j] * d[j];
    g.delta[idx] = s;
  }
};

/// Backward pass 1: dK, dV for one (batch, kv head, key tile), over every query tile and
/// every query head of the group that sees it.
template <class Scheme, class T, class Space>
struct BackwardKV {
  AttentionArgs<T> a;
  AttentionGrads<T> g;
  std::int64_t n_ktiles;

  static std::size_t scratch_bytes(int head_dim) {
    return sizeof(T) * (2 * std::size_t(tile_q) * tile_k + 2 * std::size_t(tile_k) * head_dim);
  }

  void operator()(const TeamMember<Space>& team) const {
    const std::int64_t task = team.league_rank();
    const std::int64_t kt = task % n_ktiles, bh = task / n_ktiles;
    const int hk = int(bh % a.kv_heads);
    const std::int64_t b = bh / a.kv_heads;
    const int dh = a.head_dim, group = a.heads / a.kv_heads;
    const std::int64_t n = a.tk, k0 = kt * tile_k, cols = std::min<std::int64_t>(tile_k, n - k0);

    T* p = static_cast<T*>(team.team_shmem().get_shmem(sizeof(T) * tile_q * tile_k));
    T* dp = static_cast<T*>(team.team_shmem().get_shmem(sizeof(T) * tile_q * tile_k));
    T* dk = static_cast<T*>(team.team_shmem().get_shmem(sizeof(T) * tile_k * dh));
    T* dv = static_cast<T*>(team.team_shmem().get_shmem(sizeof(T) * tile_k * dh));
    std::fill(dk, dk + cols * dh, T(0));
    std::fill(dv, dv + cols * dh, T(0));

    const std::int64_t i_begin = first_query_seeing<Scheme>(k0, a.q0, a.tq, n);
    const std::int64_t i_end = end_query_seeing<Scheme>(k0 + cols, a.q0, a.tq, n);
    for (int h = hk * group; h < (hk + 1) * group; ++h) {
      const T alpha = a.alpha[h];
      for (std::int64_t i0 = i_begin / tile_q * tile_q; i0 < i_end; i0 += tile_q) {
        const std::int64_t rows = std::min<std::int64_t>(tile_q, a.tq - i0), p_first = a.q0 + i0;
        score_tile<Scheme>(a, b, h, hk, i0, rows, k0, cols, p);
        const bool interior = tile_is_interior<Scheme, T>(p_first, p_first + rows - 1, k0, cols, n);
        probabilities<Scheme>(p, a.lse + (b * a.heads + h) * a.tq + i0, p_first, rows, k0, cols, n, interior);
        // dV += Pᵀ dO (with dropout: (P ⊙ M)ᵀ dO, the dropped tile built in dp first)
        const T* pv = p;
        if (a.dropout.active()) {
          for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t c = 0; c < cols; ++c)
              dp[r * tile_k + c] = p[r * tile_k + c] * a.dropout_factor(b, h, i0 + r, k0 + c);
          pv = dp;
        }
        host_gemm<T>(Op::transpose, Op::none, cols, dh, rows, T(1), pv, tile_k, g.d_o.row(b, i0, h), g.d_o.time_stride,
                     T(1), dv, dh);
        // dP = dO Vᵀ (⊙ M), then dS = P ⊙ (dP − Δ)
        host_gemm<T>(Op::none, Op::transpose, rows, cols, dh, T(1), g.d_o.row(b, i0, h), g.d_o.time_stride,
                     a.v.row(b, k0, hk), a.v.time_stride, T(0), dp, tile_k);
        scores_gradient(a, g, b, h, i0, rows, k0, cols, p, dp);
        // dK += α dSᵀ Q
        host_gemm<T>(Op::transpose, Op::none, cols, dh, rows, alpha, dp, tile_k, a.q.row(b, i0, h), a.q.time_stride,
                     T(1), dk, dh);
      }
    }
    for (std::int64_t c = 0; c < cols; ++c) {
      T* dkr = g.dk.row(b, k0 + c, hk);
      T* dvr = g.dv.row(b, k0 + c, hk);
      for (int d = 0; d < dh; ++d) dkr[d] = dk[c * dh + d], dvr[d] = dv[c * dh + d];
    }
  }
};

/// Backward pass 2: dQ (and the partial temperature gradient) for one (batch, head, query tile).
template <class Scheme, class T, class Space>
struct BackwardQ {
  AttentionArgs<T> a;
  AttentionGrads<T> g;
  std::int64_t n_qtiles;

  static std::size_t scratch_bytes(int head_dim) {
    return sizeof(T) * (3 * std::size_t(tile_q) * tile_k + std::size_t(tile_q) * head_dim);
  }

  void operator()(const TeamMember<Space>& team) const {
    const std::int64_t task = team.league_rank();
    const std::int64_t qt = task % n_qtiles, bh = task / n_qtiles;
    const int h = int(bh % a.heads);
    const std::int64_t b = bh / a.heads;
    const int hk = h / (a.heads / a.kv_heads), dh = a.head_dim;
    const std::int64_t n = a.tk, i0 = qt * tile_q, rows = std::min<std::int64_t>(tile_q, a.tq - i0);
    const std::int64_t p_first = a.q0 + i0, p_last = p_first + rows - 1;
    const T alpha = a.alpha[h];

    T* p = static_cast<T*>(team.team_shmem().get_shmem(sizeof(T) * tile_q * tile_k));
    T* dp = static_cast<T*>(team.team_shmem().get_shmem(sizeof(T) * tile_q * tile_k));
    T* scores = static_cast<T*>(team.team_shmem().get_shmem(sizeof(T) * tile_q * tile_k));
    T* dq = static_cast<T*>(team.team_shmem().get_shmem(sizeof(T) * tile_q * dh));
    std::fill(dq, dq + rows * dh, T(0));
    const T* lse = a.lse + (b * a.heads + h) * a.tq + i0;
    double dalpha = 0;  // Σ dS ⊙ (S / α) over this tile row block

    const std::int64_t kb = Scheme::key_begin(p_first, n), ke = Scheme::key_end(p_last, n);
    for (std::int64_t k0 = kb / tile_k * tile_k; k0 < ke; k0 += tile_k) {
      const std::int64_t cols = std::min<std::int64_t>(tile_k, n - k0);
      score_tile<Scheme>(a, b, h, hk, i0, rows, k0, cols, p);
      const bool interior = tile_is_interior<Scheme, T>(p_first, p_last, k0, cols, n);
      if (g.dalpha) std::copy(p, p + rows * tile_k, scores);  // S, for ∂L/∂α = Σ dS ⊙ S / α
      probabilities<Scheme>(p, lse, p_first, rows, k0, cols, n, interior);
      host_gemm<T>(Op::none, Op::transpose, rows, cols, dh, T(1), g.d_o.row(b, i0, h), g.d_o.time_stride,
                   a.v.row(b, k0, hk), a.v.time_stride, T(0), dp, tile_k);
      scores_gradient(a, g, b, h, i0, rows, k0, cols, p, dp);
      if (g.dalpha)
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t c = 0; c < cols; ++c) dalpha += double(dp[r * tile_k + c]) * double(scores[r * tile_k + c]);
      // dQ += α dS K
      host_gemm<T>(Op::none, Op::none, rows, dh, cols, alpha, dp, tile_k, a.k.row(b, k0, hk), a.k.time_stride, T(1), dq,
                   dh);
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      T* out = g.dq.row(b, i0 + r, h);
      for (int d = 0; d < dh; ++d) out[d] = dq[r * dh + d];
    }
    if (g.dalpha) g.dalpha[(b * a.heads + h) * n_qtiles + qt] = T(dalpha / double(alpha));
  }
};

template <class Functor, class Space>
void launch(const char* label, const Space& exec, std::int64_t tasks, std::size_t scratch, const Functor& f) {
  if (tasks == 0) return;
  Kokkos::TeamPolicy<Space, Kokkos::Schedule<Kokkos::Dynamic>> policy(exec, tasks, 1);
  Kokkos::parallel_for(label, policy.set_scratch_size(0, Kokkos::PerTeam(scratch)), f);
}

}  // namespace detail

inline std::int64_t query_tiles(std::int64_t tq) {
  return (tq + tile_q - 1) / tile_q;
}

/// The host kernels; kernels/attention/attention.hpp chooses between them and the team
/// kernels of team_attention.hpp by execution space.
namespace tiled {

template <class Space>
inline constexpr bool runs_on = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Space::memory_space>::accessible;

/// O and LSE for every query row.
template <class Scheme, class T, class Space>
void forward(const Space& exec, const AttentionArgs<T>& a) {
  static_assert(runs_on<Space>, "hybridseq::kernels::attention::tiled: host execution spaces only (BLAS per tile)");
  const std::int64_t nq = query_tiles(a.tq);
  detail::launch("hybridseq::kernels::attention::forward[tiled]", exec, a.batch * a.heads * nq,
                 detail::Forward<Scheme, T, Space>::scratch_bytes(a.head_dim),
                 detail::Forward<Scheme, T, Space>{a, nq});
}

/// dQ, dK, dV (overwritten) from dO, and, when g.dalpha is set, the per-(b, h, query tile)
/// partial sums of ∂L/∂α (sum them over b and tiles for each head).
template <class Scheme, class T, class Space>
void backward(const Space& exec, const AttentionArgs<T>& a, const AttentionGrads<T>& g) {
  static_assert(runs_on<Space>, "hybridseq::kernels::attention::tiled: host execution spaces only (BLAS per tile)");
  if (a.batch * a.tq == 0) return;
  Kokkos::parallel_for("hybridseq::kernels::attention::delta",
                       Kokkos::RangePolicy<Space>(exec, 0, a.batch * a.heads * a.tq), detail::Delta<T, Space>{a, g});
  const std::int64_t nk = (a.tk + tile_k - 1) / tile_k, nq = query_tiles(a.tq);
  detail::launch("hybridseq::kernels::attention::backward_kv[tiled]", exec, a.batch * a.kv_heads * nk,
                 detail::BackwardKV<Scheme, T, Space>::scratch_bytes(a.head_dim),
                 detail::BackwardKV<Scheme, T, Space>{a, g, nk});
  detail::launch("hybridseq::kernels::attention::backward_q[tiled]", exec, a.batch * a.heads * nq,
                 detail::BackwardQ<Scheme, T, Space>::scratch_bytes(a.head_dim),
                 detail::BackwardQ<Scheme, T, Space>{a, g, nq});
}

}  // namespace tiled
}  // namespace hybridseq::kernels::attention
