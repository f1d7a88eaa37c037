#pragma once
/// \file
/// Attention as portable Kokkos team kernels, for execution spaces whose memory the host
/// cannot read (Kokkos::Cuda): the same online-softmax algorithm, segment schemes, GQA,
/// dropout and outputs as the tiled host kernel (tiled_attention.hpp), without a BLAS call.
/// They run on Serial and OpenMP as well, which is how the test suite checks them on every
/// machine against the naive oracle.
///
/// Work split (FlashAttention-2's, one thread per row instead of one warp per tile):
///   forward     a team per (batch, head, tile_q query rows); a thread owns a query row:
///               its running max and sum, its output row. The team stages key/value rows
///               in scratch, a block at a time, and each thread scores its row against
///               them, rescales and accumulates.
///   backward 1  a team per (batch, kv head, tile_k key rows); a thread owns a key row and
///               accumulates its dK, dV rows over the query rows of every head of the group,
///               staged in scratch (Q, dO, LSE, Δ).
///   backward 2  a team per (batch, head, tile_q query rows); a thread owns dQ's row and its
///               share of the temperature gradient; key/value rows staged as in forward.
/// No gradient row has two writers, so backward is deterministic without atomics; team
/// scratch stays within 40 KB (the level-0 budget on every CUDA GPU Kokkos supports).
///
/// Two copies of that split, chosen by the head dim:
///   Dh ≤ 64     (detail::in_registers) a thread keeps its own rows in registers — the query
///               and output rows in forward; the key and value rows in dK/dV; the query and
///               dO rows in dQ — and the scores of a staged block too: the head dim is a
///               compile-time bound (32 or 64, the lanes past Dh predicated off), so every
///               index is a constant once the loops unroll. Accumulators in global memory
///               (dK, dV, dQ) are read and written once per staged block, not per score.
///   Dh > 64     (detail::in_memory) the rows are read where they lie (64 rows of more than
///               64 registers each would spill); output and dQ rows accumulate in memory.
/// Both add in the same order, so they give the same bits for the same head dim.
///
/// The query and key blocks are tile_q and tile_k, the tiled kernel's: the temperature
/// partials (AttentionGrads::dalpha) keep its (B, H, query tiles) layout.

#include <cstdint>
#include <type_traits>

#include "../../core/spaces.hpp"
#include "../exp.hpp"
#include "tiled_attention.hpp"

#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
// The register copies index their row arrays with loop counters: the arrays stay in registers
// only when the loops unroll completely.
#define HYBRIDSEQ_DEVICE_UNROLL _Pragma("unroll")
#else
#define HYBRIDSEQ_DEVICE_UNROLL
#endif

namespace hybridseq::kernels::attention::team {

/// Key (forward, dQ) or query (dK, dV) rows staged per step: two Dh-wide row blocks of T
/// within 24 KB, at most 32 rows.
template <class T>
constexpr int staged_rows(int head_dim) {
  const int rows = int(24 * 1024 / (2 * sizeof(T) * std::size_t(head_dim > 0 ? head_dim : 1)));
  return rows < 1 ? 1 : (rows > 32 ? 32 : rows);
}

namespace detail {

using attention::detail::TeamMember;

template <class Space>
constexpr bool on_host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Space::memory_space>::accessible;

/// Threads per team: one per row of the block on a device; one on the host, where each
/// team is one thread's task and the rows of a block run in turn.
template <class Space>
constexpr int team_size(int rows) {
  return on_host<Space> ? 1 : rows;
}

KOKKOS_INLINE_FUNCTION constexpr std::size_t padded(std::size_t bytes) {
  return (bytes + 7) / 8 * 8;
}

/// A typed slice of team scratch. Every slice is a multiple of 8 bytes, so doubles stay aligned.
template <class T, class Member>
KOKKOS_INLINE_FUNCTION T* scratch(const Member& team, std::int64_t count) {
  return static_cast<T*>(team.team_shmem().get_shmem(padded(sizeof(T) * std::size_t(count))));
}

template <class T>
KOKKOS_INLINE_FUNCTION T dot(const T* x, const T* y, int n) {
  T s = 0;
  for (int d = 0; d < n; ++d) s += x[d] * y[d];
  return s;
}

KOKKOS_INLINE_FUNCTION std::int64_t clamp(std::int64_t x, std::int64_t lo, std::int64_t hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

/// The keys each row of a query tile sees, [from[r], to[r]) for query position p_first + r,
/// staged in team scratch once per task: the loops over key blocks then read two numbers per
/// row instead of evaluating the band, whose divisions would hold registers through them.
/// Readable after the next team barrier.
struct RowKeys {
  std::int64_t* from;
  std::int64_t* to;

  static constexpr std::size_t scratch_bytes() { return 2 * padded(sizeof(std::int64_t) * tile_q); }

  template <class Member>
  KOKKOS_INLINE_FUNCTION RowKeys(const Member& team, const Band& band, std::int64_t p_first, std::int64_t rows,
                                 std::int64_t n)
      : from(scratch<std::int64_t>(team, tile_q)), to(scratch<std::int64_t>(team, tile_q)) {
    std::int64_t* f = from;
    std::int64_t* e = to;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const std::int64_t r) {
      f[r] = band.key_begin(p_first + r, n);
      e[r] = band.key_end(p_first + r, n);
    });
  }

