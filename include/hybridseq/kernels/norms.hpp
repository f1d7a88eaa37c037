#pragma once
/// \file
/// RMSNorm and LayerNorm over the last dimension of a (R, D) matrix, forward and backward.
///
/// Forward saves one or two scalars per row (rstd, mean) so backward does not keep x̂.
/// Parameter gradients are reduced over rows by row blocks (kernels/bias.hpp): race-free and
/// deterministic, the same gradients, bit for bit, at any thread count.

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../core/spaces.hpp"
#include "bias.hpp"
#include "elementwise.hpp"
#include "tile_gemm.hpp"

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
    const T ss = lane_sum<T>(d, [&](std::int64_t j) { return x(r, j) * x(r, j); });
    const T s = T(1) / math::sqrt(ss / T(d) + eps);
    rstd(r) = s;
    for (std::int64_t j = 0; j < d; ++j) y(r, j) = x(r, j) * s * w(j);
  }
#if HYBRIDSEQ_ISA_DISPATCH
  // The host's vector loop (kernels::HostVectorLoop): operator()'s arithmetic, term for term,
  // on whole vectors, with the sum folded in registers (simd::lane_total), where the
  // compiler's copy of lane_sum's final combine goes through the stack one float at a time.
  // Under GCC's default contraction (-ffp-contract=fast) it gives operator()'s bits.
  template <class S>
  HYBRIDSEQ_HOST_FORCEINLINE void vector_loop(std::int64_t r,
                                              const std::int64_t end) const requires std::is_same_v<T, float> {
    using V = typename S::V;
    constexpr int W = S::lanes, NV = reduce_lanes / W;
    const std::int64_t d = x.extent(1);
    if (d == 0 || d % reduce_lanes != 0) {
      for (; r < end; ++r) (*this)(r);
      return;
    }
    const float* pw = w.data();
    for (; r < end; ++r) {
      const float* xr = &x(r, 0);
      float* yr = &y(r, 0);
      V sq[NV] = {}, xv, wv;
      for (std::int64_t j = 0; j < d; j += reduce_lanes)
        for (int v = 0; v < NV; ++v) {
          simd::load(xv, xr + j + v * W);
          sq[v] += xv * xv;
        }
      const float s = 1.0f / std::sqrt(simd::lane_total<S>(sq) / float(d) + eps);
      rstd(r) = s;
      for (std::int64_t j = 0; j < d; j += W) {
        simd::load(xv, xr + j);
        simd::load(wv, pw + j);
        simd::store(yr + j, V(xv * s * wv));
      }
    }
  }
#endif
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
    const T dot = lane_sum<T>(d, [&](std::int64_t j) { return w(j) * dy(r, j) * x(r, j); });
    const T c = s * s * s * dot / T(d);
    for (std::int64_t j = 0; j < d; ++j) dx(r, j) += s * w(j) * dy(r, j) - c * x(r, j);
  }
#if HYBRIDSEQ_ISA_DISPATCH
  // The host's vector loop, as RmsNormForward's.
  template <class S>
  HYBRIDSEQ_HOST_FORCEINLINE void vector_loop(std::int64_t r,
                                              const std::int64_t end) const requires std::is_same_v<T, float> {
    using V = typename S::V;
    constexpr int W = S::lanes, NV = reduce_lanes / W;
    const std::int64_t d = x.extent(1);
    if (d == 0 || d % reduce_lanes != 0) {
      for (; r < end; ++r) (*this)(r);
      return;
    }
    const float* pw = w.data();
    for (; r < end; ++r) {
      const float* xr = &x(r, 0);
      const float* dyr = &dy(r, 0);
      float* dxr = &dx(r, 0);
      const float s = rstd(r);
      V acc[NV] = {}, xv, wv, dyv;
      for (std::int64_t j = 0; j < d; j += reduce_lanes)
        for (int v = 0; v < NV; ++v) {
          simd::load(xv, xr + j + v * W);
          simd::load(wv, pw + j + v * W);
          simd::load(dyv, dyr + j + v * W);
          acc[v] += wv * dyv * xv;
        }
      const float c = s * s * s * simd::lane_total<S>(acc) / float(d);
      for (std::int64_t j = 0; j < d; j += W) {
        V dxv;
        simd::load(xv, xr + j);
        simd::load(wv, pw + j);
        simd::load(dyv, dyr + j);
        simd::load(dxv, dxr + j);
        simd::store(dxr + j, V(dxv + (s * wv * dyv - c * xv)));
      }
    }
  }
