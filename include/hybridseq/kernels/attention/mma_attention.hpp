#pragma once
/// \file
/// Attention on tensor cores: Q, K, V, dO and the probabilities (and dS) rounded to bfloat16,
/// every product accumulated in fp32 (`mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32`), the
/// softmax statistics, outputs and gradients in fp32. Same arguments and outputs as the fp32
/// kernels (AttentionArgs<float>: every segment scheme, GQA, dropout, the per-head multiplier
/// and its gradient partials).
///
/// Work split (FlashAttention-2's), a team of four warps, each warp 16 rows of the team's 64:
///   forward     a team per (batch, head, 64 query rows). Per block of 64 keys the team stages
///               K and Vᵀ in team scratch as bf16 pairs; a warp computes S = Q·Kᵀ (eight m16n8
///               tiles), rescales and exponentiates in registers (a row's values are spread
///               over the four lanes of a quad, combined by shuffles), and adds P·V with P taken
///               straight from S's accumulators: the C fragments of two adjacent m16n8 tiles
///               are the A fragment of one m16n8k16 product.
///   backward 1  a team per (batch, kv head, 64 key rows), a warp 16 keys with their K and V
///               fragments: per head of the group and block of queries, Sᵀ = K·Qᵀ and
///               dPᵀ = V·dOᵀ, then dV += Pᵀ·dO and dK += α·dSᵀ·Q from those accumulators
///               (head dims above 64: two teams per key tile, each half of dK's and dV's dims).
///   backward 2  a team per (batch, head, 64 query rows): S = Q·Kᵀ, dP = dO·Vᵀ, dQ += α·dS·K,
///               and the temperature's partial, summed lane by lane in a fixed order.
/// No gradient row has two writers: deterministic without atomics, like the fp32 kernels.
///
/// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"), lane l, g = l / 4, c = l % 4,
/// each 32-bit register two bf16 of adjacent k (the lower k in the low half):
///   A (16 × 16)  r0: row g, k 2c..2c+1   r1: row g+8, k 2c..   r2: row g, k 2c+8..   r3: row g+8, k 2c+8..
///   B (16 × 8)   r0: col g, k 2c..2c+1   r1: col g, k 2c+8..
///   C (16 × 8)   c0, c1: row g, cols 2c, 2c+1   c2, c3: row g+8, cols 2c, 2c+1
///
/// On a device each thread is one lane. Host spaces run the same code with the team's 128
/// lanes as arrays of per-lane state (one thread per team) and the warp-wide steps — the mma,
/// the four-lane reductions — emulated over those arrays in the layouts above: that is how the
/// test suite checks the fragment bookkeeping against the naive oracle on every machine, and
/// a CUDA run against Serial compares the tensor cores with that emulation. It is a
/// reference, not a fast host path: host users want the fp32 tiled kernel.

#include <cstdint>
#include <limits>
#include <type_traits>

#include "../../core/error.hpp"
#include "../exp.hpp"
#include "team_attention.hpp"

