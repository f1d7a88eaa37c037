#pragma once
/// \file
/// Tiled attention with online softmax (FlashAttention-2, Dao 2023), forward and backward,
/// for any banded segment scheme (segment_schemes.hpp) and grouped-query heads.
///
/// Memory is O(T·D): forward keeps only the per-row log-sum-exp; backward recomputes each
/// score tile from Q, K and the saved LSE. Never a T×T matrix. Which key tiles a query tile
/// visits is decided by the scheme's band (segment_schemes.hpp): fully masked tiles are
/// skipped, interior tiles run unmasked, and a tile on a band edge computes only what the band
/// shows there (TileSpans: per block of rows, the micro-kernel skips the vectors and the depth
/// that hold none of it) and masks the rest.
///
/// Tiles are held transposed, a row per key and a lane per query (Sᵀ = K · α Qᵀ, with α Qᵀ
/// packed once per query tile): the softmax statistics of a tile's 64 queries are then whole
/// vectors, and every max, sum and exp of the online softmax is a vertical vector operation
/// in a fixed order. Every tile product goes through the register-blocked micro-kernel of
/// tile_gemm.hpp, compiled per ISA and chosen at run time (isa.hpp): AVX-512 or AVX2+FMA for
/// float when the head dim is a multiple of the vector width, the generic copy otherwise.
///
/// Backward computes each tile's scores once (FlashAttention-2's five tile products: Sᵀ,
/// dPᵀ, dV += Pᵀ dO, dK += α dSᵀ Q, dQ += α dS K) in one task per (batch, head, query tile),
/// with P = exp(S − LSE), dS = P ⊙ (dP − Δ), Δ = rowsum(dO ⊙ O). dQ belongs to its task; dK and
/// dV, which every query tile adds to, accumulate in per-slot buffers: the tasks are cut into
/// `backward_slots` runs of equal cost, a slot runs its tasks in order, and the slots' buffers
/// are summed in slot order. The cut depends on the problem only, not on the thread count, so
/// results are bit-identical at any number of threads, without atomics.
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
#include <type_traits>
#include <utility>
#include <vector>

#include "../../core/dropout.hpp"
#include "../../core/error.hpp"
#include "../../core/parallel.hpp"
#include "../../core/spaces.hpp"
#include "../elementwise.hpp"
#include "../exp.hpp"
#include "../isa.hpp"
#include "../tile_gemm.hpp"
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

/// The query tile one task of a launch over query tiles works on. Tasks enumerate (batch, head,
/// query tile), the tile fastest, so that consecutive tasks read the same keys and values.
struct QueryTile {
  std::int64_t qt, b, i0, rows;  // tile index, batch, first query row, rows (the last tile's may be short)
  std::int64_t p_first, p_last;  // positions of its first and last query
  int h, hk;                     // head, and the kv head it reads
  template <class T>
  KOKKOS_INLINE_FUNCTION QueryTile(const AttentionArgs<T>& a, std::int64_t task, std::int64_t n_qtiles)
      : qt(task % n_qtiles),
        b(task / n_qtiles / a.heads),
        i0(qt * tile_q),
        rows(a.tq - i0 < tile_q ? a.tq - i0 : tile_q),
        p_first(a.q0 + i0),
        p_last(p_first + rows - 1),
        h(int(task / n_qtiles % a.heads)),
        hk(h / (a.heads / a.kv_heads)) {}
};

/// The key tile one task of a launch over key tiles (dK, dV) works on: (batch, kv head, key
/// tile), the tile fastest.
struct KeyTile {
  std::int64_t kt, b, k0, cols;  // tile index, batch, first key, keys (the last tile's may be short)
  int hk;                        // kv head
  template <class T>
  KOKKOS_INLINE_FUNCTION KeyTile(const AttentionArgs<T>& a, std::int64_t task, std::int64_t n_ktiles)
      : kt(task % n_ktiles),
        b(task / n_ktiles / a.kv_heads),
        k0(kt * tile_k),
        cols(a.tk - k0 < tile_k ? a.tk - k0 : tile_k),
        hk(int(task / n_ktiles % a.kv_heads)) {}
};

