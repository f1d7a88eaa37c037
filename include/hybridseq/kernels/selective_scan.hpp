#pragma once
/// \file
/// The selective scan of Mamba-1 (Gu & Dao 2023, §3.2 and Algorithm 2; papers.md §4):
///
///   Δ_t = softplus(dt_t + dt_bias)                    Δ, dt (B, T, Di), dt_bias (Di)
///   h_t = exp(Δ_t A) ⊙ h_{t−1} + Δ_t x_t B_t          h (B, Di, N), A = −exp(A_log) (Di, N)
///   y_t = C_t · h_t + D ⊙ x_t                         B_t, C_t (B, T, N) shared by all channels
///
/// **Work split.** One work item is a block of `scan_lanes<T>` consecutive channels of one
/// sequence (float: 16). The loops over lanes are innermost: each state update of a block is
/// a fixed-width, branch-free loop over independent channels that the compiler vectorises,
/// with B_t[n], C_t[n] broadcast. Vectorising over channels rather than over the state index
/// n needs no horizontal sums in the forward pass (y_t[d] stays in its lane), computes the
/// softplus of a whole block at once, and works for any N (odd or tiny). Measured on the
/// development machine (B=1, T=4096, Di=512, N=16, AVX2): 0.55 ns per update with channel
/// lanes against 1.0 ns with n innermost.
///
/// **Chunked recomputation.** The forward pass stores the state only at chunk starts:
/// (B, ⌈T/L⌉, Di, N) instead of (B, T, Di, N). Backward walks the chunks from last to first;
/// for each it recomputes the chunk's states and decay factors from the stored start state
/// into a per-thread scratch of L·N·lanes values and then runs the reverse recurrence for dh.
///
/// **Determinism.** dB_t and dC_t are sums over all channels. A backward work item owns
/// `scan_group_channels` (64) channels and writes one partial sum per (b, group, t, n); a
/// second kernel adds the groups in a fixed order. Per-channel gradients (A_log, D, dt_bias)
/// belong to one work item. No atomics: the gradients are bit-identical at any thread count.
///
/// **exp.** The float path evaluates exp(ΔA) as exp2_polynomial(Δ · A·log₂e), a vectorisable
/// branch-free 2^z (see below); double keeps math::exp for the gradient checks.
///
/// **Instruction sets.** On x86-64 hosts compiled for the baseline ISA (no -mavx2), the float
/// work item is compiled twice — baseline SSE2 and AVX2+FMA — and the AVX2 copy is chosen at
/// run time when the CPU has it. The scan is bound by exp's arithmetic, so the 8-wide FMA
/// form is about 2.5× faster than SSE2. Builds that already target AVX2 or wider, other
/// architectures and device compilers get a single copy. `-DHYBRIDSEQ_NO_ISA_DISPATCH`
/// turns the dispatch off.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "../core/check.hpp"
#include "../core/spaces.hpp"
#include "../core/workspace.hpp"
#include "activations.hpp"

#if !defined(HYBRIDSEQ_NO_ISA_DISPATCH) && !defined(__CUDACC__) && !defined(__HIPCC__) && \
    !defined(__SYCL_DEVICE_ONLY__) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(__AVX2__)
#define HYBRIDSEQ_SCAN_ISA_DISPATCH 1
#else
#define HYBRIDSEQ_SCAN_ISA_DISPATCH 0
#endif

