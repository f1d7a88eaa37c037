#pragma once
/// \file
/// The selective scan of Mamba-1 (Gu & Dao 2023, §3.2 and Algorithm 2; papers.md §4):
///
///   Δ_t = softplus(dt_t + dt_bias)                    Δ, dt (B, T, Di), dt_bias (Di)
///   h_t = exp(Δ_t A) ⊙ h_{t−1} + Δ_t x_t B_t          h (B, Di, N), A = −exp(A_log) (Di, N)
///   y_t = C_t · h_t + D ⊙ x_t                         B_t, C_t (B, T, N) shared by all channels
///
/// **Work split.** A forward work item is a block of `scan_forward_lanes<T>` consecutive
/// channels of one sequence (float: 32); the loops over those lanes are innermost. Each state
/// update of a block is then a fixed-width, branch-free loop over independent channels that
/// the compiler vectorises, with B_t[n] and C_t[n] broadcast, and the loop over n sits just
/// outside it. Vectorising over channels rather than over the (contiguous) state index n
/// needs no horizontal sum per step (y_t[d] stays in its lane), computes the softplus of a
/// whole block at once, and does not depend on N being a multiple of the vector width (N is
/// 1 … 16 in practice).
///
/// **Chunked recomputation.** The forward pass stores the state only at chunk starts:
/// (B, ⌈T/L⌉, Di, N) instead of (B, T, Di, N). Backward walks the chunks from last to first;
/// for each it recomputes the chunk's states and decay factors from the stored start state
/// into a per-thread scratch (2·L·(N + 1)·lanes values) and then runs the reverse recurrence
/// for dh. The recomputation repeats the forward pass's arithmetic, so the states match.
///
/// **Determinism.** dB_t and dC_t are sums over all channels. A backward work item owns
/// `scan_group_channels` (64) channels of one sequence and writes one partial sum per
/// (b, group, t, n); a second kernel adds the groups in a fixed order. Per-channel gradients
/// (A_log, D, dt_bias) are written per sequence and summed over sequences in order by a
/// third. No atomics: the gradients are bit-identical at any thread count.
///
/// **Devices.** Where the host cannot read the execution space's memory (Kokkos::Cuda), the
/// same entry points run the team kernels of `namespace team` below: a thread per channel,
/// B_t and C_t staged in team scratch, the same checkpoints and partial sums, and a backward
/// workspace sized by the problem (`team::selective_scan_backward_scratch`), not by threads.
///
/// **exp.** The float path evaluates exp(ΔA) as exp2_polynomial(Δ · A·log₂e), a vectorisable
/// branch-free 2^z (see below); double keeps math::exp for the gradient checks. (exp.hpp's
/// exp_polynomial is not used: its float-compare clamps keep GCC 12 from vectorising a loop
/// that calls it under the default -ftrapping-math; the selects here work on integer bits.)
///
/// **Instruction sets.** The float work items have an AVX2+FMA copy beside the baseline one,
/// chosen per call from `kernels::host_isa()` (isa.hpp: the library's one dispatch, capped by
/// `limit_isa`). The scan is bound by the exp's arithmetic, which the 8-wide FMA form does in
/// fewer instructions; AVX-512 CPUs run the AVX2 copy (the lane blocks are 8 wide). Double keeps
/// one copy: it is the reference path of the gradient checks.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "../core/check.hpp"
#include "../core/spaces.hpp"
#include "../core/workspace.hpp"
#include "activations.hpp"
#include "exp.hpp"
#include "isa.hpp"

// The loops over lanes are the vector loops. Saying so keeps the compiler from vectorising the
// loop over n around them with transposes instead, which GCC 12 does for some block widths
// (a slower form). Without OpenMP (Serial-only Kokkos builds) the auto-vectoriser decides alone.
#if defined(_OPENMP)
#define HYBRIDSEQ_LANE_LOOP _Pragma("omp simd")
#else
#define HYBRIDSEQ_LANE_LOOP
#endif

namespace hybridseq {

namespace kernels {

/// Elementwise maths of the scan and of Mamba's gates, with one definition per scalar type:
/// float uses the branch-free polynomials above, double the libm functions (reference
/// precision for finite differences). softplus and sigmoid agree with PyTorch's
/// (softplus(v) = v above 20) to float rounding.
template <class T>
struct ScanMath;

template <>
struct ScanMath<float> {
  static constexpr float log2e = 1.44269504088896341f;
  /// A is stored pre-multiplied by log₂e so that exp(ΔA) = 2^(Δ·A·log₂e) costs one multiply.
  static constexpr float decay_scale = log2e;
  KOKKOS_FORCEINLINE_FUNCTION static float decay(float scaled) { return exp2_polynomial(scaled); }
  KOKKOS_FORCEINLINE_FUNCTION static float exp(float x) { return exp_cody_waite(x); }
  KOKKOS_FORCEINLINE_FUNCTION static float softplus(float v) { return softplus_polynomial(v); }
  KOKKOS_FORCEINLINE_FUNCTION static float sigmoid(float v) { return sigmoid_polynomial(v); }
  KOKKOS_FORCEINLINE_FUNCTION static void softplus_and_sigmoid(float v, float& sp, float& sig) {
    softplus_and_sigmoid_polynomial(v, sp, sig);
  }
};

template <>
struct ScanMath<double> {
  static constexpr double decay_scale = 1.0;
  KOKKOS_INLINE_FUNCTION static double decay(double x) { return math::exp(x); }
  KOKKOS_INLINE_FUNCTION static double exp(double x) { return math::exp(x); }
  KOKKOS_INLINE_FUNCTION static double softplus(double v) { return ActivationFn<Activation::softplus>::value(v); }
  KOKKOS_INLINE_FUNCTION static double sigmoid(double v) {
    return v >= 0 ? 1.0 / (1.0 + math::exp(-v)) : math::exp(v) / (1.0 + math::exp(v));
  }
  KOKKOS_INLINE_FUNCTION static void softplus_and_sigmoid(double v, double& sp, double& sig) {
    sp = softplus(v);
    sig = ActivationFn<Activation::softplus>::derivative(v);
  }
};

/// Channels per forward work item, which are also its vector lanes: 128 bytes of scalars (two
/// AVX-512 or four AVX2 registers per state row). Wider blocks spread the per-step work (row
/// loads, softplus) and y's accumulation chain over more lanes.
template <class T>
inline constexpr int scan_forward_lanes = 128 / static_cast<int>(sizeof(T));

/// Lanes of a backward lane block: 64 bytes. Backward keeps more arrays per lane (the chunk's
/// decays and states in scratch, dh and dA per lane block), and is faster at 64 than at 128.
template <class T>
inline constexpr int scan_backward_lanes = 64 / static_cast<int>(sizeof(T));

/// Channels per backward work item: the unit of the deterministic dB/dC reduction. Larger
/// groups mean fewer partial sums (B · ⌈Di/64⌉ · T · 2N scalars), smaller ones more parallelism.
inline constexpr int scan_group_channels = 64;

/// Default chunk length L of the forward checkpoints.
inline constexpr int scan_default_chunk = 64;

/// Number of chunk checkpoints for T steps: ⌈T/L⌉.
constexpr std::int64_t scan_chunks(std::int64_t steps, int chunk) {
  return (steps + chunk - 1) / chunk;
}

namespace detail {

template <class T, class Space>
bool use_avx2() {
  return std::is_same_v<T, float> &&
         Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Space::memory_space>::accessible &&
         host_isa() >= Isa::avx2;
}

/// Lane j of a row of channels: read straight from memory in full blocks; padding lanes of the
/// last, partial block read 0. Reading rows directly matters: staging them in a stack array
/// first costs a store-forwarding stall per step.
template <bool Full, class T>
KOKKOS_FORCEINLINE_FUNCTION T scan_lane(const T* p, int j, int lanes) {
  if constexpr (Full)
    return p[j];
  else
    return j < lanes ? p[j] : T(0);
}

/// v[n] = p[n·stride] for n < N: one step's B_t or C_t (a strided column slice).
template <int N, class T>
KOKKOS_FORCEINLINE_FUNCTION void scan_load_row(T (&v)[N], const T* p, std::size_t stride) {
  for (int n = 0; n < N; ++n) v[n] = p[n * stride];
}

/// Sum of the W lanes in a fixed pairwise order (deterministic). One fixed-width loop per
/// halving, so each level vectorises (a loop over the levels is not unrolled by GCC 12).
template <int W, class T>
KOKKOS_FORCEINLINE_FUNCTION T scan_lane_sum(const T (&v)[W]) {
  if constexpr (W == 1) {
    return v[0];
  } else {
    static_assert(W % 2 == 0, "hybridseq::kernels::scan_lane_sum: W must be a power of two");
    T half[W / 2];
    for (int j = 0; j < W / 2; ++j) half[j] = v[j] + v[j + W / 2];
    return scan_lane_sum<W / 2>(half);
  }
}

/// a[n][j] = −exp(A_log(d0 + j, n)) · scale for the block's lanes, 0 for padding lanes. The
/// exponentials go through ScanMath (vectorised for float): with libm, recomputing A per call
/// was a third of a decoding step's time.
template <int N, int W, class M, class ALog, class T>
KOKKOS_FORCEINLINE_FUNCTION void load_decay_rates(const ALog& a_log, int d0, int lanes, T scale, T (&a)[N][W]) {
  T raw[N][W];
  for (int j = 0; j < W; ++j)
    for (int n = 0; n < N; ++n) raw[n][j] = j < lanes ? a_log(d0 + j, n) : T(0);
  for (int n = 0; n < N; ++n) {
    HYBRIDSEQ_LANE_LOOP
    for (int j = 0; j < W; ++j) a[n][j] = j < lanes ? -M::exp(raw[n][j]) * scale : T(0);
  }
}

template <int N, class T, class Space>
struct ScanForward {
  static constexpr int W = scan_forward_lanes<T>;
  using M = ScanMath<T>;

