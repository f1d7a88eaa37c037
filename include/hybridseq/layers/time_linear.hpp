#pragma once
/// \file
/// TimeLinear: a learned linear map along the time axis (Compressed Double Attention's history
/// compression, Linear(h → c) over positions rather than features).

#include <cstdint>

#include "../core/parameter.hpp"
#include "../kernels/gemm.hpp"

namespace hybridseq::layers {

/// A linear map along time: y[b, i, :] = Σ_t P[i, t] x[b, t, :] + p[i] for i < C, t < Hin,
/// reading the first Hin rows of x (B, ≥Hin, K) and writing the first C rows of y (B, ≥C, K).
/// Parameters `weight` (C, Hin), `bias` (C). Gradients are summed over the batch in order.
template <int Hin, int C, Scalar T, ExecutionSpace Space>
class TimeLinear {
  using In = kernels::MatrixIn<T, Space>;
  using Out = kernels::MatrixOut<T, Space>;

 public:
  using scalar_type = T;
  using execution_space = Space;

  explicit TimeLinear(double init_std)
      : weight_({C, Hin}, core::Role::weight, core::Init::normal(init_std)),
        bias_({C}, core::Role::bias, core::Init::zeros()) {}

  void forward(Tensor<const T***, Space> x, Tensor<T***, Space> y) const {
    const Space exec{};
    const std::int64_t b = x.extent(0), k = x.extent(2), xs = x.extent(1) * k, ys = y.extent(1) * k;
    const auto w = weight_.template shaped<T**>();
    for (std::int64_t i = 0; i < b; ++i)
      kernels::gemm(exec, kernels::Op::none, kernels::Op::none, T(1), In(w.data(), C, Hin),
                    In(x.data() + i * xs, Hin, k), T(0), Out(y.data() + i * ys, C, k));
    const auto p = bias_.value();
    Kokkos::parallel_for(
        "hybridseq::layers::TimeLinear::bias",
        Kokkos::MDRangePolicy<Space, Kokkos::Rank<3>>(exec, {0, 0, 0}, {b, C, k}),
        KOKKOS_LAMBDA(std::int64_t bi, std::int64_t r, std::int64_t c) { y(bi, r, c) += p(r); });
  }

  /// dx[:, :Hin] += Pᵀ dy[:, :C]; dP += Σ_b dy_b x_bᵀ; dp += Σ_b Σ_k dy.
  void backward(Tensor<const T***, Space> x, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    const Space exec{};
    const std::int64_t b = x.extent(0), k = x.extent(2), xs = x.extent(1) * k, ys = dy.extent(1) * k,
                       dxs = dx.extent(1) * k;
    const auto w = weight_.template shaped<T**>();
    const auto gw = weight_.template shaped_grad<T**>();
    for (std::int64_t i = 0; i < b; ++i) {
      kernels::gemm(exec, kernels::Op::transpose, kernels::Op::none, T(1), In(w.data(), C, Hin),
                    In(dy.data() + i * ys, C, k), T(1), Out(dx.data() + i * dxs, Hin, k));
      kernels::gemm(exec, kernels::Op::none, kernels::Op::transpose, T(1), In(dy.data() + i * ys, C, k),
                    In(x.data() + i * xs, Hin, k), T(1), Out(gw.data(), C, Hin));
    }
    const auto gp = bias_.grad();
    Kokkos::parallel_for(
        "hybridseq::layers::TimeLinear::bias_grad", Kokkos::RangePolicy<Space>(exec, 0, C),
        KOKKOS_LAMBDA(std::int64_t r) {
          T acc = 0;
          for (std::int64_t bi = 0; bi < b; ++bi)
            for (std::int64_t c = 0; c < k; ++c) acc += dy(bi, r, c);
          gp(r) += acc;
        });
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("weight", weight_);
    visit("bias", bias_);
  }

 private:
  core::Parameter<T, Space> weight_, bias_;
};

}  // namespace hybridseq::layers
