#pragma once
/// \file
/// Elementwise activations and their derivatives, forward and backward kernels.
///
/// Definitions follow PyTorch: GELU exact (erf form) and its tanh approximation, SiLU
/// x·σ(x), softplus log(1 + eˣ) with PyTorch's linear region above x = 20. The kernels run
/// through `elementwise`: on the host, float loops on the CPU's vector ISA.

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../core/spaces.hpp"
#include "elementwise.hpp"
#include "exp.hpp"

namespace hybridseq::kernels {

enum class Activation { identity, gelu, gelu_tanh, silu, softplus };

constexpr const char* name_of(Activation a) {
  constexpr std::array<const char*, 5> names{"identity", "gelu", "gelu_tanh", "silu", "softplus"};  // in enum order
  const auto i = static_cast<std::size_t>(a);
  return i < names.size() ? names[i] : "?";
}

/// f(x) and f'(x) for activation A. Force-inlined: an element-wise loop vectorises only when
/// they are (in a large translation unit the inliner's budget would otherwise keep a call).
template <Activation A>
struct ActivationFn;

template <>
struct ActivationFn<Activation::identity> {
  template <class T>
  KOKKOS_FORCEINLINE_FUNCTION static T value(T x) {
    return x;
  }
  template <class T>
  KOKKOS_FORCEINLINE_FUNCTION static T derivative(T) {
    return T(1);
  }
};

/// GELU(x) = x·Φ(x). Float takes the branch-free Φ of kernels/exp.hpp (libm's erff is a
/// scalar call that keeps the loop from vectorising); double keeps libm (reference precision
/// for finite differences).
template <>
struct ActivationFn<Activation::gelu> {
  template <class T>
  KOKKOS_FORCEINLINE_FUNCTION static T cdf(T x) {
    if constexpr (std::is_same_v<T, float>)
      return normal_cdf_polynomial(x);
    else
      return T(0.5) * (T(1) + math::erf(x * T(0.70710678118654752440)));
  }
  template <class T>
  KOKKOS_FORCEINLINE_FUNCTION static T value(T x) {
    return x * cdf(x);
  }
  template <class T>
  KOKKOS_FORCEINLINE_FUNCTION static T derivative(T x) {
    return cdf(x) + x * pdf(x);
  }
  /// f'(x) given y = f(x), for a layer that kept its output: Φ(x) = y / x, so float needs only
  /// the density's exp, not Φ's polynomial and division again (a third of derivative(x)'s
  /// time). Where |x| < 2⁻⁶⁰, Φ is ½ in float and y / x (0 / 0 at x = 0) would not give it.
  /// double ignores y (reference precision).
  template <class T>
  KOKKOS_FORCEINLINE_FUNCTION static T derivative(T x, T y) {
    if constexpr (std::is_same_v<T, float>) {
      const std::uint32_t near_zero = 0u - std::uint32_t((detail::float_bits(x) & 0x7fffffffu) < 0x21800000u);
      const float cdf_x = detail::select_bits(near_zero, 0.5f, y / x);  // 0x21800000: 2⁻⁶⁰
      return cdf_x + x * pdf(x);
    } else {
      (void)y;
      return derivative(x);
    }
  }