  Tensor<const T***, Space> u, dt;          // (B, T, Di)
  Tensor<const T*, Space> dt_bias, d_skip;  // (Di)
  Tensor<const T**, Space> a_log;           // (Di, N)
  StridedTensor<const T***, Space> bm, cm;  // (B, T, N)
  Tensor<const T***, Space> h0;             // (B, Di, N) or empty: zero initial state
  Tensor<T***, Space> y;                    // (B, T, Di)
  Tensor<T****, Space> h_chunks;            // (B, ⌈T/L⌉, Di, N) or empty
  Tensor<T***, Space> h_last;               // (B, Di, N) or empty; may alias h0
  int chunk, blocks;
  bool avx2;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t item) const {
#if HYBRIDSEQ_ISA_DISPATCH
    if constexpr (std::is_same_v<T, float>)  // double stays on one copy (it is the reference path)
      if (avx2) return run_avx2(item);
#endif
    run(item);
  }

#if HYBRIDSEQ_ISA_DISPATCH
  [[HYBRIDSEQ_TARGET_AVX2]] void run_avx2(const std::int64_t item) const {
    run(item);
  }
#endif

  KOKKOS_FORCEINLINE_FUNCTION void run(const std::int64_t item) const {
    const int b = static_cast<int>(item / blocks);
    const int d0 = static_cast<int>(item % blocks) * W;
    const int di = static_cast<int>(u.extent(2));
    const int lanes = di - d0 < W ? di - d0 : W;

    // Padding lanes (beyond Di) get A = 0, x = 0: their state stays 0 and is never written.
    T a2[N][W], h[N][W], bias[W], dsk[W];
    load_decay_rates<N, W, M>(a_log, d0, lanes, T(M::decay_scale), a2);
    for (int j = 0; j < W; ++j) {
      const bool valid = j < lanes;
      bias[j] = valid ? dt_bias(d0 + j) : T(0);
      dsk[j] = valid ? d_skip(d0 + j) : T(0);
      for (int n = 0; n < N; ++n) h[n][j] = valid && h0.data() ? h0(b, d0 + j, n) : T(0);
    }
    if (lanes == W)
      steps<true>(b, d0, lanes, a2, h, bias, dsk);
    else
      steps<false>(b, d0, lanes, a2, h, bias, dsk);
    if (h_last.data())
      for (int j = 0; j < lanes; ++j)
        for (int n = 0; n < N; ++n) h_last(b, d0 + j, n) = h[n][j];
  }

  template <bool Full>
  KOKKOS_FORCEINLINE_FUNCTION void steps(const int b, const int d0, const int lanes, const T (&a2)[N][W], T (&h)[N][W],
                                         const T (&bias)[W], const T (&dsk)[W]) const {
    const int n_steps = static_cast<int>(u.extent(1));
    const bool chunks = h_chunks.data() != nullptr;
    for (int t = 0, c = 0, next = 0; t < n_steps; ++t) {
      if (chunks && t == next) {  // a counter, not t % chunk: no integer division per step
        for (int j = 0; j < lanes; ++j)
          for (int n = 0; n < N; ++n) h_chunks(b, c, d0 + j, n) = h[n][j];
        ++c;
        next += chunk;
      }
      const T* const up = &u(b, t, d0);
      const T* const dp = &dt(b, t, d0);
      T dx[W], delta[W], yv[W];
      HYBRIDSEQ_LANE_LOOP
      for (int j = 0; j < W; ++j) {
        const T xj = scan_lane<Full>(up, j, lanes);
        delta[j] = M::softplus(scan_lane<Full>(dp, j, lanes) + bias[j]);
        dx[j] = delta[j] * xj;
        yv[j] = dsk[j] * xj;
      }
      T bl[N], cl[N];  // B_t, C_t: strided in memory, read once per step
      scan_load_row(bl, &bm(b, t, 0), bm.stride(2));
      scan_load_row(cl, &cm(b, t, 0), cm.stride(2));
      for (int n = 0; n < N; ++n) {
        HYBRIDSEQ_LANE_LOOP
        for (int j = 0; j < W; ++j) {
          const T a = M::decay(delta[j] * a2[n][j]);
          h[n][j] = a * h[n][j] + dx[j] * bl[n];
          yv[j] += cl[n] * h[n][j];
        }
      }
      T* const yp = &y(b, t, d0);
      if constexpr (Full) {
        HYBRIDSEQ_LANE_LOOP
        for (int j = 0; j < W; ++j) yp[j] = yv[j];
      } else {
        for (int j = 0; j < lanes; ++j) yp[j] = yv[j];
      }
    }
  }
};

template <int N, class T, class Space>
struct ScanBackward {
  static constexpr int W = scan_backward_lanes<T>;
  static constexpr int G = scan_group_channels / W;  // lane blocks per work item
  using M = ScanMath<T>;

  Tensor<const T***, Space> u, dt, dy;      // (B, T, Di)
  Tensor<const T*, Space> dt_bias, d_skip;  // (Di)
  Tensor<const T**, Space> a_log;           // (Di, N)
  StridedTensor<const T***, Space> bm, cm;  // (B, T, N)
  Tensor<const T****, Space> h_chunks;      // (B, ⌈T/L⌉, Di, N)
  Tensor<T***, Space> du, ddt;              // (B, T, Di), accumulated
  Tensor<T***, Space> param_partial;        // (B, Di, N + 2): per sequence dA_log | dD | ddt_bias
  Tensor<T*****, Space> partial;            // (B, groups, T, 2, N): Σ over a group's channels of dB, dC
  Tensor<T**, Space> scratch;               // (threads, L·N·W·2 + L·W·2)
  Kokkos::Experimental::UniqueToken<Space> token;
  int chunk, groups;
  bool avx2;

  /// One lane block's A = −exp(A_log) and reverse-time carries: dh = dL/dh (N, W) and the
  /// per-channel gradient sums.
  struct Carry {
    T anat[N][W], dh[N][W], dA[N][W], dD[W], dbias[W];
  };

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t item) const {
    const int id = token.acquire();
#if HYBRIDSEQ_ISA_DISPATCH
    if constexpr (std::is_same_v<T, float>)
      if (avx2) {
        run_avx2(item, id);
        token.release(id);
        return;
      }
#endif
    run(item, id);
    token.release(id);
  }

#if HYBRIDSEQ_ISA_DISPATCH
  [[HYBRIDSEQ_TARGET_AVX2]] void run_avx2(const std::int64_t item, int id) const {
    run(item, id);
  }
#endif