namespace hybridseq::kernels::attention::mma {

namespace detail {

using attention::detail::TeamMember;
using team::detail::on_host;

/// float → bfloat16 bits, rounding to nearest, ties to even; a NaN stays a (quiet) NaN. The
/// same bits on host and device, so the host emulation rounds as the device does.
KOKKOS_INLINE_FUNCTION std::uint32_t bf16(float x) {
  const std::uint32_t u = kernels::detail::float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

/// Two floats as one register of bf16 pairs, `lo` in the low half.
KOKKOS_INLINE_FUNCTION std::uint32_t pack(float lo, float hi) {
  return bf16(lo) | (bf16(hi) << 16);
}

/// The float values of a register's two bf16 halves.
KOKKOS_INLINE_FUNCTION float low(std::uint32_t r) {
  return kernels::detail::bits_float(r << 16);
}
KOKKOS_INLINE_FUNCTION float high(std::uint32_t r) {
  return kernels::detail::bits_float(r & 0xffff0000u);
}

struct FragA {
  std::uint32_t r[4];
};
struct FragB {
  std::uint32_t r[2];
};

inline constexpr int warps = 4, lanes = 32, threads = warps * lanes;
static_assert(warps * 16 == tile_q, "a warp owns 16 of a team's query rows");

/// Per-lane state lives in `slots` copies: one on a device (the lane's registers), one per
/// lane of the team on the host, where a single thread plays all of them.
template <class Space>
inline constexpr int slots = on_host<Space> ? threads : 1;

/// Calls f(thread, slot) for this lane on a device, for every lane of the team on the host.
template <class Space, class F>
KOKKOS_INLINE_FUNCTION void each_lane([[maybe_unused]] const TeamMember<Space>& team, const F& f) {
  if constexpr (on_host<Space>) {
    for (int t = 0; t < threads; ++t) f(t, t);
  } else {
    f(team.team_rank(), 0);
  }
}

/// D (16 × 8) += A (16 × 16) · B (16 × 8) on every warp: acc(t, slot) is lane t's four
/// accumulators, a(t, slot) and b(t, slot) its fragments.
template <class Space, class Acc, class A, class B>
KOKKOS_INLINE_FUNCTION void mma(const TeamMember<Space>& team, const Acc& acc, const A& a, const B& b) {
  (void)team, (void)acc, (void)a, (void)b;  // each pass compiles one of the two
  if constexpr (on_host<Space>) {
#if !defined(__CUDA_ARCH__)
    for (int w = 0; w < warps; ++w) {
      float am[16][16], bm[16][8];
      for (int l = 0; l < lanes; ++l) {
        const int t = w * lanes + l, g = l / 4, c = l % 4;
        const FragA fa = a(t, t);
        const FragB fb = b(t, t);
        for (int r = 0; r < 4; ++r) {
          const int row = g + 8 * (r % 2), k = 2 * c + 8 * (r / 2);
          am[row][k] = low(fa.r[r]);
          am[row][k + 1] = high(fa.r[r]);
        }
        for (int r = 0; r < 2; ++r) {
          bm[2 * c + 8 * r][g] = low(fb.r[r]);
          bm[2 * c + 8 * r + 1][g] = high(fb.r[r]);
        }
      }
      for (int l = 0; l < lanes; ++l) {
        const int t = w * lanes + l, g = l / 4, c = l % 4;
        float* d = acc(t, t);
        for (int r = 0; r < 4; ++r) {
          const int row = g + 8 * (r / 2), col = 2 * c + r % 2;
          float sum = 0;  // bf16 × bf16 is exact in fp32; the sum rounds like any fp32 sum
          for (int k = 0; k < 16; ++k) sum += am[row][k] * bm[k][col];
          d[r] += sum;
        }
      }
    }
#endif
  } else {
#if defined(__CUDA_ARCH__)
    const int t = team.team_rank();
    float* d = acc(t, 0);
    const FragA fa = a(t, 0);
    const FragB fb = b(t, 0);
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(fa.r[0]), "r"(fa.r[1]), "r"(fa.r[2]), "r"(fa.r[3]), "r"(fb.r[0]), "r"(fb.r[1]));
#endif
  }
}

/// v(slot) ← op over the four lanes of its quad (the lanes that share rows g and g + 8).
template <class Space, class Get, class Op>
KOKKOS_INLINE_FUNCTION void quad_all_reduce(const Get& v, const Op& op) {
  (void)v, (void)op;  // each pass compiles one of the two
  if constexpr (on_host<Space>) {
    for (int t = 0; t < threads; t += 4) {
      const float r = op(op(v(t), v(t + 1)), op(v(t + 2), v(t + 3)));
      for (int i = 0; i < 4; ++i) v(t + i) = r;
    }
  } else {
#if defined(__CUDA_ARCH__)
    float& x = v(0);
    x = op(x, __shfl_xor_sync(0xffffffffu, x, 1));
    x = op(x, __shfl_xor_sync(0xffffffffu, x, 2));
#endif
  }
}

/// The A fragments of 16 rows of a (B, T, heads, Dh) buffer — rows r0 + g and r0 + g + 8 of lane
/// t, −1 past the block — for KT k-steps of 16 dims, rounded to bf16; zeros past the head dim.
template <int KT>
KOKKOS_INLINE_FUNCTION void load_a(std::uint32_t (&f)[KT][4], const HeadRows<const float>& from, std::int64_t b,
                                   std::int64_t t0, int h, std::int64_t row0, std::int64_t row1, int dh, int c) {
  const auto pair = [&](std::int64_t r, int d) -> std::uint32_t {
    if (r < 0 || d >= dh) return 0;
    const float* x = from.row(b, t0 + r, h);
    return pack(x[d], d + 1 < dh ? x[d + 1] : 0.0f);
  };
  HYBRIDSEQ_DEVICE_UNROLL
  for (int k = 0; k < KT; ++k) {
    f[k][0] = pair(row0, 16 * k + 2 * c);
    f[k][1] = pair(row1, 16 * k + 2 * c);
    f[k][2] = pair(row0, 16 * k + 8 + 2 * c);
    f[k][3] = pair(row1, 16 * k + 8 + 2 * c);
  }
}

/// The A fragment for k-step k of fragments held as f[KT][4] (load_a's).
template <int KT>
KOKKOS_INLINE_FUNCTION FragA a_of(const std::uint32_t (&f)[KT][4], int k) {
  return {{f[k][0], f[k][1], f[k][2], f[k][3]}};
}

/// The A fragment for k-step k of a 16 × 16·KT operand held as C fragments c[2·KT][4] (the
/// accumulators of a previous product), rounded to bf16.
template <int N>
KOKKOS_INLINE_FUNCTION FragA a_of_c(const float (&c)[N][4], int k) {
  return {{pack(c[2 * k][0], c[2 * k][1]), pack(c[2 * k][2], c[2 * k][3]), pack(c[2 * k + 1][0], c[2 * k + 1][1]),
           pack(c[2 * k + 1][2], c[2 * k + 1][3])}};
}

template <int N>
KOKKOS_INLINE_FUNCTION void zero(float (&c)[N][4]) {
  HYBRIDSEQ_DEVICE_UNROLL
  for (int j = 0; j < N; ++j) {
    HYBRIDSEQ_DEVICE_UNROLL
    for (int e = 0; e < 4; ++e) c[j][e] = 0;
  }
}

/// acc (16 × 8·NT) += A (16 × 16·KT) · B on every warp (or =, for Write::assign), B's column
/// n lying in `cols` from word n · stride on as bf16 pairs along k. a(slot, k) gives the lane's
/// A fragment of k-step k; acc(slot) its C fragments, float[NT][4].
template <class Space, int NT, int KT, Write W = Write::add, class Acc, class A>
KOKKOS_INLINE_FUNCTION void product(const TeamMember<Space>& team, const Acc& acc, const A& a,
                                    const std::uint32_t* cols, int stride) {
  if constexpr (W == Write::assign) each_lane<Space>(team, [&](int, int s) { zero(acc(s)); });
  HYBRIDSEQ_DEVICE_UNROLL
  for (int k = 0; k < KT; ++k) {
    HYBRIDSEQ_DEVICE_UNROLL
    for (int j = 0; j < NT; ++j)
      mma<Space>(
          team, [&](int, int s) { return acc(s)[j]; }, [&](int, int s) { return a(s, k); },
          [&](int t, int) {
            const std::uint32_t* col = cols + (8 * j + (t % lanes) / 4) * stride + 8 * k + t % 4;
            return FragB{{col[0], col[4]}};
          });
  }
}

/// Stages `count` rows t0.. of head h (of `block` ≥ count; zeros past count and the head dim)
/// in team scratch as bf16 pairs, `stride` words per row:
///   by_rows  row r's dims in pairs (d, d + 1) from word r · stride on: B columns of a product
///            over the head dim (Q·Kᵀ's keys);
///   by_dims  dims d0 .. d0 + DH − 1, dim d's rows in pairs (r, r + 1) from word (d − d0) · stride
///            on: B columns of a product over the rows (P·V's dims).
template <int DH, class Member>
KOKKOS_INLINE_FUNCTION void stage_by_rows(const Member& team, const HeadRows<const float>& from, std::int64_t b,
                                          std::int64_t t0, int h, std::int64_t count, int block, int dh,
                                          std::uint32_t* to, int stride) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, block * (DH / 2)), [&](const int e) {
    const int r = e / (DH / 2), d = 2 * (e % (DH / 2));
    float lo = 0, hi = 0;
    if (r < count && d < dh) {
      const float* x = from.row(b, t0 + r, h);
      lo = x[d];
      hi = d + 1 < dh ? x[d + 1] : 0.0f;
    }
    to[r * stride + d / 2] = pack(lo, hi);
  });
}
template <int DH, class Member>
KOKKOS_INLINE_FUNCTION void stage_by_dims(const Member& team, const HeadRows<const float>& from, std::int64_t b,
                                          std::int64_t t0, int h, std::int64_t count, int block, int dh,
                                          std::uint32_t* to, int stride, int d0 = 0) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, (block / 2) * DH), [&](const int e) {
    const int d = e % DH, r = 2 * (e / DH);
    float lo = 0, hi = 0;
    if (d0 + d < dh) {
      if (r < count) lo = from.row(b, t0 + r, h)[d0 + d];
      if (r + 1 < count) hi = from.row(b, t0 + r + 1, h)[d0 + d];
    }
    to[d * stride + r / 2] = pack(lo, hi);
  });
}

