#pragma once
/// \file
/// Linear: y = x Wᵀ + b, W (out, in) as in PyTorch.

#include <string_view>

#include "../core/check.hpp"
#include "../core/parameter.hpp"
#include "../core/workspace.hpp"
#include "../kernels/bias.hpp"
#include "../kernels/gemm.hpp"

namespace hybridseq::layers {

/// Compile-time shape of a Linear layer.
struct LinearShape {
  int in;
  int out;
  bool bias = true;
};

/// y (B, T, out) = x (B, T, in) · Wᵀ + b.
///
/// Requires: x contiguous with last extent `in`; y (B, T, out).
/// Backward accumulates dx += dy·W (or, asked for Write::assign, sets dx = dy·W), dW += dyᵀ·x,
/// db += Σ dy.
template <LinearShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class Linear {
  static_assert(S.in > 0 && S.out > 0, "hybridseq::layers::Linear: widths must be positive");

 public:
  using scalar_type = T;
  using execution_space = Space;
  static constexpr int d_in = S.in;
  static constexpr int d_out = S.out;
  static constexpr bool position_wise = true;  // decodes by forward: no state across time
  static constexpr LinearShape shape = S;

  struct Options {
    double init_std = 0.02;  // weights ~ N(0, init_std²); biases start at zero
  };
  struct Saved {
    Tensor<const T***, Space> x;  // (B, T, in)
  };

  explicit Linear(const Options& options = {})
      : weight_({S.out, S.in}, core::Role::weight, core::Init::normal(options.init_std)),
        bias_({S.bias ? S.out : 0}, core::Role::bias, core::Init::zeros()),
        bias_partials_(S.bias ? kernels::column_partials<T, Space>("hybridseq::layers::Linear::bias_partials", S.out)
                              : Tensor<T**, Space>()) {}

  /// y = x Wᵀ + b, then `then` (a kernels::ElementwiseOp over y's flat index, e.g. an
  /// activation; or kernels::NoThen) on y's elements as the product finishes them: the bias and
  /// `then` are the product's epilogue (kernels::Epilogue), fused where the product allows.
  template <class Then = kernels::NoThen>
  void forward(core::Workspace<Space>&, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& saved,
               const Then& then = {}) const {
    check(x, y, "forward", "y");
    saved.x = x;
    kernels::gemm(Space{}, kernels::Op::none, kernels::Op::transpose, T(1), core::as_matrix(x),
                  weight_.template shaped<T**>(), T(0), core::as_matrix(y),
                  kernels::Epilogue<T, Space, Then>{bias_.value(), then});
  }

  /// The gradients; `then` runs on dx's elements as the product that makes dx finishes them
  /// (e.g. the backward of the activation before this layer).
  template <class Then = kernels::NoThen>
  void backward(core::Workspace<Space>&, const Saved& saved, Tensor<const T***, Space> dy, Tensor<T***, Space> dx,
                Write write = Write::add, const Then& then = {}) {
    check(dx, dy, "backward", "dy");
    const Space exec{};
    const auto x = core::as_matrix(saved.x);
    const auto g = core::as_matrix(dy);
    kernels::gemm(exec, kernels::Op::none, kernels::Op::none, T(1), g, weight_.template shaped<T**>(),
                  write == Write::add ? T(1) : T(0), core::as_matrix(dx), kernels::Epilogue<T, Space, Then>{{}, then});
    kernels::gemm(exec, kernels::Op::transpose, kernels::Op::none, T(1), g, x, T(1),
                  weight_.template shaped_grad<T**>());
    if constexpr (S.bias) kernels::accumulate_column_sums<T>(exec, g, bias_.grad(), bias_partials_);
  }

  /// Arena use: none (y and the saved input are the caller's).
  core::Footprint workspace(const core::WorkspaceQuery&) const { return {}; }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("weight", weight_);
    if constexpr (S.bias) visit("bias", bias_);
  }

  const core::Parameter<T, Space>& weight() const { return weight_; }

  /// Multiplies output rows [row_begin, row_end) of W by `factor` (DeepNorm's β-init).
  void scale_weights(double factor, int row_begin = 0, int row_end = S.out) {
    if (row_begin < 0 || row_end > S.out || row_begin > row_end)
      fail<value_error>("hybridseq::layers::Linear::scale_weights", "rows [", row_begin, ", ", row_end,
                        ") are outside [0, ", S.out, ")");
    const auto w = weight_.value();
    const T f = static_cast<T>(factor);
    Kokkos::parallel_for(
        "hybridseq::layers::Linear::scale_weights",
        Kokkos::RangePolicy<Space>(std::int64_t(row_begin) * S.in, std::int64_t(row_end) * S.in),
        KOKKOS_LAMBDA(std::int64_t i) { w(i) *= f; });
  }

  /// Flops of one forward over `rows` = B·T rows (bias adds not counted).
  static constexpr double forward_flops(double rows) { return 2.0 * rows * S.in * S.out; }

 private:
  template <class X, class Y>
  static void check(const X& x, const Y& y, const char* op, const char* yname) {
    core::check_sequence_io(std::string("hybridseq::layers::Linear::") + op, x, S.in, yname, y, S.out);
  }

  core::Parameter<T, Space> weight_;  // (out, in)
  core::Parameter<T, Space> bias_;    // (out), or empty when S.bias is false
  Tensor<T**, Space> bias_partials_;  // the bias gradient's row-block sums (kernels::column_partials)
};

}  // namespace hybridseq::layers