#endif
};

// Row block `block`'s partial of dw = Σ_r dy ⊙ x · rstd(r).
template <class T, class Space>
struct RmsNormBackwardWeight {
  Tensor<const T**, Space> x, dy;
  Tensor<const T*, Space> rstd;
  Tensor<T**, Space> partial;  // (blocks, D)
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t block) const {
    const std::int64_t d = x.extent(1);
    const RowBlock rows(block, x.extent(0));
    for (std::int64_t j = 0; j < d; ++j) partial(block, j) = T(0);
    for (std::int64_t r = rows.begin; r < rows.end; ++r) {
      const T s = rstd(r);
      for (std::int64_t j = 0; j < d; ++j) partial(block, j) += dy(r, j) * x(r, j) * s;
    }
  }
  KOKKOS_INLINE_FUNCTION std::int64_t parts() const { return std::int64_t(x.extent(1)); }
  KOKKOS_INLINE_FUNCTION void part(const std::int64_t block, const std::int64_t j) const {
    const RowBlock rows(block, x.extent(0));
    T acc = 0;
    for (std::int64_t r = rows.begin; r < rows.end; ++r) acc += dy(r, j) * x(r, j) * rstd(r);
    partial(block, j) = acc;
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
    const T mu = lane_sum<T>(d, [&](std::int64_t j) { return x(r, j); }) / T(d);
    // two-pass: no cancellation for rows with a large mean
    const T var = lane_sum<T>(d, [&](std::int64_t j) { return (x(r, j) - mu) * (x(r, j) - mu); });
    const T s = T(1) / math::sqrt(var / T(d) + eps);
    mean(r) = mu;
    rstd(r) = s;
    for (std::int64_t j = 0; j < d; ++j) y(r, j) = (x(r, j) - mu) * s * w(j) + b(j);
  }
#if HYBRIDSEQ_ISA_DISPATCH
  // The host's vector loop (kernels::HostVectorLoop): operator()'s arithmetic, term for term,
  // on whole vectors, with the sums folded in registers (simd::lane_total); under GCC's
  // default contraction, operator()'s bits.
  template <class S>
  HYBRIDSEQ_HOST_FORCEINLINE void vector_loop(std::int64_t r,
                                              const std::int64_t end) const requires std::is_same_v<T, float> {
    using V = typename S::V;
    constexpr int W = S::lanes, NV = reduce_lanes / W;
    const std::int64_t d = x.extent(1);
    if (d == 0 || d % reduce_lanes != 0) {
      for (; r < end; ++r) (*this)(r);
      return;
    }
    const float* pw = w.data();
    const float* pb = b.data();
    for (; r < end; ++r) {
      const float* xr = &x(r, 0);
      float* yr = &y(r, 0);
      V acc[NV] = {}, sq[NV] = {}, xv;
      for (std::int64_t j = 0; j < d; j += reduce_lanes)
        for (int v = 0; v < NV; ++v) {
          simd::load(xv, xr + j + v * W);
          acc[v] += xv;
        }
      const float mu = simd::lane_total<S>(acc) / float(d);
      for (std::int64_t j = 0; j < d; j += reduce_lanes)
        for (int v = 0; v < NV; ++v) {
          simd::load(xv, xr + j + v * W);
          sq[v] += (xv - mu) * (xv - mu);
        }
      const float s = 1.0f / std::sqrt(simd::lane_total<S>(sq) / float(d) + eps);
      mean(r) = mu;
      rstd(r) = s;
      for (std::int64_t j = 0; j < d; j += W) {
        V wv, bv;
        simd::load(xv, xr + j);
        simd::load(wv, pw + j);
        simd::load(bv, pb + j);
        simd::store(yr + j, V((xv - mu) * s * wv + bv));
      }
    }
  }