  /// Row r's visible columns [c0, c1) among key rows k0 .. k0 + cols − 1 (cols ≤ a tile).
  KOKKOS_INLINE_FUNCTION void visible(std::int64_t r, std::int64_t k0, std::int64_t cols, int& c0, int& c1) const {
    c0 = int(clamp(from[r] - k0, 0, cols));
    c1 = int(clamp(to[r] - k0, 0, cols));
  }
};

/// The queries that see each key of a key tile, [from[c], to[c]) for key k0 + c (query
/// indices, 0 .. Tq): the band's ends never decrease, so they are a range. Staged once per task
/// for the same reason as RowKeys; readable after the next team barrier.
struct KeyQueries {
  std::int64_t* from;
  std::int64_t* to;

  static constexpr std::size_t scratch_bytes() { return 2 * padded(sizeof(std::int64_t) * tile_k); }

  template <class Member, class T>
  KOKKOS_INLINE_FUNCTION KeyQueries(const Member& team, const Band& band, const AttentionArgs<T>& a, std::int64_t k0,
                                    std::int64_t cols)
      : from(scratch<std::int64_t>(team, tile_k)), to(scratch<std::int64_t>(team, tile_k)) {
    std::int64_t* f = from;
    std::int64_t* e = to;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](const std::int64_t c) {
      f[c] = attention::detail::first_query_seeing(band, k0 + c, a.q0, a.tq, a.tk);
      e[c] = attention::detail::end_query_seeing(band, k0 + c + 1, a.q0, a.tq, a.tk);
    });
  }

  /// The rows [r0, r1) of the query block i0 .. i0 + rows − 1 that see key k0 + c.
  KOKKOS_INLINE_FUNCTION void seeing(std::int64_t c, std::int64_t i0, std::int64_t rows, int& r0, int& r1) const {
    r0 = int(clamp(from[c] - i0, 0, rows));
    r1 = int(clamp(to[c] - i0, 0, rows));
  }
};

/// Copies `rows` rows of Dh from `from` (starting at time t0) into scratch, row r at
/// to + r · stride (stride ≥ Dh).
template <class T, class Member>
KOKKOS_INLINE_FUNCTION void stage(const Member& team, const HeadRows<const T>& from, std::int64_t b, std::int64_t t0,
                                  int h, std::int64_t rows, int dh, T* to, int stride) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * dh), [&](const std::int64_t e) {
    to[e / dh * stride + e % dh] = from.row(b, t0 + e / dh, h)[e % dh];
  });
}

/// Stages key and value rows k0 .. k0 + cols − 1 of kv head hk (forward, dQ).
template <class T, class Member>
KOKKOS_INLINE_FUNCTION void stage_keys(const Member& team, const AttentionArgs<T>& a, std::int64_t b, std::int64_t k0,
                                       int hk, std::int64_t cols, T* ks, T* vs, int stride) {
  stage<T>(team, a.k, b, k0, hk, cols, a.head_dim, ks, stride);
  stage<T>(team, a.v, b, k0, hk, cols, a.head_dim, vs, stride);
}

/// Stages query and dO rows i0 .. i0 + rows − 1 of head h with their LSE and Δ (dK/dV).
template <class T, class Member>
KOKKOS_INLINE_FUNCTION void stage_queries(const Member& team, const AttentionArgs<T>& a, const AttentionGrads<T>& g,
                                          std::int64_t b, std::int64_t i0, int h, std::int64_t rows, T* qs, T* dos,
                                          T* lse, T* delta, int stride) {
  stage<T>(team, a.q, b, i0, h, rows, a.head_dim, qs, stride);
  stage<T>(team, g.d_o, b, i0, h, rows, a.head_dim, dos, stride);
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const std::int64_t r) {
    lse[r] = a.lse[(b * a.heads + h) * a.tq + i0 + r];
    delta[r] = g.delta[(b * a.heads + h) * a.tq + i0 + r];
  });
}

