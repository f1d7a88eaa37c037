#pragma once
/// \file
/// The DSS sequence-mixing kernel of GSS (Gupta et al. 2022, "Diagonal State Spaces are as
/// Effective as Structured State Spaces"; used by Mehta et al. 2022, "Long Range Language
/// Modeling via Gated State Spaces"), forward and backward, in two algorithms.
///
/// Per channel h (H channels), with N complex modes Λ_n shared by all channels:
///   Λ_n = −exp(λre_n) + i·exp(λim_n),   C̃_{h,n} = C_{h,n} (e^{Λ_n} − 1) / Λ_n,
///   K_h[ℓ] = Re Σ_n C̃_{h,n} e^{Λ_n ℓ},
///   y_h[t] = Σ_{s≤t} K_h[t−s] u_h[s] + D_h u_h[t]                         (convolution form)
///          = Re Σ_n C̃_{h,n} s_{h,n}[t] + D_h u_h[t],  s[t] = e^{Λ} s[t−1] + u[t]  (recurrence form)
///
/// Algorithms (measurements behind the default: bench/gss_benchmarks.cpp, `gss_mix/*`):
///  * `fft`: K (L, H) is one GEMM per chunk of ℓ with the Vandermonde matrix e^{Λ_n ℓ}
///    (generated in double, rounded to T), then a causal FFT convolution per channel,
///    zero-padded to the power of two M ≥ 2L−1, with a lane-vectorised radix-4 FFT that
///    carries 8 channels per transform. Backward: two FFT correlations give du and dK, and
///    one GEMM per ℓ-chunk gives dC̃ and dΛ from dK. Cost O(H·N·L) in BLAS plus
///    O(B·H·L log L); scratch O(L·H), never L×H×N.
///  * `scan`: the exact diagonal recurrence, one work item per (b, h), all N modes of a
///    channel in one inner loop. Backward re-runs the recurrence from checkpoints every
///    `chunk` steps, kept per worker (never L×H×N), and runs the adjoint recurrence
///    backwards. Cost O(B·H·N·L) flops, not BLAS-shaped; it is also decoding (L = 1) and prefill.
///
/// Complex quantities are stored as real tensors with separate real and imaginary parts.
/// Gradients of complex quantities use the convention g = ∂L/∂Re z + i·∂L/∂Im z, for which
/// the chain rule through a holomorphic w = f(z) is g_z = g_w · conj(f′(z)).
/// Parameter-gradient reductions run in a fixed order (no atomics): bit-identical results
/// at any thread count.

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "../core/check.hpp"
#include "../core/spaces.hpp"
#include "../core/workspace.hpp"
#include "dss_batched_fft.hpp"
#include "elementwise.hpp"
#include "gemm.hpp"

namespace hybridseq::kernels {

/// How the training path mixes the sequence.
///
/// `fft` is faster than `scan` forward and backward at every T (hybridseq-bench `gss_mix/*`
/// compares them): its O(N) work per token is a BLAS GEMM shared by the whole batch, the
/// scan's 11 (forward) and 37 (backward) flops per state element and batch row are not. So
/// `fft` is the default. `scan` keeps its
/// place because the recurrence *is* decoding (step), because it parallelises over (b, h)
/// where `fft` has only H/8 channel groups (it is the default on non-host spaces), and
/// because as an independent algorithm it cross-checks `fft` in the tests.
enum class DssAlgorithm { fft, scan };

constexpr const char* name_of(DssAlgorithm a) {
  return a == DssAlgorithm::fft ? "fft" : "scan";
}

/// The discretised modes read by every mixing kernel; computed from the parameters once per
/// call by `dss_discretize`.
template <class T, class Space>
struct DssModes {
  Tensor<double**, Space> lambda;  // (2, N) Λ: row 0 real, row 1 imaginary (double: ℓ·Λ reaches 1e5)
  Tensor<T**, Space> a;            // (2, N) e^{Λ}: real, imaginary
  Tensor<T**, Space> c;            // (H, 2N) C̃: [Re C̃ | Im C̃]
};

/// Gradients with respect to the modes, accumulated by the mixing kernels' backward and
/// turned into parameter gradients by `dss_discretize_backward`.
template <class T, class Space>
struct DssModeGrads {
  Tensor<double**, Space> lambda;  // (2, N) ∂L/∂Λ (direct dependence through e^{Λℓ})
  Tensor<double**, Space> a;       // (2, N) ∂L/∂e^{Λ} (scan path)
  Tensor<T**, Space> c;            // (H, 2N) ∂L/∂C̃
};

/// Allocates modes (H channels, N modes) from a workspace.
template <class T, class Space>
DssModes<T, Space> allocate_dss_modes(core::Workspace<Space>& ws, int h, int n) {
  return {ws.template allocate<double**>("dss.lambda", 2, n), ws.template allocate<T**>("dss.a", 2, n),
          ws.template allocate<T**>("dss.c", h, 2 * n)};
}

/// Allocates zeroed mode gradients from a workspace.
template <class T, class Space>
DssModeGrads<T, Space> allocate_dss_mode_grads(core::Workspace<Space>& ws, int h, int n) {
  return {ws.template allocate_zeroed<double**>("dss.g_lambda", 2, n),
          ws.template allocate_zeroed<double**>("dss.g_a", 2, n),
          ws.template allocate_zeroed<T**>("dss.g_c", h, 2 * n)};
}

/// Arena bytes of allocate_dss_modes / allocate_dss_mode_grads (h channels, n modes).
template <class T>
std::size_t dss_modes_bytes(int h, int n) {
  return core::padded_bytes<double>(2 * n) + core::padded_bytes<T>(2 * n) + core::padded_bytes<T>(2 * h * n);
}
template <class T>
std::size_t dss_mode_grads_bytes(int h, int n) {
  return 2 * core::padded_bytes<double>(2 * n) + core::padded_bytes<T>(2 * h * n);
}

/// FFT length for a causal convolution of length L: the smallest power of two M ≥ 2L − 1
/// (wrap-free). Powers of two keep the lane FFT to radix-4/2 stages; the price is up to 2x
/// padding when L is just above a power of two.
inline std::int64_t dss_fft_size(std::int64_t length) {
  std::int64_t m = 1;
  while (m < 2 * length - 1) m *= 2;
  return m;
}

namespace detail {

template <class Space>
constexpr bool dss_host_space = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Space::memory_space>::accessible;

/// Entries of the Vandermonde block below T's smallest normal are stored as zero. Fast
/// modes decay through float's denormal range within tens of steps, and denormal GEMM
/// operands cost microcode assists. The error is below 1.2e-38 (float) / 2.2e-308 (double)
/// per entry.
template <class T>
KOKKOS_INLINE_FUNCTION T dss_flush(const double x) {
  return math::fabs(x) < double(Kokkos::Experimental::norm_min<T>::value) ? T(0) : static_cast<T>(x);
}

// Per mode n: Λ, e^Λ, and C̃ for every channel; all in double, rounded once.
template <class T, class Space>
struct DssDiscretize {
  Tensor<const T*, Space> lambda_re, lambda_im;  // (N)
  Tensor<const T**, Space> c_re, c_im;           // (H, N)
  DssModes<T, Space> m;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t n) const {
    const std::int64_t nn = lambda_re.extent(0), hh = c_re.extent(0);
    const double lr = -math::exp(double(lambda_re(n))), li = math::exp(double(lambda_im(n)));
    const double c = math::cos(li), s = math::sin(li), e = math::exp(lr);
    // e^Λ − 1 without cancellation for small |Λ|: expm1(re)·cos(im) − 2 sin²(im/2) + i e^re sin(im)
    const double sh = math::sin(0.5 * li);
    const double nr = math::expm1(lr) * c - 2.0 * sh * sh, ni = e * s;
    const double den = lr * lr + li * li;  // |Λ|² ≥ exp(2 λim) > 0
    const double wr = (nr * lr + ni * li) / den, wi = (ni * lr - nr * li) / den;
    m.lambda(0, n) = lr;
    m.lambda(1, n) = li;
    m.a(0, n) = static_cast<T>(e * c);
    m.a(1, n) = static_cast<T>(e * s);
    for (std::int64_t h = 0; h < hh; ++h) {
      const double cr = c_re(h, n), ci = c_im(h, n);
      m.c(h, n) = static_cast<T>(cr * wr - ci * wi);
      m.c(h, nn + n) = static_cast<T>(cr * wi + ci * wr);
    }
  }
};

// Per mode n: parameter gradients from the mode gradients. C̃ = C·w(Λ), a = e^Λ, and Λ's
// direct dependence (through e^{Λℓ}) arrives in g.lambda.
template <class T, class Space>
struct DssDiscretizeBackward {
  Tensor<const T*, Space> lambda_re, lambda_im;  // (N)
  Tensor<const T**, Space> c_re, c_im;           // (H, N)
  DssModeGrads<T, Space> g;
  Tensor<T*, Space> g_lambda_re, g_lambda_im;  // (N) +=
  Tensor<T**, Space> g_c_re, g_c_im;           // (H, N) +=
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t n) const {
    const std::int64_t nn = lambda_re.extent(0), hh = c_re.extent(0);
    const double er = math::exp(double(lambda_re(n))), ei = math::exp(double(lambda_im(n)));
    const double lr = -er, li = ei;
    const double c = math::cos(li), s = math::sin(li), e = math::exp(lr);
    const double sh = math::sin(0.5 * li);
    const double nr = math::expm1(lr) * c - 2.0 * sh * sh, ni = e * s;
    const double den = lr * lr + li * li;
    const double wr = (nr * lr + ni * li) / den, wi = (ni * lr - nr * li) / den;
    // w′(Λ) = (e^Λ − w) / Λ
    const double pr = e * c - wr, pi = e * s - wi;
    const double dwr = (pr * lr + pi * li) / den, dwi = (pi * lr - pr * li) / den;
    double gwr = 0, gwi = 0;
    for (std::int64_t h = 0; h < hh; ++h) {
      const double gr = g.c(h, n), gi = g.c(h, nn + n);
      const double cr = c_re(h, n), ci = c_im(h, n);
      // g_C = g_C̃ · conj(w);  g_w += g_C̃ · conj(C)
      g_c_re(h, n) += static_cast<T>(gr * wr + gi * wi);
      g_c_im(h, n) += static_cast<T>(gi * wr - gr * wi);
      gwr += gr * cr + gi * ci;
      gwi += gi * cr - gr * ci;
    }
    const double gar = g.a(0, n), gai = g.a(1, n);
    // g_Λ = g_direct + g_w·conj(w′) + g_a·conj(e^Λ)
    const double glr = g.lambda(0, n) + gwr * dwr + gwi * dwi + gar * e * c + gai * e * s;
    const double gli = g.lambda(1, n) + gwi * dwr - gwr * dwi + gai * e * c - gar * e * s;
    g_lambda_re(n) += static_cast<T>(-er * glr);
    g_lambda_im(n) += static_cast<T>(ei * gli);
  }
};