namespace detail {

template <class Space>
using TeamMember = typename Kokkos::TeamPolicy<Space>::member_type;

template <class T>
KOKKOS_INLINE_FUNCTION T neg_inf() {
  return -std::numeric_limits<T>::infinity();
}

/// The first query index whose band reaches past key `k0` / the first whose band starts at or
/// after key `k1` (so the queries that see any of keys k0 .. k1 − 1 are the indices between).
KOKKOS_INLINE_FUNCTION std::int64_t first_query_seeing(const Band& band, std::int64_t k0, std::int64_t q0,
                                                       std::int64_t tq, std::int64_t n) {
  std::int64_t lo = 0, hi = tq;  // first i with key_end(q0 + i) > k0
  while (lo < hi) {
    const std::int64_t mid = (lo + hi) / 2;
    if (band.key_end(q0 + mid, n) > k0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}
KOKKOS_INLINE_FUNCTION std::int64_t end_query_seeing(const Band& band, std::int64_t k1, std::int64_t q0,
                                                     std::int64_t tq, std::int64_t n) {
  std::int64_t lo = 0, hi = tq;  // first i with key_begin(q0 + i) ≥ k1
  while (lo < hi) {
    const std::int64_t mid = (lo + hi) / 2;
    if (band.key_begin(q0 + mid, n) >= k1)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

KOKKOS_INLINE_FUNCTION bool tile_is_interior(const Band& band, std::int64_t p_first, std::int64_t p_last,
                                             std::int64_t k0, std::int64_t cols, std::int64_t n) {
  return k0 >= band.key_begin(p_last, n) && k0 + cols <= band.key_end(p_first, n);
}

/// The micro-kernel shape a kernel call runs with: the widest vector copy the host has that
/// divides the head dim (so that every tile product is whole vectors), for float only.
template <class T>
Isa kernel_isa(int head_dim) {
  if constexpr (std::is_same_v<T, float>) {
    const Isa isa = host_isa();
    if (isa == Isa::avx512 && head_dim % 16 == 0) return Isa::avx512;
    if (isa >= Isa::avx2 && head_dim % 8 == 0) return Isa::avx2;
  }
  return Isa::baseline;
}

/// Runs `f.run(shape, team)` with the micro-kernel shape of `isa`, inside a copy compiled for
/// that ISA: `run` is force-inlined there, so the element-wise loops of the softmax are
/// vectorised for the ISA too (a lambda in between would be compiled for the baseline).
#if HYBRIDSEQ_ISA_DISPATCH
template <class F, class Member>
[[HYBRIDSEQ_TARGET_AVX512]] void run_avx512(const F& f, const Member& team) {
  f.run(simd::Avx512{}, team);
}
template <class F, class Member>
[[HYBRIDSEQ_TARGET_AVX2]] void run_avx2(const F& f, const Member& team) {
  f.run(simd::Avx2{}, team);
}
#endif

template <class T, class F, class Member>
void with_shape(Isa isa, const F& f, const Member& team) {
#if HYBRIDSEQ_ISA_DISPATCH
  if constexpr (std::is_same_v<T, float>) {
    if (isa == Isa::avx512) return run_avx512(f, team);
    if (isa == Isa::avx2) return run_avx2(f, team);
  }
#endif
  (void)isa;
  f.run(simd::Generic<T>{}, team);
}

/// x̂ᵀ = scale · xᵀ of a query tile's rows (Q or dO), packed Dh × tile_q with lanes past the
/// tile's rows zero: the vector operand of Sᵀ = K · α Qᵀ and dPᵀ = V · dOᵀ, packed once per
/// query tile and reused by every key tile. Whole blocks of the shape's vector width go through
/// simd::transpose_block (the head dim is a multiple of it: kernel_isa picks a vector shape
/// only then), the rows past the last whole block one element at a time (a whole block would
/// read rows past the tile, or past the tensor's end).
template <class S, class T>
HYBRIDSEQ_HOST_FORCEINLINE void pack_transposed(const HeadRows<const T>& x, std::int64_t b, std::int64_t i0, int h,
                                                std::int64_t rows, int dh, T scale, T* out) {
  constexpr int W = S::lanes;
  if (rows < tile_q) std::fill(out, out + std::int64_t(dh) * tile_q, T(0));
  const std::int64_t whole = rows / W * W;
  for (std::int64_t i = 0; i < whole; i += W) {
    const T* xr = x.row(b, i0 + i, h);
    for (int d = 0; d < dh; d += W)
      simd::transpose_block<S>(xr + d, x.time_stride, scale, out + d * tile_q + i, tile_q);
  }
  for (std::int64_t i = whole; i < rows; ++i) {
    const T* xr = x.row(b, i0 + i, h);
    for (int d = 0; d < dh; ++d) out[d * tile_q + i] = scale * xr[d];
  }
}

/// Which entries of a tile on a band edge the band shows, as ranges within the tile: for each
/// key j the query rows that see it, for each query row i the keys it sees. Both ends of either
/// are non-decreasing, as the band's are, which is what the micro-kernel's RowSpans ask.
struct TileSpans {
  int query_begin[tile_k], query_end[tile_k];
  int key_begin[tile_q], key_end[tile_q];

  /// Fills the spans of the tile of `rows` query rows from position p_first and `cols` keys from k0.
  void find(const Band& band, std::int64_t p_first, std::int64_t rows, std::int64_t k0, std::int64_t cols,
            std::int64_t n) {
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::int64_t kb = std::clamp<std::int64_t>(band.key_begin(p_first + i, n) - k0, 0, cols);
      key_begin[i] = int(kb);
      key_end[i] = int(std::clamp<std::int64_t>(band.key_end(p_first + i, n) - k0, kb, cols));
    }
    // Query row i sees key k0 + j when key_begin ≤ k0 + j < key_end: the rows from the first
    // whose band ends past the key to the first whose band starts past it.
    std::int64_t qb = 0, qe = 0;
    for (std::int64_t j = 0; j < cols; ++j) {
      while (qb < rows && band.key_end(p_first + qb, n) <= k0 + j) ++qb;
      while (qe < rows && band.key_begin(p_first + qe, n) <= k0 + j) ++qe;
      query_begin[j] = int(qb);
      query_end[j] = int(std::max(qb, qe));
    }
  }
  simd::RowSpans queries() const { return {query_begin, query_end}; }  // per row of Sᵀ
  simd::RowSpans keys() const { return {key_begin, key_end}; }         // per row of S
};

/// Sets the entries of an edge tile Sᵀ (cols keys × `lanes` query lanes) that the band hides,
/// and the lanes past the tile's query rows, to −inf, so that exp makes them 0: also those the
/// product skipped (TileSpans: it computes only vectors that hold shown entries).
template <class T>
HYBRIDSEQ_HOST_FORCEINLINE void mask_scores(const TileSpans& spans, T* st, std::int64_t cols, int lanes) {
  for (std::int64_t j = 0; j < cols; ++j) {
    T* row = st + j * tile_q;
    std::fill(row, row + spans.query_begin[j], neg_inf<T>());
    std::fill(row + spans.query_end[j], row + lanes, neg_inf<T>());
  }
}

/// Row j of an edge tile's Sᵀ-shaped result: f(i) over the query lanes that see key j, 0 on
/// every other lane of the tile (also where the product skipped vectors, which hold garbage).
template <class T, class F>
HYBRIDSEQ_HOST_FORCEINLINE void shown_or_zero(const TileSpans& spans, std::int64_t j, T* row, F f) {
  const int qb = spans.query_begin[j], qe = spans.query_end[j];
  std::fill(row, row + qb, T(0));
  for (int i = qb; i < qe; ++i) row[i] = f(i);
  std::fill(row + qe, row + tile_q, T(0));
}

/// One key tile of the online softmax, a lane per query: m ← max(m, maxⱼ Sᵀⱼ),
/// Sᵀ ← exp(Sᵀ − m), l ← l·c + Σⱼ Sᵀⱼ, with c = exp(m_old − m) left in `corr` for O.
/// m starts at the lowest finite value rather than −inf, so that a query that has seen only
/// masked keys gets c = exp(0) and P = exp(−inf) = 0 instead of NaNs.
/// `lanes` (a multiple of the vector width, at most tile_q) are the query lanes in use: an int,
/// or std::integral_constant<int, tile_q> for a full tile, whose loops then have a fixed count.
template <class S, class T, class Lanes>
HYBRIDSEQ_HOST_FORCEINLINE void online_softmax(T* st, std::int64_t cols, Lanes lanes, T* m, T* l, T* corr) {
  using V = typename S::V;
  constexpr int W = S::lanes;
  // The max as vectors (GCC will not if-convert a float select), G of them at a time with the
  // keys in the outer loop: G running maxima whose chains interleave, where one vector's chain
  // down the keys would wait out the max's latency at every key.
  constexpr int G = tile_q / W < 8 ? tile_q / W : 8;
  T mx[tile_q], sum[tile_q];
  for (int i0 = 0; i0 < lanes; i0 += G * W) {
    V v[G] = {};
    HYBRIDSEQ_UNROLL
    for (int u = 0; u < G; ++u)
      if (i0 + u * W < lanes) simd::load(v[u], m + i0 + u * W);
    for (std::int64_t j = 0; j < cols; ++j) {
      const T* row = st + j * tile_q + i0;
      HYBRIDSEQ_UNROLL
      for (int u = 0; u < G; ++u)
        if (i0 + u * W < lanes) {
          V x;
          simd::load(x, row + u * W);
          v[u] = x > v[u] ? x : v[u];
        }
    }
    HYBRIDSEQ_UNROLL
    for (int u = 0; u < G; ++u)
      if (i0 + u * W < lanes) simd::store(mx + i0 + u * W, v[u]);
  }
  for (int i = 0; i < lanes; ++i) corr[i] = exp_in_loop(m[i] - mx[i]), m[i] = mx[i], sum[i] = 0;
  for (std::int64_t j = 0; j < cols; ++j) {
    T* sj = st + j * tile_q;
    for (int i = 0; i < lanes; ++i) sj[i] = exp_in_loop(sj[i] - mx[i]), sum[i] += sj[i];
  }
  for (int i = 0; i < lanes; ++i) l[i] = l[i] * corr[i] + sum[i];
}

/// Forward: one task per (batch, head, query tile).
template <class T, class Space>
struct Forward {
  AttentionArgs<T> a;
  Band band;
  std::int64_t n_qtiles;
  Isa isa;

  static std::size_t scratch_bytes(int head_dim) {
    return sizeof(T) * (std::size_t(tile_k) * tile_q + 2 * std::size_t(tile_q) * head_dim + 3 * tile_q);
  }

  template <class Member>
  void operator()(const Member& team) const {
    with_shape<T>(isa, *this, team);
  }

  template <class S, class Member>
  HYBRIDSEQ_HOST_FORCEINLINE void run(S shape, const Member& team) const {
    const QueryTile tile(a, team.league_rank(), n_qtiles);
    const std::int64_t b = tile.b, i0 = tile.i0, rows = tile.rows, p_first = tile.p_first, p_last = tile.p_last;
    const int h = tile.h, hk = tile.hk, dh = a.head_dim;
    const std::int64_t n = a.tk;
    // The query lanes the tile products and the softmax run over: the rows rounded up to whole
    // vectors, so that a short tile (a decoding step's one row) costs a vector, not a tile.
    const int lanes = int((rows + S::lanes - 1) / S::lanes * S::lanes);

    T* s = static_cast<T*>(team.team_shmem().get_shmem(sizeof(T) * tile_k * tile_q));
    T* q_t = static_cast<T*>(team.team_shmem().get_shmem(sizeof(T) * tile_q * dh));
    T* acc = static_cast<T*>(team.team_shmem().get_shmem(sizeof(T) * tile_q * dh));
    T* m = static_cast<T*>(team.team_shmem().get_shmem(sizeof(T) * tile_q));
    T* l = static_cast<T*>(team.team_shmem().get_shmem(sizeof(T) * tile_q));
    T* corr = static_cast<T*>(team.team_shmem().get_shmem(sizeof(T) * tile_q));
    pack_transposed<S>(a.q, b, i0, h, rows, dh, a.alpha[h], q_t);
    std::fill(m, m + tile_q, std::numeric_limits<T>::lowest());
    std::fill(l, l + tile_q, T(0));
    std::fill(acc, acc + rows * dh, T(0));

    const std::int64_t kb = band.key_begin(p_first, n), ke = band.key_end(p_last, n);
    for (std::int64_t k0 = kb / tile_k * tile_k; k0 < ke; k0 += tile_k) {
      const std::int64_t cols = std::min<std::int64_t>(tile_k, n - k0);
      const T* k = a.k.row(b, k0, hk);
      // On a band edge only the shown entries are computed (TileSpans), the rest masked.
      const bool edge = !tile_is_interior(band, p_first, p_last, k0, cols, n);
      TileSpans spans;
      if (edge) spans.find(band, p_first, rows, k0, cols, n);
      simd::gemm(shape, int(cols), lanes, dh, T(1), k, a.k.time_stride, 1, q_t, tile_q, s, tile_q, false,
                 {.c_wanted = edge ? spans.queries() : simd::RowSpans{}});
      if (edge) mask_scores(spans, s, cols, lanes);
      if (lanes == tile_q)
        online_softmax<S>(s, cols, std::integral_constant<int, tile_q>{}, m, l, corr);
      else
        online_softmax<S>(s, cols, lanes, m, l, corr);
      if (a.dropout.active())  // after the row sums: the normaliser is the undropped one
        for (std::int64_t j = 0; j < cols; ++j)
          for (std::int64_t i = 0; i < rows; ++i) s[j * tile_q + i] *= a.dropout_factor(b, h, i0 + i, k0 + j);
      // O ← diag(corr) · O + P V, P read transposed out of Sᵀ
      simd::gemm(shape, int(rows), dh, int(cols), T(1), s, 1, tile_q, a.v.row(b, k0, hk), a.v.time_stride, acc, dh,
                 true, {.row_scale = corr, .a_nonzero = edge ? spans.keys() : simd::RowSpans{}});
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
    g.delta[idx] = lane_sum<T>(a.head_dim, [&](std::int64_t j) { return o[j] * d[j]; });
  }
#if HYBRIDSEQ_ISA_DISPATCH
  // The host's vector loop (kernels::HostVectorLoop): the same terms in the same order, the
  // sum folded in registers (simd::lane_total) rather than by the compiler's copy of
  // lane_sum's tree, which goes through the stack and costs more than a head's 32 products.
  template <class S>
  HYBRIDSEQ_HOST_FORCEINLINE void vector_loop(std::int64_t idx,
                                              const std::int64_t end) const requires std::is_same_v<T, float> {
    using V = typename S::V;
    constexpr int W = S::lanes, NV = reduce_lanes / W;
    if (a.head_dim % reduce_lanes != 0) {
      for (; idx < end; ++idx) (*this)(idx);
      return;
    }
    for (; idx < end; ++idx) {
      const std::int64_t i = idx % a.tq, bh = idx / a.tq;
      const int h = int(bh % a.heads);
      const std::int64_t b = bh / a.heads;
      const float* o = a.o.row(b, i, h);
      const float* d = g.d_o.row(b, i, h);
      V acc[NV] = {}, ov, dv;
      for (int j = 0; j < a.head_dim; j += reduce_lanes)
        for (int v = 0; v < NV; ++v) {
          simd::load(ov, o + j + v * W);
          simd::load(dv, d + j + v * W);
          acc[v] += ov * dv;
        }
      g.delta[idx] = simd::lane_total<S>(acc);
    }
  }
#endif
};

/// How backward's tasks, (batch, kv head, head of the group, query tile) in that order, are cut
/// into slots, and where each slot sums dK and dV of a (batch, kv head) block, (Tk × Dh) each.
/// Consecutive tasks share their kv block, so only the first and the last block of a slot can
/// be touched by another slot as well: those the slot sums in partial buffers of its own, which
/// `SumSlots` adds up in slot order afterwards; every other block the slot sums in dK and dV
/// themselves. A sum starts from zero either way, so both give the same bits.
struct SlotPlan {
  int slots = 0;
  std::vector<std::int64_t> first_task;               // slot s runs tasks [first_task[s], first_task[s + 1])
  std::vector<std::int64_t> first_block, last_block;  // and touches kv blocks first..last (b · Hkv + hk)
  std::vector<char> first_shared, last_shared;        // whether another slot touches its first (last) block
  std::vector<std::int64_t> offset;                   // its first partial row (a shared first block's, else
                                                      // a shared last block's) in the partial buffers
  std::vector<std::int64_t> shared_blocks;            // the blocks more than one slot touches, ascending
  std::int64_t rows = 0;                              // rows of Dh in each partial buffer (dK, dV)

  /// Slot s's partial rows of `block`, one of its shared blocks.
  std::int64_t partial_row(int s, std::int64_t block, std::int64_t tk) const {
    return offset[s] + (block != first_block[s] && first_shared[s] ? tk : 0);
  }
};

/// Slots per backward call. Fixed, not the thread count, so that the sums do not depend on it;
/// 8 gives up to 8 threads equal shares while duplicating at most 7 blocks.
inline constexpr int backward_slots = 8;

template <class T>
SlotPlan plan_slots(const AttentionArgs<T>& a, const Band& band, std::int64_t n_qtiles) {
  const std::int64_t tasks = a.batch * a.heads * n_qtiles, per_block = a.heads / a.kv_heads * n_qtiles;
  std::vector<std::int64_t> cost(n_qtiles);  // key tiles a query tile visits: the same for every head
  std::int64_t total = 0;
  for (std::int64_t qt = 0; qt < n_qtiles; ++qt) {
    const std::int64_t p_first = a.q0 + qt * tile_q,
                       p_last = a.q0 + std::min<std::int64_t>(a.tq, qt * tile_q + tile_q) - 1;
    const std::int64_t kb = band.key_begin(p_first, a.tk) / tile_k * tile_k, ke = band.key_end(p_last, a.tk);
    cost[qt] = 1 + std::max<std::int64_t>(0, (ke - kb + tile_k - 1) / tile_k);  // + 1: the task's own packing
    total += cost[qt];
  }
  total *= a.batch * a.heads;
  SlotPlan plan;
  plan.slots = int(std::min<std::int64_t>(tasks, backward_slots));
  // Task t goes to slot ⌊(cost of the tasks before t) · slots / total⌋: equal shares, in order.
  plan.first_task.assign(plan.slots + 1, tasks);
  std::int64_t before = 0;
  for (std::int64_t t = 0; t < tasks; ++t) {
    const std::int64_t s = before * plan.slots / total;
    for (std::int64_t r = s; r >= 0 && plan.first_task[r] == tasks; --r) plan.first_task[r] = t;  // and skipped slots
    before += cost[t % n_qtiles];
  }
  plan.first_block.resize(plan.slots);
  plan.last_block.resize(plan.slots);
  for (int s = 0; s < plan.slots; ++s) {
    const std::int64_t t0 = plan.first_task[s], t1 = plan.first_task[s + 1];
    plan.first_block[s] = t0 / per_block;
    plan.last_block[s] = t1 > t0 ? (t1 - 1) / per_block : plan.first_block[s] - 1;  // empty slot: no blocks
  }
  // A block is shared when two slots with tasks touch it; slots are in task order, so those
  // are neighbours among the non-empty slots.
  std::vector<std::int64_t> touching(std::size_t(a.batch) * a.kv_heads, 0);
  for (int s = 0; s < plan.slots; ++s)
    for (std::int64_t block = plan.first_block[s]; block <= plan.last_block[s]; ++block) ++touching[block];
  plan.first_shared.resize(plan.slots);
  plan.last_shared.resize(plan.slots);
  plan.offset.resize(plan.slots);
  for (int s = 0; s < plan.slots; ++s) {
    const std::int64_t fb = plan.first_block[s], lb = plan.last_block[s];
    plan.first_shared[s] = fb <= lb && touching[fb] > 1;
    plan.last_shared[s] = lb > fb && touching[lb] > 1;
    plan.offset[s] = plan.rows;
    plan.rows += (plan.first_shared[s] + plan.last_shared[s]) * a.tk;
  }
  for (std::int64_t block = 0; block < std::int64_t(touching.size()); ++block)
    if (touching[block] > 1) plan.shared_blocks.push_back(block);
  return plan;
}

/// Backward: slot s runs its tasks, one per (batch, head, query tile), in order; dK and dV of
/// a block only it touches go to dK and dV, of a shared one to the slot's partial buffers
/// (`partial`: dK rows, then dV rows, Dh each; SlotPlan).
template <class T, class Space>
struct Backward {
  AttentionArgs<T> a;
  AttentionGrads<T> g;
  Band band;
  std::int64_t n_qtiles;
  const SlotPlan* plan;
  T* partial;  // uninitialised: each slot zeroes the rows it sums into, partial or not
  Isa isa;

  static std::size_t scratch_bytes(int head_dim, bool dalpha, bool dropout) {
    const std::size_t tiles = 2 + (dalpha ? 1 : 0) + (dropout ? 1 : 0);
    return sizeof(T) * (tiles * tile_k * tile_q + 3 * std::size_t(tile_q) * head_dim + 2 * tile_q);
  }

  template <class Member>
  void operator()(const Member& team) const {
    with_shape<T>(isa, *this, team);
  }

  template <class S, class Member>
  HYBRIDSEQ_HOST_FORCEINLINE void run(S shape, const Member& team) const {
    const int slot = team.league_rank(), dh = a.head_dim, group = a.heads / a.kv_heads;
    auto& shmem = team.team_shmem();
    T* s = static_cast<T*>(shmem.get_shmem(sizeof(T) * tile_k * tile_q));
    T* dp = static_cast<T*>(shmem.get_shmem(sizeof(T) * tile_k * tile_q));
    T* scores = g.dalpha ? static_cast<T*>(shmem.get_shmem(sizeof(T) * tile_k * tile_q)) : nullptr;
    T* dropped = a.dropout.active() ? static_cast<T*>(shmem.get_shmem(sizeof(T) * tile_k * tile_q)) : nullptr;
    T* q_t = static_cast<T*>(shmem.get_shmem(sizeof(T) * tile_q * dh));
    T* do_t = static_cast<T*>(shmem.get_shmem(sizeof(T) * tile_q * dh));
    T* dq = static_cast<T*>(shmem.get_shmem(sizeof(T) * tile_q * dh));
    T* lse = static_cast<T*>(shmem.get_shmem(sizeof(T) * tile_q));
    T* delta = static_cast<T*>(shmem.get_shmem(sizeof(T) * tile_q));
    const std::int64_t fb = plan->first_block[slot], lb = plan->last_block[slot], n = a.tk;
    const bool first_shared = plan->first_shared[slot], last_shared = plan->last_shared[slot];
    // Where the slot sums dK and dV of `block`: rows t of the returned bases, `stride` apart.
    struct Rows {
      T *dk, *dv;
      std::int64_t dk_stride, dv_stride;
    };
    const auto rows_of_block = [&](const std::int64_t block) -> Rows {
      if ((block == fb && first_shared) || (block == lb && last_shared)) {
        T* dk = partial + plan->partial_row(slot, block, n) * dh;
        return {dk, dk + plan->rows * dh, dh, dh};
      }
      const std::int64_t b = block / a.kv_heads, hk = block % a.kv_heads;
      return {g.dk.row(b, 0, hk), g.dv.row(b, 0, hk), g.dk.time_stride, g.dv.time_stride};
    };
    for (std::int64_t block = fb; block <= lb; ++block) {
      const Rows r = rows_of_block(block);
      for (std::int64_t t = 0; t < n; ++t) {
        std::fill(r.dk + t * r.dk_stride, r.dk + t * r.dk_stride + dh, T(0));
        std::fill(r.dv + t * r.dv_stride, r.dv + t * r.dv_stride + dh, T(0));
      }
    }

    for (std::int64_t task = plan->first_task[slot]; task < plan->first_task[slot + 1]; ++task) {
      const std::int64_t qt = task % n_qtiles, hb = task / n_qtiles, block = hb / group;
      const int h = int(block % a.kv_heads) * group + int(hb % group), hk = h / group;
      const std::int64_t b = block / a.kv_heads, i0 = qt * tile_q;
      const std::int64_t rows = std::min<std::int64_t>(tile_q, a.tq - i0), p_first = a.q0 + i0;
      const std::int64_t p_last = p_first + rows - 1;
      const T alpha = a.alpha[h];
      const Rows sums = rows_of_block(block);

      pack_transposed<S>(a.q, b, i0, h, rows, dh, alpha, q_t);
      pack_transposed<S>(g.d_o, b, i0, h, rows, dh, T(1), do_t);
      const std::int64_t stats = (b * a.heads + h) * a.tq + i0;
      for (int i = 0; i < tile_q; ++i)
        lse[i] = i < rows ? a.lse[stats + i] : T(0), delta[i] = i < rows ? g.delta[stats + i] : T(0);
      std::fill(dq, dq + rows * dh, T(0));
      double dalpha = 0;  // Σ dS ⊙ S over this query tile (S = α Q Kᵀ), divided by α at the end

      const std::int64_t kb = band.key_begin(p_first, n), ke = band.key_end(p_last, n);
      for (std::int64_t k0 = kb / tile_k * tile_k; k0 < ke; k0 += tile_k) {
        const int cols = int(std::min<std::int64_t>(tile_k, n - k0));
        if (cols <= 0) break;  // never (k0 < ke ≤ n); without it GCC 12 sees a negative copy size
        const T* k = a.k.row(b, k0, hk);
        const T* v = a.v.row(b, k0, hk);
        // On a band edge only the shown entries are computed (TileSpans); P and dS are 0 elsewhere.
        const bool edge = !tile_is_interior(band, p_first, p_last, k0, cols, n);
        TileSpans spans;
        if (edge) spans.find(band, p_first, rows, k0, cols, n);
        const simd::RowSpans by_key = edge ? spans.queries() : simd::RowSpans{};
        const simd::RowSpans by_query = edge ? spans.keys() : simd::RowSpans{};
        // The query rows that see key j: its span on an edge, all of the tile's rows inside.
        const auto rows_seeing = [&](int j) {
          return edge ? std::pair{spans.query_begin[j], spans.query_end[j]} : std::pair{0, int(rows)};
        };
        simd::gemm(shape, cols, tile_q, dh, T(1), k, a.k.time_stride, 1, q_t, tile_q, s, tile_q, false,
                   {.c_wanted = by_key});  // Sᵀ
        if (scores) std::copy(s, s + cols * tile_q, scores);
        for (int j = 0; j < cols; ++j) {  // Pᵀ
          T* sj = s + j * tile_q;
          if (edge)
            shown_or_zero(spans, j, sj, [&](int i) { return exp_in_loop(sj[i] - lse[i]); });
          else
            for (int i = 0; i < tile_q; ++i) sj[i] = exp_in_loop(sj[i] - lse[i]);
        }
        // dPᵀ
        simd::gemm(shape, cols, tile_q, dh, T(1), v, a.v.time_stride, 1, do_t, tile_q, dp, tile_q, false,
                   {.c_wanted = by_key});
        const T* p_used = s;  // the probabilities V saw: P, or P ⊙ M under dropout
        // Under dropout the mask is drawn for the shown entries only: P is 0 on the others.
        if (dropped) {
          for (int j = 0; j < cols; ++j) {
            const auto [lo, hi] = rows_seeing(j);
            T* dj = dropped + j * tile_q;
            std::fill(dj, dj + lo, T(0));
            for (int i = lo; i < hi; ++i) {
              const T f = a.dropout_factor(b, h, i0 + i, k0 + j);
              dj[i] = s[j * tile_q + i] * f;
              dp[j * tile_q + i] *= f;
            }
            std::fill(dj + hi, dj + rows, T(0));
          }
          p_used = dropped;
        }
        for (int j = 0; j < cols; ++j) {  // dSᵀ
          const T* pj = s + j * tile_q;
          T* dj = dp + j * tile_q;
          if (edge)
            shown_or_zero(spans, j, dj, [&](int i) { return pj[i] * (dj[i] - delta[i]); });
          else
            for (int i = 0; i < tile_q; ++i) dj[i] = pj[i] * (dj[i] - delta[i]);
        }
        if (scores)  // over the shown entries: dS is 0 on the others, whose scores were not computed
          for (int j = 0; j < cols; ++j) {
            const auto [lo, hi] = rows_seeing(j);
            for (int i = lo; i < hi; ++i) dalpha += double(dp[j * tile_q + i]) * double(scores[j * tile_q + i]);
          }
        // dV += Pᵀ dO, dK += α dSᵀ Q (both rows of Sᵀ), dQ += dS K (Sᵀ read transposed; α at the end)
        simd::gemm(shape, cols, dh, int(rows), T(1), p_used, tile_q, 1, g.d_o.row(b, i0, h), g.d_o.time_stride,
                   sums.dv + k0 * sums.dv_stride, sums.dv_stride, true, {.a_nonzero = by_key});
        simd::gemm(shape, cols, dh, int(rows), alpha, dp, tile_q, 1, a.q.row(b, i0, h), a.q.time_stride,
                   sums.dk + k0 * sums.dk_stride, sums.dk_stride, true, {.a_nonzero = by_key});
        simd::gemm(shape, int(rows), dh, cols, T(1), dp, 1, tile_q, k, a.k.time_stride, dq, dh, true,
                   {.a_nonzero = by_query});
      }
      for (std::int64_t r = 0; r < rows; ++r) {
        T* out = g.dq.row(b, i0 + r, h);
        for (int d = 0; d < dh; ++d) out[d] = alpha * dq[r * dh + d];
      }
      if (g.dalpha) g.dalpha[(b * a.heads + h) * n_qtiles + qt] = T(dalpha / double(alpha));
    }
  }
};

/// dK and dV rows of the shared blocks: the sum of the partial rows of the slots that touch
/// them, in slot order.
template <class T, class Space>
struct SumSlots {
  AttentionArgs<T> a;
  AttentionGrads<T> g;
  const SlotPlan* plan;
  const T* partial;

  void operator()(const std::int64_t row) const {
    const std::int64_t block = plan->shared_blocks[row / a.tk], t = row % a.tk, b = block / a.kv_heads;
    const int hk = int(block % a.kv_heads), dh = a.head_dim;
    T* dk = g.dk.row(b, t, hk);
    T* dv = g.dv.row(b, t, hk);
    std::fill(dk, dk + dh, T(0));
    std::fill(dv, dv + dh, T(0));
    for (int s = 0; s < plan->slots; ++s) {
      if (block < plan->first_block[s] || block > plan->last_block[s]) continue;
      const T* pk = partial + (plan->partial_row(s, block, a.tk) + t) * dh;
      const T* pv = pk + plan->rows * dh;
      for (int d = 0; d < dh; ++d) dk[d] += pk[d], dv[d] += pv[d];
    }
  }
};

/// A team of one on the calling thread: the task index and a scratch arena, the two things the
/// kernels ask of their Kokkos team member.
class InlineTeam {
 public:
  class Scratch {
   public:
    Scratch(std::byte* begin, std::byte* end) : next_(begin), end_(end) {}
    void* get_shmem(std::size_t bytes) {
      const std::size_t take = aligned(bytes), left = std::size_t(end_ - next_);
      if (take > left)
        fail<error>("hybridseq::kernels::attention::InlineTeam", "scratch overrun: ", take, " bytes asked, ", left,
                    " left");
      void* p = next_;
      next_ += take;
      return p;
    }

   private:
    std::byte *next_, *end_;
  };

  /// `scratch` holds the kernel's bytes plus a cache line, so that the arena can start on one.
  InlineTeam(std::int64_t task, std::vector<std::byte>& scratch)
      : task_(task), scratch_(line_start(scratch.data()), scratch.data() + scratch.size()) {}
  std::int64_t league_rank() const { return task_; }
  Scratch& team_shmem() const { return scratch_; }

  /// Sizes round up to cache lines; the kernels' scratch sizes are multiples of a tile row of
  /// floats (256 bytes), so this adds nothing to what they ask for.
  static std::size_t aligned(std::size_t bytes) { return (bytes + 63) / 64 * 64; }
  static std::byte* line_start(std::byte* p) { return p + (64 - reinterpret_cast<std::uintptr_t>(p) % 64) % 64; }

 private:
  std::int64_t task_;
  mutable Scratch scratch_;
};

/// Runs f once per task: as a Kokkos team launch, or, on a host space when the launch's `work`
/// (light element updates, core/parallel.hpp's unit) is below the fork's worth, task after task
/// on the calling thread; a decoding step's attention over its history is such a launch.
template <class Functor, class Space>
void launch(const char* label, const Space& exec, std::int64_t tasks, std::size_t scratch, std::int64_t work,
            const Functor& f) {
  if (tasks == 0) return;
  if constexpr (core::host_space<Space>) {
    if (core::runs_inline<Space>(work)) {
      thread_local std::vector<std::byte> buffer;
      if (buffer.size() < scratch + 64) buffer.resize(scratch + 64);
      for (std::int64_t task = 0; task < tasks; ++task) f(InlineTeam(task, buffer));
      return;
    }
  }
  Kokkos::TeamPolicy<Space, Kokkos::Schedule<Kokkos::Dynamic>> policy(exec, tasks, 1);
  Kokkos::parallel_for(label, policy.set_scratch_size(0, Kokkos::PerTeam(scratch)), f);
}

/// Light element updates of an attention launch over `rows` query rows of `keys` keys each: a
/// multiply-add of the micro-kernel, vectorised with its operands in registers, counts an
/// eighth of one. The rows are the queries asked for, not the lanes a tile pads them to (a
/// vector's width at least): a decoding step, one query per head, is counted by its one row and
/// so runs on the calling thread up to long histories, off the thread pool like the rest of a
/// decoding step (design.md, "Threads").
inline std::int64_t attention_work(std::int64_t rows, std::int64_t keys, int head_dim) {
  return rows * keys * head_dim / 8;
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
template <class T, class Space>
void forward(const Space& exec, const AttentionArgs<T>& a, const Band& band) {
  static_assert(runs_on<Space>, "hybridseq::kernels::attention::tiled: host execution spaces only");
  const std::int64_t nq = query_tiles(a.tq);
  using F = detail::Forward<T, Space>;
  detail::launch("hybridseq::kernels::attention::forward[tiled]", exec, a.batch * a.heads * nq,
                 F::scratch_bytes(a.head_dim), detail::attention_work(a.batch * a.heads * a.tq, a.tk, a.head_dim),
                 F{a, band, nq, detail::kernel_isa<T>(a.head_dim)});
}

/// dQ, dK, dV (overwritten) from dO, and, when g.dalpha is set, the per-(b, h, query tile)
/// partial sums of ∂L/∂α (sum them over b and tiles for each head).
template <class T, class Space>
void backward(const Space& exec, const AttentionArgs<T>& a, const AttentionGrads<T>& g, const Band& band) {
  static_assert(runs_on<Space>, "hybridseq::kernels::attention::tiled: host execution spaces only");
  if (a.batch * a.tq == 0) return;
  elementwise<T>("hybridseq::kernels::attention::delta", exec, a.batch * a.heads * a.tq, a.head_dim,
                 detail::Delta<T, Space>{a, g});
  const std::int64_t nq = query_tiles(a.tq);
  const detail::SlotPlan plan = detail::plan_slots(a, band, nq);
  // The partial rows live in a buffer of the calling thread that only grows, as the inline
  // teams' scratch does: a training step allocates nothing after its first. Each slot zeroes
  // the rows it sums into as it starts (on its thread: no separate fill pass).
  thread_local std::vector<T> partial;
  if (partial.size() < std::size_t(2 * plan.rows * a.head_dim)) partial.resize(2 * plan.rows * a.head_dim);
  using B = detail::Backward<T, Space>;
  detail::launch("hybridseq::kernels::attention::backward[tiled]", exec, plan.slots,
                 B::scratch_bytes(a.head_dim, g.dalpha != nullptr, a.dropout.active()),
                 detail::attention_work(a.batch * a.heads * a.tq, a.tk, a.head_dim),
                 B{a, g, band, nq, &plan, partial.data(), detail::kernel_isa<T>(a.head_dim)});
  elementwise<T>("hybridseq::kernels::attention::dkv_sum", exec, std::int64_t(plan.shared_blocks.size()) * a.tk,
                 2 * a.head_dim, detail::SumSlots<T, Space>{a, g, &plan, partial.data()});
  exec.fence();  // the plan goes out of scope here
}

}  // namespace tiled
}  // namespace hybridseq::kernels::attention
