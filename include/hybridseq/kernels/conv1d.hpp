#pragma once
/// \file
/// Causal depthwise 1-D convolution over time (Mamba's conv1d, groups = channels), with an
/// optional fused elementwise activation, forward, backward and the decoding step.
///
///   pre(b, t, d) = bias(d) + Σ_{k<K} w(d, k) · x(b, t − (K − 1) + k, d)
///   out = act(pre)
///
/// Inputs before t = 0 come from a left-context window (B, Di, K − 1) of the K − 1 previous
/// inputs (decoding) or are zero (PyTorch's Conv1d with padding K − 1, truncated to T). The
/// weight is PyTorch's (Di, 1, K) viewed as (Di, K). Row kernels put channels innermost, so
/// the K-term sums over a row vectorise; weight gradients use one work item per block of 16
/// channels over all rows in a fixed order (deterministic, no atomics).

#include <cstdint>
#include <string>

#include "../core/check.hpp"
#include "../core/spaces.hpp"
#include "activations.hpp"

namespace hybridseq {

namespace kernels {

/// Activation policy with no activation (out = pre).
using IdentityPost = ActivationFn<Activation::identity>;

namespace detail {

template <int K, class Post, class T, class Space>
struct Conv1dForward {
  StridedTensor<const T***, Space> x;  // (B, T, Di), unit stride over Di
  Tensor<const T**, Space> w;          // (Di, K)
  Tensor<const T*, Space> bias;        // (Di) or empty
  Tensor<const T***, Space> window;    // (B, Di, K − 1) or empty: zero left context
  Tensor<T***, Space> pre, out;        // (B, T, Di); pre may be empty

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t row) const {
    const std::int64_t steps = x.extent(1), di = x.extent(2);
    const std::int64_t b = row / steps, t = row % steps;
    T* const o = &out(b, t, 0);
    T* const p = pre.data() ? &pre(b, t, 0) : nullptr;
    const T* const wp = w.data();
    if (t >= K - 1) {  // all K inputs inside the sequence: straight vectorisable rows
      const T* xr[K];
      for (int k = 0; k < K; ++k) xr[k] = &x(b, t - (K - 1) + k, 0);
      for (std::int64_t d = 0; d < di; ++d) {
        T acc = bias.data() ? bias(d) : T(0);
        for (int k = 0; k < K; ++k) acc += wp[d * K + k] * xr[k][d];
        if (p) p[d] = acc;
        o[d] = Post::value(acc);
      }
      return;
    }
    for (std::int64_t d = 0; d < di; ++d) {
      T acc = bias.data() ? bias(d) : T(0);
      for (int k = 0; k < K; ++k) {
        const std::int64_t s = t - (K - 1) + k;
        const T xv = s >= 0 ? x(b, s, d) : (window.data() ? window(b, d, K - 1 + s) : T(0));
        acc += wp[d * K + k] * xv;
      }
      if (p) p[d] = acc;
      o[d] = Post::value(acc);
    }
  }
};

// dx(b, s, d) += Σ_k w(d, k) · dpre(b, s + K − 1 − k, d) over the outputs inside the sequence.
template <int K, class T, class Space>
struct Conv1dBackwardInput {
  Tensor<const T***, Space> dpre;  // (B, T, Di)
  Tensor<const T**, Space> w;      // (Di, K)
  StridedTensor<T***, Space> dx;   // (B, T, Di), unit stride over Di
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t row) const {
    const std::int64_t steps = dpre.extent(1), di = dpre.extent(2);
    const std::int64_t b = row / steps, s = row % steps;
    T* const o = &dx(b, s, 0);
    const T* const wp = w.data();
    if (s + K - 1 < steps) {
      const T* g[K];
      for (int k = 0; k < K; ++k) g[k] = &dpre(b, s + K - 1 - k, 0);
      for (std::int64_t d = 0; d < di; ++d) {
        T acc = 0;
        for (int k = 0; k < K; ++k) acc += wp[d * K + k] * g[k][d];
        o[d] += acc;
      }
      return;
    }
    for (std::int64_t d = 0; d < di; ++d) {
      T acc = 0;
      for (int k = 0; k < K; ++k) {
        const std::int64_t t = s + K - 1 - k;
        if (t < steps) acc += wp[d * K + k] * dpre(b, t, d);
      }
      o[d] += acc;
    }
  }
};

// dw(d, k) += Σ_{b,t} dpre(b, t, d) · x(b, t − K + 1 + k, d); dbias(d) += Σ_{b,t} dpre(b, t, d).
// One item per block of L channels; rows in a fixed order, so the sums are deterministic.
template <int K, class T, class Space>
struct Conv1dBackwardWeight {
  static constexpr int L = 16;
  Tensor<const T***, Space> dpre;      // (B, T, Di)
  StridedTensor<const T***, Space> x;  // (B, T, Di)
  Tensor<T**, Space> dw;               // (Di, K)
  Tensor<T*, Space> dbias;             // (Di) or empty
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t block) const {
    const std::int64_t nb = dpre.extent(0), steps = dpre.extent(1), di = dpre.extent(2);
    const std::int64_t d0 = block * L;
    const int lanes = static_cast<int>(di - d0 < L ? di - d0 : L);
    T acc[K][L], accb[L];
    for (int j = 0; j < L; ++j) {
      accb[j] = 0;
      for (int k = 0; k < K; ++k) acc[k][j] = 0;
    }
    for (std::int64_t b = 0; b < nb; ++b) {
      T hist[K][L];  // x at t − K + 1 .. t; zero before the sequence
      for (int k = 0; k < K; ++k)
        for (int j = 0; j < L; ++j) hist[k][j] = 0;
      for (std::int64_t t = 0; t < steps; ++t) {
        for (int k = 0; k + 1 < K; ++k)
          for (int j = 0; j < L; ++j) hist[k][j] = hist[k + 1][j];
        T g[L];
        const T* const xp = &x(b, t, d0);
        const T* const gp = &dpre(b, t, d0);
        for (int j = 0; j < L; ++j) {
          hist[K - 1][j] = j < lanes ? xp[j] : T(0);
          g[j] = j < lanes ? gp[j] : T(0);
        }
        for (int j = 0; j < L; ++j) {
          accb[j] += g[j];
          for (int k = 0; k < K; ++k) acc[k][j] += g[j] * hist[k][j];
        }
      }
    }
    for (int j = 0; j < lanes; ++j) {
      if (dbias.data()) dbias(d0 + j) += accb[j];
      for (int k = 0; k < K; ++k) dw(d0 + j, k) += acc[k][j];
    }
  }
};