namespace in_memory {

template <class T, class Space>
struct Forward {
  AttentionArgs<T> a;
  Band band;
  std::int64_t n_qtiles;
  int kt;  // key rows staged per step

  static std::size_t scratch_bytes(int dh, int kt) {
    return 2 * padded(sizeof(T) * std::size_t(kt) * dh) + padded(sizeof(T) * std::size_t(tile_q) * kt) +
           2 * padded(sizeof(T) * tile_q) + RowKeys::scratch_bytes();
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember<Space>& team) const {
    const QueryTile tile(a, team.league_rank(), n_qtiles);
    const std::int64_t b = tile.b, i0 = tile.i0, rows = tile.rows, p_first = tile.p_first, p_last = tile.p_last;
    const int h = tile.h, hk = tile.hk, dh = a.head_dim;
    const std::int64_t n = a.tk;
    const T alpha = a.alpha[h];
    T* ks = scratch<T>(team, std::int64_t(kt) * dh);
    T* vs = scratch<T>(team, std::int64_t(kt) * dh);
    T* s_all = scratch<T>(team, std::int64_t(tile_q) * kt);
    T* m = scratch<T>(team, tile_q);
    T* l = scratch<T>(team, tile_q);
    const RowKeys keys(team, band, p_first, rows, n);

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const std::int64_t r) {
      m[r] = attention::detail::neg_inf<T>();
      l[r] = 0;
      T* o = a.o.row(b, i0 + r, h);
      for (int d = 0; d < dh; ++d) o[d] = 0;
    });
    const std::int64_t kb = band.key_begin(p_first, n), ke = band.key_end(p_last, n);
    for (std::int64_t k0 = kb; k0 < ke; k0 += kt) {
      const std::int64_t cols = ke - k0 < kt ? ke - k0 : kt;
      team.team_barrier();  // every thread is done with the previous rows
      stage_keys<T>(team, a, b, k0, hk, cols, ks, vs, dh);
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const std::int64_t r) {
        int c0, c1;
        keys.visible(r, k0, cols, c0, c1);
        if (c0 >= c1) return;
        const T* q = a.q.row(b, i0 + r, h);
        T* s = s_all + r * kt;
        T mx = m[r];
        for (std::int64_t c = c0; c < c1; ++c) {
          s[c] = alpha * dot(q, ks + c * dh, dh);
          mx = s[c] > mx ? s[c] : mx;
        }
        const T correction = math::exp(m[r] - mx);  // 0 on the first visible rows
        T sum = 0;
        for (std::int64_t c = c0; c < c1; ++c) {
          s[c] = exp_in_loop(s[c] - mx);
          sum += s[c];
        }
        if (a.dropout.active())  // after the row sum: the normaliser is the undropped one
          for (std::int64_t c = c0; c < c1; ++c) s[c] *= a.dropout_factor(b, h, i0 + r, k0 + c);
        l[r] = l[r] * correction + sum;
        m[r] = mx;
        T* o = a.o.row(b, i0 + r, h);
        for (int d = 0; d < dh; ++d) {
          T acc = o[d] * correction;
          for (std::int64_t c = c0; c < c1; ++c) acc += s[c] * vs[c * dh + d];
          o[d] = acc;
        }
      });
    }
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const std::int64_t r) {
      const T inv = T(1) / l[r];
      T* o = a.o.row(b, i0 + r, h);
      for (int d = 0; d < dh; ++d) o[d] *= inv;
      a.lse[(b * a.heads + h) * a.tq + i0 + r] = m[r] + math::log(l[r]);
    });
  }
};

/// dK, dV for one (batch, kv head, key block): a thread per key row.
template <class T, class Space>
struct BackwardKV {
  AttentionArgs<T> a;
  AttentionGrads<T> g;
  Band band;
  std::int64_t n_ktiles;
  int qt;  // query rows staged per step

