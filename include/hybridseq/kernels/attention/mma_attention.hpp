#pragma once
/// \file
/// Attention forward on tensor cores: Q, K, V and the probabilities rounded to bfloat16, every
/// product accumulated in fp32 (`mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32`), the softmax
/// statistics, output and LSE in fp32. Same arguments and outputs as the fp32 kernels
/// (AttentionArgs<float>: every segment scheme, GQA, dropout, the per-head score multiplier).
///
/// Work split (FlashAttention-2's): a team of four warps per (batch, head, 64 query rows); a
/// warp owns 16 query rows, their Q fragments, scores, running max and sum and output
/// accumulators in registers. Per block of 64 keys the team stages K (row-major) and Vᵀ in
/// team scratch as bf16 pairs; each warp computes S = Q·Kᵀ (16 × 64, eight m16n8 tiles),
/// rescales and exponentiates in registers (a row's 16 lanes-values reduced across the four
/// lanes that hold it), and adds P·V with P taken straight from S's accumulators: the C
/// fragment of two adjacent m16n8 tiles is the A fragment of one m16n8k16 product.
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

/// One lane's share of its warp's 16 query rows: rows g and g + 8.
template <int DH>
struct Lane {
  std::uint32_t q[DH / 16][4];  // A fragments of Q, by k-step
  float s[tile_k / 8][4];       // a key block's scores, then probabilities (C fragments)
  float o[DH / 8][4];           // the output rows' accumulators (C fragments)
  float m[2], l[2];             // running max; this lane's part of the running sum
  float block_max[2];
};

/// Forward for one (batch, head, 64 query rows); DH (32, 64, 128) bounds the head dim, the
/// dims past it zero.
template <class Scheme, class Space, int DH>
struct Forward {
  AttentionArgs<float> a;
  std::int64_t n_qtiles;

  static constexpr int k_stride = DH / 2 + 4;      // words per staged key row: conflict-free B loads
  static constexpr int v_stride = tile_k / 2 + 4;  // words per staged Vᵀ row (a head dim)