  KOKKOS_FORCEINLINE_FUNCTION void run(const std::int64_t item, int id) const {
    const int b = static_cast<int>(item / groups), grp = static_cast<int>(item % groups);
    const int di = static_cast<int>(u.extent(2)), steps = static_cast<int>(u.extent(1));
    const int nchunks = static_cast<int>(scan_chunks(steps, chunk));
    Carry carry[G];
    for (int g = 0; g < G; ++g) {
      const int d0 = grp * scan_group_channels + g * W;
      load_decay_rates<N, W, M>(a_log, d0, di - d0 < W ? di - d0 : W, T(1), carry[g].anat);
      for (int j = 0; j < W; ++j) {
        carry[g].dD[j] = carry[g].dbias[j] = T(0);
        for (int n = 0; n < N; ++n) carry[g].dh[n][j] = carry[g].dA[n][j] = T(0);
      }
    }
    for (int c = nchunks - 1; c >= 0; --c)
      for (int g = 0; g < G; ++g) {
        const int d0 = grp * scan_group_channels + g * W;
        if (d0 >= di) break;
        const int lanes = di - d0 < W ? di - d0 : W;
        if (lanes == W)
          chunk_backward<true>(b, grp, g, c, d0, lanes, id, carry[g]);
        else
          chunk_backward<false>(b, grp, g, c, d0, lanes, id, carry[g]);
      }
    for (int g = 0; g < G; ++g) {
      const int d0 = grp * scan_group_channels + g * W;
      if (d0 >= di) break;
      const int lanes = di - d0 < W ? di - d0 : W;
      for (int j = 0; j < lanes; ++j) {
        for (int n = 0; n < N; ++n)  // dA_log = dA ⊙ A
          param_partial(b, d0 + j, n) = carry[g].dA[n][j] * carry[g].anat[n][j];
        param_partial(b, d0 + j, N) = carry[g].dD[j];
        param_partial(b, d0 + j, N + 1) = carry[g].dbias[j];
      }
    }
  }

  /// One lane block over chunk c: recompute the chunk's decays and states from its
  /// checkpoint into scratch, then run the reverse recurrence, updating the carries.
  template <bool Full>
  KOKKOS_FORCEINLINE_FUNCTION void chunk_backward(const int b, const int grp, const int g, const int c, const int d0,
                                                  const int lanes, const int id, Carry& cr) const {
    const int steps = static_cast<int>(u.extent(1));
    const int t0 = c * chunk, len = (steps - t0 < chunk ? steps - t0 : chunk);
    // Per-thread scratch: decays a_s and states h_s (L, N, W), Δ and σ(dt + bias) (L, W).
    T* const a_s = &scratch(id, 0);
    T* const h_s = a_s + std::size_t(chunk) * N * W;
    T* const delta_s = h_s + std::size_t(chunk) * N * W;
    T* const sig_s = delta_s + std::size_t(chunk) * W;

    const auto& anat = cr.anat;
    T a2[N][W], hstart[N][W], bias[W], dsk[W];
    for (int j = 0; j < W; ++j) {
      const bool valid = j < lanes;
      bias[j] = valid ? dt_bias(d0 + j) : T(0);
      dsk[j] = valid ? d_skip(d0 + j) : T(0);
      for (int n = 0; n < N; ++n) {
        a2[n][j] = anat[n][j] * T(M::decay_scale);
        hstart[n][j] = valid ? h_chunks(b, c, d0 + j, n) : T(0);
      }
    }

    // Recompute the chunk forward from its checkpoint (the arithmetic of ScanForward).
    {
      T h[N][W];
      for (int n = 0; n < N; ++n)
        for (int j = 0; j < W; ++j) h[n][j] = hstart[n][j];
      for (int s = 0; s < len; ++s) {
        const int t = t0 + s;
        const T* const up = &u(b, t, d0);
        const T* const dp = &dt(b, t, d0);
        T* const delta = delta_s + std::size_t(s) * W;
        T* const sig = sig_s + std::size_t(s) * W;
        T dx[W];
        HYBRIDSEQ_LANE_LOOP
        for (int j = 0; j < W; ++j) {
          T sp, sg;
          M::softplus_and_sigmoid(scan_lane<Full>(dp, j, lanes) + bias[j], sp, sg);
          delta[j] = sp;
          sig[j] = sg;
          dx[j] = sp * scan_lane<Full>(up, j, lanes);
        }
        T bl[N];
        scan_load_row(bl, &bm(b, t, 0), bm.stride(2));
        for (int n = 0; n < N; ++n) {
          T* const as = a_s + (std::size_t(s) * N + n) * W;
          T* const hs = h_s + (std::size_t(s) * N + n) * W;
          HYBRIDSEQ_LANE_LOOP
          for (int j = 0; j < W; ++j) {
            const T a = M::decay(delta[j] * a2[n][j]);
            h[n][j] = a * h[n][j] + dx[j] * bl[n];
            as[j] = a;
            hs[j] = h[n][j];
          }
        }
      }
    }

    // Reverse recurrence over the chunk.
    for (int s = len - 1; s >= 0; --s) {
      const int t = t0 + s;
      const T* const up = &u(b, t, d0);
      const T* const gp = &dy(b, t, d0);
      const T* const delta = delta_s + std::size_t(s) * W;
      T xv[W], gv[W], dx[W], ddelta[W], dxv[W];
      HYBRIDSEQ_LANE_LOOP
      for (int j = 0; j < W; ++j) {
        xv[j] = scan_lane<Full>(up, j, lanes);
        gv[j] = scan_lane<Full>(gp, j, lanes);
        dx[j] = delta[j] * xv[j];
        ddelta[j] = T(0);
        dxv[j] = gv[j] * dsk[j];
        cr.dD[j] += gv[j] * xv[j];
      }
      T bl[N], cl[N];
      scan_load_row(bl, &bm(b, t, 0), bm.stride(2));
      scan_load_row(cl, &cm(b, t, 0), cm.stride(2));
      for (int n = 0; n < N; ++n) {
        const T* const as = a_s + (std::size_t(s) * N + n) * W;
        const T* const hs = h_s + (std::size_t(s) * N + n) * W;
        const T* const hp = s > 0 ? h_s + (std::size_t(s - 1) * N + n) * W : hstart[n];
        T db[W], dc[W];
        HYBRIDSEQ_LANE_LOOP
        for (int j = 0; j < W; ++j) {
          const T dhv = cr.dh[n][j] + gv[j] * cl[n];  // dL/dh_t
          dc[j] = gv[j] * hs[j];
          const T a = as[j];
          const T da = dhv * hp[j] * a;  // dL/d(ΔA) through exp
          ddelta[j] += da * anat[n][j] + dhv * xv[j] * bl[n];
          cr.dA[n][j] += da * delta[j];
          db[j] = dhv * dx[j];
          dxv[j] += dhv * delta[j] * bl[n];
          cr.dh[n][j] = dhv * a;  // dL/dh_{t−1}
        }
        T* const pb = &partial(b, grp, t, 0, n);
        T* const pc = &partial(b, grp, t, 1, n);
        const T sb = scan_lane_sum<W>(db), sc = scan_lane_sum<W>(dc);
        *pb = g == 0 ? sb : *pb + sb;
        *pc = g == 0 ? sc : *pc + sc;
      }
      T* const dup = &du(b, t, d0);
      T* const ddtp = &ddt(b, t, d0);
      const T* const sig = sig_s + std::size_t(s) * W;
      for (int j = 0; j < lanes; ++j) {
        const T dv = ddelta[j] * sig[j];
        dup[j] += dxv[j];
        ddtp[j] += dv;
        cr.dbias[j] += dv;
      }
    }
  }
};

/// Per-channel parameter gradients: Σ over sequences in ascending order, one thread per channel.
template <class T, class Space>
struct ScanReduceSequences {
  Tensor<const T***, Space> param_partial;  // (B, Di, N + 2)
  Tensor<T**, Space> da_log;                // (Di, N)
  Tensor<T*, Space> dd_skip, ddt_bias;      // (Di)
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t d) const {
    const std::int64_t nb = param_partial.extent(0), n_state = da_log.extent(1);
    for (std::int64_t n = 0; n < n_state + 2; ++n) {
      T acc = 0;
      for (std::int64_t b = 0; b < nb; ++b) acc += param_partial(b, d, n);
      if (n < n_state)
        da_log(d, n) += acc;
      else if (n == n_state)
        dd_skip(d) += acc;
      else
        ddt_bias(d) += acc;
    }
  }
};

