#pragma once
/// \file
/// RMSNorm and LayerNorm over the last dimension of a (R, D) matrix, forward and backward.
///
/// Forward saves one or two scalars per row (rstd, mean) so backward does not keep x̂.
/// Parameter gradients are reduced per column over rows (one thread per column), which is
/// race-free and deterministic: the same gradients, bit for bit, at any thread count.

#include <cstdint>

#include "../core/spaces.hpp"

namespace hybridseq::kernels {

namespace detail {

template <class T, class Space>
struct RmsNormForward {
  Tensor<const T**, Space> x;  // (R, D)
  Tensor<const T*, Space> w;   // (D)
  Tensor<T**, Space> y;        // (R, D)
  Tensor<T*, Space> rstd;      // (R)
  T eps;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t r) const {
    const std::int64_t d = x.extent(1);
    T ss = 0;
    for (std::int64_t j = 0; j < d; ++j) ss += x(r, j) * x(r, j);
    const T s = T(1) / math::sqrt(ss / T(d) + eps);
    rstd(r) = s;
    for (std::int64_t j = 0; j < d; ++j) y(r, j) = x(r, j) * s * w(j);
  }
};

// dx = s·(w⊙dy) − s³/D · x · Σ_j (w⊙dy⊙x)
template <class T, class Space>
struct RmsNormBackwardInput {
  Tensor<const T**, Space> x, dy;
  Tensor<const T*, Space> w, rstd;
  Tensor<T**, Space> dx;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t r) const {
    const std::int64_t d = x.extent(1);
    const T s = rstd(r);
    T dot = 0;
    for (std::int64_t j = 0; j < d; ++j) dot += w(j) * dy(r, j) * x(r, j);
    const T c = s * s * s * dot / T(d);
    for (std::int64_t j = 0; j < d; ++j) dx(r, j) += s * w(j) * dy(r, j) - c * x(r, j);
  }
};

template <class T, class Space>
struct RmsNormBackwardWeight {
  Tensor<const T**, Space> x, dy;
  Tensor<const T*, Space> rstd;
  Tensor<T*, Space> dw;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t j) const {
    T acc = 0;
    for (std::int64_t r = 0; r < std::int64_t(x.extent(0)); ++r) acc += dy(r, j) * x(r, j) * rstd(r);
    dw(j) += acc;
  }
};

template <class T, class Space>
struct LayerNormForward {
  Tensor<const T**, Space> x;
  Tensor<const T*, Space> w, b;
  Tensor<T**, Space> y;
  Tensor<T*, Space> mean, rstd;
  T eps;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t r) const {
    const std::int64_t d = x.extent(1);
    T mu = 0;
    for (std::int64_t j = 0; j < d; ++j) mu += x(r, j);
    mu /= T(d);
    T var = 0;  // two-pass: no cancellation for rows with a large mean
    for (std::int64_t j = 0; j < d; ++j) var += (x(r, j) - mu) * (x(r, j) - mu);
    const T s = T(1) / math::sqrt(var / T(d) + eps);
    mean(r) = mu;
    rstd(r) = s;
    for (std::int64_t j = 0; j < d; ++j) y(r, j) = (x(r, j) - mu) * s * w(j) + b(j);
  }
};

// g = w⊙dy; dx = s·(g − mean(g) − x̂·mean(g⊙x̂))
template <class T, class Space>
struct LayerNormBackwardInput {
  Tensor<const T**, Space> x, dy;
  Tensor<const T*, Space> w, mean, rstd;
  Tensor<T**, Space> dx;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t r) const {
    const std::int64_t d = x.extent(1);
    const T mu = mean(r), s = rstd(r);
    T g_mean = 0, gx_mean = 0;
    for (std::int64_t j = 0; j < d; ++j) {
      const T g = w(j) * dy(r, j);
      g_mean += g;
      gx_mean += g * (x(r, j) - mu) * s;
    }
    g_mean /= T(d);
    gx_mean /= T(d);
    for (std::int64_t j = 0; j < d; ++j) {
      const T xhat = (x(r, j) - mu) * s;
      dx(r, j) += s * (w(j) * dy(r, j) - g_mean - xhat * gx_mean);
    }
  }
};

template <class T, class Space>
struct LayerNormBackwardParams {
  Tensor<const T**, Space> x, dy;
  Tensor<const T*, Space> mean, rstd;
  Tensor<T*, Space> dw, db;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t j) const {
    T aw = 0, ab = 0;
    for (std::int64_t r = 0; r < std::int64_t(x.extent(0)); ++r) {
      aw += dy(r, j) * (x(r, j) - mean(r)) * rstd(r);
      ab += dy(r, j);
    }
    dw(j) += aw;
    db(j) += ab;
  }
};

}  // namespace detail

template <class T, class Space>
void rmsnorm_forward(const Space& exec, TensorArg<const T**, Space> x, TensorArg<const T*, Space> w, T eps,
                     TensorArg<T**, Space> y, TensorArg<T*, Space> rstd) {
  Kokkos::parallel_for("hybridseq::kernels::rmsnorm::forward", Kokkos::RangePolicy<Space>(exec, 0, x.extent(0)),
                       detail::RmsNormForward<T, Space>{x, w, y, rstd, eps});
}

template <class T, class Space>
void rmsnorm_backward(const Space& exec, TensorArg<const T**, Space> x, TensorArg<const T*, Space> w,
                      TensorArg<const T*, Space> rstd, TensorArg<const T**, Space> dy, TensorArg<T**, Space> dx,
                      TensorArg<T*, Space> dw) {
  Kokkos::parallel_for("hybridseq::kernels::rmsnorm::backward_input", Kokkos::RangePolicy<Space>(exec, 0, x.extent(0)),
                       detail::RmsNormBackwardInput<T, Space>{x, dy, w, rstd, dx});
  Kokkos::parallel_for("hybridseq::kernels::rmsnorm::backward_weight", Kokkos::RangePolicy<Space>(exec, 0, x.extent(1)),
                       detail::RmsNormBackwardWeight<T, Space>{x, dy, rstd, dw});
}

template <class T, class Space>
void layernorm_forward(const Space& exec, TensorArg<const T**, Space> x, TensorArg<const T*, Space> w,
                       TensorArg<const T*, Space> b, T eps, TensorArg<T**, Space> y, TensorArg<T*, Space> mean,
                       TensorArg<T*, Space> rstd) {
  Kokkos::parallel_for("hybridseq::kernels::layernorm::forward", Kokkos::RangePolicy<Space>(exec, 0, x.extent(0)),
                       detail::LayerNormForward<T, Space>{x, w, b, y, mean, rstd, eps});
}

template <class T, class Space>
void layernorm_backward(const Space& exec, TensorArg<const T**, Space> x, TensorArg<const T*, Space> w,
                        TensorArg<const T*, Space> mean, TensorArg<const T*, Space> rstd,
                        TensorArg<const T**, Space> dy, TensorArg<T**, Space> dx, TensorArg<T*, Space> dw,
                        TensorArg<T*, Space> db) {
  Kokkos::parallel_for("hybridseq::kernels::layernorm::backward_input",
                       Kokkos::RangePolicy<Space>(exec, 0, x.extent(0)),
                       detail::LayerNormBackwardInput<T, Space>{x, dy, w, mean, rstd, dx});
  Kokkos::parallel_for("hybridseq::kernels::layernorm::backward_params",
                       Kokkos::RangePolicy<Space>(exec, 0, x.extent(1)),
                       detail::LayerNormBackwardParams<T, Space>{x, dy, mean, rstd, dw, db});
}

}  // namespace hybridseq::kernels