  static std::size_t scratch_bytes() {
    return team::detail::padded(4 * std::size_t(tile_k) * k_stride) +
           team::detail::padded(4 * std::size_t(DH) * v_stride);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember<Space>& team) const {
    const std::int64_t task = team.league_rank(), qt = task % n_qtiles, bh = task / n_qtiles;
    const int h = int(bh % a.heads), hk = h / (a.heads / a.kv_heads), dh = a.head_dim;
    const std::int64_t b = bh / a.heads, n = a.tk, i0 = qt * tile_q;
    const std::int64_t rows = a.tq - i0 < tile_q ? a.tq - i0 : tile_q;
    const std::int64_t p_first = a.q0 + i0, p_last = p_first + rows - 1;
    const float alpha = a.alpha[h];
    std::uint32_t* ks = team::detail::scratch<std::uint32_t>(team, std::int64_t(tile_k) * k_stride);
    std::uint32_t* vt = team::detail::scratch<std::uint32_t>(team, std::int64_t(DH) * v_stride);
    Lane<DH> st[slots<Space>];

    // Row r (0 .. 63) of the block, or −1 past the queries.
    const auto row_of = [&](int t, int half) -> std::int64_t {
      const std::int64_t r = (t / lanes) * 16 + (t % lanes) / 4 + 8 * half;
      return r < rows ? r : -1;
    };
    const auto q_pair = [&](std::int64_t r, int d) -> std::uint32_t {
      if (r < 0 || d >= dh) return 0;
      const float* q = a.q.row(b, i0 + r, h);
      return pack(q[d], d + 1 < dh ? q[d + 1] : 0.0f);
    };
    each_lane<Space>(team, [&](int t, int s) {
      Lane<DH>& x = st[s];
      const int c = t % 4;
      const std::int64_t r0 = row_of(t, 0), r1 = row_of(t, 1);
      HYBRIDSEQ_DEVICE_UNROLL
      for (int k = 0; k < DH / 16; ++k) {
        x.q[k][0] = q_pair(r0, 16 * k + 2 * c);
        x.q[k][1] = q_pair(r1, 16 * k + 2 * c);
        x.q[k][2] = q_pair(r0, 16 * k + 8 + 2 * c);
        x.q[k][3] = q_pair(r1, 16 * k + 8 + 2 * c);
      }
      HYBRIDSEQ_DEVICE_UNROLL
      for (int j = 0; j < DH / 8; ++j) HYBRIDSEQ_DEVICE_UNROLL
      for (int e = 0; e < 4; ++e) x.o[j][e] = 0;
      HYBRIDSEQ_DEVICE_UNROLL
      for (int half = 0; half < 2; ++half) x.m[half] = attention::detail::neg_inf<float>(), x.l[half] = 0;
    });

    const std::int64_t kb = Scheme::key_begin(p_first, n), ke = Scheme::key_end(p_last, n);
    for (std::int64_t k0 = kb; k0 < ke; k0 += tile_k) {
      const std::int64_t cols = ke - k0 < tile_k ? ke - k0 : tile_k;
      team.team_barrier();  // every lane is done with the previous block
      // K row-major in pairs of dims; Vᵀ in pairs of keys. Past the block and the head dim: zeros.
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, tile_k * (DH / 2)), [&](const int e) {
        const int key = e / (DH / 2), d = 2 * (e % (DH / 2));
        float lo = 0, hi = 0;
        if (key < cols && d < dh) {
          const float* k = a.k.row(b, k0 + key, hk);
          lo = k[d];
          hi = d + 1 < dh ? k[d + 1] : 0.0f;
        }
        ks[key * k_stride + d / 2] = pack(lo, hi);
      });
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, (tile_k / 2) * DH), [&](const int e) {
        const int d = e % DH, key = 2 * (e / DH);
        float lo = 0, hi = 0;
        if (d < dh) {
          if (key < cols) lo = a.v.row(b, k0 + key, hk)[d];
          if (key + 1 < cols) hi = a.v.row(b, k0 + key + 1, hk)[d];
        }
        vt[d * v_stride + key / 2] = pack(lo, hi);
      });
      team.team_barrier();

      // S = Q·Kᵀ: eight 16 × 8 tiles of keys, DH / 16 k-steps each.
      each_lane<Space>(team, [&](int, int s) {
        HYBRIDSEQ_DEVICE_UNROLL
        for (int j = 0; j < tile_k / 8; ++j) HYBRIDSEQ_DEVICE_UNROLL
        for (int e = 0; e < 4; ++e) st[s].s[j][e] = 0;
      });
      HYBRIDSEQ_DEVICE_UNROLL
      for (int k = 0; k < DH / 16; ++k) {
        HYBRIDSEQ_DEVICE_UNROLL
        for (int j = 0; j < tile_k / 8; ++j)
          mma<Space>(
              team, [&](int, int s) { return st[s].s[j]; },
              [&](int, int s) {
                return FragA{{st[s].q[k][0], st[s].q[k][1], st[s].q[k][2], st[s].q[k][3]}};
              },
              [&](int t, int) {
                const std::uint32_t* row = ks + (8 * j + (t % lanes) / 4) * k_stride + 8 * k + t % 4;
                return FragB{{row[0], row[4]}};
              });
      }

      // Scale, mask and the block's row maxima.
      each_lane<Space>(team, [&](int t, int s) {
        Lane<DH>& x = st[s];
        HYBRIDSEQ_DEVICE_UNROLL
        for (int half = 0; half < 2; ++half) {
          const std::int64_t r = row_of(t, half);
          std::int64_t c0 = 0, c1 = 0;
          if (r >= 0) team::detail::visible<Scheme>(p_first + r, n, k0, cols, c0, c1);
          float mx = x.m[half];
          HYBRIDSEQ_DEVICE_UNROLL
          for (int j = 0; j < tile_k / 8; ++j) HYBRIDSEQ_DEVICE_UNROLL
          for (int e = 0; e < 2; ++e) {
            const int col = 8 * j + 2 * (t % 4) + e;
            const float v = col >= c0 && col < c1 ? alpha * x.s[j][2 * half + e] : attention::detail::neg_inf<float>();
            x.s[j][2 * half + e] = v;
            mx = v > mx ? v : mx;
          }
          x.block_max[half] = mx;
        }
      });
      const auto max_op = [](float u, float v) { return u > v ? u : v; };
      quad_all_reduce<Space>([&](int s) -> float& { return st[s].block_max[0]; }, max_op);
      quad_all_reduce<Space>([&](int s) -> float& { return st[s].block_max[1]; }, max_op);

      // Probabilities, the sums and the output's correction.
      each_lane<Space>(team, [&](int t, int s) {
        Lane<DH>& x = st[s];
        HYBRIDSEQ_DEVICE_UNROLL
        for (int half = 0; half < 2; ++half) {
          const float mx = x.block_max[half];
          if (mx == attention::detail::neg_inf<float>()) {  // nothing visible yet: P = 0
            HYBRIDSEQ_DEVICE_UNROLL
            for (int j = 0; j < tile_k / 8; ++j) x.s[j][2 * half] = x.s[j][2 * half + 1] = 0;
            continue;
          }
          const float correction = math::exp(x.m[half] - mx);  // 0 on the first visible block
          x.m[half] = mx;
          float sum = 0;
          HYBRIDSEQ_DEVICE_UNROLL
          for (int j = 0; j < tile_k / 8; ++j) HYBRIDSEQ_DEVICE_UNROLL
          for (int e = 0; e < 2; ++e) {
            float& v = x.s[j][2 * half + e];
            v = v == attention::detail::neg_inf<float>() ? 0.0f : exp_in_loop(v - mx);
            sum += v;
          }
          x.l[half] = x.l[half] * correction + sum;
          if (a.dropout.active()) {  // after the sum: the normaliser is the undropped one
            const std::int64_t i = i0 + row_of(t, half);
            HYBRIDSEQ_DEVICE_UNROLL
            for (int j = 0; j < tile_k / 8; ++j) HYBRIDSEQ_DEVICE_UNROLL
            for (int e = 0; e < 2; ++e) {
              const int col = 8 * j + 2 * (t % 4) + e;
              if (col < cols) x.s[j][2 * half + e] *= a.dropout_factor(b, h, i, k0 + col);
            }
          }
          HYBRIDSEQ_DEVICE_UNROLL
          for (int j = 0; j < DH / 8; ++j) x.o[j][2 * half] *= correction, x.o[j][2 * half + 1] *= correction;
        }
      });

      // O += P·V: P's A fragment for keys 16k .. 16k + 15 is S's C fragments of tiles 2k, 2k + 1.
      HYBRIDSEQ_DEVICE_UNROLL
      for (int k = 0; k < tile_k / 16; ++k) {
        HYBRIDSEQ_DEVICE_UNROLL
        for (int j = 0; j < DH / 8; ++j)
          mma<Space>(
              team, [&](int, int s) { return st[s].o[j]; },
              [&](int, int s) {
                const float(&p0)[4] = st[s].s[2 * k];
                const float(&p1)[4] = st[s].s[2 * k + 1];
                return FragA{{pack(p0[0], p0[1]), pack(p0[2], p0[3]), pack(p1[0], p1[1]), pack(p1[2], p1[3])}};
              },
              [&](int t, int) {
                const std::uint32_t* row = vt + (8 * j + (t % lanes) / 4) * v_stride + 8 * k + t % 4;
                return FragB{{row[0], row[4]}};
              });
      }
    }

    const auto sum_op = [](float u, float v) { return u + v; };
    quad_all_reduce<Space>([&](int s) -> float& { return st[s].l[0]; }, sum_op);
    quad_all_reduce<Space>([&](int s) -> float& { return st[s].l[1]; }, sum_op);
    each_lane<Space>(team, [&](int t, int s) {
      const Lane<DH>& x = st[s];
      HYBRIDSEQ_DEVICE_UNROLL
      for (int half = 0; half < 2; ++half) {
        const std::int64_t r = row_of(t, half);
        if (r < 0) continue;
        const float inv = 1.0f / x.l[half];
        float* o = a.o.row(b, i0 + r, h);
        HYBRIDSEQ_DEVICE_UNROLL
        for (int j = 0; j < DH / 8; ++j) HYBRIDSEQ_DEVICE_UNROLL
        for (int e = 0; e < 2; ++e) {
          const int d = 8 * j + 2 * (t % 4) + e;
          if (d < dh) o[d] = x.o[j][2 * half + e] * inv;
        }
        if (t % 4 == 0) a.lse[(b * a.heads + h) * a.tq + i0 + r] = x.m[half] + math::log(x.l[half]);
      }
    });
  }
};

}  // namespace detail

