#pragma once
/// \file
/// An elementwise activation as a layer (GELU exact/tanh, SiLU, softplus).

#include <string>

#include "../core/check.hpp"
#include "../core/concepts.hpp"
#include "../core/workspace.hpp"
#include "../kernels/activations.hpp"

namespace hybridseq::layers {

using kernels::Activation;

/// y (B, T, D) = f(x (B, T, D)) elementwise. No parameters.
template <Activation A, int D, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class ActivationLayer : public core::PositionWiseLayer<D, T, Space> {
 public:
  struct Options {};
  struct Saved {
    Tensor<const T***, Space> x;  // (B, T, D)
  };

  explicit ActivationLayer(const Options& = {}) {}

  void forward(core::Workspace<Space>&, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& saved) const {
    check(x, y, "forward", "y");
    saved.x = x;
    kernels::activation_forward<A, T>(Space{}, core::flat(x), core::flat(y));
  }

  void backward(core::Workspace<Space>&, const Saved& saved, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    check(saved.x, dy, "backward", "dy");
    check(saved.x, dx, "backward", "dx");
    kernels::activation_backward<A, T>(Space{}, core::flat(saved.x), core::flat(dy), core::flat(dx));
  }

  /// Arena use: none (y and the saved input are the caller's).
  core::Footprint workspace(const core::WorkspaceQuery&) const { return {}; }

  template <class Visit>
  void visit_parameters(Visit&&) {}

 private:
  template <class X, class Y>
  static void check(const X& x, const Y& y, const char* op, const char* yname) {
    core::check_sequence_io(std::string("hybridseq::layers::ActivationLayer<") + kernels::name_of(A) + ">::" + op, x, D,
                            yname, y, D);
  }
};

}  // namespace hybridseq::layers