namespace hybridseq {

// A strided tensor: a column slice of a row-major tensor (B_t = x_proj output[..., R:R+N]).
// Defined by both conv1d.hpp and selective_scan.hpp, whichever comes first; its natural home
// is core/spaces.hpp next to Tensor.
#ifndef HYBRIDSEQ_STRIDED_TENSOR_DEFINED
#define HYBRIDSEQ_STRIDED_TENSOR_DEFINED
template <class DataType, ExecutionSpace Space>
using StridedTensor = Kokkos::View<DataType, Kokkos::LayoutStride, typename Space::memory_space>;
#endif

namespace kernels {

// ---------------------------------------------------------------------------------------------
// Vectorisable float maths. Every function is straight-line code (selects are done on integer
// bits, which the vectoriser if-converts; float compares under the default -ftrapping-math are
// not), so a loop that calls it vectorises.
// ---------------------------------------------------------------------------------------------

namespace detail {
KOKKOS_FORCEINLINE_FUNCTION std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
KOKKOS_FORCEINLINE_FUNCTION float float_of(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
}  // namespace detail

/// 2^z for float z, branch-free: z = k + f with k = round(z), f ∈ [−½, ½]; 2^f by a degree-5
/// minimax polynomial (relative error 9.1e-8); k is added to the exponent bits.
/// Accuracy ≤ 2 ulp for z ∈ [−125.5, 127] (tests/branches/test_mamba.cpp checks every 2^-10
/// step). Below −125.5 the result is flushed to +0 instead of a subnormal; z > 127 (overflow)
/// is outside the domain.
KOKKOS_FORCEINLINE_FUNCTION float exp2_polynomial(float z) {
  // 1.5·2²³: for |z| < 2²², z + magic has ulp 1, so the addition rounds z to the nearest
  // integer k and leaves k (two's complement) in the low mantissa bits of the sum.
  constexpr float magic = 12582912.0f;
  const float t = z + magic;
  const float k = t - magic;
  const float f = z - k;
  float p = 1.3264726e-3f;
  p = p * f + 9.6715130e-3f;
  p = p * f + 5.5507336e-2f;
  p = p * f + 2.4022242e-1f;
  p = p * f + 6.9314700e-1f;
  p = p * f + 1.0f;
  const std::uint32_t tb = detail::bits_of(t);
  // tb << 23 moves k's low 9 bits into the exponent field and shifts the rest out: adding it
  // to p's bits multiplies p ∈ [0.70, 1.42] by 2^k.
  const std::uint32_t scaled = detail::bits_of(p) + (tb << 23);
  // k ≥ −125 keeps the result normal; below, flush (also catches z = −inf and huge |z|).
  const std::int32_t k_min = static_cast<std::int32_t>(detail::bits_of(magic)) - 126;
  const std::uint32_t keep = static_cast<std::int32_t>(tb) > k_min ? ~0u : 0u;
  return detail::float_of(scaled & keep);
}

/// e^x for float x, branch-free: Cody–Waite reduction x = k·ln2 + r (ln2 split in two so that
/// k·ln2_hi is exact), e^r by a degree-5 minimax polynomial on [−ln2/2, ln2/2] (relative error
/// 1.0e-7), 2^k through the exponent bits. Accuracy ≤ 3 ulp for x ∈ [−86.6, 88.0]; below,
/// the result flushes to +0; above 88.0 is outside the domain.
KOKKOS_FORCEINLINE_FUNCTION float exp_polynomial(float x) {
  constexpr float magic = 12582912.0f;
  const float t = x * 1.44269504088896341f + magic;
  const float k = t - magic;
  float r = x - k * 0.693359375f;   // ln2_hi: 9 significant bits, so k·ln2_hi is exact
  r = r - k * -2.12194440e-4f;      // ln2_lo = ln2 − ln2_hi
  float p = 8.3125252e-3f;
  p = p * r + 4.1890115e-2f;
  p = p * r + 1.6667114e-1f;
  p = p * r + 4.9999231e-1f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::uint32_t tb = detail::bits_of(t);
  const std::uint32_t scaled = detail::bits_of(p) + (tb << 23);
  const std::int32_t k_min = static_cast<std::int32_t>(detail::bits_of(magic)) - 126;
  const std::uint32_t keep = static_cast<std::int32_t>(tb) > k_min ? ~0u : 0u;
  return detail::float_of(scaled & keep);
}

/// log(1 + u) for u ∈ [0, 1] as 2·atanh(s), s = u / (2 + u) ∈ [0, ⅓]: no cancellation for
/// small u (unlike log of 1 + u); the odd series to s¹⁵ leaves a relative error below 2e-9.
KOKKOS_FORCEINLINE_FUNCTION float log1p_polynomial(float u) {
  const float s = u / (2.0f + u);
  const float s2 = s * s;
  float p = 1.0f / 15;
  p = p * s2 + 1.0f / 13;
  p = p * s2 + 1.0f / 11;
  p = p * s2 + 1.0f / 9;
  p = p * s2 + 1.0f / 7;
  p = p * s2 + 1.0f / 5;
  p = p * s2 + 1.0f / 3;
  return 2.0f * (s + s * s2 * p);
}

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
  KOKKOS_FORCEINLINE_FUNCTION static float exp(float x) { return exp_polynomial(x); }
  /// softplus(v) = max(v, 0) + log1p(e^−|v|); (v + |v|)/2 is max(v, 0) exactly, without a select.
  KOKKOS_FORCEINLINE_FUNCTION static float softplus(float v) {
    const float a = detail::float_of(detail::bits_of(v) & 0x7fffffffu);  // |v|
    return 0.5f * (v + a) + log1p_polynomial(exp_polynomial(-a));
  }
  /// σ(v) = (v ≥ 0 ? 1 : e) / (1 + e), e = e^−|v|: no overflow, full relative accuracy for
  /// v ≪ 0. The select is on the sign bit, so it vectorises.
  KOKKOS_FORCEINLINE_FUNCTION static float sigmoid(float v) {
    const std::uint32_t vb = detail::bits_of(v);
    const float e = exp_polynomial(detail::float_of(vb | 0x80000000u));  // e^−|v|
    const std::uint32_t negative = static_cast<std::uint32_t>(static_cast<std::int32_t>(vb) >> 31);
    const float num = detail::float_of((detail::bits_of(1.0f) & ~negative) | (detail::bits_of(e) & negative));
    return num / (1.0f + e);
  }
  /// softplus and its derivative σ share e^−|v|.
  KOKKOS_FORCEINLINE_FUNCTION static void softplus_and_sigmoid(float v, float& sp, float& sig) {
    const std::uint32_t vb = detail::bits_of(v);
    const float a = detail::float_of(vb & 0x7fffffffu);
    const float e = exp_polynomial(-a);
    sp = 0.5f * (v + a) + log1p_polynomial(e);
    const std::uint32_t negative = static_cast<std::uint32_t>(static_cast<std::int32_t>(vb) >> 31);
    const float num = detail::float_of((detail::bits_of(1.0f) & ~negative) | (detail::bits_of(e) & negative));
    sig = num / (1.0f + e);
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

/// Channels per work item and vector lanes of the scan: 64 bytes of scalars (one AVX-512
/// register, two AVX2 registers), so that each state update is a full-width vector operation.
template <class T>
inline constexpr int scan_lanes = 64 / static_cast<int>(sizeof(T));

/// Channels per backward work item: the unit of the deterministic dB/dC reduction. Larger
/// groups mean fewer partial sums (B · ⌈Di/64⌉ · T · 2N scalars), smaller ones more parallelism.
inline constexpr int scan_group_channels = 64;

/// Default chunk length L of the forward checkpoints.
inline constexpr int scan_default_chunk = 64;

/// Number of chunk checkpoints for T steps: ⌈T/L⌉.
constexpr std::int64_t scan_chunks(std::int64_t steps, int chunk) { return (steps + chunk - 1) / chunk; }

namespace detail {

/// True when the AVX2+FMA copy of the float work items can run on this CPU.
inline bool host_has_avx2_fma() {
#if HYBRIDSEQ_SCAN_ISA_DISPATCH
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
#else
  return false;
#endif
}

template <class T, class Space>
bool use_avx2() {
  return std::is_same_v<T, float> &&
         Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Space::memory_space>::accessible &&
         host_has_avx2_fma();
}

/// Copies `lanes` ≤ W values from p into v and zero-fills the rest. Full blocks take the
/// unconditional (vectorised) copy.
template <int W, class T>
KOKKOS_FORCEINLINE_FUNCTION void load_lanes(T (&v)[W], const T* p, int lanes) {
  if (lanes == W) {
    for (int j = 0; j < W; ++j) v[j] = p[j];
  } else {
    for (int j = 0; j < W; ++j) v[j] = j < lanes ? p[j] : T(0);
  }
}

/// Sum of the W lanes in a fixed pairwise order (deterministic; vectorises by halves).
template <int W, class T>
KOKKOS_FORCEINLINE_FUNCTION T lane_sum(const T (&v)[W]) {
  T s[W];
  for (int j = 0; j < W; ++j) s[j] = v[j];
  for (int w = W / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) s[j] += s[j + w];
  return s[0];
}

template <int N, class T, class Space>
struct ScanForward {
  static constexpr int W = scan_lanes<T>;
  using M = ScanMath<T>;

  Tensor<const T***, Space> u, dt;             // (B, T, Di)
  Tensor<const T*, Space> dt_bias, d_skip;     // (Di)
  Tensor<const T**, Space> a_log;              // (Di, N)
  StridedTensor<const T***, Space> bm, cm;     // (B, T, N)
  Tensor<const T***, Space> h0;                // (B, Di, N) or empty: zero initial state
  Tensor<T***, Space> y;                       // (B, T, Di)
  Tensor<T****, Space> h_chunks;               // (B, ⌈T/L⌉, Di, N) or empty
  Tensor<T***, Space> h_last;                  // (B, Di, N) or empty; may alias h0
  int chunk, blocks;
  bool avx2;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t item) const {
#if HYBRIDSEQ_SCAN_ISA_DISPATCH
    if (avx2) return run_avx2(item);
#endif
    run(item);
  }

#if HYBRIDSEQ_SCAN_ISA_DISPATCH
  [[gnu::target("avx2,fma")]] void run_avx2(const std::int64_t item) const { run(item); }
#endif

  KOKKOS_FORCEINLINE_FUNCTION void run(const std::int64_t item) const {
    const int b = static_cast<int>(item / blocks);
    const int d0 = static_cast<int>(item % blocks) * W;
    const int di = static_cast<int>(u.extent(2)), steps = static_cast<int>(u.extent(1));
    const int lanes = di - d0 < W ? di - d0 : W;
    const bool chunks = h_chunks.data() != nullptr;

    // Padding lanes (beyond Di) get A = 0, x = 0: their state stays 0 and is never written.
    T a2[N][W], h[N][W], bias[W], dsk[W];
    for (int j = 0; j < W; ++j) {
      const bool valid = j < lanes;
      bias[j] = valid ? dt_bias(d0 + j) : T(0);
      dsk[j] = valid ? d_skip(d0 + j) : T(0);
      for (int n = 0; n < N; ++n) {
        a2[n][j] = valid ? -math::exp(a_log(d0 + j, n)) * T(M::decay_scale) : T(0);
        h[n][j] = valid && h0.data() ? h0(b, d0 + j, n) : T(0);
      }
    }

    for (int t = 0; t < steps; ++t) {
      if (chunks && t % chunk == 0)
        for (int j = 0; j < lanes; ++j)
          for (int n = 0; n < N; ++n) h_chunks(b, t / chunk, d0 + j, n) = h[n][j];

      T xv[W], dtv[W], dx[W], delta[W], yv[W];
      load_lanes<W>(xv, &u(b, t, d0), lanes);
      load_lanes<W>(dtv, &dt(b, t, d0), lanes);
      for (int j = 0; j < W; ++j) {
        delta[j] = M::softplus(dtv[j] + bias[j]);
        dx[j] = delta[j] * xv[j];
        yv[j] = dsk[j] * xv[j];
      }
      for (int n = 0; n < N; ++n) {
        const T bn = bm(b, t, n), cn = cm(b, t, n);
        for (int j = 0; j < W; ++j) {
          const T a = M::decay(delta[j] * a2[n][j]);
          h[n][j] = a * h[n][j] + dx[j] * bn;
          yv[j] += cn * h[n][j];
        }
      }
      T* yp = &y(b, t, d0);
      if (lanes == W) {
        for (int j = 0; j < W; ++j) yp[j] = yv[j];
      } else {
        for (int j = 0; j < lanes; ++j) yp[j] = yv[j];
      }
    }
    if (h_last.data())
      for (int j = 0; j < lanes; ++j)
        for (int n = 0; n < N; ++n) h_last(b, d0 + j, n) = h[n][j];
  }
};

template <int N, class T, class Space>
struct ScanBackward {
  static constexpr int W = scan_lanes<T>;
  static constexpr int G = scan_group_channels / W;  // lane blocks per work item
  using M = ScanMath<T>;

  Tensor<const T***, Space> u, dt, dy;          // (B, T, Di)
  Tensor<const T*, Space> dt_bias, d_skip;      // (Di)
  Tensor<const T**, Space> a_log;               // (Di, N)
  StridedTensor<const T***, Space> bm, cm;      // (B, T, N)
  Tensor<const T****, Space> h_chunks;          // (B, ⌈T/L⌉, Di, N)
  Tensor<T***, Space> du, ddt;                  // (B, T, Di), accumulated
  Tensor<T**, Space> da_log;                    // (Di, N), accumulated
  Tensor<T*, Space> dd_skip, ddt_bias;          // (Di), accumulated
  Tensor<T*****, Space> partial;                // (B, groups, T, 2, N): Σ over a group's channels of dB, dC
  Tensor<T**, Space> scratch;                   // (threads, L·N·W·2 + L·W·2)
  Kokkos::Experimental::UniqueToken<Space> token;
  int chunk, groups;
  bool avx2;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t item) const {
    const int id = token.acquire();
#if HYBRIDSEQ_SCAN_ISA_DISPATCH
    if (avx2) {
      run_avx2(item, id);
      token.release(id);
      return;
    }
#endif
    run(item, id);
    token.release(id);
  }

#if HYBRIDSEQ_SCAN_ISA_DISPATCH
  [[gnu::target("avx2,fma")]] void run_avx2(const std::int64_t item, int id) const { run(item, id); }
#endif

  KOKKOS_FORCEINLINE_FUNCTION void run(const std::int64_t item, int id) const {
    const int b = static_cast<int>(item / groups), grp = static_cast<int>(item % groups);
    const int di = static_cast<int>(u.extent(2)), steps = static_cast<int>(u.extent(1));
    const int nchunks = static_cast<int>(scan_chunks(steps, chunk));
    // Per-thread scratch for one lane block and one chunk: decay factors a_s and states h_s
    // (L, N, W), Δ and σ(dt + bias) (L, W).
    T* const a_s = &scratch(id, 0);
    T* const h_s = a_s + std::size_t(chunk) * N * W;
    T* const delta_s = h_s + std::size_t(chunk) * N * W;
    T* const sig_s = delta_s + std::size_t(chunk) * W;

    // Reverse-time carries of each lane block: dh (N, W) and the per-channel gradient sums.
    T dh[G][N][W], dA[G][N][W], dD[G][W], dbias[G][W];
    for (int g = 0; g < G; ++g)
      for (int j = 0; j < W; ++j) {
        dD[g][j] = dbias[g][j] = T(0);
        for (int n = 0; n < N; ++n) dh[g][n][j] = dA[g][n][j] = T(0);
      }

    for (int c = nchunks - 1; c >= 0; --c) {
      const int t0 = c * chunk, len = (steps - t0 < chunk ? steps - t0 : chunk);
      for (int g = 0; g < G; ++g) {
        const int d0 = grp * scan_group_channels + g * W;
        if (d0 >= di) break;
        const int lanes = di - d0 < W ? di - d0 : W;

        T anat[N][W], a2[N][W], hstart[N][W], bias[W], dsk[W];
        for (int j = 0; j < W; ++j) {
          const bool valid = j < lanes;
          bias[j] = valid ? dt_bias(d0 + j) : T(0);
          dsk[j] = valid ? d_skip(d0 + j) : T(0);
          for (int n = 0; n < N; ++n) {
            anat[n][j] = valid ? -math::exp(a_log(d0 + j, n)) : T(0);
            a2[n][j] = anat[n][j] * T(M::decay_scale);
            hstart[n][j] = valid ? h_chunks(b, c, d0 + j, n) : T(0);
          }
        }

        // Recompute the chunk forward from its checkpoint (same arithmetic as ScanForward).
        {
          T h[N][W];
          for (int n = 0; n < N; ++n)
            for (int j = 0; j < W; ++j) h[n][j] = hstart[n][j];
          for (int s = 0; s < len; ++s) {
            const int t = t0 + s;
            T xv[W], dtv[W], dx[W];
            T* const delta = delta_s + std::size_t(s) * W;
            T* const sig = sig_s + std::size_t(s) * W;
            load_lanes<W>(xv, &u(b, t, d0), lanes);
            load_lanes<W>(dtv, &dt(b, t, d0), lanes);
            for (int j = 0; j < W; ++j) {
              T sp, sg;
              M::softplus_and_sigmoid(dtv[j] + bias[j], sp, sg);
              delta[j] = sp;
              sig[j] = sg;
              dx[j] = sp * xv[j];
            }
            for (int n = 0; n < N; ++n) {
              const T bn = bm(b, t, n);
              T* const as = a_s + (std::size_t(s) * N + n) * W;
              T* const hs = h_s + (std::size_t(s) * N + n) * W;
              for (int j = 0; j < W; ++j) {
                const T a = M::decay(delta[j] * a2[n][j]);
                h[n][j] = a * h[n][j] + dx[j] * bn;
                as[j] = a;
                hs[j] = h[n][j];
              }
            }
          }
        }

        // Reverse recurrence over the chunk.
        for (int s = len - 1; s >= 0; --s) {
          const int t = t0 + s;
          T xv[W], gv[W], delta[W], dx[W], ddelta[W], dxv[W];
          load_lanes<W>(xv, &u(b, t, d0), lanes);
          load_lanes<W>(gv, &dy(b, t, d0), lanes);
          for (int j = 0; j < W; ++j) {
            delta[j] = delta_s[std::size_t(s) * W + j];
            dx[j] = delta[j] * xv[j];
            ddelta[j] = T(0);
            dxv[j] = gv[j] * dsk[j];
            dD[g][j] += gv[j] * xv[j];
          }
          for (int n = 0; n < N; ++n) {
            const T bn = bm(b, t, n), cn = cm(b, t, n);
            const T* const as = a_s + (std::size_t(s) * N + n) * W;
            const T* const hs = h_s + (std::size_t(s) * N + n) * W;
            const T* const hp = s > 0 ? h_s + (std::size_t(s - 1) * N + n) * W : hstart[n];
            T db[W], dc[W];
            for (int j = 0; j < W; ++j) {
              const T dhv = dh[g][n][j] + gv[j] * cn;     // dL/dh_t
              dc[j] = gv[j] * hs[j];
              const T a = as[j];
              const T da = dhv * hp[j] * a;                // dL/d(ΔA) through exp
              ddelta[j] += da * anat[n][j] + dhv * xv[j] * bn;
              dA[g][n][j] += da * delta[j];
              db[j] = dhv * dx[j];
              dxv[j] += dhv * delta[j] * bn;
              dh[g][n][j] = dhv * a;                       // dL/dh_{t−1}
            }
            T* const pb = &partial(b, grp, t, 0, n);
            T* const pc = &partial(b, grp, t, 1, n);
            const T sb = lane_sum<W>(db), sc = lane_sum<W>(dc);
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
            dbias[g][j] += dv;
          }
        }
      }
    }

    for (int g = 0; g < G; ++g) {
      const int d0 = grp * scan_group_channels + g * W;
      if (d0 >= di) break;
      const int lanes = di - d0 < W ? di - d0 : W;
      for (int j = 0; j < lanes; ++j) {
        dd_skip(d0 + j) += dD[g][j];
        ddt_bias(d0 + j) += dbias[g][j];
        for (int n = 0; n < N; ++n) da_log(d0 + j, n) += dA[g][n][j] * -math::exp(a_log(d0 + j, n));  // dA_log = dA ⊙ A
      }
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

/// "avx2+fma" when the float scan runs its AVX2 copy on this machine, otherwise "baseline".
inline const char* selective_scan_isa() {
  return detail::host_has_avx2_fma() ? "avx2+fma" : (HYBRIDSEQ_SCAN_ISA_DISPATCH ? "baseline" : "compiler target");
}

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
    if (chunk < 1) fail<value_error>(api, "chunk is ", chunk, ", expected ≥ 1");
    core::check_shape(api, "h_chunks", h_chunks, core::dim(b), core::dim(scan_chunks(t, chunk)), core::dim(di),
                      core::dim(N));
  }
  constexpr int W = scan_lanes<T>;
  const int blocks = static_cast<int>((di + W - 1) / W);
  if (b == 0 || di == 0) return;
  Kokkos::parallel_for("hybridseq::kernels::selective_scan::forward[chunked]",
                       Kokkos::RangePolicy<Space>(exec, 0, b * blocks),
                       detail::ScanForward<N, T, Space>{u, dt, dt_bias, d_skip, a_log, bm, cm, h0, y, h_chunks, h_last,
                                                         chunk < 1 ? 1 : chunk, blocks, detail::use_avx2<T, Space>()});
}

/// Backward of `selective_scan_forward` from its chunk checkpoints (zero initial state or the
/// h0 the forward pass stored in h_chunks[:, 0]).
///
/// Accumulates (+=): du, ddt (B, T, Di) — ddt is the gradient of the pre-bias dt —; dBm, dCm
/// (B, T, N), any strides; dA_log (Di, N); dD, ddt_bias (Di). Scratch comes from `ws`:
/// B·⌈Di/64⌉·T·2N partial sums for dB/dC and, per thread, 2·chunk·(N + 1)·lanes values.
/// Deterministic: no atomics, the same bits at any thread count.
template <int N, Scalar T, ExecutionSpace Space>
void selective_scan_backward(const Space& exec, core::Workspace<Space>& ws, TensorArg<const T***, Space> u,
                             TensorArg<const T***, Space> dt, TensorArg<const T*, Space> dt_bias,
                             TensorArg<const T**, Space> a_log,
                             std::type_identity_t<StridedTensor<const T***, Space>> bm,
                             std::type_identity_t<StridedTensor<const T***, Space>> cm,
                             TensorArg<const T*, Space> d_skip, TensorArg<const T****, Space> h_chunks,
                             TensorArg<const T***, Space> dy, TensorArg<T***, Space> du, TensorArg<T***, Space> ddt,
                             TensorArg<T**, Space> da_log,
                             std::type_identity_t<StridedTensor<T***, Space>> dbm,
                             std::type_identity_t<StridedTensor<T***, Space>> dcm, TensorArg<T*, Space> dd_skip,
                             TensorArg<T*, Space> ddt_bias, int chunk = scan_default_chunk) {
  static_assert(N >= 1, "hybridseq::kernels::selective_scan_backward: N must be positive");
  const std::string api = "hybridseq::kernels::selective_scan_backward";
  detail::check_scan_inputs<N>(api, u, dt, dt_bias, a_log, bm, cm, d_skip);
  const auto b = static_cast<std::int64_t>(u.extent(0)), t = static_cast<std::int64_t>(u.extent(1)),
             di = static_cast<std::int64_t>(u.extent(2));
  if (chunk < 1) fail<value_error>(api, "chunk is ", chunk, ", expected ≥ 1");
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

  constexpr int W = scan_lanes<T>;
  const int groups = static_cast<int>((di + scan_group_channels - 1) / scan_group_channels);
  core::WorkspaceScope<Space> scope(ws);
  auto partial = ws.template allocate<T*****>("selective_scan.partial", b, groups, t, 2, N);
  const Kokkos::Experimental::UniqueToken<Space> token(exec);
  auto scratch = ws.template allocate<T**>("selective_scan.scratch", token.size(),
                                           std::size_t(chunk) * W * (2 * N + 2));
  Kokkos::parallel_for("hybridseq::kernels::selective_scan::backward[chunked]",
                       Kokkos::RangePolicy<Space>(exec, 0, b * groups),
                       detail::ScanBackward<N, T, Space>{u, dt, dy, dt_bias, d_skip, a_log, bm, cm, h_chunks, du, ddt,
                                                          da_log, dd_skip, ddt_bias, partial, scratch, token, chunk,
                                                          groups, detail::use_avx2<T, Space>()});
  Kokkos::parallel_for("hybridseq::kernels::selective_scan::reduce_groups", Kokkos::RangePolicy<Space>(exec, 0, b * t),
                       detail::ScanReduceGroups<T, Space>{partial, dbm, dcm});
}

}  // namespace kernels
}  // namespace hybridseq