// Rows [0, q) of the Vandermonde block starting at ℓ0:
//   V(j, n) = Re e^{Λ_n ℓ},  V(j, N+n) = −Im e^{Λ_n ℓ},  ℓ = ℓ0 + j
// and, when `weighted`, V(j, 2N+n), V(j, 3N+n) = the same times ℓ (for ∂K/∂Λ).
// One work item per block of `block` modes walks the rows, so writes are contiguous and the
// mode loop vectorises. The walk multiplies by e^Λ in double from a directly computed start:
// relative error ≈ q·1e-16, far below T's rounding.
template <class T, class Space>
struct DssVandermonde {
  static constexpr int block = 32;
  Tensor<const double**, Space> lambda;  // (2, N)
  Tensor<T**, Space> v;                  // (q, 2N or 4N)
  std::int64_t l0, q;
  bool weighted;
  bool reverse = false;  // row q−1−j holds ℓ = ℓ0 + j (for Σ_j u[j] e^{Λ(L−1−j)})
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t item) const {
    const std::int64_t nn = lambda.extent(1), n0 = item * block;
    const int w = int(nn - n0 < block ? nn - n0 : block);
    double pr[block], pi[block], sr[block], si[block];
    for (int k = 0; k < w; ++k) {
      const double re = lambda(0, n0 + k), im = lambda(1, n0 + k);
      const double e = math::exp(re);
      sr[k] = e * math::cos(im);
      si[k] = e * math::sin(im);
      pr[k] = pi[k] = 0;
      const double log_mag = re * double(l0);
      if (log_mag > -690.0) {  // e^-690 ≈ 1e-300: zero for every T
        const double mag = math::exp(log_mag);
        pr[k] = mag * math::cos(im * double(l0));
        pi[k] = mag * math::sin(im * double(l0));
      }
    }
    for (std::int64_t j = 0; j < q; ++j) {
      T* __restrict__ row = &v(reverse ? q - 1 - j : j, 0);
      const T l = static_cast<T>(l0 + j);
      for (int k = 0; k < w; ++k) {
        const T vr = dss_flush<T>(pr[k]), vi = dss_flush<T>(-pi[k]);
        row[n0 + k] = vr;
        row[nn + n0 + k] = vi;
        if (weighted) {  // |ℓ·v| ≥ |v| for ℓ ≥ 1, so these stay normal too
          row[2 * nn + n0 + k] = l * vr;
          row[3 * nn + n0 + k] = l * vi;
        }
        const double r = pr[k] * sr[k] - pi[k] * si[k], i = pr[k] * si[k] + pi[k] * sr[k];
        // Below every normal the walk only decays further: stop it before double denormals.
        const bool live = math::fabs(r) + math::fabs(i) >= 1e-300;
        pr[k] = live ? r : 0.0;
        pi[k] = live ? i : 0.0;
      }
    }
  }
};

// g_lambda(n) += Σ_h conj(C̃_{h,n}) · (G(h, 2N+n) + i·G(h, 3N+n)), fixed order over h.
template <class T, class Space>
struct DssLambdaFromKernelGrad {
  Tensor<const T**, Space> c;  // (H, 2N)
  Tensor<const T**, Space> g;  // (H, 4N)
  Tensor<double**, Space> g_lambda;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t n) const {
    const std::int64_t nn = g_lambda.extent(1);
    double ar = 0, ai = 0;
    for (std::int64_t h = 0; h < std::int64_t(c.extent(0)); ++h) {
      const double cr = c(h, n), ci = c(h, nn + n);
      const double zr = g(h, 2 * nn + n), zi = g(h, 3 * nn + n);
      ar += cr * zr + ci * zi;
      ai += cr * zi - ci * zr;
    }
    g_lambda(0, n) += ar;
    g_lambda(1, n) += ai;
  }
};

template <class T, class Space>
struct DssAddColumns {  // out(h, k) += g(h, k) for k < out.extent(1)
  Tensor<const T**, Space> g;
  Tensor<T**, Space> out;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t h) const {
    for (std::int64_t k = 0; k < std::int64_t(out.extent(1)); ++k) out(h, k) += g(h, k);
  }
};

