#pragma once
/// \file
/// Identity: y = x. The skip path of a parallel residual written as a branch, so that
/// GPT-NeoX's `x + Attn(LN1(x)) + MLP(LN2(x))` is ParallelBlock<SumMixer<3>, Identity, …>.

#include "../core/check.hpp"
#include "../core/concepts.hpp"
#include "../core/spaces.hpp"
#include "../core/workspace.hpp"

namespace hybridseq::layers {

template <int D, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class Identity : public core::PositionWiseLayer<D, T, Space> {
 public:
  static constexpr bool skip_path = true;  // ParallelBlock never drops it (Options::dropout)

  struct Options {};
  struct Saved {};

  explicit Identity(const Options& = {}) {}

  void forward(core::Workspace<Space>&, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved&) const {
    core::check_shape("hybridseq::layers::Identity::forward", "x", x, core::B, core::T, core::dim(D));
    core::check_same_shape("hybridseq::layers::Identity::forward", "y", y, "x", x);
    Kokkos::deep_copy(y, x);
  }

  /// dx += dy.
  void backward(core::Workspace<Space>&, const Saved&, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    core::check_same_shape("hybridseq::layers::Identity::backward", "dx", dx, "dy", dy);
    const auto fy = core::flat(dy);
    const auto fx = core::flat(dx);
    Kokkos::parallel_for(
        "hybridseq::layers::Identity::backward", Kokkos::RangePolicy<Space>(0, fx.extent(0)),
        KOKKOS_LAMBDA(std::int64_t i) { fx(i) += fy(i); });
  }

  /// Arena use: none (y and the saved input are the caller's).
  core::Footprint workspace(const core::WorkspaceQuery&) const { return {}; }

  template <class Visit>
  void visit_parameters(Visit&&) {}
};

}  // namespace hybridseq::layers