#endif
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
    const T g_mean = lane_sum<T>(d, [&](std::int64_t j) { return w(j) * dy(r, j); }) / T(d);
    const T gx_mean = lane_sum<T>(d, [&](std::int64_t j) { return w(j) * dy(r, j) * (x(r, j) - mu) * s; }) / T(d);
    for (std::int64_t j = 0; j < d; ++j) {
      const T xhat = (x(r, j) - mu) * s;
      dx(r, j) += s * (w(j) * dy(r, j) - g_mean - xhat * gx_mean);
    }
  }
#if HYBRIDSEQ_ISA_DISPATCH
  // The host's vector loop, as LayerNormForward's.
  template <class S>
  HYBRIDSEQ_HOST_FORCEINLINE void vector_loop(std::int64_t r,
                                              const std::int64_t end) const requires std::is_same_v<T, float> {
    using V = typename S::V;
    constexpr int W = S::lanes, NV = reduce_lanes / W;
    const std::int64_t d = x.extent(1);
    if (d == 0 || d % reduce_lanes != 0) {
      for (; r < end; ++r) (*this)(r);
      return;
    }
    const float* pw = w.data();
    for (; r < end; ++r) {
      const float* xr = &x(r, 0);
      const float* dyr = &dy(r, 0);
      float* dxr = &dx(r, 0);
      const float mu = mean(r), s = rstd(r);
      // Two loops, as operator()'s two sums: in one, w·dy would be shared and rounded before
      // the first sum adds it (operator() fuses it into an FMA there).
      V g[NV] = {}, gx[NV] = {}, xv, wv, dyv;
      for (std::int64_t j = 0; j < d; j += reduce_lanes)
        for (int v = 0; v < NV; ++v) {
          simd::load(wv, pw + j + v * W);
          simd::load(dyv, dyr + j + v * W);
          g[v] += wv * dyv;
        }
      for (std::int64_t j = 0; j < d; j += reduce_lanes)
        for (int v = 0; v < NV; ++v) {
          simd::load(xv, xr + j + v * W);
          simd::load(wv, pw + j + v * W);
          simd::load(dyv, dyr + j + v * W);
          gx[v] += wv * dyv * (xv - mu) * s;
        }
      const float g_mean = simd::lane_total<S>(g) / float(d), gx_mean = simd::lane_total<S>(gx) / float(d);
      for (std::int64_t j = 0; j < d; j += W) {
        V dxv;
        simd::load(xv, xr + j);
        simd::load(wv, pw + j);
        simd::load(dyv, dyr + j);
        simd::load(dxv, dxr + j);
        const V xhat = (xv - mu) * s;
        simd::store(dxr + j, V(dxv + s * (wv * dyv - g_mean - xhat * gx_mean)));
      }
    }
  }
#endif
};

// Row block `block`'s partials of dw = Σ_r dy ⊙ x̂ and db = Σ_r dy.
template <class T, class Space>
struct LayerNormBackwardParams {
  Tensor<const T**, Space> x, dy;
  Tensor<const T*, Space> mean, rstd;
  Tensor<T**, Space> partial_w, partial_b;  // (blocks, D)
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t block) const {
    const std::int64_t d = x.extent(1);
    const RowBlock rows(block, x.extent(0));
    for (std::int64_t j = 0; j < d; ++j) {
      partial_w(block, j) = T(0);
      partial_b(block, j) = T(0);
    }
    for (std::int64_t r = rows.begin; r < rows.end; ++r) {
      const T mu = mean(r), s = rstd(r);
      for (std::int64_t j = 0; j < d; ++j) {
        partial_w(block, j) += dy(r, j) * (x(r, j) - mu) * s;
        partial_b(block, j) += dy(r, j);
      }
    }
  }
  KOKKOS_INLINE_FUNCTION std::int64_t parts() const { return std::int64_t(x.extent(1)); }
  KOKKOS_INLINE_FUNCTION void part(const std::int64_t block, const std::int64_t j) const {
    const RowBlock rows(block, x.extent(0));
    T acc_w = 0, acc_b = 0;
    for (std::int64_t r = rows.begin; r < rows.end; ++r) {
      acc_w += dy(r, j) * (x(r, j) - mean(r)) * rstd(r);
      acc_b += dy(r, j);
    }
    partial_w(block, j) = acc_w;
    partial_b(block, j) = acc_b;
  }
};

}  // namespace detail