/// The recurrence for one channel and one time step, all N modes:
///   s ← a ⊙ s + u;  returns Re Σ_n c_n s_n.
/// Lane-wise partial sums (8 lanes) let the compiler vectorise the mode loop without
/// reassociating a float reduction; the summation order is fixed, so results do not
/// depend on the thread count.
template <class T>
KOKKOS_INLINE_FUNCTION T dss_recurrence_step(const std::int64_t n, const T* __restrict__ ar, const T* __restrict__ ai,
                                             const T* __restrict__ cr, const T* __restrict__ ci, T* __restrict__ sr,
                                             T* __restrict__ si, const T u) {
  constexpr int W = 8;
  T acc[W] = {};
  std::int64_t k = 0;
  for (; k + W <= n; k += W) {
    for (int l = 0; l < W; ++l) {
      const T r = ar[k + l] * sr[k + l] - ai[k + l] * si[k + l] + u;
      const T i = ar[k + l] * si[k + l] + ai[k + l] * sr[k + l];
      sr[k + l] = r;
      si[k + l] = i;
      acc[l] += cr[k + l] * r - ci[k + l] * i;
    }
  }
  for (int l = 0; k < n; ++k, ++l) {
    const T r = ar[k] * sr[k] - ai[k] * si[k] + u;
    const T i = ar[k] * si[k] + ai[k] * sr[k];
    sr[k] = r;
    si[k] = i;
    acc[l] += cr[k] * r - ci[k] * i;
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// One work item per (b, h): runs the recurrence over t from the state (s_re, s_im)(b, h, :)
// and leaves the final state there.
template <class T, class Space>
struct DssScanForward {
  Tensor<const T**, Space> a;      // (2, N)
  Tensor<const T**, Space> c;      // (H, 2N)
  Tensor<const T*, Space> d;       // (H)
  Tensor<const T***, Space> u;     // (B, L, H)
  Tensor<T***, Space> y;           // (B, L, H)
  Tensor<T***, Space> s_re, s_im;  // (B, H, N)
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t item) const {
    const std::int64_t hh = u.extent(2), nn = a.extent(1), len = u.extent(1);
    const std::int64_t b = item / hh, h = item % hh;
    T* sr = &s_re(b, h, 0);
    T* si = &s_im(b, h, 0);
    const T* cr = &c(h, 0);
    const T* ci = &c(h, nn);
    const T dh = d(h);
    for (std::int64_t t = 0; t < len; ++t) {
      const T ut = u(b, t, h);
      y(b, t, h) = dss_recurrence_step<T>(nn, &a(0, 0), &a(1, 0), cr, ci, sr, si, ut) + dh * ut;
    }
  }
};

// Backward of the recurrence from a zero initial state, one work item per (b, h), run by
// `workers` workers that each own a checkpoint buffer (ceil(L/Q) states) and a chunk buffer
// (Q states). Per item: a forward pass stores the state before every chunk; then, chunk by
// chunk from the end, the chunk's states are recomputed and the adjoint recurrence
//   g[t] = dy[t]·conj(C̃) + conj(a)·g[t+1]
// runs backwards, giving du[t] += D dy[t] + Σ_n Re g_n[t], ∂L/∂C̃ += dy[t]·conj(s[t]),
// ∂L/∂a += g[t]·conj(s[t−1]). Per-item parameter partials go to (B·H, ·) buffers and are
// reduced in a fixed order afterwards.
template <class T, class Space>
struct DssScanBackward {
  Tensor<const T**, Space> a;      // (2, N)
  Tensor<const T**, Space> c;      // (H, 2N)
  Tensor<const T*, Space> d;       // (H)
  Tensor<const T***, Space> u;     // (B, L, H)
  Tensor<const T***, Space> dy;    // (B, L, H)
  Tensor<T***, Space> du;          // (B, L, H) +=
  Tensor<T**, Space> part_c;       // (B·H, 2N) ∂L/∂C̃ of the item
  Tensor<T**, Space> part_a;       // (B·H, 2N) ∂L/∂a of the item
  Tensor<T*, Space> part_d;        // (B·H)
  Tensor<T**, Space> checkpoints;  // (workers, ceil(L/Q)·2N)
  Tensor<T**, Space> chunk;        // (workers, Q·2N)
  Tensor<T**, Space> adjoint;      // (workers, 2N)
  std::int64_t q, workers;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t w) const {
    const std::int64_t items = part_d.extent(0);
    for (std::int64_t item = w; item < items; item += workers) run(w, item);
  }

  KOKKOS_INLINE_FUNCTION void run(const std::int64_t w, const std::int64_t item) const {
    const std::int64_t hh = u.extent(2), nn = a.extent(1), len = u.extent(1);
    const std::int64_t b = item / hh, h = item % hh;
    const T* __restrict__ ar = &a(0, 0);
    const T* __restrict__ ai = &a(1, 0);
    const T* __restrict__ cr = &c(h, 0);
    const T* __restrict__ ci = &c(h, nn);
    T* ck = &checkpoints(w, 0);
    T* buf = &chunk(w, 0);
    T* __restrict__ gr = &adjoint(w, 0);
    T* __restrict__ gi = gr + nn;
    T* __restrict__ pcr = &part_c(item, 0);
    T* __restrict__ pci = pcr + nn;
    T* __restrict__ par = &part_a(item, 0);
    T* __restrict__ pai = par + nn;
    const std::int64_t chunks = (len + q - 1) / q;
    // Forward: the state before each chunk (zero before the first).
    {
      T* sr = ck;
      T* si = ck + nn;
      for (std::int64_t k = 0; k < 2 * nn; ++k) ck[k] = T(0);
      for (std::int64_t cidx = 0; cidx + 1 < chunks; ++cidx) {
        T* nr = ck + (cidx + 1) * 2 * nn;
        T* ni = nr + nn;
        for (std::int64_t k = 0; k < nn; ++k) nr[k] = sr[k], ni[k] = si[k];
        for (std::int64_t t = cidx * q; t < (cidx + 1) * q; ++t) {
          const T ut = u(b, t, h);
          for (std::int64_t k = 0; k < nn; ++k) {
            const T r = ar[k] * nr[k] - ai[k] * ni[k] + ut;
            ni[k] = ar[k] * ni[k] + ai[k] * nr[k];
            nr[k] = r;
          }
        }
        sr = nr;
        si = ni;
      }
    }
    for (std::int64_t k = 0; k < 2 * nn; ++k) gr[k] = T(0), pcr[k] = T(0), par[k] = T(0);
    const T dh = d(h);
    T gd = 0;
    for (std::int64_t cidx = chunks - 1; cidx >= 0; --cidx) {
      const std::int64_t t0 = cidx * q, t1 = t0 + q < len ? t0 + q : len;
      // Recompute the chunk's states: buf row j holds s[t0 + j].
      const T* pr = ck + cidx * 2 * nn;
      for (std::int64_t t = t0; t < t1; ++t) {
        T* __restrict__ sr = buf + (t - t0) * 2 * nn;
        T* __restrict__ si = sr + nn;
        const T* __restrict__ qr = pr;
        const T* __restrict__ qi = pr + nn;
        const T ut = u(b, t, h);
        for (std::int64_t k = 0; k < nn; ++k) {
          sr[k] = ar[k] * qr[k] - ai[k] * qi[k] + ut;
          si[k] = ar[k] * qi[k] + ai[k] * qr[k];
        }
        pr = sr;
      }
      for (std::int64_t t = t1 - 1; t >= t0; --t) {
        const T* __restrict__ sr = buf + (t - t0) * 2 * nn;
        const T* __restrict__ si = sr + nn;
        const T* __restrict__ qr = t > t0 ? sr - 2 * nn : ck + cidx * 2 * nn;  // s[t−1]
        const T* __restrict__ qi = qr + nn;
        const T g_y = dy(b, t, h);
        constexpr int W = 8;
        T acc[W] = {};
        std::int64_t k = 0;
        auto body = [&](const std::int64_t m, const int l) {
          // g ← dy·conj(C̃) + conj(a)·g
          const T r = g_y * cr[m] + ar[m] * gr[m] + ai[m] * gi[m];
          const T i = -g_y * ci[m] + ar[m] * gi[m] - ai[m] * gr[m];
          gr[m] = r;
          gi[m] = i;
          acc[l] += r;
          pcr[m] += g_y * sr[m];
          pci[m] -= g_y * si[m];
          par[m] += r * qr[m] + i * qi[m];
          pai[m] += i * qr[m] - r * qi[m];
        };
        for (; k + W <= nn; k += W)
          for (int l = 0; l < W; ++l) body(k + l, l);
        for (int l = 0; k < nn; ++k, ++l) body(k, l);
        const T ut = u(b, t, h);
        du(b, t, h) += (((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))) + dh * g_y;
        gd += g_y * ut;
      }
    }
    part_d(item) = gd;
  }
};

// Deterministic reductions of the scan's per-item partials.
template <class T, class Space>
struct DssScanReduceC {  // g_c(h, k) += Σ_b part_c(b·H + h, k); one item per h
  Tensor<const T**, Space> part_c;
  Tensor<const T*, Space> part_d;
  Tensor<T**, Space> g_c;
  Tensor<T*, Space> g_d;
  std::int64_t batch;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t h) const {
    const std::int64_t hh = g_c.extent(0);
    for (std::int64_t k = 0; k < std::int64_t(g_c.extent(1)); ++k) {
      T s = 0;
      for (std::int64_t b = 0; b < batch; ++b) s += part_c(b * hh + h, k);
      g_c(h, k) += s;
    }
    T s = 0;
    for (std::int64_t b = 0; b < batch; ++b) s += part_d(b * hh + h);
    g_d(h) += s;
  }
};

template <class T, class Space>
struct DssScanReduceA {  // g_a(·, n) += Σ_items part_a(item, ·); one item per n
  Tensor<const T**, Space> part_a;
  Tensor<double**, Space> g_a;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t n) const {
    const std::int64_t nn = g_a.extent(1);
    double r = 0, i = 0;
    for (std::int64_t item = 0; item < std::int64_t(part_a.extent(0)); ++item) {
      r += part_a(item, n);
      i += part_a(item, nn + n);
    }
    g_a(0, n) += r;
    g_a(1, n) += i;
  }
};

/// Power-of-two FFT on W lanes at once (lane l of element i at re[i·W + l], im[i·W + l]):
/// radix-4 Stockham stages, plus one radix-2 stage when log2 M is odd; forward sign
/// e^{−2πi/M}, unscaled. The lanes are neighbouring channels, so loading (L, H)-major data
/// is a contiguous copy and every butterfly vectorises over lanes. It replaced Eigen's FFT
/// (kissfft: one real channel per transform, strided gathers, plans cached per thread).
/// Power-of-two sizes only.
template <class T, int W>
struct LaneFft {
  // The butterflies take their operands as restrict-qualified parameters: GCC ignores
  // restrict on block-scope pointers, and without it the lane loops stay scalar.
  KOKKOS_INLINE_FUNCTION static void radix2(const T* __restrict__ ar, const T* __restrict__ ai,
                                            const T* __restrict__ br, const T* __restrict__ bi, T* __restrict__ y0r,
                                            T* __restrict__ y0i, T* __restrict__ y1r, T* __restrict__ y1i, const T wr,
                                            const T wi) {
    for (int l = 0; l < W; ++l) {
      const T dr = ar[l] - br[l], di = ai[l] - bi[l];
      y0r[l] = ar[l] + br[l];
      y0i[l] = ai[l] + bi[l];
      y1r[l] = dr * wr - di * wi;
      y1i[l] = dr * wi + di * wr;
    }
  }

