#pragma once
/// \file
/// LayerNorm (Ba et al. 2016): y = (x − mean) / sqrt(var + eps) · g + b, biased variance.

#include <string>

#include "../core/check.hpp"
#include "../core/concepts.hpp"
#include "../core/parameter.hpp"
#include "../core/workspace.hpp"
#include "../kernels/norms.hpp"

namespace hybridseq::layers {

/// y (B, T, D) = LayerNorm(x (B, T, D)); gain g (D) starts at 1, bias b (D) at 0.
template <int D, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class LayerNorm : public core::PositionWiseLayer<D, T, Space> {
 public:
  struct Options {
    double eps = 1e-5;
  };
  struct Saved {
    Tensor<const T***, Space> x;  // (B, T, D)
    Tensor<T*, Space> mean;       // (B·T)
    Tensor<T*, Space> rstd;       // (B·T)
  };

  explicit LayerNorm(const Options& options = {})
      : eps_(static_cast<T>(options.eps)),
        weight_({D}, core::Role::norm_gain, core::Init::ones()),
        bias_({D}, core::Role::bias, core::Init::zeros()),
        weight_partials_(kernels::column_partials<T, Space>("hybridseq::layers::LayerNorm::weight_partials", D)),
        bias_partials_(kernels::column_partials<T, Space>("hybridseq::layers::LayerNorm::bias_partials", D)) {}

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& saved) const {
    check(x, y, "forward", "y");
    const auto rows = x.extent(0) * x.extent(1);
    saved.x = x;
    saved.mean = ws.template allocate<T*>("layernorm.mean", rows);
    saved.rstd = ws.template allocate<T*>("layernorm.rstd", rows);
    kernels::layernorm_forward<T>(Space{}, core::as_matrix(x), weight_.value(), bias_.value(), eps_, core::as_matrix(y),
                                  saved.mean, saved.rstd);
  }

  void backward(core::Workspace<Space>&, const Saved& saved, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    check(saved.x, dy, "backward", "dy");
    check(saved.x, dx, "backward", "dx");
    kernels::layernorm_backward<T>(Space{}, core::as_matrix(saved.x), weight_.value(), saved.mean, saved.rstd,
                                   core::as_matrix(dy), core::as_matrix(dx), weight_.grad(), bias_.grad(),
                                   weight_partials_, bias_partials_);
  }

  /// Arena use: the saved mean and rstd, one per row (forward's allocations).
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    return core::Footprint::kept(2 * core::padded_bytes<T>(q.batch * q.time));
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("weight", weight_);
    visit("bias", bias_);
  }

 private:
  template <class X, class Y>
  static void check(const X& x, const Y& y, const char* op, const char* yname) {
    core::check_sequence_io(std::string("hybridseq::layers::LayerNorm::") + op, x, D, yname, y, D);
  }

  T eps_;
  core::Parameter<T, Space> weight_;  // (D)
  core::Parameter<T, Space> bias_;    // (D)
  // The gradients' row-block sums (kernels::column_partials): held like the gradients, so that
  // backward allocates nothing.
  Tensor<T**, Space> weight_partials_, bias_partials_;
};

}  // namespace hybridseq::layers