/// dB(b, t, :) += Σ_groups partial(b, g, t, 0, :), likewise dC; groups in ascending order.
template <class T, class Space>
struct ScanReduceGroups {
  Tensor<const T*****, Space> partial;  // (B, groups, T, 2, N)
  StridedTensor<T***, Space> dbm, dcm;  // (B, T, N)
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t row) const {
    const std::int64_t steps = partial.extent(2);
    const int b = static_cast<int>(row / steps), t = static_cast<int>(row % steps);
    const int groups = static_cast<int>(partial.extent(1)), n_state = static_cast<int>(partial.extent(4));
    for (int n = 0; n < n_state; ++n) {
      T sb = 0, sc = 0;
      for (int g = 0; g < groups; ++g) {
        sb += partial(b, g, t, 0, n);
        sc += partial(b, g, t, 1, n);
      }
      dbm(b, t, n) += sb;
      dcm(b, t, n) += sc;
    }
  }
};

template <int N, class U, class Dt, class Bias, class ALog, class Bm, class Cm, class DSkip>
void check_scan_inputs(const std::string& api, const U& u, const Dt& dt, const Bias& dt_bias, const ALog& a_log,
                       const Bm& bm, const Cm& cm, const DSkip& d_skip) {
  const auto b = static_cast<std::int64_t>(u.extent(0)), t = static_cast<std::int64_t>(u.extent(1)),
             di = static_cast<std::int64_t>(u.extent(2));
  core::check_shape(api, "dt", dt, core::dim(b), core::dim(t), core::dim(di));
  core::check_shape(api, "dt_bias", dt_bias, core::dim(di));
  core::check_shape(api, "A_log", a_log, core::dim(di), core::dim(N));
  core::check_shape(api, "B", bm, core::dim(b), core::dim(t), core::dim(N));
  core::check_shape(api, "C", cm, core::dim(b), core::dim(t), core::dim(N));
  core::check_shape(api, "D", d_skip, core::dim(di));
}

}  // namespace detail

/// The selective scan as portable Kokkos team kernels, for execution spaces whose memory the
/// host cannot read (Kokkos::Cuda). They run on Serial and OpenMP too (one thread per team),
/// which is how the test suite checks them against the oracle on every machine.
///
/// Work split (mamba-ssm's: a block per (batch, channel group), time sequential):
///   forward   a team per (sequence, `channels` channels); a thread owns a channel and its N
///             states. The team stages `staged_steps` rows of B_t and C_t (shared by all
///             channels) in scratch, then each thread runs those steps for its channel;
///             chunk-start states go to h_chunks, the host kernel's checkpoint layout.
///   backward  the same teams walk the chunks from last to first. Per chunk: each thread
///             recomputes its states from the checkpoint into a trace (B, L, N, Di) in the
///             caller's workspace (Di innermost: a warp's accesses are contiguous); the team
///             sums dC_t = Σ_d dy_t[d] h_t[d] over its channels; each thread runs the reverse
///             recurrence, overwriting its trace entries with its dB_t terms, which the team
///             then sums. Those sums are the host kernel's per-group partials (B, groups, T,
///             2, N), added over groups by ScanReduceGroups in a fixed order; per-channel
///             sums (dA_log, dD, ddt_bias) go per sequence to ScanReduceSequences.
/// Split in time (ScanSplit below), the same teams each take one chunk, after a first pass that
/// gives them their chunk's start state (forward) or dL/dh at its end (backward).
/// Every sum has a fixed order: no atomics, the same bits at any team size. Between the
/// staged blocks a thread keeps its states (and dL/dh, dL/dA) in team scratch, so that a host team
/// of one thread can run all of its channels in turn; scratch stays within 40 KB.
namespace team {

/// Channels per team: the host backward's group, so both write the same partials.
inline constexpr int channels = scan_group_channels;

/// Rows of B_t and C_t staged per block: at most 32, within 40 KB beside backward's three
/// (channels, N) arrays.
template <int N, class T>
constexpr int staged_steps() {
  constexpr std::size_t budget = 40 * 1024, states = 3 * std::size_t(channels) * N * sizeof(T);
  static_assert(states + 2 * N * sizeof(T) <= budget,
                "hybridseq::kernels::team: N too large for the scan's team scratch");
  constexpr std::size_t rows = (budget - states) / (2 * N * sizeof(T));
  return rows > 32 ? 32 : static_cast<int>(rows);
}

/// How the team kernels divide a scan among teams. `sequences`: a team per (sequence, group
/// of channels) walks the whole sequence; B·⌈Di/64⌉ teams, a thread per channel. `time`: a
/// first pass (a thread per sequence, channel and state index) finds every chunk's start state
/// (forward) or dL/dh at its end (backward), then a team per (sequence, group, chunk) runs the
/// chunk: ⌈T/L⌉ times the teams for about twice the arithmetic (mamba-ssm splits time
/// across a block's threads instead). `automatic` splits time when the sequences alone give
/// fewer than `time_split_teams` teams and there are at least two chunks.
struct ScanSplit {
  enum Mode { automatic, sequences, time };
  Mode mode = automatic;
  /// Backward split in time: chunks per launch (each holds a trace); 0: enough chunks for
  /// `time_split_teams` teams.
  int chunks_per_launch = 0;
};

/// About 8 teams of 64 threads per SM of an H200: a guess, not yet measured on a GPU. A
/// backward launch's traces then take about time_split_teams · 64 · L · N values.
inline constexpr std::int64_t time_split_teams = 1024;

namespace detail {

template <class Space>
using Member = typename Kokkos::TeamPolicy<Space>::member_type;

/// One thread per channel on a device; one per team on the host, where a team is one
/// thread's task and its channels run in turn.
template <class Space>
constexpr int team_size() {
  return Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Space::memory_space>::accessible ? 1 : channels;
}

template <class T>
KOKKOS_INLINE_FUNCTION constexpr std::size_t slice_bytes(std::int64_t count) {
  return (sizeof(T) * std::size_t(count) + 7) / 8 * 8;
}

/// A typed slice of team scratch, a multiple of 8 bytes (doubles stay aligned).
template <class T, class Member>
KOKKOS_INLINE_FUNCTION T* scratch(const Member& team, std::int64_t count) {
  return static_cast<T*>(team.team_shmem().get_shmem(slice_bytes<T>(count)));
}

/// rows[s·N + n] = m(b, t0 + s, n) for s < len: a block of B_t or C_t rows.
template <int N, class Member, class View, class T>
KOKKOS_INLINE_FUNCTION void stage_rows(const Member& team, const View& m, int b, int t0, int len, T* rows) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, len * N), [&](const int i) { rows[i] = m(b, t0 + i / N, i % N); });
}

template <int N, class T, class Space>
struct Forward {
  static constexpr int K = staged_steps<N, T>();
  using M = ScanMath<T>;

  Tensor<const T***, Space> u, dt;          // (B, T, Di)
  Tensor<const T*, Space> dt_bias, d_skip;  // (Di)
  Tensor<const T**, Space> a_log;           // (Di, N)
  StridedTensor<const T***, Space> bm, cm;  // (B, T, N)
  Tensor<const T***, Space> h0;             // (B, Di, N) or empty
  Tensor<T***, Space> y;                    // (B, T, Di)
  Tensor<T****, Space> h_chunks;            // (B, ⌈T/L⌉, Di, N) or empty
  Tensor<T***, Space> h_last;               // (B, Di, N) or empty; may alias h0
  int chunk, groups;
  // Split in time: a team per (sequence, group, chunk), starting from the chunk's checkpoint
  // in `starts` (written by ForwardCheckpoints); h0, h_chunks and h_last are then empty.
  Tensor<const T****, Space> starts;  // (B, ⌈T/L⌉, Di, N) or empty
  int spans = 1;                      // teams per (sequence, group): 1, or ⌈T/L⌉ with `starts`

  static std::size_t scratch_bytes() { return slice_bytes<T>(channels * N) + 2 * slice_bytes<T>(K * N); }