  // DFT-4 of (a, b, c, d): (a+c)+(b+d), (a−c)−i(b−d), (a+c)−(b+d), (a−c)+i(b−d); outputs 1–3
  // times w1, w2, w3. Outputs are s·W apart.
  KOKKOS_INLINE_FUNCTION static void radix4(const T* __restrict__ pa, const T* __restrict__ pai,
                                            const T* __restrict__ pb, const T* __restrict__ pbi,
                                            const T* __restrict__ pc, const T* __restrict__ pci,
                                            const T* __restrict__ pd, const T* __restrict__ pdi, T* __restrict__ y0r,
                                            T* __restrict__ y0i, T* __restrict__ y1r, T* __restrict__ y1i,
                                            T* __restrict__ y2r, T* __restrict__ y2i, T* __restrict__ y3r,
                                            T* __restrict__ y3i, const T w1r, const T w1i, const T w2r, const T w2i,
                                            const T w3r, const T w3i) {
    for (int l = 0; l < W; ++l) {
      const T apcr = pa[l] + pc[l], apci = pai[l] + pci[l], amcr = pa[l] - pc[l], amci = pai[l] - pci[l];
      const T bpdr = pb[l] + pd[l], bpdi = pbi[l] + pdi[l];
      const T jr = pbi[l] - pdi[l], ji = pd[l] - pb[l];  // −i(b − d)
      const T t1r = amcr + jr, t1i = amci + ji, t2r = apcr - bpdr, t2i = apci - bpdi;
      const T t3r = amcr - jr, t3i = amci - ji;
      y0r[l] = apcr + bpdr;
      y0i[l] = apci + bpdi;
      y1r[l] = t1r * w1r - t1i * w1i;
      y1i[l] = t1r * w1i + t1i * w1r;
      y2r[l] = t2r * w2r - t2i * w2i;
      y2i[l] = t2r * w2i + t2i * w2r;
      y3r[l] = t3r * w3r - t3i * w3i;
      y3i[l] = t3r * w3i + t3i * w3r;
    }
  }

  /// Transforms x, using y as the other ping-pong buffer; returns true when the result is in
  /// x, false when it is in y. tw (2, M): ω^k = e^{−2πik/M}, real row then imaginary row.
  KOKKOS_INLINE_FUNCTION static bool forward(const std::int64_t m, const T* __restrict__ twr, const T* __restrict__ twi,
                                             T* xr, T* xi, T* yr, T* yi) {
    std::int64_t n = m, s = 1;
    bool in_x = true;
    T *ar = xr, *ai = xi, *br = yr, *bi = yi;
    auto swap = [&] {
      T* t = ar;
      ar = br, br = t;
      t = ai;
      ai = bi, bi = t;
      in_x = !in_x;
    };
    int log2m = 0;
    while ((std::int64_t(1) << log2m) < m) ++log2m;
    if (log2m & 1) {
      const std::int64_t h = n / 2;
      for (std::int64_t p = 0; p < h; ++p)
        for (std::int64_t q = 0; q < s; ++q) {
          const std::int64_t i0 = (q + s * p) * W, i1 = (q + s * (p + h)) * W, o = (q + s * 2 * p) * W;
          radix2(ar + i0, ai + i0, ar + i1, ai + i1, br + o, bi + o, br + o + s * W, bi + o + s * W, twr[p * s],
                 twi[p * s]);
        }
      n = h, s *= 2;
      swap();
    }
    for (; n > 1; n /= 4, s *= 4) {
      const std::int64_t q4 = n / 4;
      for (std::int64_t p = 0; p < q4; ++p) {
        const T w1r = twr[p * s], w1i = twi[p * s], w2r = twr[2 * p * s], w2i = twi[2 * p * s];
        const T w3r = twr[3 * p * s], w3i = twi[3 * p * s];
        for (std::int64_t q = 0; q < s; ++q) {
          const std::int64_t ia = (q + s * p) * W, ib = ia + s * q4 * W, ic = ib + s * q4 * W, id = ic + s * q4 * W;
          const std::int64_t o0 = (q + s * 4 * p) * W, o1 = o0 + s * W, o2 = o1 + s * W, o3 = o2 + s * W;
          radix4(ar + ia, ai + ia, ar + ib, ai + ib, ar + ic, ai + ic, ar + id, ai + id, br + o0, bi + o0, br + o1,
                 bi + o1, br + o2, bi + o2, br + o3, bi + o3, w1r, w1i, w2r, w2i, w3r, w3i);
        }
      }
      swap();
    }
    return in_x;
  }
};

// ω^k = e^{−2πik/M} in double, rounded to T; one item per k.
template <class T, class Space>
struct DssTwiddles {
  Tensor<T**, Space> tw;  // (2, M)
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t k) const {
    const double a = -6.283185307179586476925 * double(k) / double(tw.extent(1));
    tw(0, k) = static_cast<T>(math::cos(a));
    tw(1, k) = static_cast<T>(math::sin(a));
  }
};

// Causal FFT convolution. One group = 2W channels: channels [h0, h0+W) ride in the real
// parts of W lanes and [h0+W, h0+2W) in the imaginary parts, so one complex transform
// serves two real channels; spectra are separated by conjugate symmetry,
//   X_a[f] = (Z[f] + conj Z[−f]) / 2,   X_b[f] = (Z[f] − conj Z[−f]) / 2i,
// and recombined as Y = Y_a + i·Y_b, whose inverse has y_a in its real and y_b in its
// imaginary part. Inverses are forward transforms of conjugates: x = conj(FFT(conj X))/M.
// Worker w owns 3 (forward) or 5 (backward) complex lane buffers of M; groups are dealt out
// round-robin.
template <class T, class Space>
struct DssConvFft {
  static constexpr int W = 4;  // lanes: wider ones spill L2 at M = 16384
  using Fft = LaneFft<T, W>;
  Tensor<const T**, Space> k;    // (L, H)
  Tensor<const T***, Space> u;   // (B, L, H)
  Tensor<const T*, Space> d;     // (H)
  Tensor<const T***, Space> dy;  // backward only: (B, L, H)
  Tensor<T***, Space> out;       // forward: y (B, L, H) =; backward: du +=
  Tensor<T**, Space> dk;         // backward only: (L, H) =
  Tensor<T*, Space> dd;          // backward only: (H) +=
  Tensor<const T**, Space> tw;   // (2, M)
  Tensor<T**, Space> scratch;    // (workers, buffers · 2·M·W)
  std::int64_t m, workers;
  bool backward;

  static constexpr int buffers(bool backward) { return backward ? 5 : 3; }