/// Words per staged row: half the row's values, plus 4 so that a fragment load's 32 lanes
/// (rows g = 0..7 at word offsets c = 0..3) fall in 32 distinct banks.
constexpr int stride_for(int values) {
  return values / 2 + 4;
}

/// Row r (0 .. 16·warps − 1) of a team's block that lane t's half (0: row g, 1: row g + 8)
/// holds, or −1 past the block's `rows`.
KOKKOS_INLINE_FUNCTION std::int64_t row_of(int t, int half, std::int64_t rows) {
  const std::int64_t r = (t / lanes) * 16 + (t % lanes) / 4 + 8 * half;
  return r < rows ? r : -1;
}

/// Column of C-fragment element (j, e) of lane t: 8j + 2(t mod 4) + e.
KOKKOS_INLINE_FUNCTION int col_of(int t, int j, int e) {
  return 8 * j + 2 * (t % 4) + e;
}

/// One lane's share of its warp's 16 query rows (forward): rows g and g + 8.
template <int DH>
struct ForwardLane {
  std::uint32_t q[DH / 16][4];  // A fragments of Q
  float s[tile_k / 8][4];       // a key block's scores, then probabilities
  float o[DH / 8][4];           // the output rows' accumulators
  float m[2], l[2];             // running max; this lane's part of the running sum
  float block_max[2];
};

/// Forward for one (batch, head, 64 query rows); DH (32, 64, 128) bounds the head dim.
template <class Space, int DH>
struct Forward {
  AttentionArgs<float> a;
  Band band;
  std::int64_t n_qtiles;

