#pragma once
/// \file
/// Rotary position embedding (Su et al. 2021), GPT-NeoX / Llama "rotate-half" pairing:
/// within the first r (rotary) dims of each head, dim i pairs with dim i + r/2, rotated by
/// θ_i = p · base^(−2i/r) at position p; dims ≥ r pass through (partial rotary).

#include <cmath>
#include <cstdint>

#include "../core/spaces.hpp"
#include "elementwise.hpp"

namespace hybridseq::kernels {

namespace detail {
// Angles in double: at p ~ 10⁴ a float angle would lose ~1e-3 rad.
template <class T, class Space>
struct RopeTable {
  Tensor<T**, Space> cos, sin;  // (T, r/2)
  double log_base;
  std::int64_t offset;
  int rotary;
  // Index = t·(r/2) + i.
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t index) const {
    const std::int64_t t = index / (rotary / 2), i = index % (rotary / 2);
    const double inv_freq = math::exp(-log_base * (2.0 * double(i) / double(rotary)));
    const double angle = double(t + offset) * inv_freq;
    cos(t, i) = T(math::cos(angle));
    sin(t, i) = T(math::sin(angle));
  }
};

// sign = +1 rotates by +θ (forward), −1 by −θ (backward, the transpose). Out may alias in
// only in forward's non-accumulating mode; backward accumulates into out.
template <class T, class Space, bool Accumulate>
struct RopeApply {
  Tensor<const T****, Space> in;  // (B, T, H, Dh)
  Tensor<T****, Space> out;       // (B, T, H, Dh)
  Tensor<const T**, Space> cos, sin;
  int rotary;
  T sign;
  std::int64_t heads;  // heads rotated: [0, heads) of in's H
  // Host: index = b·T + t, the heads of one position sharing its cos/sin row and its index
  // arithmetic (64-bit divisions cost more than a head's rotation).
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t bt) const {
    const std::int64_t t = bt % std::int64_t(in.extent(1)), b = bt / std::int64_t(in.extent(1));
    for (std::int64_t h = 0; h < heads; ++h) rotate(&in(b, t, h, 0), &out(b, t, h, 0), row(cos, t), row(sin, t));
  }
  // Devices: a thread per (b·T + t, h).
  KOKKOS_INLINE_FUNCTION std::int64_t parts() const { return heads; }
  KOKKOS_INLINE_FUNCTION void part(const std::int64_t bt, const std::int64_t h) const {
    const std::int64_t t = bt % std::int64_t(in.extent(1)), b = bt / std::int64_t(in.extent(1));
    rotate(&in(b, t, h, 0), &out(b, t, h, 0), row(cos, t), row(sin, t));
  }
  // Row t of a table by address: the table has no columns when rotary is 0.
  KOKKOS_FORCEINLINE_FUNCTION static const T* row(const Tensor<const T**, Space>& table, const std::int64_t t) {
    return table.data() + t * std::int64_t(table.stride(0));
  }

  KOKKOS_FORCEINLINE_FUNCTION void rotate(const T* x, T* y, const T* c, const T* s) const {
    const int half = rotary / 2, dh = int(in.extent(3));
    HYBRIDSEQ_INDEPENDENT_ITERATIONS  // y may be x: pair i reads and writes only its own two dims
        for (int i = 0; i < half; ++i) {
      const T ci = c[i], si = sign * s[i], x1 = x[i], x2 = x[i + half];
      if constexpr (Accumulate) {
        y[i] += x1 * ci - x2 * si;
        y[i + half] += x2 * ci + x1 * si;
      } else {
        y[i] = x1 * ci - x2 * si;
        y[i + half] = x2 * ci + x1 * si;
      }
    }
    if (!Accumulate && y == x) return;  // the pass-through dims are already in place
    for (int j = rotary; j < dh; ++j) {
      if constexpr (Accumulate)
        y[j] += x[j];
      else
        y[j] = x[j];
    }
  }
};

static_assert(SplitsOnDevices<RopeApply<float, DefaultSpace, false>>);
}  // namespace detail

/// Fills cos/sin tables (T, r/2) for positions offset .. offset + T − 1.
template <class T, class Space>
void rope_table(const Space& exec, double base, std::int64_t offset, int rotary, TensorArg<T**, Space> cos,
                TensorArg<T**, Space> sin) {
  if (cos.extent(0) == 0 || cos.extent(1) == 0) return;
  // Three libm calls in double per entry.
  core::parallel_for("hybridseq::kernels::rope::table", exec, std::int64_t(cos.extent(0) * cos.extent(1)), 64,
                     detail::RopeTable<T, Space>{cos, sin, std::log(base), offset, rotary});
}

/// out = R(θ) in  (forward), or out += R(−θ) in  (backward: R is orthogonal), for heads
/// [0, heads) of (B, T, H, Dh) views (all heads when heads < 0). In place is allowed when
/// not accumulating.
template <class T, bool Accumulate, class Space>
void rope_apply(const Space& exec, TensorArg<const T****, Space> in, TensorArg<T****, Space> out,
                TensorArg<const T**, Space> cos, TensorArg<const T**, Space> sin, int rotary, bool inverse,
                std::int64_t heads = -1) {
  if (in.size() == 0) return;
  if (heads < 0) heads = std::int64_t(in.extent(2));
  const std::int64_t positions = std::int64_t(in.extent(0) * in.extent(1)), dh = std::int64_t(in.extent(3));
  elementwise<T>("hybridseq::kernels::rope::apply", exec, positions, heads * dh,
                 detail::RopeApply<T, Space, Accumulate>{in, out, cos, sin, rotary, inverse ? T(-1) : T(1), heads});
}

}  // namespace hybridseq::kernels