  struct Buf {  // one complex lane buffer
    T *re, *im;
  };

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t w) const {
    const std::int64_t hh = k.extent(1), groups = (hh + 2 * W - 1) / (2 * W);
    T* base = &scratch(w, 0);
    Buf buf[5];
    for (int i = 0; i < buffers(backward); ++i) buf[i] = {base + 2 * i * m * W, base + (2 * i + 1) * m * W};
    for (std::int64_t g = w; g < groups; g += workers) {
      if (backward)
        run_backward(g * 2 * W, buf);
      else
        run_forward(g * 2 * W, buf);
    }
  }

  // Transforms buffer `x` (using `y` as ping-pong); afterwards x holds the spectrum.
  KOKKOS_INLINE_FUNCTION void transform(Buf& x, Buf& y) const {
    if (!Fft::forward(m, &tw(0, 0), &tw(1, 0), x.re, x.im, y.re, y.im)) {
      const Buf t = x;
      x = y;
      y = t;
    }
  }

  // Loads channels (h0 + l) into real parts and (h0 + W + l) into imaginary parts, zero-padded.
  // `src` points at (t = 0, h = 0) of an (L, H) row-major slice. Full groups take a
  // branch-free path (the common case: H a multiple of 8).
  KOKKOS_INLINE_FUNCTION void load(const Buf& x, const std::int64_t h0, const T* src) const {
    const std::int64_t hh = k.extent(1), len = k.extent(0);
    if (h0 + 2 * W <= hh) {
      for (std::int64_t t = 0; t < len; ++t) {
        const T* __restrict__ row = src + t * hh + h0;
        T* __restrict__ re = x.re + t * W;
        T* __restrict__ im = x.im + t * W;
        for (int l = 0; l < W; ++l) re[l] = row[l], im[l] = row[W + l];
      }
    } else {
      for (std::int64_t t = 0; t < len; ++t)
        for (int l = 0; l < W; ++l) {
          x.re[t * W + l] = h0 + l < hh ? src[t * hh + h0 + l] : T(0);
          x.im[t * W + l] = h0 + W + l < hh ? src[t * hh + h0 + W + l] : T(0);
        }
    }
    for (std::int64_t i = len * W; i < m * W; ++i) x.re[i] = x.im[i] = T(0);
  }

  // dst(t, h0 + l) (+)= re(t, l) + D·v(t, h0 + l), dst(t, h0 + W + l) (+)= −im(t, l) + D·v(…):
  // the inverse transform's conjugate, plus the skip term.
  template <bool Accumulate>
  KOKKOS_INLINE_FUNCTION void store(const Buf& y, const std::int64_t h0, T* dst, const T* v) const {
    const std::int64_t hh = k.extent(1), len = k.extent(0);
    for (std::int64_t t = 0; t < len; ++t) {
      T* __restrict__ row = dst + t * hh + h0;
      const T* __restrict__ vrow = v + t * hh + h0;
      for (int l = 0; l < 2 * W; ++l) {
        if (h0 + l >= hh) break;
        const T val = (l < W ? y.re[t * W + l] : -y.im[t * W + l - W]) + d(h0 + l) * vrow[l];
        if (Accumulate)
          row[l] += val;
        else
          row[l] = val;
      }
    }
  }

  // Spectrum of the forward pair at bin f from the K and u pair spectra at f and −f:
  // Y = K_a·U_a + i·K_b·U_b = ¼[(P + P̄′)(Q + Q̄′) − i(P − P̄′)(Q − Q̄′)], P = Ẑ_k[f],
  // P̄′ = conj Ẑ_k[−f] (likewise Q for u); stores conj(Y)/M (c = 1/4M) for the inverse.
  // Restrict-qualified parameters, as in LaneFft, so that the lane loop vectorises.
  KOKKOS_INLINE_FUNCTION static void combine_forward(const T* __restrict__ kr, const T* __restrict__ ki,
                                                     const T* __restrict__ kmr, const T* __restrict__ kmi,
                                                     const T* __restrict__ xr, const T* __restrict__ xi,
                                                     const T* __restrict__ xmr, const T* __restrict__ xmi,
                                                     T* __restrict__ yr, T* __restrict__ yi, const T c) {
    for (int l = 0; l < W; ++l) {
      const T ar = kr[l] + kmr[l], ai = ki[l] - kmi[l], br = kr[l] - kmr[l], bi = ki[l] + kmi[l];
      const T cr = xr[l] + xmr[l], ci = xi[l] - xmi[l], dr = xr[l] - xmr[l], di = xi[l] + xmi[l];
      const T acr = ar * cr - ai * ci, aci = ar * ci + ai * cr;
      const T bdr = br * dr - bi * di, bdi = br * di + bi * dr;
      yr[l] = c * (acr + bdi);
      yi[l] = -c * (aci - bdr);
    }
  }

  // Backward at bin f: unpacks X_a = (Z[f] + conj Z[−f])/2, X_b = −i(Z[f] − conj Z[−f])/2 for
  // K, dy (G) and u, stores conj(conj(K_a)·G_a + i·conj(K_b)·G_b)/M (the du pair, for the
  // inverse) and accumulates conj(U_a)·G_a + i·conj(U_b)·G_b (the dK pair).
  KOKKOS_INLINE_FUNCTION static void combine_backward(
      const T* __restrict__ kr, const T* __restrict__ ki, const T* __restrict__ kmr, const T* __restrict__ kmi,
      const T* __restrict__ gr, const T* __restrict__ gi, const T* __restrict__ gmr, const T* __restrict__ gmi,
      const T* __restrict__ ur, const T* __restrict__ ui, const T* __restrict__ umr, const T* __restrict__ umi,
      T* __restrict__ yr, T* __restrict__ yi, T* __restrict__ accr, T* __restrict__ acci, const T inv_m) {
    const T half = T(0.5);
    for (int l = 0; l < W; ++l) {
      const T kar = half * (kr[l] + kmr[l]), kai = half * (ki[l] - kmi[l]);
      const T kbr = half * (ki[l] + kmi[l]), kbi = -half * (kr[l] - kmr[l]);
      const T gar = half * (gr[l] + gmr[l]), gai = half * (gi[l] - gmi[l]);
      const T gbr = half * (gi[l] + gmi[l]), gbi = -half * (gr[l] - gmr[l]);
      const T uar = half * (ur[l] + umr[l]), uai = half * (ui[l] - umi[l]);
      const T ubr = half * (ui[l] + umi[l]), ubi = -half * (ur[l] - umr[l]);
      const T dar = kar * gar + kai * gai, dai = kar * gai - kai * gar;
      const T dbr = kbr * gbr + kbi * gbi, dbi = kbr * gbi - kbi * gbr;
      yr[l] = inv_m * (dar - dbi);
      yi[l] = -inv_m * (dai + dbr);
      const T ear = uar * gar + uai * gai, eai = uar * gai - uai * gar;
      const T ebr = ubr * gbr + ubi * gbi, ebi = ubr * gbi - ubi * gbr;
      accr[l] += ear - ebi;
      acci[l] += eai + ebr;
    }
  }

  KOKKOS_INLINE_FUNCTION void run_forward(const std::int64_t h0, Buf* buf) const {
    Buf zk = buf[0], x = buf[1], y = buf[2];
    load(zk, h0, k.data());
    transform(zk, y);
    const T c = T(1) / T(4 * m);
    for (std::int64_t b = 0; b < std::int64_t(u.extent(0)); ++b) {
      load(x, h0, &u(b, 0, 0));
      transform(x, y);
      for (std::int64_t f = 0; f < m; ++f) {
        const std::int64_t i = f * W, j = ((m - f) & (m - 1)) * W;
        combine_forward(zk.re + i, zk.im + i, zk.re + j, zk.im + j, x.re + i, x.im + i, x.re + j, x.im + j, y.re + i,
                        y.im + i, c);
      }
      transform(y, x);
      store<false>(y, h0, &out(b, 0, 0), &u(b, 0, 0));
    }
  }

  // Backward: correlations, as inverse transforms of conj(A)·B per channel:
  //   du[s] = Σ_j K[j] dy[s+j],   dK[ℓ] = Σ_b Σ_j u[j] dy[j+ℓ]   (no wrap: s + j ≤ 2L−2 < M)
  KOKKOS_INLINE_FUNCTION void run_backward(const std::int64_t h0, Buf* buf) const {
    const std::int64_t hh = k.extent(1), len = k.extent(0);
    Buf zk = buf[0], zg = buf[1], zu = buf[2], acc = buf[3], y = buf[4];
    load(zk, h0, k.data());
    transform(zk, y);
    for (std::int64_t i = 0; i < m * W; ++i) acc.re[i] = acc.im[i] = T(0);
    T gd[2 * W] = {};
    const T inv_m = T(1) / T(m);
    for (std::int64_t b = 0; b < std::int64_t(u.extent(0)); ++b) {
      load(zg, h0, &dy(b, 0, 0));
      load(zu, h0, &u(b, 0, 0));
      for (std::int64_t t = 0; t < len; ++t)
        for (int l = 0; l < W; ++l) {
          gd[l] += zg.re[t * W + l] * zu.re[t * W + l];
          gd[W + l] += zg.im[t * W + l] * zu.im[t * W + l];
        }
      transform(zg, y);
      transform(zu, y);
      for (std::int64_t f = 0; f < m; ++f) {
        const std::int64_t i = f * W, j = ((m - f) & (m - 1)) * W;
        combine_backward(zk.re + i, zk.im + i, zk.re + j, zk.im + j, zg.re + i, zg.im + i, zg.re + j, zg.im + j,
                         zu.re + i, zu.im + i, zu.re + j, zu.im + j, y.re + i, y.im + i, acc.re + i, acc.im + i, inv_m);
      }
      transform(y, zg);
      store<true>(y, h0, &out(b, 0, 0), &dy(b, 0, 0));
    }
    for (std::int64_t i = 0; i < m * W; ++i) acc.re[i] *= inv_m, acc.im[i] *= -inv_m;  // conj(·)/M
    transform(acc, y);
    for (std::int64_t t = 0; t < len; ++t)
      for (int l = 0; l < W; ++l) {
        if (h0 + l < hh) dk(t, h0 + l) = acc.re[t * W + l];
        if (h0 + W + l < hh) dk(t, h0 + W + l) = -acc.im[t * W + l];
      }
    for (int l = 0; l < W; ++l) {
      if (h0 + l < hh) dd(h0 + l) += gd[l];
      if (h0 + W + l < hh) dd(h0 + W + l) += gd[W + l];
    }
  }
};

template <class View>
auto rows(const View& v, std::int64_t r0, std::int64_t r1) {
  using M = Kokkos::View<typename View::value_type**, Kokkos::LayoutRight, typename View::memory_space,
                         Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  return M(v.data() + r0 * v.extent(1), r1 - r0, v.extent(1));
}

/// Reals per FFT worker: 3 (forward) or 5 (backward) complex lane buffers of M.
template <class T, class Space>
std::int64_t dss_fft_scratch(std::int64_t m, bool backward) {
  return DssConvFft<T, Space>::buffers(backward) * 2 * m * DssConvFft<T, Space>::W;
}