// window(b, d, :) ← the last K − 1 inputs of [window(b, d, :), x(b, :, d)]. In place: entry k
// reads window entry k + T > k, which has not been overwritten yet.
template <int K, class T, class Space>
struct Conv1dUpdateWindow {
  StridedTensor<const T***, Space> x;  // (B, T, Di)
  Tensor<const T***, Space> old;       // (B, Di, K − 1) or empty: zero left context
  Tensor<T***, Space> window;          // (B, Di, K − 1)
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    const std::int64_t steps = x.extent(1), di = x.extent(2);
    const std::int64_t b = i / di, d = i % di;
    for (int k = 0; k < K - 1; ++k) {
      const std::int64_t s = steps - (K - 1) + k;
      window(b, d, k) = s >= 0 ? x(b, s, d) : (old.data() ? old(b, d, k + steps) : T(0));
    }
  }
};

template <class X>
void check_unit_channel_stride(const std::string& api, const char* name, const X& x) {
  if (x.extent(2) > 1 && x.stride(2) != 1)
    fail<shape_error>(api, name, " has channel stride ", x.stride(2),
                      ", expected 1 (a column slice of a row-major tensor)");
}

}  // namespace detail

/// pre = causal depthwise conv of x, out = Post::value(pre).
///
/// Shapes: x (B, T, Di), unit stride over Di (a column slice of a row-major tensor is fine);
/// w (Di, K); bias (Di) or empty; window (B, Di, K − 1) or empty (zero left context);
/// pre (B, T, Di) or empty (not kept); out (B, T, Di).
template <int K, class Post, Scalar T, ExecutionSpace Space>
void conv1d_forward(const Space& exec, std::type_identity_t<StridedTensor<const T***, Space>> x,
                    TensorArg<const T**, Space> w, TensorArg<const T*, Space> bias, TensorArg<const T***, Space> window,
                    TensorArg<T***, Space> pre, TensorArg<T***, Space> out) {
  static_assert(K >= 1, "hybridseq::kernels::conv1d_forward: K must be positive");
  const std::string api = "hybridseq::kernels::conv1d_forward";
  const auto b = static_cast<std::int64_t>(x.extent(0)), t = static_cast<std::int64_t>(x.extent(1)),
             di = static_cast<std::int64_t>(x.extent(2));
  detail::check_unit_channel_stride(api, "x", x);
  core::check_shape(api, "w", w, core::dim(di), core::dim(K));
  if (bias.data()) core::check_shape(api, "bias", bias, core::dim(di));
  if (window.data()) core::check_shape(api, "window", window, core::dim(b), core::dim(di), core::dim(K - 1));
  if (pre.data()) core::check_shape(api, "pre", pre, core::dim(b), core::dim(t), core::dim(di));
  core::check_shape(api, "out", out, core::dim(b), core::dim(t), core::dim(di));
  Kokkos::parallel_for("hybridseq::kernels::conv1d::forward", Kokkos::RangePolicy<Space>(exec, 0, b * t),
                       detail::Conv1dForward<K, Post, T, Space>{x, w, bias, window, pre, out});
}