  KOKKOS_INLINE_FUNCTION void operator()(const Member<Space>& team) const {
    const int r = team.league_rank(), span = r % spans;
    const int b = r / spans / groups, d0 = r / spans % groups * channels;
    const int di = static_cast<int>(u.extent(2)), steps = static_cast<int>(u.extent(1));
    const int lanes = di - d0 < channels ? di - d0 : channels;
    const int t_begin = spans == 1 ? 0 : span * chunk;
    const int t_end = spans == 1 || steps - t_begin < chunk ? steps : t_begin + chunk;
    T* const hs = scratch<T>(team, channels * N);  // hs[n·channels + j]: state n of channel d0 + j
    T* const bs = scratch<T>(team, K * N);
    T* const cs = scratch<T>(team, K * N);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, lanes), [&](const int j) {
      for (int n = 0; n < N; ++n)
        hs[n * channels + j] = starts.data() ? starts(b, span, d0 + j, n) : h0.data() ? h0(b, d0 + j, n) : T(0);
    });
    for (int t0 = t_begin; t0 < t_end; t0 += K) {
      const int len = t_end - t0 < K ? t_end - t0 : K;
      team.team_barrier();  // the previous block's rows are read
      stage_rows<N>(team, bm, b, t0, len, bs);
      stage_rows<N>(team, cm, b, t0, len, cs);
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, lanes),
                           [&](const int j) { block(b, d0 + j, &hs[j], t0, len, bs, cs); });
    }
    if (h_last.data())
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, lanes), [&](const int j) {
        for (int n = 0; n < N; ++n) h_last(b, d0 + j, n) = hs[n * channels + j];
      });
  }

  /// Steps t0 .. t0 + len − 1 of channel d, whose states are hs[n·channels].
  KOKKOS_INLINE_FUNCTION void block(const int b, const int d, T* const hs, const int t0, const int len,
                                    const T* const bs, const T* const cs) const {
    T a2[N], h[N];
    for (int n = 0; n < N; ++n) {
      a2[n] = -M::exp(a_log(d, n)) * T(M::decay_scale);
      h[n] = hs[n * channels];
    }
    const T bias = dt_bias(d), dsk = d_skip(d);
    int next = (t0 + chunk - 1) / chunk * chunk;  // the next checkpoint: a compare per step, no division
    for (int s = 0; s < len; ++s) {
      const int t = t0 + s;
      if (h_chunks.data() && t == next) {
        for (int n = 0; n < N; ++n) h_chunks(b, t / chunk, d, n) = h[n];
        next += chunk;
      }
      const T x = u(b, t, d), delta = M::softplus(dt(b, t, d) + bias), dx = delta * x;
      T yv = dsk * x;
      for (int n = 0; n < N; ++n) {
        h[n] = M::decay(delta * a2[n]) * h[n] + dx * bs[s * N + n];
        yv += cs[s * N + n] * h[n];
      }
      y(b, t, d) = yv;
    }
    for (int n = 0; n < N; ++n) hs[n * channels] = h[n];
  }
};

/// The first pass of a scan split in time: the state at every chunk start (and the final
/// state), a thread per (sequence, channel, state index) walking the whole sequence with
/// Forward's arithmetic. It writes no output (y sums over the state index), so its threads
/// are independent: B·Di·N of them where the sequential split has B·Di.
template <int N, class T, class Space>
struct ForwardCheckpoints {
  using M = ScanMath<T>;

  Tensor<const T***, Space> u, dt;      // (B, T, Di)
  Tensor<const T*, Space> dt_bias;      // (Di)
  Tensor<const T**, Space> a_log;       // (Di, N)
  StridedTensor<const T***, Space> bm;  // (B, T, N)
  Tensor<const T***, Space> h0;         // (B, Di, N) or empty
  Tensor<T****, Space> h_chunks;        // (B, ⌈T/L⌉, Di, N)
  Tensor<T***, Space> h_last;           // (B, Di, N) or empty; may alias h0 (a thread reads its entry first)
  int chunk;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    const int di = static_cast<int>(u.extent(2)), steps = static_cast<int>(u.extent(1));
    const int n = static_cast<int>(i % N), d = static_cast<int>(i / N % di), b = static_cast<int>(i / N / di);
    const T a2 = -M::exp(a_log(d, n)) * T(M::decay_scale), bias = dt_bias(d);
    T h = h0.data() ? h0(b, d, n) : T(0);
    for (int t = 0, c = 0; t < steps; ++t) {
      if (t == c * chunk) h_chunks(b, c++, d, n) = h;
      const T delta = M::softplus(dt(b, t, d) + bias), dx = delta * u(b, t, d);
      h = M::decay(delta * a2) * h + dx * bm(b, t, n);
    }
    if (h_last.data()) h_last(b, d, n) = h;
  }
};

/// The first pass of a backward split in time: dL/dh at the end of every chunk, carried from
/// the chunks after it, a thread per (sequence, channel, state index) walking the sequence from
/// its end with Backward's arithmetic: dL/dh_{t−1} = exp(Δ_t A) (dL/dh_t + dy_t C_t).
template <int N, class T, class Space>
struct BackwardCheckpoints {
  using M = ScanMath<T>;

  Tensor<const T***, Space> dt, dy;     // (B, T, Di)
  Tensor<const T*, Space> dt_bias;      // (Di)
  Tensor<const T**, Space> a_log;       // (Di, N)
  StridedTensor<const T***, Space> cm;  // (B, T, N)
  Tensor<T****, Space> dh_ends;         // (B, ⌈T/L⌉, Di, N)
  int chunk;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    const int di = static_cast<int>(dt.extent(2)), steps = static_cast<int>(dt.extent(1));
    const int n = static_cast<int>(i % N), d = static_cast<int>(i / N % di), b = static_cast<int>(i / N / di);
    const T a2 = -M::exp(a_log(d, n)) * T(M::decay_scale), bias = dt_bias(d);
    T dh = 0;
    for (int c = static_cast<int>(scan_chunks(steps, chunk)) - 1; c >= 0; --c) {
      dh_ends(b, c, d, n) = dh;
      for (int t = steps < (c + 1) * chunk ? steps - 1 : (c + 1) * chunk - 1; t >= c * chunk; --t) {
        T delta, sig;  // as Backward computes Δ (sig unused)
        M::softplus_and_sigmoid(dt(b, t, d) + bias, delta, sig);
        dh = (dh + dy(b, t, d) * cm(b, t, n)) * M::decay(delta * a2);
      }
    }
  }
};

template <int N, class T, class Space>
struct Backward {
  static constexpr int K = staged_steps<N, T>();
  using M = ScanMath<T>;

  Tensor<const T***, Space> u, dt, dy;      // (B, T, Di)
  Tensor<const T*, Space> dt_bias, d_skip;  // (Di)
  Tensor<const T**, Space> a_log;           // (Di, N)
  StridedTensor<const T***, Space> bm, cm;  // (B, T, N)
  Tensor<const T****, Space> h_chunks;      // (B, ⌈T/L⌉, Di, N)
  Tensor<T***, Space> du, ddt;              // (B, T, Di), accumulated
  Tensor<T***, Space> param_partial;        // (B·spans', Di, N + 2): per team row dA | dD | ddt_bias
  Tensor<T*****, Space> partial;            // (B, groups, T, 2, N): Σ over a group's channels of dB, dC
  Tensor<T****, Space> trace;               // (B·spans, min(L, T), N, Di): a chunk's states, then its dB terms
  int chunk, groups;
  // Split in time: a team per (sequence, group, chunk first + s) for s < spans, starting from
  // dL/dh at its chunk's end (BackwardCheckpoints); its dA | dD | ddt_bias go to row
  // b·⌈T/L⌉ + chunk of param_partial. Unsplit (spans 1, dh_ends empty): a team walks every chunk.
  Tensor<const T****, Space> dh_ends;  // (B, ⌈T/L⌉, Di, N) or empty
  int spans = 1, first = 0;

  static std::size_t scratch_bytes() { return 3 * slice_bytes<T>(channels * N) + 2 * slice_bytes<T>(K * N); }