  static std::size_t scratch_bytes(int dh, int qt) {
    return 2 * padded(sizeof(T) * std::size_t(qt) * dh) + 2 * padded(sizeof(T) * qt) + KeyQueries::scratch_bytes();
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember<Space>& team) const {
    const KeyTile tile(a, team.league_rank(), n_ktiles);
    const std::int64_t b = tile.b, k0 = tile.k0, cols = tile.cols, n = a.tk;
    const int hk = tile.hk, dh = a.head_dim, group = a.heads / a.kv_heads;
    T* qs = scratch<T>(team, std::int64_t(qt) * dh);
    T* dos = scratch<T>(team, std::int64_t(qt) * dh);
    T* lse = scratch<T>(team, qt);
    T* delta = scratch<T>(team, qt);
    const KeyQueries queries(team, band, a, k0, cols);

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](const std::int64_t c) {
      T* dk = g.dk.row(b, k0 + c, hk);
      T* dv = g.dv.row(b, k0 + c, hk);
      for (int d = 0; d < dh; ++d) dk[d] = 0, dv[d] = 0;
    });
    const std::int64_t i_begin = attention::detail::first_query_seeing(band, k0, a.q0, a.tq, n);
    const std::int64_t i_end = attention::detail::end_query_seeing(band, k0 + cols, a.q0, a.tq, n);
    for (int h = hk * group; h < (hk + 1) * group; ++h) {
      const T alpha = a.alpha[h];
      for (std::int64_t i0 = i_begin; i0 < i_end; i0 += qt) {
        const std::int64_t rows = i_end - i0 < qt ? i_end - i0 : qt;
        team.team_barrier();
        stage_queries<T>(team, a, g, b, i0, h, rows, qs, dos, lse, delta, dh);
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](const std::int64_t c) {
          const std::int64_t key = k0 + c;
          const T* k = a.k.row(b, key, hk);
          const T* v = a.v.row(b, key, hk);
          T* dk = g.dk.row(b, key, hk);
          T* dv = g.dv.row(b, key, hk);
          int r0, r1;  // the block's rows that see this key
          queries.seeing(c, i0, rows, r0, r1);
          for (int r = r0; r < r1; ++r) {
            const T* q = qs + r * dh;
            const T* d_o = dos + r * dh;
            const T prob = exp_in_loop(alpha * dot(q, k, dh) - lse[r]);
            const T factor = a.dropout.active() ? a.dropout_factor(b, h, i0 + r, key) : T(1);
            const T ds = prob * (dot(d_o, v, dh) * factor - delta[r]);
            const T pv = prob * factor, dsa = alpha * ds;
            for (int d = 0; d < dh; ++d) {
              dv[d] += pv * d_o[d];
              dk[d] += dsa * q[d];
            }
          }
        });
      }
    }
  }
};

/// dQ and the temperature partial for one (batch, head, query block): a thread per query row.
template <class T, class Space>
struct BackwardQ {
  AttentionArgs<T> a;
  AttentionGrads<T> g;
  Band band;
  std::int64_t n_qtiles;
  int kt;  // key rows staged per step

  static std::size_t scratch_bytes(int dh, int kt) {
    return padded(sizeof(double) * tile_q) + 2 * padded(sizeof(T) * std::size_t(kt) * dh) + RowKeys::scratch_bytes();
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember<Space>& team) const {
    const QueryTile tile(a, team.league_rank(), n_qtiles);
    const std::int64_t b = tile.b, i0 = tile.i0, rows = tile.rows, p_first = tile.p_first, p_last = tile.p_last;
    const int h = tile.h, hk = tile.hk, dh = a.head_dim;
    const std::int64_t n = a.tk;
    const T alpha = a.alpha[h];
    double* dalpha = scratch<double>(team, tile_q);  // Σ_j dS ⊙ S of each row
    T* ks = scratch<T>(team, std::int64_t(kt) * dh);
    T* vs = scratch<T>(team, std::int64_t(kt) * dh);
    const RowKeys keys(team, band, p_first, rows, n);

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const std::int64_t r) {
      dalpha[r] = 0;
      T* dq = g.dq.row(b, i0 + r, h);
      for (int d = 0; d < dh; ++d) dq[d] = 0;
    });
    const std::int64_t kb = band.key_begin(p_first, n), ke = band.key_end(p_last, n);
    for (std::int64_t k0 = kb; k0 < ke; k0 += kt) {
      const std::int64_t cols = ke - k0 < kt ? ke - k0 : kt;
      team.team_barrier();
      stage_keys<T>(team, a, b, k0, hk, cols, ks, vs, dh);
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const std::int64_t r) {
        int c0, c1;
        keys.visible(r, k0, cols, c0, c1);
        const std::int64_t i = i0 + r;
        const T* q = a.q.row(b, i, h);
        const T* d_o = g.d_o.row(b, i, h);
        const T lse = a.lse[(b * a.heads + h) * a.tq + i], delta = g.delta[(b * a.heads + h) * a.tq + i];
        T* dq = g.dq.row(b, i, h);
        for (std::int64_t c = c0; c < c1; ++c) {
          const T s = alpha * dot(q, ks + c * dh, dh);
          const T factor = a.dropout.active() ? a.dropout_factor(b, h, i, k0 + c) : T(1);
          const T ds = exp_in_loop(s - lse) * (dot(d_o, vs + c * dh, dh) * factor - delta);
          dalpha[r] += double(ds) * double(s);
          for (int d = 0; d < dh; ++d) dq[d] += alpha * ds * ks[c * dh + d];
        }
      });
    }
    if (g.dalpha == nullptr) return;
    double total = 0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, rows), [&](const std::int64_t r, double& sum) { sum += dalpha[r]; }, total);
    Kokkos::single(Kokkos::PerTeam(team),
                   [&]() { g.dalpha[(b * a.heads + h) * n_qtiles + tile.qt] = T(total / double(alpha)); });
  }
};

}  // namespace in_memory