template <class T, class Space>
void rmsnorm_forward(const Space& exec, TensorArg<const T**, Space> x, TensorArg<const T*, Space> w, T eps,
                     TensorArg<T**, Space> y, TensorArg<T*, Space> rstd) {
  elementwise<T>("hybridseq::kernels::rmsnorm::forward", exec, x.extent(0), 3 * x.extent(1),
                 detail::RmsNormForward<T, Space>{x, w, y, rstd, eps});
}

template <class T, class Space>
void rmsnorm_backward(const Space& exec, TensorArg<const T**, Space> x, TensorArg<const T*, Space> w,
                      TensorArg<const T*, Space> rstd, TensorArg<const T**, Space> dy, TensorArg<T**, Space> dx,
                      TensorArg<T*, Space> dw, TensorArg<T**, Space> partials) {
  const std::int64_t rows = x.extent(0), d = x.extent(1);
  elementwise<T>("hybridseq::kernels::rmsnorm::backward_input", exec, rows, 4 * d,
                 detail::RmsNormBackwardInput<T, Space>{x, dy, w, rstd, dx});
  if (rows == 0) return;
  const auto partial = detail::blocks_of<T, Space>("hybridseq::kernels::rmsnorm_backward", partials, rows, d);
  detail::reduce_column_blocks<T>("hybridseq::kernels::rmsnorm::backward_weight", exec, rows, d, 1,
                                  detail::RmsNormBackwardWeight<T, Space>{x, dy, rstd, partial});
  detail::combine_blocks<T>(exec, partial, dw);
}

template <class T, class Space>
void layernorm_forward(const Space& exec, TensorArg<const T**, Space> x, TensorArg<const T*, Space> w,
                       TensorArg<const T*, Space> b, T eps, TensorArg<T**, Space> y, TensorArg<T*, Space> mean,
                       TensorArg<T*, Space> rstd) {
  elementwise<T>("hybridseq::kernels::layernorm::forward", exec, x.extent(0), 4 * x.extent(1),
                 detail::LayerNormForward<T, Space>{x, w, b, y, mean, rstd, eps});
}

template <class T, class Space>
void layernorm_backward(const Space& exec, TensorArg<const T**, Space> x, TensorArg<const T*, Space> w,
                        TensorArg<const T*, Space> mean, TensorArg<const T*, Space> rstd,
                        TensorArg<const T**, Space> dy, TensorArg<T**, Space> dx, TensorArg<T*, Space> dw,
                        TensorArg<T*, Space> db, TensorArg<T**, Space> partials_w, TensorArg<T**, Space> partials_b) {
  const std::int64_t rows = x.extent(0), d = x.extent(1);
  elementwise<T>("hybridseq::kernels::layernorm::backward_input", exec, rows, 5 * d,
                 detail::LayerNormBackwardInput<T, Space>{x, dy, w, mean, rstd, dx});
  if (rows == 0) return;
  const auto partial_w = detail::blocks_of<T, Space>("hybridseq::kernels::layernorm_backward", partials_w, rows, d);
  const auto partial_b = detail::blocks_of<T, Space>("hybridseq::kernels::layernorm_backward", partials_b, rows, d);
  detail::reduce_column_blocks<T>("hybridseq::kernels::layernorm::backward_params", exec, rows, d, 2,
                                  detail::LayerNormBackwardParams<T, Space>{x, dy, mean, rstd, partial_w, partial_b});
  detail::combine_blocks<T>(exec, partial_w, dw);
  detail::combine_blocks<T>(exec, partial_b, db);
}

}  // namespace hybridseq::kernels
