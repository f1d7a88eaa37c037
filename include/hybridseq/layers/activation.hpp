#pragma once
/// \file
/// An elementwise activation as a layer (GELU exact/tanh, SiLU, softplus).

#include <string>

#include "../core/check.hpp"
#include "../core/workspace.hpp"
#include "../kernels/activations.hpp"

namespace hybridseq::layers {

using kernels::Activation;

/// y (B, T, D) = f(x (B, T, D)) elementwise. No parameters.
template <Activation A, int D, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class ActivationLayer {
 public:
  using scalar_type = T;
  using execution_space = Space;
  static constexpr int d_in = D;
  static constexpr int d_out = D;
  static constexpr bool position_wise = true;  // decodes by forward: no state across time

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
    const std::string api = std::string("hybridseq::layers::ActivationLayer<") + kernels::name_of(A) + ">::" + op;
    core::check_shape(api, "x", x, core::B, core::T, core::dim(D));
    core::check_shape(api, yname, y, core::dim(x.extent(0)), core::dim(x.extent(1)), core::dim(D));
  }
};

}  // namespace hybridseq::layers