namespace in_registers {
/// Rows staged per block: keys in forward and dQ (a thread's scores of the block live in its
/// registers), queries in dK/dV (their probabilities and dS live in registers).
inline constexpr int key_block = 32, query_block = 16;

/// A thread's copy of a Dh-wide row, DH ≥ Dh lanes in registers, the lanes past Dh zero.
template <class T, int DH>
struct Row {
  T x[DH];

  KOKKOS_INLINE_FUNCTION void load(const T* p, int dh) {
    HYBRIDSEQ_DEVICE_UNROLL
    for (int d = 0; d < DH; ++d) x[d] = d < dh ? p[d] : T(0);
  }
  /// Σ_d x[d] · y[d] over the first dh lanes, in the order of d (the in-memory kernels' dot).
  KOKKOS_INLINE_FUNCTION T dot(const T* y, int dh) const {
    T s = 0;
    HYBRIDSEQ_DEVICE_UNROLL
    for (int d = 0; d < DH; ++d)
      if (d < dh) s += x[d] * y[d];
    return s;
  }
};

// Each kernel loops over the rows of its block, a thread taking rows team_rank, team_rank +
// team_size, …: on a device the team has a thread per row, so each thread takes one row and
// holds it through every staged block; on the host the team's one thread takes them in turn.
// Every thread runs every staged block's barriers, rows or not.

template <class T, class Space, int DH>
struct Forward {
  AttentionArgs<T> a;
  Band band;
  std::int64_t n_qtiles;

  static std::size_t scratch_bytes() { return 2 * padded(sizeof(T) * key_block * DH) + RowKeys::scratch_bytes(); }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember<Space>& team) const {
    const QueryTile tile(a, team.league_rank(), n_qtiles);
    const std::int64_t b = tile.b, i0 = tile.i0, rows = tile.rows, p_first = tile.p_first, p_last = tile.p_last;
    const int h = tile.h, hk = tile.hk, dh = a.head_dim;
    const std::int64_t n = a.tk;
    const T alpha = a.alpha[h];
    T* ks = scratch<T>(team, std::int64_t(key_block) * DH);
    T* vs = scratch<T>(team, std::int64_t(key_block) * DH);
    const RowKeys keys(team, band, p_first, rows, n);
    const std::int64_t kb = band.key_begin(p_first, n), ke = band.key_end(p_last, n);

    for (int r = team.team_rank(); r < tile_q; r += team.team_size()) {
      const bool mine = r < rows;
      Row<T, DH> q;
      if (mine) q.load(a.q.row(b, i0 + r, h), dh);
      T o[DH];
      HYBRIDSEQ_DEVICE_UNROLL
      for (int d = 0; d < DH; ++d) o[d] = 0;
      T m = attention::detail::neg_inf<T>(), l = 0;
      for (std::int64_t k0 = kb; k0 < ke; k0 += key_block) {
        const std::int64_t cols = ke - k0 < key_block ? ke - k0 : key_block;
        team.team_barrier();  // every thread is done with the previous block
        stage_keys<T>(team, a, b, k0, hk, cols, ks, vs, DH);
        team.team_barrier();
        if (!mine) continue;
        int c0, c1;
        keys.visible(r, k0, cols, c0, c1);
        if (c0 >= c1) continue;
        T s[key_block];
        T mx = m;
        HYBRIDSEQ_DEVICE_UNROLL
        for (int c = 0; c < key_block; ++c) {
          s[c] = 0;
          if (c >= c0 && c < c1) {
            s[c] = alpha * q.dot(ks + c * DH, dh);
            mx = s[c] > mx ? s[c] : mx;
          }
        }
        const T correction = math::exp(m - mx);  // 0 on the first visible block
        T sum = 0;
        HYBRIDSEQ_DEVICE_UNROLL
        for (int c = 0; c < key_block; ++c)
          if (c >= c0 && c < c1) {
            s[c] = exp_in_loop(s[c] - mx);
            sum += s[c];
          }
        if (a.dropout.active()) {  // after the row sum: the normaliser is the undropped one
          HYBRIDSEQ_DEVICE_UNROLL
          for (int c = 0; c < key_block; ++c)
            if (c >= c0 && c < c1) s[c] *= a.dropout_factor(b, h, i0 + r, k0 + c);
        }
        l = l * correction + sum;
        m = mx;
        HYBRIDSEQ_DEVICE_UNROLL
        for (int d = 0; d < DH; ++d) {
          if (d >= dh) continue;
          T acc = o[d] * correction;
          HYBRIDSEQ_DEVICE_UNROLL
          for (int c = 0; c < key_block; ++c)
            if (c >= c0 && c < c1) acc += s[c] * vs[c * DH + d];
          o[d] = acc;
        }
      }
      if (!mine) continue;
      const T inv = T(1) / l;
      T* out = a.o.row(b, i0 + r, h);
      HYBRIDSEQ_DEVICE_UNROLL
      for (int d = 0; d < DH; ++d)
        if (d < dh) out[d] = o[d] * inv;
      a.lse[(b * a.heads + h) * a.tq + i0 + r] = m + math::log(l);
    }
  }
};