  static constexpr int k_stride = stride_for(DH), v_stride = stride_for(tile_k);

  static std::size_t scratch_bytes() {
    return team::detail::padded(4 * std::size_t(tile_k) * k_stride) +
           team::detail::padded(4 * std::size_t(DH) * v_stride) + team::detail::RowKeys::scratch_bytes();
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember<Space>& team) const {
    const QueryTile tile(a, team.league_rank(), n_qtiles);
    const std::int64_t b = tile.b, i0 = tile.i0, rows = tile.rows, p_first = tile.p_first, p_last = tile.p_last;
    const int h = tile.h, hk = tile.hk, dh = a.head_dim;
    const std::int64_t n = a.tk;
    const float alpha = a.alpha[h];
    std::uint32_t* ks = team::detail::scratch<std::uint32_t>(team, std::int64_t(tile_k) * k_stride);
    std::uint32_t* vt = team::detail::scratch<std::uint32_t>(team, std::int64_t(DH) * v_stride);
    const team::detail::RowKeys keys(team, band, p_first, rows, n);
    ForwardLane<DH> st[slots<Space>];
    constexpr float neg_inf = -std::numeric_limits<float>::infinity();

    each_lane<Space>(team, [&](int t, int s) {
      ForwardLane<DH>& x = st[s];
      load_a(x.q, a.q, b, i0, h, row_of(t, 0, rows), row_of(t, 1, rows), dh, t % 4);
      zero(x.o);
      x.m[0] = x.m[1] = neg_inf;
      x.l[0] = x.l[1] = 0;
    });

    const std::int64_t kb = band.key_begin(p_first, n), ke = band.key_end(p_last, n);
    for (std::int64_t k0 = kb; k0 < ke; k0 += tile_k) {
      const std::int64_t cols = ke - k0 < tile_k ? ke - k0 : tile_k;
      team.team_barrier();  // every lane is done with the previous block
      stage_by_rows<DH>(team, a.k, b, k0, hk, cols, tile_k, dh, ks, k_stride);
      stage_by_dims<DH>(team, a.v, b, k0, hk, cols, tile_k, dh, vt, v_stride);
      team.team_barrier();

      product<Space, tile_k / 8, DH / 16, Write::assign>(
          team, [&](int s) -> auto& { return st[s].s; }, [&](int s, int k) { return a_of(st[s].q, k); }, ks, k_stride);

      // Scale, mask and the block's row maxima.
      each_lane<Space>(team, [&](int t, int s) {
        ForwardLane<DH>& x = st[s];
        HYBRIDSEQ_DEVICE_UNROLL
        for (int half = 0; half < 2; ++half) {
          const std::int64_t r = row_of(t, half, rows);
          int c0 = 0, c1 = 0;
          if (r >= 0) keys.visible(r, k0, cols, c0, c1);
          float mx = x.m[half];
          HYBRIDSEQ_DEVICE_UNROLL
          for (int j = 0; j < tile_k / 8; ++j) {
            HYBRIDSEQ_DEVICE_UNROLL
            for (int e = 0; e < 2; ++e) {
              const int col = col_of(t, j, e);
              const float v = col >= c0 && col < c1 ? alpha * x.s[j][2 * half + e] : neg_inf;
              x.s[j][2 * half + e] = v;
              mx = v > mx ? v : mx;
            }
          }
          x.block_max[half] = mx;
        }
      });
      const auto max_op = [](float u, float v) { return u > v ? u : v; };
      quad_all_reduce<Space>([&](int s) -> float& { return st[s].block_max[0]; }, max_op);
      quad_all_reduce<Space>([&](int s) -> float& { return st[s].block_max[1]; }, max_op);

      // Probabilities, the sums and the output's correction.
      each_lane<Space>(team, [&](int t, int s) {
        ForwardLane<DH>& x = st[s];
        HYBRIDSEQ_DEVICE_UNROLL
        for (int half = 0; half < 2; ++half) {
          const float mx = x.block_max[half];
          const bool none = mx == neg_inf;  // nothing visible yet: P = 0, nothing to correct
          const float correction = none ? 1.0f : math::exp(x.m[half] - mx);  // 0 on the first visible block
          x.m[half] = mx;
          float sum = 0;
          HYBRIDSEQ_DEVICE_UNROLL
          for (int j = 0; j < tile_k / 8; ++j) {
            HYBRIDSEQ_DEVICE_UNROLL
            for (int e = 0; e < 2; ++e) {
              float& v = x.s[j][2 * half + e];
              v = v == neg_inf ? 0.0f : exp_in_loop(v - mx);
              sum += v;
            }
          }
          x.l[half] = x.l[half] * correction + sum;
          if (a.dropout.active() && !none) {  // after the sum: the normaliser is the undropped one
            const std::int64_t i = i0 + row_of(t, half, rows);
            HYBRIDSEQ_DEVICE_UNROLL
            for (int j = 0; j < tile_k / 8; ++j) {
              HYBRIDSEQ_DEVICE_UNROLL
              for (int e = 0; e < 2; ++e) {
                const int col = col_of(t, j, e);
                if (col < cols) x.s[j][2 * half + e] *= a.dropout_factor(b, h, i, k0 + col);
              }
            }
          }
          HYBRIDSEQ_DEVICE_UNROLL
          for (int j = 0; j < DH / 8; ++j) x.o[j][2 * half] *= correction, x.o[j][2 * half + 1] *= correction;
        }
      });

      // O += P·V, P's A fragments straight from S's C fragments.
      product<Space, DH / 8, tile_k / 16>(
          team, [&](int s) -> auto& { return st[s].o; }, [&](int s, int k) { return a_of_c(st[s].s, k); }, vt,
          v_stride);
    }

    const auto sum_op = [](float u, float v) { return u + v; };
    quad_all_reduce<Space>([&](int s) -> float& { return st[s].l[0]; }, sum_op);
    quad_all_reduce<Space>([&](int s) -> float& { return st[s].l[1]; }, sum_op);
    each_lane<Space>(team, [&](int t, int s) {
      const ForwardLane<DH>& x = st[s];
      HYBRIDSEQ_DEVICE_UNROLL
      for (int half = 0; half < 2; ++half) {
        const std::int64_t r = row_of(t, half, rows);
        if (r < 0) continue;
        const float inv = 1.0f / x.l[half];
        float* o = a.o.row(b, i0 + r, h);
        HYBRIDSEQ_DEVICE_UNROLL
        for (int j = 0; j < DH / 8; ++j) {
          HYBRIDSEQ_DEVICE_UNROLL
          for (int e = 0; e < 2; ++e) {
            const int d = col_of(t, j, e);
            if (d < dh) o[d] = x.o[j][2 * half + e] * inv;
          }
        }
        if (t % 4 == 0) a.lse[(b * a.heads + h) * a.tq + i0 + r] = x.m[half] + math::log(x.l[half]);
      }
    });
  }
};

