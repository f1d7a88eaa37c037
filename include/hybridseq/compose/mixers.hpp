#pragma once
/// \file
/// Mixers: combine the outputs h_1..h_N (each (B, T, D)) of parallel branches into one.
///
///   SoftplusMixer<N>           w_b = softplus(p_b) / Σ softplus(p)   (PHA default; p_b = log(e−1) → equal weights)
///   SoftplusMixer<N, false>    w_b = softplus(p_b)                   (PHA's un-normalised reading)
///   MeanMixer<N>, SumMixer<N>  fixed weights 1/N and 1
///
/// Forward writes y = Σ_b w_b h_b. Backward writes dh_b = w_b dy (the caller need not clear
/// dh_b) and accumulates the weights' gradient: ∂L/∂w_b = Σ dy ⊙ h_b, then through the
/// normalisation and softplus.

#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "../core/parallel.hpp"
#include "../core/parameter.hpp"
#include "../core/spaces.hpp"
#include "../kernels/elementwise.hpp"

namespace hybridseq::compose {

namespace detail {
template <class T, class Space, int N>
void weighted_sum(const std::array<Tensor<T***, Space>, N>& h, const Tensor<const T*, Space>& w,
                  const Tensor<T***, Space>& y) {
  const auto fy = core::flat(y);
  std::array<decltype(core::flat(h[0])), N> fh;
  for (int b = 0; b < N; ++b) fh[b] = core::flat(h[b]);
  core::parallel_for(
      "hybridseq::compose::mix", Space{}, fy.extent(0), N, KOKKOS_LAMBDA(std::int64_t i) {
        T acc = 0;
        for (int b = 0; b < N; ++b) acc += w(b) * fh[b](i);
        fy(i) = acc;
      });
}

/// sum() = Σ a ⊙ b in double, left where the space keeps it (no read back to the host). On the
/// host each row of D sums in kernels::lane_sum's interleaved partials, which vectorise (one
/// running double sum would be a chain of dependent adds), then the rows add up; a device
/// thread takes one element, so that neighbouring threads read neighbouring addresses.
template <class T, class Space>
void dot(const Tensor<T***, Space>& a, const Tensor<const T***, Space>& b, const Kokkos::View<double, Space>& sum) {
  const auto fa = core::flat(a);
  const auto fb = core::flat(b);
  if constexpr (core::host_space<Space>) {
    const std::int64_t d = a.extent(2), rows = std::int64_t(a.extent(0) * a.extent(1));
    const auto row_sum = [=](std::int64_t r, double& acc) {
      acc +=
          kernels::lane_sum<double>(d, [&](std::int64_t j) { return double(fa(r * d + j)) * double(fb(r * d + j)); });
    };
    double s = 0;
    core::parallel_sum("hybridseq::compose::mix_grad", Space{}, rows, d, row_sum, s);
    sum() = s;
  } else {
    Kokkos::parallel_reduce(
        "hybridseq::compose::mix_grad", Kokkos::RangePolicy<Space>(Space{}, 0, fa.extent(0)),
        KOKKOS_LAMBDA(std::int64_t i, double& acc) { acc += double(fa(i)) * double(fb(i)); }, sum);
  }
}

/// dh = w(b) dy.
template <class T, class Space>
void scaled(const Tensor<const T*, Space>& w, int b, const Tensor<const T***, Space>& dy,
            const Tensor<T***, Space>& dh) {
  const auto fd = core::flat(dy);
  const auto fh = core::flat(dh);
  core::parallel_for(
      "hybridseq::compose::mix_backward", Space{}, fd.extent(0), 1,
      KOKKOS_LAMBDA(std::int64_t i) { fh(i) = w(b) * fd(i); });
}

KOKKOS_INLINE_FUNCTION double softplus(double p) {
  return p > 20 ? p : math::log1p(math::exp(p));
}
KOKKOS_INLINE_FUNCTION double sigmoid(double p) {
  return 1 / (1 + math::exp(-p));
}

/// w_b = softplus(p_b) (/ Σ softplus(p)), in double, rounded to T once.
template <bool Normalised, class P>
KOKKOS_INLINE_FUNCTION double softplus_weight(const P& p, int b) {
  if constexpr (!Normalised) {
    return softplus(double(p(b)));
  } else {
    double total = 0;
    for (int c = 0; c < int(p.extent(0)); ++c) total += softplus(double(p(c)));
    return softplus(double(p(b))) / total;
  }
}

/// w (N) = the mixing weights of the logits p (N), computed where they live.
template <bool Normalised, class T, class Space>
void softplus_weights(const Tensor<const T*, Space>& p, const Tensor<T*, Space>& w) {
  core::parallel_for(
      "hybridseq::compose::mix_weights", Space{}, w.extent(0), 1,
      KOKKOS_LAMBDA(std::int64_t b) { w(b) = T(softplus_weight<Normalised>(p, int(b))); });
}

/// dp_b += ∂L/∂p_b from g_b = ∂L/∂w_b = Σ dy ⊙ h_b:
///   normalised ∂L/∂s_b = (g_b − Σ_c w_c g_c) / Σ s;  un-normalised ∂L/∂s_b = g_b;  ∂s_b/∂p_b = σ(p_b).
template <bool Normalised, class T, class Space>
void softplus_weights_backward(const Tensor<const T*, Space>& p, const Kokkos::View<const double*, Space>& g,
                               const Tensor<T*, Space>& dp) {
  const int n = int(p.extent(0));
  core::parallel_for(
      "hybridseq::compose::mix_weights_backward", Space{}, 1, n, KOKKOS_LAMBDA(std::int64_t) {
        double total = 0, wg = 0;
        for (int b = 0; b < n; ++b) total += softplus(double(p(b)));
        for (int b = 0; b < n; ++b) wg += softplus(double(p(b))) / total * g(b);
        for (int b = 0; b < n; ++b) {
          const double ds = Normalised ? (g(b) - wg) / total : g(b);
          dp(b) += T(ds * sigmoid(double(p(b))));
        }
      });
}
}  // namespace detail

/// Learnable softplus mixing: one scalar per branch. The weights and their gradient are
/// computed where the logits live: a step reads nothing back to the host (on a GPU, a copy
/// to the host would wait for every kernel before it).
template <int N, bool Normalised = true, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class SoftplusMixer {
  static_assert(N >= 1, "hybridseq::compose::SoftplusMixer: needs at least one branch");

 public:
  using scalar_type = T;
  using execution_space = Space;
  static constexpr int arity = N;
  struct Options {};
  struct Saved {
    std::array<Tensor<T***, Space>, N> h;  // each (B, T, D)
  };

  explicit SoftplusMixer(const Options& = {})
      : logits_({N}, core::Role::scalar, core::Init::constant(std::log(std::exp(1.0) - 1.0))),
        weights_("hybridseq::compose::SoftplusMixer::weights", N),
        weight_grads_("hybridseq::compose::SoftplusMixer::weight_grads", N) {}

  /// The current mixing weights w_b (a host copy), readable after training.
  std::array<double, N> weights() const {
    using HostScalars = Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    std::array<T, N> values;
    const HostScalars p(values.data(), N);
    Kokkos::deep_copy(p, logits_.value());
    std::array<double, N> w;
    for (int b = 0; b < N; ++b) w[b] = detail::softplus_weight<Normalised>(p, b);
    return w;
  }

  void forward(const std::array<Tensor<T***, Space>, N>& h, Tensor<T***, Space> y, Saved& s) const {
    s.h = h;
    detail::softplus_weights<Normalised, T, Space>(logits_.value(), weights_);
    detail::weighted_sum<T, Space, N>(h, weights_, y);
  }

  void backward(const Saved& s, Tensor<const T***, Space> dy, const std::array<Tensor<T***, Space>, N>& dh) {
    detail::softplus_weights<Normalised, T, Space>(logits_.value(), weights_);
    for (int b = 0; b < N; ++b) {
      detail::dot<T, Space>(s.h[b], dy, Kokkos::subview(weight_grads_, b));
      detail::scaled<T, Space>(weights_, b, dy, dh[b]);
    }
    detail::softplus_weights_backward<Normalised, T, Space>(logits_.value(), weight_grads_, logits_.grad());
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("logits", logits_);
  }

 private:
  core::Parameter<T, Space> logits_;  // (N)
  // Scratch of a forward or backward call, kept by the mixer so a step allocates nothing:
  Tensor<T*, Space> weights_;                  // (N) w_b
  Kokkos::View<double*, Space> weight_grads_;  // (N) ∂L/∂w_b
};

/// Fixed weights: 1/N (mean) or 1 (sum).
template <int N, bool Mean, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class FixedMixer {
 public:
  using scalar_type = T;
  using execution_space = Space;
  static constexpr int arity = N;
  struct Options {};
  struct Saved {};
  explicit FixedMixer(const Options& = {}) : weights_("hybridseq::compose::FixedMixer::weights", N) {
    core::fill(weights_, weight);
  }
  static constexpr T weight = Mean ? T(1) / T(N) : T(1);
  std::array<double, N> weights() const {
    std::array<double, N> w;
    w.fill(double(weight));
    return w;
  }
  void forward(const std::array<Tensor<T***, Space>, N>& h, Tensor<T***, Space> y, Saved&) const {
    detail::weighted_sum<T, Space, N>(h, weights_, y);
  }
  void backward(const Saved&, Tensor<const T***, Space> dy, const std::array<Tensor<T***, Space>, N>& dh) {
    for (int b = 0; b < N; ++b) detail::scaled<T, Space>(weights_, b, dy, dh[b]);
  }
  template <class Visit>
  void visit_parameters(Visit&&) {}

 private:
  Tensor<T*, Space> weights_;  // (N), every one `weight`
};

template <int N, Scalar T = float, ExecutionSpace Space = DefaultSpace>
using MeanMixer = FixedMixer<N, true, T, Space>;
template <int N, Scalar T = float, ExecutionSpace Space = DefaultSpace>
using SumMixer = FixedMixer<N, false, T, Space>;

}  // namespace hybridseq::compose
