#pragma once
/// \file
/// RMSNorm (Zhang & Sennrich 2019): y = x / sqrt(mean(x²) + eps) · g.

#include <string>

#include "../core/check.hpp"
#include "../core/concepts.hpp"
#include "../core/parameter.hpp"
#include "../core/workspace.hpp"
#include "../kernels/norms.hpp"

namespace hybridseq::layers {

/// y (B, T, D) = RMSNorm(x (B, T, D)) with a learnable gain g (D), initialised to 1.
template <int D, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class RmsNorm : public core::PositionWiseLayer<D, T, Space> {
 public:
  struct Options {
    double eps = 1e-6;
  };
  struct Saved {
    Tensor<const T***, Space> x;  // (B, T, D)
    Tensor<T*, Space> rstd;       // (B·T) 1/sqrt(mean(x²)+eps)
  };

  explicit RmsNorm(const Options& options = {})
      : eps_(static_cast<T>(options.eps)),
        weight_({D}, core::Role::norm_gain, core::Init::ones()),
        weight_partials_(kernels::column_partials<T, Space>("hybridseq::layers::RmsNorm::weight_partials", D)) {}

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& saved) const {
    check(x, y, "forward", "y");
    saved.x = x;
    saved.rstd = ws.template allocate<T*>("rmsnorm.rstd", x.extent(0) * x.extent(1));
    kernels::rmsnorm_forward<T>(Space{}, core::as_matrix(x), weight_.value(), eps_, core::as_matrix(y), saved.rstd);
  }

  void backward(core::Workspace<Space>&, const Saved& saved, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    check(saved.x, dy, "backward", "dy");
    check(saved.x, dx, "backward", "dx");
    kernels::rmsnorm_backward<T>(Space{}, core::as_matrix(saved.x), weight_.value(), saved.rstd, core::as_matrix(dy),
                                 core::as_matrix(dx), weight_.grad(), weight_partials_);
  }

  /// Arena use: the saved rstd, one per row (forward's allocation).
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    return core::Footprint::kept(core::padded_bytes<T>(q.batch * q.time));
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("weight", weight_);
  }

 private:
  template <class X, class Y>
  static void check(const X& x, const Y& y, const char* op, const char* yname) {
    core::check_sequence_io(std::string("hybridseq::layers::RmsNorm::") + op, x, D, yname, y, D);
  }

  T eps_;
  core::Parameter<T, Space> weight_;    // (D)
  Tensor<T**, Space> weight_partials_;  // the gradient's row-block sums (kernels::column_partials)
};

}  // namespace hybridseq::layers