/// One lane's share of its warp's 16 key rows (dK, dV).
template <int DH, int QB, int DIMS>
struct KeyLane {
  std::uint32_t k[DH / 16][4], v[DH / 16][4];  // A fragments of K and V
  float s[QB / 8][4];                          // Sᵀ of a query block, then P·dropout
  float dp[QB / 8][4];                         // dPᵀ = V·dOᵀ, then α·dSᵀ
  float dk[DIMS / 8][4], dv[DIMS / 8][4];      // the team's dims of dK and dV
};

/// dK, dV for one (batch, kv head, 64 key rows), summed over the group's heads and the query
/// blocks that see the keys: Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, dV += (P·dropout)ᵀ·dO, dK += α·dSᵀ·Q.
/// DH (32, 64, 128) bounds the head dim. Registers set the shapes: with K and V fragments,
/// dK, dV, Sᵀ and dPᵀ all in registers, 64-row query blocks spill from DH = 64 on, so the
/// wider bounds step 32 rows; and DH = 128's dK and dV do not fit a lane beside the rest, so
/// two teams share a key tile, each writing half of the dims (both compute Sᵀ and dPᵀ: six
/// products per step in place of four).
template <class Space, int DH>
struct BackwardKV {
  AttentionArgs<float> a;
  AttentionGrads<float> g;
  Band band;
  std::int64_t n_ktiles;

  static constexpr int parts = DH > 64 ? 2 : 1;  // teams per key tile
  static constexpr int dims = DH / parts;        // dims of dK and dV per team
  static constexpr int qb = DH > 32 ? 32 : 64;   // query rows per step
  static constexpr int row_stride = stride_for(DH), dim_stride = stride_for(qb);

