#pragma once
/// \file
/// Execution/memory-space templating and the tensor aliases every layer uses.
///
/// Tensors are row-major (LayoutRight) Kokkos Views, so a (B, T, D) activation is also a
/// contiguous (B·T, D) matrix that the GEMM facade can take without a copy. Every
/// declaration carries a shape comment with the fixed dimension letters:
///   B batch, T time, D model, H heads, Hkv kv heads, Dh head dim, F ffn width,
///   N state size, K conv width, S segment length, M latents, V vocabulary.

#include <concepts>
#include <cstdint>
#include <type_traits>

#include "kokkos_compat.hpp"

namespace hybridseq {

/// The default execution space for models: Kokkos' default (OpenMP or Serial on the host).
using DefaultSpace = Kokkos::DefaultExecutionSpace;

/// A Kokkos execution space type.
template <class S>
concept ExecutionSpace = Kokkos::is_execution_space<S>::value;

/// A floating-point scalar the layers are instantiated with (float for speed, double for
/// finite-difference gradient checks).
template <class T>
concept Scalar = std::same_as<T, float> || std::same_as<T, double>;

/// Row-major tensor in `Space`'s memory. `DataType` is a Kokkos data type: `float***`.
template <class DataType, ExecutionSpace Space>
using Tensor = Kokkos::View<DataType, Kokkos::LayoutRight, typename Space::memory_space>;

/// A strided tensor: e.g. a column slice of a row-major tensor (Mamba's B_t = x_proj(x)[..., R:R+N]).
template <class DataType, ExecutionSpace Space>
using StridedTensor = Kokkos::View<DataType, Kokkos::LayoutStride, typename Space::memory_space>;

/// A tensor parameter of a kernel launcher. Non-deduced, so managed, unmanaged and
/// non-const tensors all convert; launchers are called as `kernel<T>(exec, ...)`.
template <class DataType, ExecutionSpace Space>
using TensorArg = std::type_identity_t<Tensor<DataType, Space>>;

/// How a backward pass or kernel writes its output tensor. Backward passes add into dx by
/// default (a tensor that feeds several consumers sums their gradients); a caller that owns a
/// fresh buffer with no other contributor asks for `assign` and skips zero-filling it first.
enum class Write { add, assign };

/// Token ids: (B, T) of int32.
template <ExecutionSpace Space>
using TokenIds = Tensor<const std::int32_t**, Space>;

/// Creates a zero-initialised tensor with a debugging label.
template <class DataType, ExecutionSpace Space, class... Extents>
Tensor<DataType, Space> make_tensor(const std::string& label, Extents... extents) {
  return Tensor<DataType, Space>(label, static_cast<std::size_t>(extents)...);
}

namespace core {

/// Views of rank ≥ 2 that are row-major and contiguous can be reinterpreted as
/// (rows, last extent) matrices without a copy.
template <class View>
auto as_matrix(const View& v) {
  using value_type = typename View::value_type;
  using memory_space = typename View::memory_space;
  static_assert(View::rank >= 2, "hybridseq::core::as_matrix: needs a view of rank >= 2");
  const std::size_t cols = v.extent(View::rank - 1);
  const std::size_t rows = cols == 0 ? 0 : v.span() / cols;
  return Kokkos::View<value_type**, Kokkos::LayoutRight, memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
      v.data(), rows, cols);
}

/// A flat (numel) view over any contiguous tensor.
template <class View>
auto flat(const View& v) {
  return Kokkos::View<typename View::value_type*, Kokkos::LayoutRight, typename View::memory_space,
                      Kokkos::MemoryTraits<Kokkos::Unmanaged>>(v.data(), v.span());
}

}  // namespace core
}  // namespace hybridseq