  KOKKOS_INLINE_FUNCTION void operator()(const Member<Space>& team) const {
    const int r = team.league_rank(), span = r % spans;
    const int b = r / spans / groups, grp = r / spans % groups, d0 = grp * channels;
    const int di = static_cast<int>(u.extent(2)), steps = static_cast<int>(u.extent(1));
    const int lanes = di - d0 < channels ? di - d0 : channels;
    const int chunks = static_cast<int>(scan_chunks(steps, chunk));
    const bool split = dh_ends.data() != nullptr;
    const int c_last = split ? first + span : chunks - 1, c_first = split ? c_last : 0;
    const int prow = split ? b * chunks + c_last : b, trow = b * spans + span;
    T* const hs = scratch<T>(team, channels * N);   // recomputed states, [n·channels + j]
    T* const dhs = scratch<T>(team, channels * N);  // dL/dh carried to earlier steps
    // dL/dA summed over steps: in scratch rather than registers, where 16 double states
    // and their dL/dh already take most of a thread's 255.
    T* const das = scratch<T>(team, channels * N);
    T* const bs = scratch<T>(team, K * N);
    T* const cs = scratch<T>(team, K * N);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, lanes), [&](const int j) {
      for (int n = 0; n < N; ++n) {
        dhs[n * channels + j] = split ? dh_ends(b, c_last, d0 + j, n) : T(0);
        das[n * channels + j] = T(0);
      }
      param_partial(prow, d0 + j, N) = param_partial(prow, d0 + j, N + 1) = T(0);
    });
    for (int c = c_last; c >= c_first; --c) {
      const int t0 = c * chunk, len = steps - t0 < chunk ? steps - t0 : chunk;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, lanes), [&](const int j) {
        for (int n = 0; n < N; ++n) hs[n * channels + j] = h_chunks(b, c, d0 + j, n);
      });
      for (int k0 = 0; k0 < len; k0 += K) {
        const int kl = len - k0 < K ? len - k0 : K;
        team.team_barrier();  // the previous block's rows and the previous chunk's dB terms are read
        stage_rows<N>(team, bm, b, t0 + k0, kl, bs);
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, lanes),
                             [&](const int j) { recompute(b, trow, d0 + j, &hs[j], t0, k0, kl, bs); });
      }
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, len * N), [&](const int i) {
        const int s = i / N, n = i % N;
        T acc = 0;
        for (int j = 0; j < lanes; ++j) acc += dy(b, t0 + s, d0 + j) * trace(trow, s, n, d0 + j);
        partial(b, grp, t0 + s, 1, n) = acc;
      });
      for (int k0 = (len - 1) / K * K; k0 >= 0; k0 -= K) {
        const int kl = len - k0 < K ? len - k0 : K;
        team.team_barrier();  // the states are summed into dC; the previous block's rows are read
        stage_rows<N>(team, bm, b, t0 + k0, kl, bs);
        stage_rows<N>(team, cm, b, t0 + k0, kl, cs);
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, lanes), [&](const int j) {
          reverse(b, trow, prow, c, d0 + j, &dhs[j], &das[j], t0, k0, kl, bs, cs);
        });
      }
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, len * N), [&](const int i) {
        const int s = i / N, n = i % N;
        T acc = 0;
        for (int j = 0; j < lanes; ++j) acc += trace(trow, s, n, d0 + j);
        partial(b, grp, t0 + s, 0, n) = acc;
      });
    }
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, lanes), [&](const int j) {
      for (int n = 0; n < N; ++n)  // dA_log = dA ⊙ A
        param_partial(prow, d0 + j, n) = das[n * channels + j] * -M::exp(a_log(d0 + j, n));
    });
  }

  /// Chunk steps k0 .. k0 + kl − 1 (from t0) of channel d of sequence b: its states into trace
  /// row trow, with the arithmetic of Forward.
  KOKKOS_INLINE_FUNCTION void recompute(const int b, const int trow, const int d, T* const hs, const int t0,
                                        const int k0, const int kl, const T* const bs) const {
    T a2[N], h[N];
    for (int n = 0; n < N; ++n) {
      a2[n] = -M::exp(a_log(d, n)) * T(M::decay_scale);
      h[n] = hs[n * channels];
    }
    const T bias = dt_bias(d);
    for (int s = 0; s < kl; ++s) {
      const int t = t0 + k0 + s;
      const T delta = M::softplus(dt(b, t, d) + bias), dx = delta * u(b, t, d);
      for (int n = 0; n < N; ++n) {
        h[n] = M::decay(delta * a2[n]) * h[n] + dx * bs[s * N + n];
        trace(trow, k0 + s, n, d) = h[n];
      }
    }
    for (int n = 0; n < N; ++n) hs[n * channels] = h[n];
  }

  /// The reverse recurrence over chunk steps k0 + kl − 1 down to k0 of channel d (chunk c);
  /// dhs[n·channels] carries dL/dh, das[n·channels] dL/dA, param_partial(prow, d, N | N + 1)
  /// the channel's dD and ddt_bias.
  KOKKOS_INLINE_FUNCTION void reverse(const int b, const int trow, const int prow, const int c, const int d,
                                      T* const dhs, T* const das, const int t0, const int k0, const int kl,
                                      const T* const bs, const T* const cs) const {
    T anat[N], a2[N], dh[N];
    for (int n = 0; n < N; ++n) {
      anat[n] = -M::exp(a_log(d, n));
      a2[n] = anat[n] * T(M::decay_scale);
      dh[n] = dhs[n * channels];
    }
    const T bias = dt_bias(d), dsk = d_skip(d);
    T dD = param_partial(prow, d, N), dbias = param_partial(prow, d, N + 1);
    for (int s = kl - 1; s >= 0; --s) {
      const int t = t0 + k0 + s, i = k0 + s;
      const T x = u(b, t, d), g = dy(b, t, d);
      T delta, sig;
      M::softplus_and_sigmoid(dt(b, t, d) + bias, delta, sig);
      const T dx = delta * x;
      T ddelta = 0, dxv = g * dsk;
      dD += g * x;
      for (int n = 0; n < N; ++n) {
        const T bn = bs[s * N + n];
        const T hp = i > 0 ? trace(trow, i - 1, n, d) : h_chunks(b, c, d, n);  // h_{t−1}
        const T a = M::decay(delta * a2[n]);
        const T dhv = dh[n] + g * cs[s * N + n];  // dL/dh_t
        const T dexp = dhv * hp * a;              // dL/d(ΔA) through exp
        ddelta += dexp * anat[n] + dhv * x * bn;
        das[n * channels] += dexp * delta;
        dxv += dhv * delta * bn;
        dh[n] = dhv * a;                  // dL/dh_{t−1}
        trace(trow, i, n, d) = dhv * dx;  // the dB_t term; h_t's dC_t term is already summed
      }
      const T dv = ddelta * sig;
      du(b, t, d) += dxv;
      ddt(b, t, d) += dv;
      dbias += dv;
    }
    for (int n = 0; n < N; ++n) dhs[n * channels] = dh[n];
    param_partial(prow, d, N) = dD;
    param_partial(prow, d, N + 1) = dbias;
  }
};

}  // namespace detail

namespace detail {

/// How a call divides its work: split in time or not, and chunks per backward launch.
struct SplitPlan {
  bool time;
  int wave;
};

inline SplitPlan plan(const ScanSplit& split, std::int64_t b, std::int64_t t, std::int64_t di, int chunk) {
  const std::int64_t groups = (di + channels - 1) / channels, chunks = scan_chunks(t, chunk < 1 ? 1 : chunk);
  const bool time = chunks >= 1 && (split.mode == ScanSplit::time || (split.mode == ScanSplit::automatic &&
                                                                      chunks > 1 && b * groups < time_split_teams));
  if (!time) return {false, 1};
  const std::int64_t wave = split.chunks_per_launch > 0 ? split.chunks_per_launch : time_split_teams / (b * groups);
  return {true, static_cast<int>(std::clamp<std::int64_t>(wave, 1, chunks))};
}

}  // namespace detail

/// Workspace of `selective_scan_backward` (the team kernel) for u (b, t, di): the dB/dC
/// partials per channel group, the parameter partials (per sequence, or per sequence and
/// chunk when split in time) and the traces of the chunks walked at once (one per sequence,
/// or a launch's chunks), and, split in time, dL/dh at every chunk's end.
template <int N, Scalar T>
std::size_t selective_scan_backward_scratch(std::int64_t b, std::int64_t t, std::int64_t di, int chunk,
                                            const ScanSplit& split = {}) {
  if (b == 0 || t == 0 || di == 0) return 0;
  chunk = chunk < 1 ? 1 : chunk;  // as the kernels read it (the public entry points refuse it)
  const std::int64_t groups = (di + channels - 1) / channels, chunks = scan_chunks(t, chunk);
  const auto p = detail::plan(split, b, t, di, chunk);
  return core::padded_bytes<T>(b * groups * t * 2 * N) +
         core::padded_bytes<T>((p.time ? b * chunks : b) * di * (N + 2)) +
         core::padded_bytes<T>(b * p.wave * std::min<std::int64_t>(chunk, t) * N * di) +
         (p.time ? core::padded_bytes<T>(b * chunks * di * N) : 0);
}