  static std::size_t scratch_bytes() {
    return 2 * team::detail::padded(4 * std::size_t(qb) * row_stride) +
           2 * team::detail::padded(4 * std::size_t(dims) * dim_stride) + 2 * team::detail::padded(4 * qb) +
           team::detail::KeyQueries::scratch_bytes();
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember<Space>& team) const {
    const KeyTile tile(a, team.league_rank() / parts, n_ktiles);
    const int d0 = int(team.league_rank() % parts) * dims;  // the team's first dim of dK, dV
    const std::int64_t b = tile.b, k0 = tile.k0, cols = tile.cols, n = a.tk;
    const int hk = tile.hk, dh = a.head_dim, group = a.heads / a.kv_heads;
    std::uint32_t* q_rows = team::detail::scratch<std::uint32_t>(team, std::int64_t(qb) * row_stride);
    std::uint32_t* do_rows = team::detail::scratch<std::uint32_t>(team, std::int64_t(qb) * row_stride);
    std::uint32_t* q_dims = team::detail::scratch<std::uint32_t>(team, std::int64_t(dims) * dim_stride);
    std::uint32_t* do_dims = team::detail::scratch<std::uint32_t>(team, std::int64_t(dims) * dim_stride);
    float* lse = team::detail::scratch<float>(team, qb);
    float* delta = team::detail::scratch<float>(team, qb);
    const team::detail::KeyQueries queries(team, band, a, k0, cols);
    using Lane = KeyLane<DH, qb, dims>;
    Lane st[slots<Space>];

    each_lane<Space>(team, [&](int t, int s) {
      Lane& x = st[s];
      const std::int64_t r0 = row_of(t, 0, cols), r1 = row_of(t, 1, cols);
      load_a(x.k, a.k, b, k0, hk, r0, r1, dh, t % 4);
      load_a(x.v, a.v, b, k0, hk, r0, r1, dh, t % 4);
      zero(x.dk);
      zero(x.dv);
    });
    const std::int64_t i_begin = attention::detail::first_query_seeing(band, k0, a.q0, a.tq, n);
    const std::int64_t i_end = attention::detail::end_query_seeing(band, k0 + cols, a.q0, a.tq, n);
    for (int h = hk * group; h < (hk + 1) * group; ++h) {
      const float alpha = a.alpha[h];
      for (std::int64_t i0 = i_begin; i0 < i_end; i0 += qb) {
        const std::int64_t rows = i_end - i0 < qb ? i_end - i0 : qb;
        team.team_barrier();
        stage_by_rows<DH>(team, a.q, b, i0, h, rows, qb, dh, q_rows, row_stride);
        stage_by_rows<DH>(team, g.d_o, b, i0, h, rows, qb, dh, do_rows, row_stride);
        stage_by_dims<dims>(team, a.q, b, i0, h, rows, qb, dh, q_dims, dim_stride, d0);
        stage_by_dims<dims>(team, g.d_o, b, i0, h, rows, qb, dh, do_dims, dim_stride, d0);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const std::int64_t r) {
          lse[r] = a.lse[(b * a.heads + h) * a.tq + i0 + r];
          delta[r] = g.delta[(b * a.heads + h) * a.tq + i0 + r];
        });
        team.team_barrier();

        product<Space, qb / 8, DH / 16, Write::assign>(
            team, [&](int s) -> auto& { return st[s].s; }, [&](int s, int k) { return a_of(st[s].k, k); }, q_rows,
            row_stride);
        product<Space, qb / 8, DH / 16, Write::assign>(
            team, [&](int s) -> auto& { return st[s].dp; }, [&](int s, int k) { return a_of(st[s].v, k); }, do_rows,
            row_stride);

        each_lane<Space>(team, [&](int t, int s) {
          Lane& x = st[s];
          HYBRIDSEQ_DEVICE_UNROLL
          for (int half = 0; half < 2; ++half) {
            const std::int64_t c = row_of(t, half, cols), key = k0 + c;
            int r0 = 0, r1 = 0;  // the block's rows that see the key (none for a lane past cols)
            if (c >= 0) queries.seeing(c, i0, rows, r0, r1);
            HYBRIDSEQ_DEVICE_UNROLL
            for (int j = 0; j < qb / 8; ++j) {
              HYBRIDSEQ_DEVICE_UNROLL
              for (int e = 0; e < 2; ++e) {
                const int r = col_of(t, j, e);
                float& pv = x.s[j][2 * half + e];
                float& ds = x.dp[j][2 * half + e];
                if (r < r0 || r >= r1) {
                  pv = ds = 0;
                  continue;
                }
                const float prob = exp_in_loop(alpha * pv - lse[r]);
                const float factor = a.dropout.active() ? a.dropout_factor(b, h, i0 + r, key) : 1.0f;
                ds = alpha * prob * (ds * factor - delta[r]);
                pv = prob * factor;
              }
            }
          }
        });
        product<Space, dims / 8, qb / 16>(
            team, [&](int s) -> auto& { return st[s].dv; }, [&](int s, int k) { return a_of_c(st[s].s, k); }, do_dims,
            dim_stride);
        product<Space, dims / 8, qb / 16>(
            team, [&](int s) -> auto& { return st[s].dk; }, [&](int s, int k) { return a_of_c(st[s].dp, k); }, q_dims,
            dim_stride);
      }
    }
    each_lane<Space>(team, [&](int t, int s) {
      const Lane& x = st[s];
      HYBRIDSEQ_DEVICE_UNROLL
      for (int half = 0; half < 2; ++half) {
        const std::int64_t c = row_of(t, half, cols);
        if (c < 0) continue;
        float* dk = g.dk.row(b, k0 + c, hk);
        float* dv = g.dv.row(b, k0 + c, hk);
        HYBRIDSEQ_DEVICE_UNROLL
        for (int j = 0; j < dims / 8; ++j) {
          HYBRIDSEQ_DEVICE_UNROLL
          for (int e = 0; e < 2; ++e) {
            const int d = d0 + col_of(t, j, e);
            if (d < dh) dk[d] = x.dk[j][2 * half + e], dv[d] = x.dv[j][2 * half + e];
          }
        }
      }
    });
  }
};