/// The largest head dim the tensor-core kernel takes (a warp's 16 output rows of it stay in
/// registers).
inline constexpr int max_head_dim = 128;

/// O and LSE for every query row, as attention::forward computes them in fp32, with Q, K, V
/// and the probabilities rounded to bf16 (fp32 accumulation). Float only.
template <class Scheme, class Space>
void forward(const Space& exec, const AttentionArgs<float>& a) {
  if (a.head_dim < 1 || a.head_dim > max_head_dim)
    fail<value_error>("hybridseq::kernels::attention::mma::forward",
                      "the bf16 tensor-core kernel takes head dims 1 to ", max_head_dim, ", got ", a.head_dim);
  const std::int64_t nq = query_tiles(a.tq), tasks = a.batch * a.heads * nq;
  if (tasks == 0) return;
  const auto run = [&](auto bound) {
    using F = detail::Forward<Scheme, Space, decltype(bound)::value>;
    Kokkos::TeamPolicy<Space> policy(exec, tasks, detail::on_host<Space> ? 1 : detail::threads);
    Kokkos::parallel_for("hybridseq::kernels::attention::forward[bf16 mma]",
                         policy.set_scratch_size(0, Kokkos::PerTeam(F::scratch_bytes())), F{a, nq});
  };
  if (a.head_dim <= 32)
    run(std::integral_constant<int, 32>{});
  else if (a.head_dim <= 64)
    run(std::integral_constant<int, 64>{});
  else
    run(std::integral_constant<int, 128>{});
}

}  // namespace hybridseq::kernels::attention::mma