/// `kernels::selective_scan_forward` as a team kernel: same arguments, contract and results
/// up to rounding (the host checks its arguments before calling it). Split in time (only when
/// h_chunks is given: the first pass writes the checkpoints there), the scan runs twice: the
/// checkpoint pass, then a team per chunk from its checkpoint.
template <int N, Scalar T, ExecutionSpace Space>
void selective_scan_forward(const Space& exec, TensorArg<const T***, Space> u, TensorArg<const T***, Space> dt,
                            TensorArg<const T*, Space> dt_bias, TensorArg<const T**, Space> a_log,
                            std::type_identity_t<StridedTensor<const T***, Space>> bm,
                            std::type_identity_t<StridedTensor<const T***, Space>> cm,
                            TensorArg<const T*, Space> d_skip, TensorArg<const T***, Space> h0,
                            TensorArg<T***, Space> y, TensorArg<T****, Space> h_chunks, TensorArg<T***, Space> h_last,
                            int chunk = scan_default_chunk, const ScanSplit& split = {}) {
  const std::int64_t b = u.extent(0), t = u.extent(1), di = u.extent(2);
  if (b == 0 || di == 0) return;
  chunk = chunk < 1 ? 1 : chunk;
  const int groups = static_cast<int>((di + channels - 1) / channels);
  using F = detail::Forward<N, T, Space>;
  F f{u, dt, dt_bias, d_skip, a_log, bm, cm, h0, y, h_chunks, h_last, chunk, groups, {}, 1};
  if (h_chunks.data() && detail::plan(split, b, t, di, chunk).time) {
    Kokkos::parallel_for(
        "hybridseq::kernels::selective_scan::forward_checkpoints", Kokkos::RangePolicy<Space>(exec, 0, b * di * N),
        detail::ForwardCheckpoints<N, T, Space>{u, dt, dt_bias, a_log, bm, h0, h_chunks, h_last, chunk});
    f.h0 = {};
    f.h_chunks = {};
    f.h_last = {};
    f.starts = h_chunks;
    f.spans = static_cast<int>(scan_chunks(t, chunk));
  }
  Kokkos::TeamPolicy<Space> policy(exec, b * groups * f.spans, detail::team_size<Space>());
  Kokkos::parallel_for("hybridseq::kernels::selective_scan::forward[team]",
                       policy.set_scratch_size(0, Kokkos::PerTeam(F::scratch_bytes())), f);
}

/// `kernels::selective_scan_backward` as a team kernel; its workspace is
/// `team::selective_scan_backward_scratch`. Split in time: a first pass carries dL/dh from
/// the sequence's end to every chunk's end, then the chunks run as teams of their own, a
/// launch at a time (`ScanSplit::chunks_per_launch`), each with its trace.
template <int N, Scalar T, ExecutionSpace Space>
void selective_scan_backward(const Space& exec, core::Workspace<Space>& ws, TensorArg<const T***, Space> u,
                             TensorArg<const T***, Space> dt, TensorArg<const T*, Space> dt_bias,
                             TensorArg<const T**, Space> a_log,
                             std::type_identity_t<StridedTensor<const T***, Space>> bm,
                             std::type_identity_t<StridedTensor<const T***, Space>> cm,
                             TensorArg<const T*, Space> d_skip, TensorArg<const T****, Space> h_chunks,
                             TensorArg<const T***, Space> dy, TensorArg<T***, Space> du, TensorArg<T***, Space> ddt,
                             TensorArg<T**, Space> da_log, std::type_identity_t<StridedTensor<T***, Space>> dbm,
                             std::type_identity_t<StridedTensor<T***, Space>> dcm, TensorArg<T*, Space> dd_skip,
                             TensorArg<T*, Space> ddt_bias, int chunk = scan_default_chunk,
                             const ScanSplit& split = {}) {
  const std::int64_t b = u.extent(0), t = u.extent(1), di = u.extent(2);
  if (b == 0 || t == 0 || di == 0) return;
  chunk = chunk < 1 ? 1 : chunk;
  const int groups = static_cast<int>((di + channels - 1) / channels);
  const auto chunks = static_cast<int>(scan_chunks(t, chunk));
  const auto p = detail::plan(split, b, t, di, chunk);
  core::WorkspaceScope<Space> scope(ws);
  auto partial = ws.template allocate<T*****>("selective_scan.partial", b, groups, t, 2, N);
  auto param_partial = ws.template allocate<T***>("selective_scan.param_partial", p.time ? b * chunks : b, di, N + 2);
  auto trace = ws.template allocate<T****>("selective_scan.trace", b * p.wave, std::min<std::int64_t>(chunk, t), N, di);
  using F = detail::Backward<N, T, Space>;
  F f{u,       dt,    dy,    dt_bias, d_skip, a_log, bm, cm, h_chunks, du, ddt, param_partial,
      partial, trace, chunk, groups,  {},     1,     0};
  const auto launch = [&] {
    Kokkos::TeamPolicy<Space> policy(exec, b * groups * f.spans, detail::team_size<Space>());
    Kokkos::parallel_for("hybridseq::kernels::selective_scan::backward[team]",
                         policy.set_scratch_size(0, Kokkos::PerTeam(F::scratch_bytes())), f);
  };
  if (!p.time) {
    launch();
  } else {
    auto dh_ends = ws.template allocate<T****>("selective_scan.dh_ends", b, chunks, di, N);
    Kokkos::parallel_for("hybridseq::kernels::selective_scan::backward_checkpoints",
                         Kokkos::RangePolicy<Space>(exec, 0, b * di * N),
                         detail::BackwardCheckpoints<N, T, Space>{dt, dy, dt_bias, a_log, cm, dh_ends, chunk});
    f.dh_ends = dh_ends;
    for (f.first = 0; f.first < chunks; f.first += p.wave) {
      f.spans = std::min(p.wave, chunks - f.first);
      launch();
    }
  }
  Kokkos::parallel_for("hybridseq::kernels::selective_scan::reduce_groups", Kokkos::RangePolicy<Space>(exec, 0, b * t),
                       kernels::detail::ScanReduceGroups<T, Space>{partial, dbm, dcm});
  Kokkos::parallel_for("hybridseq::kernels::selective_scan::reduce_sequences", Kokkos::RangePolicy<Space>(exec, 0, di),
                       kernels::detail::ScanReduceSequences<T, Space>{param_partial, da_log, dd_skip, ddt_bias});
}

}  // namespace team

/// True when the host kernels above run on `Space` (its memory is the host's); the team
/// kernels run elsewhere.
template <class Space>
inline constexpr bool scan_runs_on_host =
    Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Space::memory_space>::accessible;