/// One lane's share of its warp's 16 query rows (dQ).
template <int DH, int KB>
struct QueryLane {
  std::uint32_t q[DH / 16][4], d_o[DH / 16][4];  // A fragments of Q and dO
  float s[KB / 8][4];                            // S of a key block
  float dp[KB / 8][4];                           // dP = dO·Vᵀ, then α·dS
  float dq[DH / 8][4];
  float lse[2], delta[2];
  double dalpha;  // this lane's Σ dS ⊙ S
};

/// dQ and the temperature partial for one (batch, head, 64 query rows): S = Q·Kᵀ,
/// dP = dO·Vᵀ, dQ += α·dS·K. DH (32, 64, 128) bounds the head dim; DH = 128 steps through
/// the keys 32 at a time, which keeps S and dP beside the Q, dO and dQ fragments in registers
/// and the staged K and V rows within the team's scratch.
template <class Space, int DH>
struct BackwardQ {
  AttentionArgs<float> a;
  AttentionGrads<float> g;
  Band band;
  std::int64_t n_qtiles;

  static constexpr int kb = DH > 64 ? 32 : tile_k;  // keys per step
  static constexpr int row_stride = stride_for(DH), dim_stride = stride_for(kb);

  static std::size_t scratch_bytes() {
    return 2 * team::detail::padded(4 * std::size_t(kb) * row_stride) +
           team::detail::padded(4 * std::size_t(DH) * dim_stride) + team::detail::padded(sizeof(double) * threads) +
           team::detail::RowKeys::scratch_bytes();
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember<Space>& team) const {
    const QueryTile tile(a, team.league_rank(), n_qtiles);
    const std::int64_t b = tile.b, i0 = tile.i0, rows = tile.rows, p_first = tile.p_first, p_last = tile.p_last;
    const int h = tile.h, hk = tile.hk, dh = a.head_dim;
    const std::int64_t n = a.tk;
    const float alpha = a.alpha[h];
    std::uint32_t* k_rows = team::detail::scratch<std::uint32_t>(team, std::int64_t(kb) * row_stride);
    std::uint32_t* v_rows = team::detail::scratch<std::uint32_t>(team, std::int64_t(kb) * row_stride);
    std::uint32_t* k_dims = team::detail::scratch<std::uint32_t>(team, std::int64_t(DH) * dim_stride);
    double* dalpha = team::detail::scratch<double>(team, threads);
    const team::detail::RowKeys keys(team, band, p_first, rows, n);
    using Lane = QueryLane<DH, kb>;
    Lane st[slots<Space>];

    each_lane<Space>(team, [&](int t, int s) {
      Lane& x = st[s];
      const std::int64_t r0 = row_of(t, 0, rows), r1 = row_of(t, 1, rows);
      load_a(x.q, a.q, b, i0, h, r0, r1, dh, t % 4);
      load_a(x.d_o, g.d_o, b, i0, h, r0, r1, dh, t % 4);
      zero(x.dq);
      HYBRIDSEQ_DEVICE_UNROLL
      for (int half = 0; half < 2; ++half) {
        const std::int64_t r = half == 0 ? r0 : r1, at = (b * a.heads + h) * a.tq + i0 + (r < 0 ? 0 : r);
        x.lse[half] = r < 0 ? 0.0f : a.lse[at];
        x.delta[half] = r < 0 ? 0.0f : g.delta[at];
      }
      x.dalpha = 0;
    });
    const std::int64_t k_begin = band.key_begin(p_first, n), k_end = band.key_end(p_last, n);
    for (std::int64_t k0 = k_begin; k0 < k_end; k0 += kb) {
      const std::int64_t cols = k_end - k0 < kb ? k_end - k0 : kb;
      team.team_barrier();
      stage_by_rows<DH>(team, a.k, b, k0, hk, cols, kb, dh, k_rows, row_stride);
      stage_by_rows<DH>(team, a.v, b, k0, hk, cols, kb, dh, v_rows, row_stride);
      stage_by_dims<DH>(team, a.k, b, k0, hk, cols, kb, dh, k_dims, dim_stride);
      team.team_barrier();

      product<Space, kb / 8, DH / 16, Write::assign>(
          team, [&](int s) -> auto& { return st[s].s; }, [&](int s, int k) { return a_of(st[s].q, k); }, k_rows,
          row_stride);
      product<Space, kb / 8, DH / 16, Write::assign>(
          team, [&](int s) -> auto& { return st[s].dp; }, [&](int s, int k) { return a_of(st[s].d_o, k); }, v_rows,
          row_stride);

      each_lane<Space>(team, [&](int t, int s) {
        Lane& x = st[s];
        HYBRIDSEQ_DEVICE_UNROLL
        for (int half = 0; half < 2; ++half) {
          const std::int64_t r = row_of(t, half, rows);
          int c0 = 0, c1 = 0;
          if (r >= 0) keys.visible(r, k0, cols, c0, c1);
          HYBRIDSEQ_DEVICE_UNROLL
          for (int j = 0; j < kb / 8; ++j) {
            HYBRIDSEQ_DEVICE_UNROLL
            for (int e = 0; e < 2; ++e) {
              const int col = col_of(t, j, e);
              float& ds = x.dp[j][2 * half + e];
              if (col < c0 || col >= c1) {
                ds = 0;
                continue;
              }
              const float score = alpha * x.s[j][2 * half + e];
              const float factor = a.dropout.active() ? a.dropout_factor(b, h, i0 + r, k0 + col) : 1.0f;
              const float d = exp_in_loop(score - x.lse[half]) * (ds * factor - x.delta[half]);
              x.dalpha += double(d) * double(score);
              ds = alpha * d;
            }
          }
        }
      });
      product<Space, DH / 8, kb / 16>(
          team, [&](int s) -> auto& { return st[s].dq; }, [&](int s, int k) { return a_of_c(st[s].dp, k); }, k_dims,
          dim_stride);
    }

    each_lane<Space>(team, [&](int t, int s) {
      const Lane& x = st[s];
      dalpha[t] = x.dalpha;
      HYBRIDSEQ_DEVICE_UNROLL
      for (int half = 0; half < 2; ++half) {
        const std::int64_t r = row_of(t, half, rows);
        if (r < 0) continue;
        float* dq = g.dq.row(b, i0 + r, h);
        HYBRIDSEQ_DEVICE_UNROLL
        for (int j = 0; j < DH / 8; ++j) {
          HYBRIDSEQ_DEVICE_UNROLL
          for (int e = 0; e < 2; ++e) {
            const int d = col_of(t, j, e);
            if (d < dh) dq[d] = x.dq[j][2 * half + e];
          }
        }
      }
    });
    if (g.dalpha == nullptr) return;
    team.team_barrier();
    Kokkos::single(Kokkos::PerTeam(team), [&]() {
      double total = 0;  // lane by lane: the same order on every space
      for (int t = 0; t < threads; ++t) total += dalpha[t];
      g.dalpha[(b * a.heads + h) * n_qtiles + tile.qt] = float(total / double(alpha));
    });
  }
};