/// dK, dV for one (batch, kv head, key block): a thread per key row, its key and value rows
/// in registers; dK and dV rows updated once per staged block of query rows.
template <class T, class Space, int DH>
struct BackwardKV {
  AttentionArgs<T> a;
  AttentionGrads<T> g;
  Band band;
  std::int64_t n_ktiles;

  static std::size_t scratch_bytes() {
    return 2 * padded(sizeof(T) * query_block * DH) + 2 * padded(sizeof(T) * query_block) + KeyQueries::scratch_bytes();
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember<Space>& team) const {
    const KeyTile tile(a, team.league_rank(), n_ktiles);
    const std::int64_t b = tile.b, k0 = tile.k0, cols = tile.cols, n = a.tk;
    const int hk = tile.hk, dh = a.head_dim, group = a.heads / a.kv_heads;
    T* qs = scratch<T>(team, std::int64_t(query_block) * DH);
    T* dos = scratch<T>(team, std::int64_t(query_block) * DH);
    T* lse = scratch<T>(team, query_block);
    T* delta = scratch<T>(team, query_block);
    const KeyQueries queries(team, band, a, k0, cols);
    const std::int64_t i_begin = attention::detail::first_query_seeing(band, k0, a.q0, a.tq, n);
    const std::int64_t i_end = attention::detail::end_query_seeing(band, k0 + cols, a.q0, a.tq, n);

    for (int c = team.team_rank(); c < tile_k; c += team.team_size()) {
      const bool mine = c < cols;
      const std::int64_t key = k0 + c;
      Row<T, DH> k, v;
      T* dk = nullptr;
      T* dv = nullptr;
      if (mine) {
        k.load(a.k.row(b, key, hk), dh);
        v.load(a.v.row(b, key, hk), dh);
        dk = g.dk.row(b, key, hk);
        dv = g.dv.row(b, key, hk);
        for (int d = 0; d < dh; ++d) dk[d] = 0, dv[d] = 0;
      }
      for (int h = hk * group; h < (hk + 1) * group; ++h) {
        const T alpha = a.alpha[h];
        for (std::int64_t i0 = i_begin; i0 < i_end; i0 += query_block) {
          const std::int64_t rows = i_end - i0 < query_block ? i_end - i0 : query_block;
          team.team_barrier();
          stage_queries<T>(team, a, g, b, i0, h, rows, qs, dos, lse, delta, DH);
          team.team_barrier();
          if (!mine) continue;
          T pv[query_block], dsa[query_block];
          bool seen[query_block];
          int r0, r1;  // the block's rows that see this key
          queries.seeing(c, i0, rows, r0, r1);
          HYBRIDSEQ_DEVICE_UNROLL
          for (int r = 0; r < query_block; ++r) {
            seen[r] = r >= r0 && r < r1;
            pv[r] = dsa[r] = 0;
            if (!seen[r]) continue;
            const T prob = exp_in_loop(alpha * k.dot(qs + r * DH, dh) - lse[r]);
            const T factor = a.dropout.active() ? a.dropout_factor(b, h, i0 + r, key) : T(1);
            const T ds = prob * (v.dot(dos + r * DH, dh) * factor - delta[r]);
            pv[r] = prob * factor;
            dsa[r] = alpha * ds;
          }
          HYBRIDSEQ_DEVICE_UNROLL
          for (int d = 0; d < DH; ++d) {
            if (d >= dh) continue;
            T sv = dv[d], sk = dk[d];
            HYBRIDSEQ_DEVICE_UNROLL
            for (int r = 0; r < query_block; ++r)
              if (seen[r]) {
                sv += pv[r] * dos[r * DH + d];
                sk += dsa[r] * qs[r * DH + d];
              }
            dv[d] = sv;
            dk[d] = sk;
          }
        }
      }
    }
  }
};

