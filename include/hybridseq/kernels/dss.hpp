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
/// Algorithms (measured on 2 cores, float, B=1, H=256, N=512; numbers in the comment at
/// `DssAlgorithm`):
///  * `fft`: K (L, H) is one GEMM per chunk of ℓ with the Vandermonde matrix e^{Λ_n ℓ}
///    (generated in double, rounded to T), then a causal FFT convolution per channel,
///    zero-padded to M ≥ 2L−1 (Eigen's FFT, kissfft backend). Backward: two FFT correlations
///    give du and dK, and one GEMM per ℓ-chunk gives dC̃ and dΛ from dK. Cost O(H·N·L) in BLAS
///    plus O(B·H·L log L); host spaces only (Eigen's FFT is host code).
///  * `scan`: the exact diagonal recurrence, one work item per (b, h), all N modes of a
///    channel in one inner loop. Backward re-runs the recurrence from checkpoints every
///    `chunk` steps, kept per worker (never T×H×N), and runs the adjoint recurrence
///    backwards. Cost O(B·H·N·L) flops; runs on any execution space and is also the
///    decoding step (L = 1) and prefill.
///
/// Complex quantities are stored as real tensors with separate real and imaginary parts.
/// Gradients of complex quantities use the convention g = ∂L/∂Re z + i·∂L/∂Im z, for which
/// the chain rule through a holomorphic w = f(z) is g_z = g_w · conj(f′(z)).
/// Parameter-gradient reductions run in a fixed order (no atomics): bit-identical results
/// at any thread count.

#include <algorithm>
#include <complex>
#include <cstdint>
#include <string>
#include <type_traits>

#include <unsupported/Eigen/FFT>

#include "../core/check.hpp"
#include "../core/spaces.hpp"
#include "../core/workspace.hpp"
#include "gemm.hpp"