/// Launches the FFT convolution (forward or backward) over channel groups.
template <class T, class Space>
void dss_conv_fft_launch(const Space& exec, core::Workspace<Space>& ws, DssConvFft<T, Space> f, const char* label) {
  core::WorkspaceScope scope(ws);
  const std::int64_t len = f.k.extent(0), h = f.k.extent(1);
  const std::int64_t m = dss_fft_size(len),
                     groups = (h + 2 * DssConvFft<T, Space>::W - 1) / (2 * DssConvFft<T, Space>::W);
  auto tw = ws.template allocate<T**>("dss.twiddles", 2, m);
  Kokkos::parallel_for("hybridseq::kernels::dss::twiddles", Kokkos::RangePolicy<Space>(exec, 0, m),
                       DssTwiddles<T, Space>{tw});
  f.m = m;
  f.tw = tw;
  f.workers = std::min<std::int64_t>(core::compat::concurrency(exec), groups);
  f.scratch = ws.template allocate<T**>("dss.fft_scratch", f.workers, dss_fft_scratch<T, Space>(m, f.backward));
  // One index per worker, each a whole group loop: `elementwise` runs it inside the copy
  // compiled for the host's ISA, so the lane loops of the transforms use its FMA and encoding.
  elementwise<T>(label, exec, f.workers, len * m * h / f.workers, f);
}

inline std::int64_t dss_vandermonde_chunk(std::int64_t chunk, std::int64_t len) {
  return std::max<std::int64_t>(1, std::min(chunk, len));
}

}  // namespace detail

/// Scratch of dss_kernel_forward (and of each Vandermonde product) over len rows of ℓ: one
/// chunk × 2N block.
template <class T>
std::size_t dss_kernel_forward_scratch(std::int64_t len, int n, std::int64_t chunk) {
  return len == 0 ? 0 : core::padded_bytes<T>(detail::dss_vandermonde_chunk(chunk, len) * 2 * n);
}

/// Scratch of dss_kernel_backward: a chunk × 4N block and the (H, 4N) accumulator.
template <class T>
std::size_t dss_kernel_backward_scratch(std::int64_t len, int h, int n, std::int64_t chunk) {
  return len == 0 ? 0
                  : core::padded_bytes<T>(detail::dss_vandermonde_chunk(chunk, len) * 4 * n) +
                        core::padded_bytes<T>(std::int64_t(h) * 4 * n);
}

/// Scratch of dss_conv_fft_forward (backward = false) or _backward for u (b, len, h) on
/// `concurrency` threads: the twiddles and one lane-buffer block per worker (dss_conv_fft_launch);
/// on Kokkos::Cuda with cuFFT, the padded rows, spectra and cuFFT's work area (dss_batched_fft.hpp).
template <class T, class Space>
std::size_t dss_conv_fft_scratch(std::int64_t b, std::int64_t len, std::int64_t h, int concurrency, bool backward) {
  if (len == 0 || h == 0 || (!backward && b == 0)) return 0;
#if HYBRIDSEQ_DSS_CUFFT
  if constexpr (std::is_same_v<Space, Kokkos::Cuda>) {
    if (b == 0) return 0;
    const std::int64_t m = batched_fft::length(dss_fft_size(len));
    return batched_fft::conv_scratch<T, Space>(b, h, m, backward);
  }
#endif
  constexpr std::int64_t lanes = detail::DssConvFft<T, Space>::W;
  const std::int64_t m = dss_fft_size(len),
                     workers = std::min<std::int64_t>(concurrency, (h + 2 * lanes - 1) / (2 * lanes));
  return core::padded_bytes<T>(2 * m) + core::padded_bytes<T>(workers * detail::dss_fft_scratch<T, Space>(m, backward));
}

/// Scratch of dss_scan_backward for u (b, len, h), n modes, on `concurrency` threads: the
/// per-item partials and, per worker, checkpoints, one chunk and the adjoint.
template <class T>
std::size_t dss_scan_backward_scratch(std::int64_t b, std::int64_t len, std::int64_t h, int n, std::int64_t chunk,
                                      int concurrency) {
  if (len == 0 || b * h == 0) return 0;
  std::int64_t q = chunk;
  if (q <= 0)
    for (q = 1; q * q < len;) ++q;
  q = std::min(q, len);
  const std::int64_t items = b * h, workers = std::min<std::int64_t>(concurrency, items), chunks = (len + q - 1) / q;
  return 2 * core::padded_bytes<T>(items * 2 * n) + core::padded_bytes<T>(items) +
         core::padded_bytes<T>(workers * chunks * 2 * n) + core::padded_bytes<T>(workers * q * 2 * n) +
         core::padded_bytes<T>(workers * 2 * n);
}

/// Λ, e^Λ and C̃ from the parameters (λre, λim (N); C re/im (H, N)).
template <class T, class Space>
void dss_discretize(const Space& exec, TensorArg<const T*, Space> lambda_re, TensorArg<const T*, Space> lambda_im,
                    TensorArg<const T**, Space> c_re, TensorArg<const T**, Space> c_im,
                    const DssModes<T, Space>& modes) {
  const char* api = "hybridseq::kernels::dss_discretize";
  const std::int64_t n = lambda_re.extent(0), h = c_re.extent(0);
  core::check_shape(api, "lambda_im", lambda_im, core::dim(n));
  core::check_shape(api, "c_re", c_re, core::dim(h), core::dim(n));
  core::check_shape(api, "c_im", c_im, core::dim(h), core::dim(n));
  core::check_shape(api, "modes.lambda", modes.lambda, core::dim(2), core::dim(n));
  core::check_shape(api, "modes.a", modes.a, core::dim(2), core::dim(n));
  core::check_shape(api, "modes.c", modes.c, core::dim(h), core::dim(2 * n));
  Kokkos::parallel_for("hybridseq::kernels::dss::discretize", Kokkos::RangePolicy<Space>(exec, 0, n),
                       detail::DssDiscretize<T, Space>{lambda_re, lambda_im, c_re, c_im, modes});
}

/// Parameter gradients (+=) from the mode gradients `g` (the sum over both paths).
template <class T, class Space>
void dss_discretize_backward(const Space& exec, TensorArg<const T*, Space> lambda_re,
                             TensorArg<const T*, Space> lambda_im, TensorArg<const T**, Space> c_re,
                             TensorArg<const T**, Space> c_im, const DssModeGrads<T, Space>& g,
                             TensorArg<T*, Space> g_lambda_re, TensorArg<T*, Space> g_lambda_im,
                             TensorArg<T**, Space> g_c_re, TensorArg<T**, Space> g_c_im) {
  Kokkos::parallel_for("hybridseq::kernels::dss::discretize_backward",
                       Kokkos::RangePolicy<Space>(exec, 0, lambda_re.extent(0)),
                       detail::DssDiscretizeBackward<T, Space>{lambda_re, lambda_im, c_re, c_im, g, g_lambda_re,
                                                               g_lambda_im, g_c_re, g_c_im});
}

namespace detail {

/// out (L, H) = beta·out + Re Σ_n c_{h,n} e^{Λ_n (ℓ + offset)}, c (H, 2N) as [Re | Im]: one GEMM
/// (chunk × 2N)·(2N × H) per chunk of ℓ against a Vandermonde block generated in double.
template <class T, class Space>
void dss_vandermonde_product(const Space& exec, core::Workspace<Space>& ws, const Tensor<double**, Space>& lambda,
                             const MatrixIn<T, Space>& c, const MatrixOut<T, Space>& out, std::int64_t chunk,
                             std::int64_t offset, T beta) {
  const std::int64_t len = out.extent(0), n = lambda.extent(1);
  if (len == 0) return;
  core::WorkspaceScope scope(ws);
  const std::int64_t q = dss_vandermonde_chunk(chunk, len);
  auto v = ws.template allocate<T**>("dss.vandermonde", q, 2 * n);
  const std::int64_t blocks = (n + DssVandermonde<T, Space>::block - 1) / DssVandermonde<T, Space>::block;
  for (std::int64_t l0 = 0; l0 < len; l0 += q) {
    const std::int64_t rows = std::min(q, len - l0);
    Kokkos::parallel_for("hybridseq::kernels::dss::vandermonde", Kokkos::RangePolicy<Space>(exec, 0, blocks),
                         DssVandermonde<T, Space>{lambda, v, l0 + offset, rows, false});
    gemm(exec, Op::none, Op::transpose, T(1), detail::rows(v, 0, rows), c, beta,
         MatrixOut<T, Space>(out.data() + l0 * out.stride(0), rows, out.extent(1)));
  }
}

// P(b) = C̃ ⊙ s(b, ·, ·) as [Re | Im] (H, 2N); one item per h.
template <class T, class Space>
struct DssStateTimesC {
  Tensor<const T**, Space> c;            // (H, 2N)
  Tensor<const T***, Space> s_re, s_im;  // (B, H, N)
  Tensor<T**, Space> p;                  // (H, 2N)
  std::int64_t b;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t h) const {
    const std::int64_t nn = s_re.extent(2);
    for (std::int64_t n = 0; n < nn; ++n) {
      const T cr = c(h, n), ci = c(h, nn + n), sr = s_re(b, h, n), si = s_im(b, h, n);
      p(h, n) = cr * sr - ci * si;
      p(h, nn + n) = cr * si + ci * sr;
    }
  }
};