/// Backward of `conv1d_forward` from a zero left context, given dpre = dL/dpre (the caller
/// applies the activation's derivative). Accumulates dx (B, T, Di, unit channel stride),
/// dw (Di, K) and dbias (Di; empty when the conv has no bias).
template <int K, Scalar T, ExecutionSpace Space>
void conv1d_backward(const Space& exec, std::type_identity_t<StridedTensor<const T***, Space>> x,
                     TensorArg<const T**, Space> w, TensorArg<const T***, Space> dpre,
                     std::type_identity_t<StridedTensor<T***, Space>> dx, TensorArg<T**, Space> dw,
                     TensorArg<T*, Space> dbias) {
  const std::string api = "hybridseq::kernels::conv1d_backward";
  const auto b = static_cast<std::int64_t>(x.extent(0)), t = static_cast<std::int64_t>(x.extent(1)),
             di = static_cast<std::int64_t>(x.extent(2));
  detail::check_unit_channel_stride(api, "x", x);
  detail::check_unit_channel_stride(api, "dx", dx);
  core::check_shape(api, "w", w, core::dim(di), core::dim(K));
  core::check_shape(api, "dpre", dpre, core::dim(b), core::dim(t), core::dim(di));
  core::check_shape(api, "dx", dx, core::dim(b), core::dim(t), core::dim(di));
  core::check_shape(api, "dw", dw, core::dim(di), core::dim(K));
  if (dbias.data()) core::check_shape(api, "dbias", dbias, core::dim(di));
  Kokkos::parallel_for("hybridseq::kernels::conv1d::backward_input", Kokkos::RangePolicy<Space>(exec, 0, b * t),
                       detail::Conv1dBackwardInput<K, T, Space>{dpre, w, dx});
  constexpr int L = detail::Conv1dBackwardWeight<K, T, Space>::L;
  Kokkos::parallel_for("hybridseq::kernels::conv1d::backward_weight",
                       Kokkos::RangePolicy<Space>(exec, 0, (di + L - 1) / L),
                       detail::Conv1dBackwardWeight<K, T, Space>{dpre, x, dw, dbias});
}

/// window ← the last K − 1 inputs of the sequence [old window, x] (B, Di, K − 1); `old` empty
/// means zeros. `window` may be `old` itself. Called after a prefill so that decoding continues.
template <int K, Scalar T, ExecutionSpace Space>
void conv1d_update_window(const Space& exec, std::type_identity_t<StridedTensor<const T***, Space>> x,
                          TensorArg<const T***, Space> old, TensorArg<T***, Space> window) {
  const std::string api = "hybridseq::kernels::conv1d_update_window";
  const auto b = static_cast<std::int64_t>(x.extent(0)), di = static_cast<std::int64_t>(x.extent(2));
  if (old.data()) core::check_shape(api, "old", old, core::dim(b), core::dim(di), core::dim(K - 1));
  core::check_shape(api, "window", window, core::dim(b), core::dim(di), core::dim(K - 1));
  if constexpr (K > 1)
    Kokkos::parallel_for("hybridseq::kernels::conv1d::window", Kokkos::RangePolicy<Space>(exec, 0, b * di),
                         detail::Conv1dUpdateWindow<K, T, Space>{x, old, window});
}

/// One decoding step: out (B, 1, Di) = act(conv of [window, x]) for x (B, 1, Di), then the
/// window advances by one input. O(K·Di) per sequence, independent of the position.
template <int K, class Post, Scalar T, ExecutionSpace Space>
void conv1d_step(const Space& exec, std::type_identity_t<StridedTensor<const T***, Space>> x,
                 TensorArg<const T**, Space> w, TensorArg<const T*, Space> bias, TensorArg<T***, Space> window,
                 TensorArg<T***, Space> pre, TensorArg<T***, Space> out) {
  const std::string api = "hybridseq::kernels::conv1d_step";
  core::check_shape(api, "x", x, core::B, core::dim(1), core::dim(x.extent(2)));
  conv1d_forward<K, Post, T>(exec, x, w, bias, window, pre, out);
  conv1d_update_window<K, T>(exec, x, window, window);
}

}  // namespace kernels
}  // namespace hybridseq