/// Forward selective scan.
///
/// Shapes: u, dt, y (B, T, Di); dt_bias, D (Di); A_log (Di, N); Bm, Cm (B, T, N), any strides.
/// h0 (B, Di, N) is the initial state (empty: zeros). When h_chunks (B, ⌈T/chunk⌉, Di, N) is
/// given, the state before step c·chunk is stored at [:, c]: what backward needs. When h_last
/// (B, Di, N) is given, the final state is written to it (it may be the same tensor as h0:
/// decoding continues a state in place).
/// Requires: chunk ≥ 1 when h_chunks is given. Ensures: y = the scan of the definition above.
template <int N, Scalar T, ExecutionSpace Space>
void selective_scan_forward(const Space& exec, TensorArg<const T***, Space> u, TensorArg<const T***, Space> dt,
                            TensorArg<const T*, Space> dt_bias, TensorArg<const T**, Space> a_log,
                            std::type_identity_t<StridedTensor<const T***, Space>> bm,
                            std::type_identity_t<StridedTensor<const T***, Space>> cm,
                            TensorArg<const T*, Space> d_skip, TensorArg<const T***, Space> h0,
                            TensorArg<T***, Space> y, TensorArg<T****, Space> h_chunks, TensorArg<T***, Space> h_last,
                            int chunk = scan_default_chunk) {
  static_assert(N >= 1, "hybridseq::kernels::selective_scan_forward: N must be positive");
  const std::string api = "hybridseq::kernels::selective_scan_forward";
  detail::check_scan_inputs<N>(api, u, dt, dt_bias, a_log, bm, cm, d_skip);
  const auto b = static_cast<std::int64_t>(u.extent(0)), t = static_cast<std::int64_t>(u.extent(1)),
             di = static_cast<std::int64_t>(u.extent(2));
  core::check_shape(api, "y", y, core::dim(b), core::dim(t), core::dim(di));
  if (h0.data()) core::check_shape(api, "h0", h0, core::dim(b), core::dim(di), core::dim(N));
  if (h_last.data()) core::check_shape(api, "h_last", h_last, core::dim(b), core::dim(di), core::dim(N));
  if (h_chunks.data()) {
    if (chunk < 1) fail<value_error>(api, "chunk is ", chunk, ", must be >= 1");
    core::check_shape(api, "h_chunks", h_chunks, core::dim(b), core::dim(scan_chunks(t, chunk)), core::dim(di),
                      core::dim(N));
  }
  if constexpr (!scan_runs_on_host<Space>) {
    team::selective_scan_forward<N, T>(exec, u, dt, dt_bias, a_log, bm, cm, d_skip, h0, y, h_chunks, h_last, chunk);
  } else {
    constexpr int W = scan_forward_lanes<T>;
    const int blocks = static_cast<int>((di + W - 1) / W);
    if (b == 0 || di == 0) return;
    Kokkos::parallel_for(
        "hybridseq::kernels::selective_scan::forward[chunked]", Kokkos::RangePolicy<Space>(exec, 0, b * blocks),
        detail::ScanForward<N, T, Space>{u, dt, dt_bias, d_skip, a_log, bm, cm, h0, y, h_chunks, h_last,
                                         chunk < 1 ? 1 : chunk, blocks, detail::use_avx2<T, Space>()});
  }
}

/// Scratch of `selective_scan_backward` on `Space` for u (b, t, di). On the host, with
/// `concurrency` threads (its UniqueToken's size): the dB/dC partials per channel group, the
/// per-sequence parameter partials and one chunk buffer per thread. Elsewhere the team
/// kernel's, which does not depend on `concurrency`.
template <int N, Scalar T, class Space = Kokkos::DefaultHostExecutionSpace>
std::size_t selective_scan_backward_scratch(std::int64_t b, std::int64_t t, std::int64_t di, int chunk,
                                            int concurrency) {
  if constexpr (!scan_runs_on_host<Space>) {
    return team::selective_scan_backward_scratch<N, T>(b, t, di, chunk);
  } else {
    if (b == 0 || t == 0 || di == 0) return 0;
    const std::int64_t groups = (di + scan_group_channels - 1) / scan_group_channels;
    return core::padded_bytes<T>(b * groups * t * 2 * N) + core::padded_bytes<T>(b * di * (N + 2)) +
           core::padded_bytes<T>(std::int64_t(concurrency) * chunk * scan_backward_lanes<T> * (2 * N + 2));
  }
}

/// Backward of `selective_scan_forward` from its chunk checkpoints (zero initial state or the
/// h0 the forward pass stored in h_chunks[:, 0]).
///
/// Accumulates (+=): du, ddt (B, T, Di) — ddt is the gradient of the pre-bias dt —; dBm, dCm
/// (B, T, N), any strides; dA_log (Di, N); dD, ddt_bias (Di). Scratch comes from `ws`:
/// B·⌈Di/64⌉·T·2N partial sums for dB/dC, B·Di·(N + 2) for the per-channel gradients and,
/// per thread, 2·chunk·(N + 1)·lanes values.
/// Deterministic: no atomics, the same bits at any thread count.
template <int N, Scalar T, ExecutionSpace Space>
void selective_scan_backward(const Space& exec, core::Workspace<Space>& ws, TensorArg<const T***, Space> u,
                             TensorArg<const T***, Space> dt, TensorArg<const T*, Space> dt_bias,
                             TensorArg<const T**, Space> a_log,
                             std::type_identity_t<StridedTensor<const T***, Space>> bm,
                             std::type_identity_t<StridedTensor<const T***, Space>> cm,
                             TensorArg<const T*, Space> d_skip, TensorArg<const T****, Space> h_chunks,
                             TensorArg<const T***, Space> dy, TensorArg<T***, Space> du, TensorArg<T***, Space> ddt,
                             TensorArg<T**, Space> da_log, std::type_identity_t<StridedTensor<T***, Space>> dbm,
                             std::type_identity_t<StridedTensor<T***, Space>> dcm, TensorArg<T*, Space> dd_skip,
                             TensorArg<T*, Space> ddt_bias, int chunk = scan_default_chunk) {
  static_assert(N >= 1, "hybridseq::kernels::selective_scan_backward: N must be positive");
  const std::string api = "hybridseq::kernels::selective_scan_backward";
  detail::check_scan_inputs<N>(api, u, dt, dt_bias, a_log, bm, cm, d_skip);
  const auto b = static_cast<std::int64_t>(u.extent(0)), t = static_cast<std::int64_t>(u.extent(1)),
             di = static_cast<std::int64_t>(u.extent(2));
  if (chunk < 1) fail<value_error>(api, "chunk is ", chunk, ", must be >= 1");
  core::check_shape(api, "h_chunks", h_chunks, core::dim(b), core::dim(scan_chunks(t, chunk)), core::dim(di),
                    core::dim(N));
  core::check_shape(api, "dy", dy, core::dim(b), core::dim(t), core::dim(di));
  core::check_shape(api, "du", du, core::dim(b), core::dim(t), core::dim(di));
  core::check_shape(api, "ddt", ddt, core::dim(b), core::dim(t), core::dim(di));
  core::check_shape(api, "dA_log", da_log, core::dim(di), core::dim(N));
  core::check_shape(api, "dB", dbm, core::dim(b), core::dim(t), core::dim(N));
  core::check_shape(api, "dC", dcm, core::dim(b), core::dim(t), core::dim(N));
  core::check_shape(api, "dD", dd_skip, core::dim(di));
  core::check_shape(api, "ddt_bias", ddt_bias, core::dim(di));
  if (b == 0 || t == 0 || di == 0) return;
  if constexpr (!scan_runs_on_host<Space>) {
    team::selective_scan_backward<N, T>(exec, ws, u, dt, dt_bias, a_log, bm, cm, d_skip, h_chunks, dy, du, ddt, da_log,
                                        dbm, dcm, dd_skip, ddt_bias, chunk);
  } else {
    constexpr int W = scan_backward_lanes<T>;
    const int groups = static_cast<int>((di + scan_group_channels - 1) / scan_group_channels);
    core::WorkspaceScope<Space> scope(ws);
    auto partial = ws.template allocate<T*****>("selective_scan.partial", b, groups, t, 2, N);
    auto param_partial = ws.template allocate<T***>("selective_scan.param_partial", b, di, N + 2);
    const Kokkos::Experimental::UniqueToken<Space> token(exec);
    auto scratch =
        ws.template allocate<T**>("selective_scan.scratch", token.size(), std::size_t(chunk) * W * (2 * N + 2));
    Kokkos::parallel_for(
        "hybridseq::kernels::selective_scan::backward[chunked]", Kokkos::RangePolicy<Space>(exec, 0, b * groups),
        detail::ScanBackward<N, T, Space>{u, dt, dy, dt_bias, d_skip, a_log, bm, cm, h_chunks, du, ddt, param_partial,
                                          partial, scratch, token, chunk, groups, detail::use_avx2<T, Space>()});
    Kokkos::parallel_for("hybridseq::kernels::selective_scan::reduce_groups",
                         Kokkos::RangePolicy<Space>(exec, 0, b * t),
                         detail::ScanReduceGroups<T, Space>{partial, dbm, dcm});
    Kokkos::parallel_for("hybridseq::kernels::selective_scan::reduce_sequences",
                         Kokkos::RangePolicy<Space>(exec, 0, di),
                         detail::ScanReduceSequences<T, Space>{param_partial, da_log, dd_skip, ddt_bias});
  }
}

}  // namespace kernels
}  // namespace hybridseq