/// Launches a team of `threads` lanes per task (one thread on host spaces).
template <class Functor, class Space>
void launch(const char* label, const Space& exec, std::int64_t tasks, const Functor& f) {
  team::detail::launch(label, exec, tasks, threads, Functor::scratch_bytes(), f);
}

}  // namespace detail

/// The largest head dim of the tensor-core kernels: a warp's 16 output rows stay in registers.
inline constexpr int max_head_dim = 128;

/// O and LSE for every query row, as attention::forward computes them, with Q, K, V and the
/// probabilities rounded to bf16 (fp32 accumulation). Float only.
template <class Space>
void forward(const Space& exec, const AttentionArgs<float>& a, const Band& band) {
  if (a.head_dim < 1 || a.head_dim > max_head_dim)
    fail<value_error>("hybridseq::kernels::attention::mma::forward",
                      "the bf16 tensor-core kernel takes head dims 1 to ", max_head_dim, ", got ", a.head_dim);
  const std::int64_t nq = query_tiles(a.tq);
  team::detail::with_register_bound<128>(a.head_dim, [&](auto bound) {
    using F = detail::Forward<Space, decltype(bound)::value>;
    detail::launch("hybridseq::kernels::attention::forward[bf16 mma]", exec, a.batch * a.heads * nq, F{a, band, nq});
  });
}

/// dQ, dK, dV (overwritten) and the temperature partials, as attention::backward computes
/// them, with Q, K, V, dO, the probabilities and dS rounded to bf16 for the products (fp32
/// accumulation), from a bf16 forward's O and LSE. Deterministic: every gradient row has one
/// writer. Float only; head dims up to max_head_dim.
template <class Space>
void backward(const Space& exec, const AttentionArgs<float>& a, const AttentionGrads<float>& g, const Band& band) {
  if (a.head_dim < 1 || a.head_dim > max_head_dim)
    fail<value_error>("hybridseq::kernels::attention::mma::backward",
                      "the bf16 tensor-core kernel takes head dims 1 to ", max_head_dim, ", got ", a.head_dim);
  if (a.batch * a.tq == 0) return;
  Kokkos::parallel_for("hybridseq::kernels::attention::delta[bf16 mma]",
                       Kokkos::RangePolicy<Space>(exec, 0, a.batch * a.heads * a.tq),
                       attention::detail::Delta<float, Space>{a, g});
  const std::int64_t nk = (a.tk + tile_k - 1) / tile_k, nq = query_tiles(a.tq);
  team::detail::with_register_bound<128>(a.head_dim, [&](auto bound) {
    using KV = detail::BackwardKV<Space, decltype(bound)::value>;
    using Q = detail::BackwardQ<Space, decltype(bound)::value>;
    detail::launch("hybridseq::kernels::attention::backward_kv[bf16 mma]", exec, a.batch * a.kv_heads * nk * KV::parts,
                   KV{a, g, band, nk});
    detail::launch("hybridseq::kernels::attention::backward_q[bf16 mma]", exec, a.batch * a.heads * nq,
                   Q{a, g, band, nq});
  });
}

}  // namespace hybridseq::kernels::attention::mma