// s(b, h, n) ← e^{Λ_n L}·s(b, h, n) + (G(h, n), −G(h, N+n)); one item per h.
template <class T, class Space>
struct DssStateAdvance {
  Tensor<const double**, Space> decay;  // (2, N) e^{ΛL}
  Tensor<const T**, Space> g;           // (H, 2N) [Σ u Re V | −Σ u Im V]
  Tensor<T***, Space> s_re, s_im;       // (B, H, N)
  std::int64_t b;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t h) const {
    const std::int64_t nn = s_re.extent(2);
    for (std::int64_t n = 0; n < nn; ++n) {
      const double er = decay(0, n), ei = decay(1, n), sr = s_re(b, h, n), si = s_im(b, h, n);
      s_re(b, h, n) = static_cast<T>(er * sr - ei * si + double(g(h, n)));
      s_im(b, h, n) = static_cast<T>(er * si + ei * sr - double(g(h, nn + n)));
    }
  }
};

template <class T, class Space>
struct DssDecay {  // e^{Λ_n L}, one item per n
  Tensor<const double**, Space> lambda;
  Tensor<double**, Space> decay;
  std::int64_t len;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t n) const {
    const double m = math::exp(lambda(0, n) * double(len)), a = lambda(1, n) * double(len);
    decay(0, n) = m * math::cos(a);
    decay(1, n) = m * math::sin(a);
  }
};

}  // namespace detail

/// Materialises the SSM kernel K (L, H), K(ℓ, h) = Re Σ_n C̃_{h,n} e^{Λ_n ℓ}: one GEMM
/// (chunk × 2N)·(2N × H) per chunk of ℓ against a Vandermonde block generated in double.
/// Scratch: chunk × 2N.
template <class T, class Space>
void dss_kernel_forward(const Space& exec, core::Workspace<Space>& ws, const DssModes<T, Space>& modes,
                        TensorArg<T**, Space> k, std::int64_t chunk = 256) {
  core::check_shape("hybridseq::kernels::dss_kernel_forward", "k", k, core::dim(k.extent(0)),
                    core::dim(modes.c.extent(0)));
  detail::dss_vandermonde_product<T>(exec, ws, modes.lambda, modes.c, k, chunk, 0, T(0));
}

namespace detail {
/// A carried state: real and imaginary parts, each (B, H, N).
template <class Re, class Im>
void check_dss_state(const char* api, const Re& s_re, const Im& s_im, std::int64_t b, std::int64_t h, std::int64_t n) {
  core::check_shape(api, "s_re", s_re, core::dim(b), core::dim(h), core::dim(n));
  core::check_shape(api, "s_im", s_im, core::dim(b), core::dim(h), core::dim(n));
}
}  // namespace detail

/// The carried state's contribution to the next L outputs (prefill from a non-zero state):
/// y(b, t, h) += Re Σ_n C̃_{h,n} e^{Λ_n (t+1)} s(b, h, n). One Vandermonde GEMM per batch row
/// and chunk. Scratch: (chunk + H) × 2N.
template <class T, class Space>
void dss_state_readout(const Space& exec, core::Workspace<Space>& ws, const DssModes<T, Space>& modes,
                       TensorArg<const T***, Space> s_re, TensorArg<const T***, Space> s_im, TensorArg<T***, Space> y,
                       std::int64_t chunk = 256) {
  const char* api = "hybridseq::kernels::dss_state_readout";
  const std::int64_t b = y.extent(0), len = y.extent(1), h = y.extent(2), n = modes.lambda.extent(1);
  detail::check_dss_state(api, s_re, s_im, b, h, n);
  if (len == 0) return;
  core::WorkspaceScope scope(ws);
  auto p = ws.template allocate<T**>("dss.state_times_c", h, 2 * n);
  for (std::int64_t i = 0; i < b; ++i) {
    Kokkos::parallel_for("hybridseq::kernels::dss::state_times_c", Kokkos::RangePolicy<Space>(exec, 0, h),
                         detail::DssStateTimesC<T, Space>{modes.c, s_re, s_im, p, i});
    detail::dss_vandermonde_product<T>(exec, ws, modes.lambda, p,
                                       MatrixOut<T, Space>(y.data() + i * y.stride(0), len, h), chunk, 1, T(1));
  }
}

/// Advances the state over u (B, L, H) without producing outputs:
/// s ← e^{ΛL}·s + Σ_j u[j] e^{Λ(L−1−j)}, by one GEMM (H × chunk)·(chunk × 2N) per chunk of
/// ℓ and batch row against a row-reversed Vandermonde block. Scratch: (chunk + B·H) × 2N + 2N.
template <class T, class Space>
void dss_state_advance(const Space& exec, core::Workspace<Space>& ws, const DssModes<T, Space>& modes,
                       TensorArg<const T***, Space> u, TensorArg<T***, Space> s_re, TensorArg<T***, Space> s_im,
                       std::int64_t chunk = 256) {
  const char* api = "hybridseq::kernels::dss_state_advance";
  const std::int64_t b = u.extent(0), len = u.extent(1), h = u.extent(2), n = modes.lambda.extent(1);
  detail::check_dss_state(api, s_re, s_im, b, h, n);
  if (len == 0) return;
  core::WorkspaceScope scope(ws);
  const std::int64_t q = detail::dss_vandermonde_chunk(chunk, len);
  auto v = ws.template allocate<T**>("dss.vandermonde", q, 2 * n);
  auto g = ws.template allocate<T**>("dss.state_sum", b * h, 2 * n);  // row i·H + h: batch row i
  auto decay = ws.template allocate<double**>("dss.decay", 2, n);
  Kokkos::parallel_for("hybridseq::kernels::dss::decay", Kokkos::RangePolicy<Space>(exec, 0, n),
                       detail::DssDecay<T, Space>{modes.lambda, decay, len});
  const std::int64_t blocks =
      (n + detail::DssVandermonde<T, Space>::block - 1) / detail::DssVandermonde<T, Space>::block;
  // The block for ℓ ∈ [ℓ0, ℓ0 + q) serves every batch row: generated once per chunk.
  for (std::int64_t l0 = 0; l0 < len; l0 += q) {
    const std::int64_t rows = std::min(q, len - l0), j0 = len - l0 - rows;
    Kokkos::parallel_for("hybridseq::kernels::dss::vandermonde", Kokkos::RangePolicy<Space>(exec, 0, blocks),
                         detail::DssVandermonde<T, Space>{modes.lambda, v, l0, rows, false, true});
    for (std::int64_t i = 0; i < b; ++i)
      gemm(exec, Op::transpose, Op::none, T(1),
           MatrixIn<T, Space>(u.data() + i * u.stride(0) + j0 * u.stride(1), rows, h), detail::rows(v, 0, rows),
           l0 == 0 ? T(0) : T(1), detail::rows(g, i * h, (i + 1) * h));
  }
  for (std::int64_t i = 0; i < b; ++i)
    Kokkos::parallel_for("hybridseq::kernels::dss::state_advance", Kokkos::RangePolicy<Space>(exec, 0, h),
                         detail::DssStateAdvance<T, Space>{decay, detail::rows(g, i * h, (i + 1) * h), s_re, s_im, i});
}

/// Backward of `dss_kernel_forward`: g.c += ∂L/∂C̃ and g.lambda += ∂L/∂Λ (direct) from
/// dK (L, H), via one GEMM (H × chunk)·(chunk × 4N) per chunk of ℓ. Scratch: (chunk + H) × 4N.
template <class T, class Space>
void dss_kernel_backward(const Space& exec, core::Workspace<Space>& ws, const DssModes<T, Space>& modes,
                         TensorArg<const T**, Space> dk, const DssModeGrads<T, Space>& g, std::int64_t chunk = 256) {
  const std::int64_t len = dk.extent(0), n = modes.lambda.extent(1), h = modes.c.extent(0);
  core::check_shape("hybridseq::kernels::dss_kernel_backward", "dk", dk, core::dim(len), core::dim(h));
  if (len == 0) return;
  core::WorkspaceScope scope(ws);
  const std::int64_t q = detail::dss_vandermonde_chunk(chunk, len);
  auto v = ws.template allocate<T**>("dss.vandermonde", q, 4 * n);
  const std::int64_t blocks =
      (n + detail::DssVandermonde<T, Space>::block - 1) / detail::DssVandermonde<T, Space>::block;
  auto acc = ws.template allocate<T**>("dss.kernel_grad", h, 4 * n);  // [dK·V̄ | dK·ℓV̄]
  for (std::int64_t l0 = 0; l0 < len; l0 += q) {
    const std::int64_t rows = std::min(q, len - l0);
    Kokkos::parallel_for("hybridseq::kernels::dss::vandermonde", Kokkos::RangePolicy<Space>(exec, 0, blocks),
                         detail::DssVandermonde<T, Space>{modes.lambda, v, l0, rows, true});
    gemm(exec, Op::transpose, Op::none, T(1), detail::rows(dk, l0, l0 + rows), detail::rows(v, 0, rows),
         l0 == 0 ? T(0) : T(1), acc);
  }
  Kokkos::parallel_for("hybridseq::kernels::dss::kernel_grad_c", Kokkos::RangePolicy<Space>(exec, 0, h),
                       detail::DssAddColumns<T, Space>{acc, g.c});
  Kokkos::parallel_for("hybridseq::kernels::dss::kernel_grad_lambda", Kokkos::RangePolicy<Space>(exec, 0, n),
                       detail::DssLambdaFromKernelGrad<T, Space>{modes.c, acc, g.lambda});
}