/// dQ and the temperature partial for one (batch, head, query block): a thread per query
/// row, its query and dO rows in registers; its dQ row updated once per staged key block.
template <class T, class Space, int DH>
struct BackwardQ {
  AttentionArgs<T> a;
  AttentionGrads<T> g;
  Band band;
  std::int64_t n_qtiles;

  static std::size_t scratch_bytes() {
    return padded(sizeof(double) * tile_q) + 2 * padded(sizeof(T) * key_block * DH) + RowKeys::scratch_bytes();
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember<Space>& team) const {
    const QueryTile tile(a, team.league_rank(), n_qtiles);
    const std::int64_t b = tile.b, i0 = tile.i0, rows = tile.rows, p_first = tile.p_first, p_last = tile.p_last;
    const int h = tile.h, hk = tile.hk, dh = a.head_dim;
    const std::int64_t n = a.tk;
    const T alpha = a.alpha[h];
    double* dalpha = scratch<double>(team, tile_q);  // Σ_j dS ⊙ S of each row
    T* ks = scratch<T>(team, std::int64_t(key_block) * DH);
    T* vs = scratch<T>(team, std::int64_t(key_block) * DH);
    const RowKeys keys(team, band, p_first, rows, n);
    const std::int64_t kb = band.key_begin(p_first, n), ke = band.key_end(p_last, n);

    for (int r = team.team_rank(); r < tile_q; r += team.team_size()) {
      const bool mine = r < rows;
      const std::int64_t i = i0 + r;
      Row<T, DH> q, d_o;
      T lse = 0, delta = 0;
      T* dq = nullptr;
      double da = 0;
      if (mine) {
        q.load(a.q.row(b, i, h), dh);
        d_o.load(g.d_o.row(b, i, h), dh);
        lse = a.lse[(b * a.heads + h) * a.tq + i];
        delta = g.delta[(b * a.heads + h) * a.tq + i];
        dq = g.dq.row(b, i, h);
        for (int d = 0; d < dh; ++d) dq[d] = 0;
      }
      for (std::int64_t k0 = kb; k0 < ke; k0 += key_block) {
        const std::int64_t cols = ke - k0 < key_block ? ke - k0 : key_block;
        team.team_barrier();
        stage_keys<T>(team, a, b, k0, hk, cols, ks, vs, DH);
        team.team_barrier();
        if (!mine) continue;
        int c0, c1;
        keys.visible(r, k0, cols, c0, c1);
        if (c0 >= c1) continue;
        T dsa[key_block];
        HYBRIDSEQ_DEVICE_UNROLL
        for (int c = 0; c < key_block; ++c) {
          dsa[c] = 0;
          if (c < c0 || c >= c1) continue;
          const T s = alpha * q.dot(ks + c * DH, dh);
          const T factor = a.dropout.active() ? a.dropout_factor(b, h, i, k0 + c) : T(1);
          const T ds = exp_in_loop(s - lse) * (d_o.dot(vs + c * DH, dh) * factor - delta);
          da += double(ds) * double(s);
          dsa[c] = alpha * ds;
        }
        HYBRIDSEQ_DEVICE_UNROLL
        for (int d = 0; d < DH; ++d) {
          if (d >= dh) continue;
          T acc = dq[d];
          HYBRIDSEQ_DEVICE_UNROLL
          for (int c = 0; c < key_block; ++c)
            if (c >= c0 && c < c1) acc += dsa[c] * ks[c * DH + d];
          dq[d] = acc;
        }
      }
      if (mine) dalpha[r] = da;
    }
    if (g.dalpha == nullptr) return;
    team.team_barrier();
    double total = 0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, rows), [&](const std::int64_t r, double& sum) { sum += dalpha[r]; }, total);
    Kokkos::single(Kokkos::PerTeam(team),
                   [&]() { g.dalpha[(b * a.heads + h) * n_qtiles + tile.qt] = T(total / double(alpha)); });
  }
};
}  // namespace in_registers