namespace hybridseq::kernels {

/// How the training/prefill path mixes the sequence.
///
/// Measured with hybridseq-bench (gss_mix/*, float, B=1, H=256, N=512, 2 cores, OpenMP):
/// see the table in bench/gss_benchmarks.cpp's header comment. `fft` is several times
/// faster for forward+backward at every T measured, so it is the default on host spaces.
/// `scan` stays because it earns its place three ways: it is the only path that runs on a
/// non-host space (Eigen's FFT is host code), the recurrence *is* decoding (step and
/// prefill), and as an independent algorithm it cross-checks `fft` in the tests.
enum class DssAlgorithm { fft, scan };

constexpr const char* name_of(DssAlgorithm a) { return a == DssAlgorithm::fft ? "fft" : "scan"; }

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

/// FFT length for a causal convolution of length L: the smallest M ≥ 2L − 1 that is a
/// multiple of 4 (kissfft's fast real-input path) and 5-smooth (kissfft's fast radices).
/// A power of two would waste up to 2x for L just above a power of two.
inline std::int64_t dss_fft_size(std::int64_t length) {
  const std::int64_t need = std::max<std::int64_t>(4, 2 * length - 1);
  for (std::int64_t m = (need + 3) / 4 * 4;; m += 4) {
    std::int64_t r = m;
    for (const std::int64_t p : {2, 3, 5})
      while (r % p == 0) r /= p;
    if (r == 1) return m;
  }
}

namespace detail {

template <class Space>
constexpr bool dss_host_space =
    Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Space::memory_space>::accessible;

/// Below this, e^{Λℓ} is flushed to zero: far below float's and double's smallest normals'
/// relevance, and it keeps the Vandermonde walk out of (slow) denormal arithmetic.
inline constexpr double dss_flush = 1e-200;

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

// Rows [0, q) of the Vandermonde block starting at ℓ0, one mode per work item:
//   V(j, n) = Re e^{Λ_n ℓ},  V(j, N+n) = −Im e^{Λ_n ℓ},  ℓ = ℓ0 + j
// and, when `weighted`, V(j, 2N+n), V(j, 3N+n) = the same times ℓ (for ∂K/∂Λ).
// The walk multiplies by e^Λ in double from a directly computed start: relative error
// ≈ q·1e-16, far below T's rounding.
template <class T, class Space>
struct DssVandermonde {
  Tensor<const double**, Space> lambda;  // (2, N)
  Tensor<T**, Space> v;                  // (q, 2N or 4N)
  std::int64_t l0, q;
  bool weighted;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t n) const {
    const std::int64_t nn = lambda.extent(1);
    const double re = lambda(0, n), im = lambda(1, n);
    const double e = math::exp(re);
    const double sr = e * math::cos(im), si = e * math::sin(im);
    double pr = 0, pi = 0;
    const double log_mag = re * double(l0);
    if (log_mag > -460.0) {  // e^-460 ≈ 1e-200: the flush threshold
      const double mag = math::exp(log_mag);
      pr = mag * math::cos(im * double(l0));
      pi = mag * math::sin(im * double(l0));
    }
    for (std::int64_t j = 0; j < q; ++j) {
      v(j, n) = static_cast<T>(pr);
      v(j, nn + n) = static_cast<T>(-pi);
      if (weighted) {
        const double l = double(l0 + j);
        v(j, 2 * nn + n) = static_cast<T>(l * pr);
        v(j, 3 * nn + n) = static_cast<T>(-l * pi);
      }
      const double r = pr * sr - pi * si;
      pi = pr * si + pi * sr;
      pr = r;
      if (math::fabs(pr) + math::fabs(pi) < dss_flush) pr = pi = 0;
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
  Tensor<const T**, Space> a;    // (2, N)
  Tensor<const T**, Space> c;    // (H, 2N)
  Tensor<const T*, Space> d;     // (H)
  Tensor<const T***, Space> u;   // (B, L, H)
  Tensor<T***, Space> y;         // (B, L, H)
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
  Tensor<const T**, Space> a;    // (2, N)
  Tensor<const T**, Space> c;    // (H, 2N)
  Tensor<const T*, Space> d;     // (H)
  Tensor<const T***, Space> u;   // (B, L, H)
  Tensor<const T***, Space> dy;  // (B, L, H)
  Tensor<T***, Space> du;        // (B, L, H) +=
  Tensor<T**, Space> part_c;     // (B·H, 2N) ∂L/∂C̃ of the item
  Tensor<T**, Space> part_a;     // (B·H, 2N) ∂L/∂a of the item
  Tensor<T*, Space> part_d;      // (B·H)
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

/// Eigen's FFT with kissfft keeps its plans and scratch inside the object, so it is not
/// thread-safe; one per OS thread, kept for the thread's life, makes plans a one-time cost
/// and keeps the hot path free of heap allocation after the first call per size.
template <class T>
Eigen::FFT<T>& thread_fft() {
  thread_local Eigen::FFT<T> fft(typename Eigen::FFT<T>::impl_type(),
                                 static_cast<typename Eigen::FFT<T>::Flag>(Eigen::FFT<T>::HalfSpectrum |
                                                                           Eigen::FFT<T>::Unscaled));
  return fft;
}

// Causal FFT convolution, host only. Worker w takes the contiguous channel range
// [w·H/W, (w+1)·H/W) (neighbouring channels share cache lines of the strided gathers) and owns
// a real buffer of M and half spectra of M/2 + 1 complex values: K's and x's (forward), K's,
// x's, dy's and the dK accumulator's (backward).
template <class T, class Space>
struct DssConvFft {
  using C = std::complex<T>;
  Tensor<const T**, Space> k;    // (L, H)
  Tensor<const T***, Space> u;   // (B, L, H)
  Tensor<const T*, Space> d;     // (H)
  Tensor<const T***, Space> dy;  // backward only: (B, L, H)
  Tensor<T***, Space> out;       // forward: y (B, L, H) =; backward: du +=
  Tensor<T**, Space> dk;         // backward only: (L, H) =
  Tensor<T*, Space> dd;          // backward only: (H) +=
  Tensor<T**, Space> scratch;    // (workers, dss_fft_scratch(M, backward))
  std::int64_t m, workers;
  bool backward;

  // Written out: std::complex's operator* carries C99 Annex G NaN-recovery branches.
  static C mul(const C& x, const C& y) {
    return C(x.real() * y.real() - x.imag() * y.imag(), x.real() * y.imag() + x.imag() * y.real());
  }
  static C conj_mul(const C& x, const C& y) {  // conj(x)·y
    return C(x.real() * y.real() + x.imag() * y.imag(), x.real() * y.imag() - x.imag() * y.real());
  }

  void operator()(const std::int64_t w) const {
    const std::int64_t hh = k.extent(1), len = k.extent(0), bb = u.extent(0), half = m / 2 + 1;
    const std::int64_t h0 = w * hh / workers, h1 = (w + 1) * hh / workers;
    T* buf = &scratch(w, 0);
    C* kf = reinterpret_cast<C*>(buf + m);
    C* xf = kf + half;
    C* gf = xf + half;
    Eigen::FFT<T>& fft = thread_fft<T>();
    const T scale = T(1) / T(m);
    auto transform = [&](C* spectrum, auto&& value) {
      for (std::int64_t t = 0; t < len; ++t) buf[t] = value(t);
      for (std::int64_t t = len; t < m; ++t) buf[t] = T(0);
      fft.fwd(spectrum, buf, m);
    };
    for (std::int64_t h = h0; h < h1; ++h) {
      // K's spectrum carries the 1/M of the unscaled inverse transform; every product
      // below has exactly one factor from kf or is rescaled (dK) on the way out.
      transform(kf, [&](std::int64_t t) { return scale * k(t, h); });
      const T dh = d(h);
      if (!backward) {
        for (std::int64_t b = 0; b < bb; ++b) {
          transform(xf, [&](std::int64_t t) { return u(b, t, h); });
          for (std::int64_t f = 0; f < half; ++f) xf[f] = mul(xf[f], kf[f]);
          fft.inv(buf, xf, m);
          for (std::int64_t t = 0; t < len; ++t) out(b, t, h) = buf[t] + dh * u(b, t, h);
        }
        continue;
      }
      // Backward: correlations, as inverse transforms of conj(A)·B:
      //   du[s] = Σ_j K[j] dy[s+j],   dK[ℓ] = Σ_b Σ_j u[j] dy[j+ℓ]   (no wrap: s + j ≤ 2L−2 < M)
      C* dkf = gf + half;
      for (std::int64_t f = 0; f < half; ++f) dkf[f] = C(0);
      T gd = 0;
      for (std::int64_t b = 0; b < bb; ++b) {
        transform(gf, [&](std::int64_t t) { return dy(b, t, h); });
        transform(xf, [&](std::int64_t t) { return u(b, t, h); });
        for (std::int64_t f = 0; f < half; ++f) {
          dkf[f] += conj_mul(xf[f], gf[f]);
          xf[f] = conj_mul(kf[f], gf[f]);
        }
        fft.inv(buf, xf, m);
        for (std::int64_t t = 0; t < len; ++t) {
          out(b, t, h) += buf[t] + dh * dy(b, t, h);
          gd += dy(b, t, h) * u(b, t, h);
        }
      }
      fft.inv(buf, dkf, m);
      for (std::int64_t t = 0; t < len; ++t) dk(t, h) = scale * buf[t];
      dd(h) += gd;
    }
  }
};

template <class View>
auto rows(const View& v, std::int64_t r0, std::int64_t r1) {
  using M = Kokkos::View<typename View::value_type**, Kokkos::LayoutRight, typename View::memory_space,
                         Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  return M(v.data() + r0 * v.extent(1), r1 - r0, v.extent(1));
}

/// Reals per FFT worker: the real buffer and 2 (forward) or 4 (backward) half spectra.
inline std::int64_t dss_fft_scratch(std::int64_t m, bool backward) { return m + (backward ? 8 : 4) * (m / 2 + 1); }

inline std::int64_t dss_vandermonde_chunk(std::int64_t chunk, std::int64_t len) {
  return std::max<std::int64_t>(1, std::min(chunk, len));
}

}  // namespace detail

/// Λ, e^Λ and C̃ from the parameters (λre, λim (N); C re/im (H, N)).
template <class T, class Space>
void dss_discretize(const Space& exec, TensorArg<const T*, Space> lambda_re, TensorArg<const T*, Space> lambda_im,
                    TensorArg<const T**, Space> c_re, TensorArg<const T**, Space> c_im, const DssModes<T, Space>& modes) {
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

/// Materialises the SSM kernel K (L, H), K(ℓ, h) = Re Σ_n C̃_{h,n} e^{Λ_n ℓ}: one GEMM
/// (chunk × 2N)·(2N × H) per chunk of ℓ against a Vandermonde block generated in double.
/// Scratch: chunk × 2N.
template <class T, class Space>
void dss_kernel_forward(const Space& exec, core::Workspace<Space>& ws, const DssModes<T, Space>& modes,
                        TensorArg<T**, Space> k, std::int64_t chunk = 256) {
  const std::int64_t len = k.extent(0), n = modes.lambda.extent(1);
  core::check_shape("hybridseq::kernels::dss_kernel_forward", "k", k, core::dim(len), core::dim(modes.c.extent(0)));
  if (len == 0) return;
  core::WorkspaceScope scope(ws);
  const std::int64_t q = detail::dss_vandermonde_chunk(chunk, len);
  auto v = ws.template allocate<T**>("dss.vandermonde", q, 2 * n);
  for (std::int64_t l0 = 0; l0 < len; l0 += q) {
    const std::int64_t rows = std::min(q, len - l0);
    Kokkos::parallel_for("hybridseq::kernels::dss::vandermonde", Kokkos::RangePolicy<Space>(exec, 0, n),
                         detail::DssVandermonde<T, Space>{modes.lambda, v, l0, rows, false});
    gemm(exec, Op::none, Op::transpose, T(1), detail::rows(v, 0, rows), modes.c, T(0),
         detail::rows(k, l0, l0 + rows));
  }
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
  auto acc = ws.template allocate<T**>("dss.kernel_grad", h, 4 * n);  // [dK·V̄ | dK·ℓV̄]
  for (std::int64_t l0 = 0; l0 < len; l0 += q) {
    const std::int64_t rows = std::min(q, len - l0);
    Kokkos::parallel_for("hybridseq::kernels::dss::vandermonde", Kokkos::RangePolicy<Space>(exec, 0, n),
                         detail::DssVandermonde<T, Space>{modes.lambda, v, l0, rows, true});
    gemm(exec, Op::transpose, Op::none, T(1), detail::rows(dk, l0, l0 + rows), detail::rows(v, 0, rows),
         l0 == 0 ? T(0) : T(1), acc);
  }
  Kokkos::parallel_for("hybridseq::kernels::dss::kernel_grad_c", Kokkos::RangePolicy<Space>(exec, 0, h),
                       detail::DssAddColumns<T, Space>{acc, g.c});
  Kokkos::parallel_for("hybridseq::kernels::dss::kernel_grad_lambda", Kokkos::RangePolicy<Space>(exec, 0, n),
                       detail::DssLambdaFromKernelGrad<T, Space>{modes.c, acc, g.lambda});
}

/// y (B, L, H) = causal_conv(K, u) + D ⊙ u, per channel by FFT (host spaces only).
/// Scratch: workers × (M + 4·(M/2+1)) reals with M = dss_fft_size(L); backward 8 instead of 4.
template <class T, class Space>
void dss_conv_fft_forward(const Space& exec, core::Workspace<Space>& ws, TensorArg<const T**, Space> k,
                          TensorArg<const T***, Space> u, TensorArg<const T*, Space> d, TensorArg<T***, Space> y) {
  static_assert(detail::dss_host_space<Space>,
                "hybridseq::kernels::dss_conv_fft_forward: Eigen's FFT runs on host spaces; use DssAlgorithm::scan");
  const char* api = "hybridseq::kernels::dss_conv_fft_forward";
  const std::int64_t len = u.extent(1), h = u.extent(2);
  core::check_shape(api, "k", k, core::dim(len), core::dim(h));
  core::check_shape(api, "d", d, core::dim(h));
  core::check_shape(api, "y", y, core::dim(u.extent(0)), core::dim(len), core::dim(h));
  if (len == 0 || u.extent(0) == 0 || h == 0) return;
  core::WorkspaceScope scope(ws);
  const std::int64_t m = dss_fft_size(len);
  const std::int64_t workers = std::min<std::int64_t>(core::compat::concurrency(exec), h);
  auto scratch = ws.template allocate<T**>("dss.fft_scratch", workers, detail::dss_fft_scratch(m, false));
  Kokkos::parallel_for("hybridseq::kernels::dss::conv_fft_forward",
                       Kokkos::RangePolicy<Space, Kokkos::Schedule<Kokkos::Static>>(exec, 0, workers),
                       detail::DssConvFft<T, Space>{k, u, d, {}, y, {}, {}, scratch, m, workers, false});
}

/// Backward of `dss_conv_fft_forward`: du += ∂L/∂u, dk = ∂L/∂K (overwritten), dd += ∂L/∂D.
template <class T, class Space>
void dss_conv_fft_backward(const Space& exec, core::Workspace<Space>& ws, TensorArg<const T**, Space> k,
                           TensorArg<const T***, Space> u, TensorArg<const T*, Space> d,
                           TensorArg<const T***, Space> dy, TensorArg<T***, Space> du, TensorArg<T**, Space> dk,
                           TensorArg<T*, Space> dd) {
  static_assert(detail::dss_host_space<Space>,
                "hybridseq::kernels::dss_conv_fft_backward: Eigen's FFT runs on host spaces; use DssAlgorithm::scan");
  const char* api = "hybridseq::kernels::dss_conv_fft_backward";
  const std::int64_t len = u.extent(1), h = u.extent(2);
  core::check_shape(api, "k", k, core::dim(len), core::dim(h));
  core::check_shape(api, "dk", dk, core::dim(len), core::dim(h));
  core::check_shape(api, "d", d, core::dim(h));
  core::check_same_shape(api, "u", u, "dy", dy);
  core::check_same_shape(api, "u", u, "du", du);
  if (len == 0 || h == 0) return;
  if (u.extent(0) == 0) {
    Kokkos::deep_copy(exec, dk, T(0));
    return;
  }
  core::WorkspaceScope scope(ws);
  const std::int64_t m = dss_fft_size(len);
  const std::int64_t workers = std::min<std::int64_t>(core::compat::concurrency(exec), h);
  auto scratch = ws.template allocate<T**>("dss.fft_scratch", workers, detail::dss_fft_scratch(m, true));
  Kokkos::parallel_for("hybridseq::kernels::dss::conv_fft_backward",
                       Kokkos::RangePolicy<Space, Kokkos::Schedule<Kokkos::Static>>(exec, 0, workers),
                       detail::DssConvFft<T, Space>{k, u, d, dy, du, dk, dd, scratch, m, workers, true});
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
  core::check_shape(api, "s_re", s_re, core::dim(b), core::dim(h), core::dim(n));
  core::check_shape(api, "s_im", s_im, core::dim(b), core::dim(h), core::dim(n));
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