 private:
  template <class T>
  KOKKOS_FORCEINLINE_FUNCTION static T pdf(T x) {
    return T(0.39894228040143267794) * exp_in_loop(T(-0.5) * x * x);
  }
};

template <>
struct ActivationFn<Activation::gelu_tanh> {
  template <class T>
  KOKKOS_FORCEINLINE_FUNCTION static T value(T x) {
    const T u = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
    return T(0.5) * x * (T(1) + math::tanh(u));
  }
  template <class T>
  KOKKOS_FORCEINLINE_FUNCTION static T derivative(T x) {
    const T u = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
    const T th = math::tanh(u);
    const T du = T(0.79788456080286535588) * (T(1) + T(3 * 0.044715) * x * x);
    return T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * du;
  }
};

/// SiLU and softplus: float takes the branch-free polynomials of kernels/exp.hpp (libm's expf
/// and log1pf are scalar calls that keep a loop from vectorising); double keeps libm.
template <>
struct ActivationFn<Activation::silu> {
  template <class T>
  KOKKOS_FORCEINLINE_FUNCTION static T sigmoid(T x) {
    if constexpr (std::is_same_v<T, float>)
      return sigmoid_polynomial(x);
    else
      return x >= T(0) ? T(1) / (T(1) + math::exp(-x)) : math::exp(x) / (T(1) + math::exp(x));
  }
  template <class T>
  KOKKOS_FORCEINLINE_FUNCTION static T value(T x) {
    return x * sigmoid(x);
  }
  template <class T>
  KOKKOS_FORCEINLINE_FUNCTION static T derivative(T x) {
    const T s = sigmoid(x);
    return s * (T(1) + x * (T(1) - s));
  }
};

template <>
struct ActivationFn<Activation::softplus> {
  static constexpr double threshold = 20;  // PyTorch's default: linear above it
  template <class T>
  KOKKOS_FORCEINLINE_FUNCTION static T value(T x) {
    if constexpr (std::is_same_v<T, float>)
      return softplus_polynomial(x);  // = x above the threshold, in float
    else
      return x > T(threshold) ? x : math::log1p(math::exp(x));
  }
  template <class T>
  KOKKOS_FORCEINLINE_FUNCTION static T derivative(T x) {
    if constexpr (std::is_same_v<T, float>)
      return sigmoid_polynomial(x);  // PyTorch's 1 above the threshold is σ(x) rounded to float
    else
      return x > T(threshold) ? T(1) : T(1) / (T(1) + math::exp(-x));
  }
};

/// f'(x) given y = f(x), for a caller that has both: the activation's cheaper form where it
/// has one (GELU), else f'(x).
template <Activation A, class T>
KOKKOS_FORCEINLINE_FUNCTION T derivative_given_value(T x, T y) {
  if constexpr (requires { ActivationFn<A>::derivative(x, y); })
    return ActivationFn<A>::derivative(x, y);
  else
    return (void)y, ActivationFn<A>::derivative(x);
}

namespace detail {
/// Light element updates per element (elementwise's unit): a polynomial or libm call
/// per element, except for the identity.
template <Activation A>
inline constexpr std::int64_t activation_work = A == Activation::identity ? 1 : 8;

template <Activation A, class T, class Space>
struct ActivationForward {
  Tensor<const T*, Space> x;
  Tensor<T*, Space> y;
  KOKKOS_FORCEINLINE_FUNCTION void operator()(const std::int64_t i) const { y(i) = ActivationFn<A>::value(x(i)); }
};
/// GivenValue: y holds f(x) (the caller kept it), and f' comes from derivative_given_value.
template <Activation A, Write W, class T, class Space, bool GivenValue = false>
struct ActivationBackward {
  Tensor<const T*, Space> x, dy;
  Tensor<T*, Space> dx;
  Tensor<const T*, Space> y{};
  KOKKOS_FORCEINLINE_FUNCTION void operator()(const std::int64_t i) const {
    T d;
    if constexpr (GivenValue)
      d = derivative_given_value<A>(x(i), y(i));
    else
      d = ActivationFn<A>::derivative(x(i));
    const T g = dy(i) * d;
    if constexpr (W == Write::add)
      dx(i) += g;
    else
      dx(i) = g;
  }
};
}  // namespace detail

/// y = f(x) as an element-wise op over flat (n) views: activation_forward's kernel, or a
/// product's epilogue (x the product's output, gemm.hpp's Epilogue).
template <Activation A, class T, class Space>
ElementwiseOp<detail::ActivationForward<A, T, Space>> activation_forward_op(TensorArg<const T*, Space> x,
                                                                            TensorArg<T*, Space> y) {
  return {"hybridseq::kernels::activation::forward", detail::activation_work<A>, {x, y}};
}

/// dx += f'(x) · dy (W = Write::assign: dx = f'(x) · dy) as an element-wise op:
/// activation_backward's kernel, or a product's epilogue (dy the product's output).
template <Activation A, class T, Write W = Write::add, class Space>
ElementwiseOp<detail::ActivationBackward<A, W, T, Space>> activation_backward_op(TensorArg<const T*, Space> x,
                                                                                 TensorArg<const T*, Space> dy,
                                                                                 TensorArg<T*, Space> dx) {
  return {"hybridseq::kernels::activation::backward", detail::activation_work<A>, {x, dy, dx}};
}

/// As above, for a caller that kept y = f(x): f'(x) from x and y (derivative_given_value,
/// cheaper for GELU).
template <Activation A, class T, Write W = Write::add, class Space>
ElementwiseOp<detail::ActivationBackward<A, W, T, Space, true>> activation_backward_op(TensorArg<const T*, Space> x,
                                                                                       TensorArg<const T*, Space> y,
                                                                                       TensorArg<const T*, Space> dy,
                                                                                       TensorArg<T*, Space> dx) {
  return {"hybridseq::kernels::activation::backward", detail::activation_work<A>, {x, dy, dx, y}};
}

/// y = f(x) elementwise over flat (n) views.
template <Activation A, class T, class Space>
void activation_forward(const Space& exec, TensorArg<const T*, Space> x, TensorArg<T*, Space> y) {
  elementwise<T>(exec, x.extent(0), activation_forward_op<A, T, Space>(x, y));
}

/// dx += f'(x) · dy (W = Write::assign: dx = f'(x) · dy) elementwise over flat (n) views.
template <Activation A, class T, Write W = Write::add, class Space>
void activation_backward(const Space& exec, TensorArg<const T*, Space> x, TensorArg<const T*, Space> dy,
                         TensorArg<T*, Space> dx) {
  elementwise<T>(exec, x.extent(0), activation_backward_op<A, T, W, Space>(x, dy, dx));
}

}  // namespace hybridseq::kernels
