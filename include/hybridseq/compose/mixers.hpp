#pragma once
/// \file
/// Mixers: combine the outputs h_1..h_N (each (B, T, D)) of parallel branches into one.
///
///   SoftplusMixer<N>           w_b = softplus(p_b) / Σ softplus(p)   (PHA default; p_b = log(e−1) → equal weights)
///   SoftplusMixer<N, false>    w_b = softplus(p_b)                   (PHA's un-normalised reading)
///   MeanMixer<N>, SumMixer<N>  fixed weights 1/N and 1
///
/// Forward writes y = Σ_b w_b h_b; backward accumulates dh_b += w_b dy and the weights'
/// gradient: ∂L/∂w_b = Σ dy ⊙ h_b, then through the normalisation and softplus.

#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include "../core/parallel.hpp"
#include "../core/parameter.hpp"
#include "../core/spaces.hpp"

namespace hybridseq::compose {

namespace detail {
template <class T, class Space, int N>
void weighted_sum(const std::array<Tensor<T***, Space>, N>& h, const std::array<T, N>& w,
                  const Tensor<T***, Space>& y) {
  const auto fy = core::flat(y);
  std::array<decltype(core::flat(h[0])), N> fh;
  for (int b = 0; b < N; ++b) fh[b] = core::flat(h[b]);
  core::parallel_for(
      "hybridseq::compose::mix", Space{}, fy.extent(0), N, KOKKOS_LAMBDA(std::int64_t i) {
        T acc = 0;
        for (int b = 0; b < N; ++b) acc += w[b] * fh[b](i);
        fy(i) = acc;
      });
}

template <class T, class Space>
double dot(const Tensor<T***, Space>& a, const Tensor<const T***, Space>& b) {
  const auto fa = core::flat(a);
  const auto fb = core::flat(b);
  double s = 0;
  core::parallel_sum(
      "hybridseq::compose::mix_grad", Space{}, fa.extent(0), 1,
      KOKKOS_LAMBDA(std::int64_t i, double& acc) { acc += double(fa(i)) * double(fb(i)); }, s);
  return s;
}

template <class T, class Space>
void axpy(T w, const Tensor<const T***, Space>& dy, const Tensor<T***, Space>& dh) {
  const auto fd = core::flat(dy);
  const auto fh = core::flat(dh);
  core::parallel_for(
      "hybridseq::compose::mix_backward", Space{}, fd.extent(0), 1,
      KOKKOS_LAMBDA(std::int64_t i) { fh(i) += w * fd(i); });
}

inline double softplus(double p) {
  return p > 20 ? p : std::log1p(std::exp(p));
}
inline double sigmoid(double p) {
  return 1 / (1 + std::exp(-p));
}
}  // namespace detail

/// Learnable softplus mixing: one scalar per branch.
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
      : logits_({N}, core::Role::scalar, core::Init::constant(std::log(std::exp(1.0) - 1.0))) {}

  /// The current mixing weights w_b (host copy), readable after training.
  std::array<double, N> weights() const {
    const auto p = host_copy(logits_.value());
    std::array<double, N> w{};
    double total = 0;
    for (int b = 0; b < N; ++b) total += (w[b] = detail::softplus(double(p[b])));
    if constexpr (Normalised)
      for (auto& v : w) v /= total;
    return w;
  }

  void forward(const std::array<Tensor<T***, Space>, N>& h, Tensor<T***, Space> y, Saved& s) const {
    s.h = h;
    const auto w = weights();
    std::array<T, N> wt;
    for (int b = 0; b < N; ++b) wt[b] = T(w[b]);
    detail::weighted_sum<T, Space, N>(h, wt, y);
  }

  void backward(const Saved& s, Tensor<const T***, Space> dy, const std::array<Tensor<T***, Space>, N>& dh) {
    const auto p = host_copy(logits_.value());
    const auto w = weights();
    std::array<double, N> g{}, sp{};  // g_b = ∂L/∂w_b
    double total = 0, wg = 0;
    for (int b = 0; b < N; ++b) {
      g[b] = detail::dot<T, Space>(s.h[b], dy);
      detail::axpy<T, Space>(T(w[b]), dy, dh[b]);
      total += (sp[b] = detail::softplus(double(p[b])));
      wg += w[b] * g[b];
    }
    auto grad = host_copy(logits_.grad());
    for (int b = 0; b < N; ++b) {
      // Normalised: ∂L/∂s_b = (g_b − Σ_c w_c g_c) / Σ s;  un-normalised: ∂L/∂s_b = g_b.
      const double ds = Normalised ? (g[b] - wg) / total : g[b];
      grad[b] += T(ds * detail::sigmoid(double(p[b])));
    }
    Kokkos::deep_copy(logits_.grad(), HostScalars(grad.data(), N));
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("logits", logits_);
  }

 private:
  using HostScalars = Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  // The N scalars on the host, copied into an array rather than a mirror View: a mirror of
  // device memory is a new allocation at every call (a step allocates nothing after its first).
  static std::array<T, N> host_copy(const Tensor<T*, Space>& v) {
    std::array<T, N> out;
    Kokkos::deep_copy(HostScalars(out.data(), N), v);
    return out;
  }

  core::Parameter<T, Space> logits_;  // (N)
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
  explicit FixedMixer(const Options& = {}) {}
  static constexpr T weight = Mean ? T(1) / T(N) : T(1);
  std::array<double, N> weights() const {
    std::array<double, N> w;
    w.fill(double(weight));
    return w;
  }
  void forward(const std::array<Tensor<T***, Space>, N>& h, Tensor<T***, Space> y, Saved&) const {
    std::array<T, N> w;
    w.fill(weight);
    detail::weighted_sum<T, Space, N>(h, w, y);
  }
  void backward(const Saved&, Tensor<const T***, Space> dy, const std::array<Tensor<T***, Space>, N>& dh) {
    for (int b = 0; b < N; ++b) detail::axpy<T, Space>(weight, dy, dh[b]);
  }
  template <class Visit>
  void visit_parameters(Visit&&) {}
};

template <int N, Scalar T = float, ExecutionSpace Space = DefaultSpace>
using MeanMixer = FixedMixer<N, true, T, Space>;
template <int N, Scalar T = float, ExecutionSpace Space = DefaultSpace>
using SumMixer = FixedMixer<N, false, T, Space>;

}  // namespace hybridseq::compose