/// y (B, L, H) = causal_conv(K, u) + D ⊙ u, per channel by FFT (on Kokkos::Cuda by cuFFT
/// where the build has it: dss_batched_fft.hpp). Scratch: dss_conv_fft_scratch.
template <class T, class Space>
void dss_conv_fft_forward(const Space& exec, core::Workspace<Space>& ws, TensorArg<const T**, Space> k,
                          TensorArg<const T***, Space> u, TensorArg<const T*, Space> d, TensorArg<T***, Space> y) {
  const char* api = "hybridseq::kernels::dss_conv_fft_forward";
  const std::int64_t len = u.extent(1), h = u.extent(2);
  core::check_shape(api, "k", k, core::dim(len), core::dim(h));
  core::check_shape(api, "d", d, core::dim(h));
  core::check_shape(api, "y", y, core::dim(u.extent(0)), core::dim(len), core::dim(h));
  if (len == 0 || u.extent(0) == 0 || h == 0) return;
#if HYBRIDSEQ_DSS_CUFFT
  if constexpr (std::is_same_v<Space, Kokkos::Cuda>)
    return batched_fft::conv_forward<T, Space>(exec, ws, k, u, d, y, batched_fft::length(dss_fft_size(len)));
#endif
  detail::dss_conv_fft_launch<T>(exec, ws, detail::DssConvFft<T, Space>{k, u, d, {}, y, {}, {}, {}, {}, 0, 0, false},
                                 "hybridseq::kernels::dss::conv_fft_forward");
}

/// Backward of `dss_conv_fft_forward`: du += ∂L/∂u, dk = ∂L/∂K (overwritten), dd += ∂L/∂D.
/// Scratch: dss_conv_fft_scratch.
template <class T, class Space>
void dss_conv_fft_backward(const Space& exec, core::Workspace<Space>& ws, TensorArg<const T**, Space> k,
                           TensorArg<const T***, Space> u, TensorArg<const T*, Space> d,
                           TensorArg<const T***, Space> dy, TensorArg<T***, Space> du, TensorArg<T**, Space> dk,
                           TensorArg<T*, Space> dd) {
  const char* api = "hybridseq::kernels::dss_conv_fft_backward";
  const std::int64_t len = u.extent(1), h = u.extent(2);
  core::check_shape(api, "k", k, core::dim(len), core::dim(h));
  core::check_shape(api, "dk", dk, core::dim(len), core::dim(h));
  core::check_shape(api, "d", d, core::dim(h));
  core::check_same_shape(api, "u", u, "dy", dy);
  core::check_same_shape(api, "u", u, "du", du);
  if (len == 0 || h == 0) return;
#if HYBRIDSEQ_DSS_CUFFT
  if constexpr (std::is_same_v<Space, Kokkos::Cuda>) {
    if (u.extent(0) == 0) return Kokkos::deep_copy(exec, dk, T(0));
    return batched_fft::conv_backward<T, Space>(exec, ws, k, u, d, dy, du, dk, dd,
                                                batched_fft::length(dss_fft_size(len)));
  }
#endif
  detail::dss_conv_fft_launch<T>(exec, ws, detail::DssConvFft<T, Space>{k, u, d, dy, du, dk, dd, {}, {}, 0, 0, true},
                                 "hybridseq::kernels::dss::conv_fft_backward");
}

/// The recurrence over a block of time steps: y (B, L, H) from u (B, L, H), starting from
/// the state (s_re, s_im) (B, H, N) and leaving the final state there. L = 1 is the
/// decoding step. O(B·H·N·L), no scratch.
template <class T, class Space>
void dss_scan_forward(const Space& exec, const DssModes<T, Space>& modes, TensorArg<const T*, Space> d,
                      TensorArg<const T***, Space> u, TensorArg<T***, Space> y, TensorArg<T***, Space> s_re,
                      TensorArg<T***, Space> s_im) {
  const char* api = "hybridseq::kernels::dss_scan_forward";
  const std::int64_t b = u.extent(0), h = u.extent(2), n = modes.a.extent(1);
  core::check_shape(api, "modes.c", modes.c, core::dim(h), core::dim(2 * n));
  core::check_shape(api, "d", d, core::dim(h));
  core::check_same_shape(api, "u", u, "y", y);
  detail::check_dss_state(api, s_re, s_im, b, h, n);
  Kokkos::parallel_for("hybridseq::kernels::dss::scan_forward", Kokkos::RangePolicy<Space>(exec, 0, b * h),
                       detail::DssScanForward<T, Space>{modes.a, modes.c, d, u, y, s_re, s_im});
}

/// Backward of `dss_scan_forward` from a zero initial state (training): du += ∂L/∂u,
/// g.c += ∂L/∂C̃, g.a += ∂L/∂e^Λ, dd += ∂L/∂D. Checkpoints every `chunk` steps (0: ⌈√L⌉,
/// which minimises checkpoints + chunk buffer); scratch per worker (ceil(L/chunk) + chunk + 1)·2N
/// plus (B·H)·(4N + 1) partials — never L×H×N.
template <class T, class Space>
void dss_scan_backward(const Space& exec, core::Workspace<Space>& ws, const DssModes<T, Space>& modes,
                       TensorArg<const T*, Space> d, TensorArg<const T***, Space> u, TensorArg<const T***, Space> dy,
                       TensorArg<T***, Space> du, const DssModeGrads<T, Space>& g, TensorArg<T*, Space> dd,
                       std::int64_t chunk = 0) {
  const char* api = "hybridseq::kernels::dss_scan_backward";
  const std::int64_t b = u.extent(0), len = u.extent(1), h = u.extent(2), n = modes.a.extent(1);
  core::check_shape(api, "modes.c", modes.c, core::dim(h), core::dim(2 * n));
  core::check_shape(api, "d", d, core::dim(h));
  core::check_same_shape(api, "u", u, "dy", dy);
  core::check_same_shape(api, "u", u, "du", du);
  if (len == 0 || b * h == 0) return;
  core::WorkspaceScope scope(ws);
  std::int64_t q = chunk;
  if (q <= 0) {
    q = 1;
    while (q * q < len) ++q;
  }
  q = std::min(q, len);
  const std::int64_t chunks = (len + q - 1) / q, items = b * h;
  const std::int64_t workers = std::min<std::int64_t>(core::compat::concurrency(exec), items);
  auto part_c = ws.template allocate<T**>("dss.scan_part_c", items, 2 * n);
  auto part_a = ws.template allocate<T**>("dss.scan_part_a", items, 2 * n);
  auto part_d = ws.template allocate<T*>("dss.scan_part_d", items);
  auto checkpoints = ws.template allocate<T**>("dss.scan_checkpoints", workers, chunks * 2 * n);
  auto buffer = ws.template allocate<T**>("dss.scan_chunk", workers, q * 2 * n);
  auto adjoint = ws.template allocate<T**>("dss.scan_adjoint", workers, 2 * n);
  Kokkos::parallel_for("hybridseq::kernels::dss::scan_backward",
                       Kokkos::RangePolicy<Space, Kokkos::Schedule<Kokkos::Static>>(exec, 0, workers),
                       detail::DssScanBackward<T, Space>{modes.a, modes.c, d, u, dy, du, part_c, part_a, part_d,
                                                         checkpoints, buffer, adjoint, q, workers});
  Kokkos::parallel_for("hybridseq::kernels::dss::scan_reduce_c", Kokkos::RangePolicy<Space>(exec, 0, h),
                       detail::DssScanReduceC<T, Space>{part_c, part_d, g.c, dd, b});
  Kokkos::parallel_for("hybridseq::kernels::dss::scan_reduce_a", Kokkos::RangePolicy<Space>(exec, 0, n),
                       detail::DssScanReduceA<T, Space>{part_a, g.a});
}

}  // namespace hybridseq::kernels