template <class Functor, class Space>
void launch(const char* label, const Space& exec, std::int64_t tasks, int rows, std::size_t scratch, const Functor& f) {
  if (tasks == 0) return;
  Kokkos::TeamPolicy<Space> policy(exec, tasks, team_size<Space>(rows));
  Kokkos::parallel_for(label, policy.set_scratch_size(0, Kokkos::PerTeam(scratch)), f);
}

/// Calls f with the register bound for the head dim (32 or 64), or with `Above` past 64 (0:
/// the in-memory kernels here; the tensor-core kernels' 128).
template <int Above = 0, class F>
void with_register_bound(int head_dim, F&& f) {
  if (head_dim <= 32) return f(std::integral_constant<int, 32>{});
  if (head_dim <= 64) return f(std::integral_constant<int, 64>{});
  f(std::integral_constant<int, Above>{});
}

}  // namespace detail

/// O and LSE for every query row (the tiled kernel's contract).
template <class T, class Space>
void forward(const Space& exec, const AttentionArgs<T>& a, const Band& band) {
  constexpr const char* label = "hybridseq::kernels::attention::forward[team]";
  const std::int64_t nq = query_tiles(a.tq), tasks = a.batch * a.heads * nq;
  detail::with_register_bound(a.head_dim, [&](auto bound) {
    constexpr int DH = decltype(bound)::value;
    if constexpr (DH > 0) {
      using F = detail::in_registers::Forward<T, Space, DH>;
      detail::launch(label, exec, tasks, tile_q, F::scratch_bytes(), F{a, band, nq});
    } else {
      using F = detail::in_memory::Forward<T, Space>;
      const int kt = staged_rows<T>(a.head_dim);
      detail::launch(label, exec, tasks, tile_q, F::scratch_bytes(a.head_dim, kt), F{a, band, nq, kt});
    }
  });
}

/// dQ, dK, dV (overwritten) from dO, and, when g.dalpha is set, the per-(b, h, query tile)
/// partial sums of ∂L/∂α (the tiled kernel's contract).
template <class T, class Space>
void backward(const Space& exec, const AttentionArgs<T>& a, const AttentionGrads<T>& g, const Band& band) {
  if (a.batch * a.tq == 0) return;
  Kokkos::parallel_for("hybridseq::kernels::attention::delta[team]",
                       Kokkos::RangePolicy<Space>(exec, 0, a.batch * a.heads * a.tq),
                       attention::detail::Delta<T, Space>{a, g});
  constexpr const char* kv_label = "hybridseq::kernels::attention::backward_kv[team]";
  constexpr const char* q_label = "hybridseq::kernels::attention::backward_q[team]";
  const std::int64_t nk = (a.tk + tile_k - 1) / tile_k, nq = query_tiles(a.tq);
  const std::int64_t kv_tasks = a.batch * a.kv_heads * nk, q_tasks = a.batch * a.heads * nq;
  detail::with_register_bound(a.head_dim, [&](auto bound) {
    constexpr int DH = decltype(bound)::value;
    if constexpr (DH > 0) {
      using KV = detail::in_registers::BackwardKV<T, Space, DH>;
      using Q = detail::in_registers::BackwardQ<T, Space, DH>;
      detail::launch(kv_label, exec, kv_tasks, tile_k, KV::scratch_bytes(), KV{a, g, band, nk});
      detail::launch(q_label, exec, q_tasks, tile_q, Q::scratch_bytes(), Q{a, g, band, nq});
    } else {
      using KV = detail::in_memory::BackwardKV<T, Space>;
      using Q = detail::in_memory::BackwardQ<T, Space>;
      const int rows = staged_rows<T>(a.head_dim);
      detail::launch(kv_label, exec, kv_tasks, tile_k, KV::scratch_bytes(a.head_dim, rows), KV{a, g, band, nk, rows});
      detail::launch(q_label, exec, q_tasks, tile_q, Q::scratch_bytes(a.head_dim, rows), Q{a, g, band, nq, rows});
    }
  });
}

}  // namespace hybridseq::kernels::attention::team
