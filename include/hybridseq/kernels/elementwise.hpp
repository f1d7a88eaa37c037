#pragma once
/// \file
/// Element-wise host loops on the CPU's vector width.
///
/// The library is built for the compiler's baseline target, so a Kokkos loop over a branch-free
/// polynomial (GELU, SiLU, softplus) vectorises four lanes wide without FMA. `elementwise` runs
/// such a loop in contiguous blocks instead, each block's loop compiled once per ISA copy
/// (isa.hpp) with the element function flattened into it, the copy chosen once per call. Float
/// only: double is the reference path of the finite-difference checks and keeps one copy.
/// Device spaces take one index per thread.

#include <cstdint>
#include <type_traits>

#include "../core/parallel.hpp"
#include "../core/spaces.hpp"
#include "isa.hpp"

namespace hybridseq::kernels {

namespace detail {
/// Indices per block of a host element-wise loop: the unit for which an ISA copy is chosen.
inline constexpr std::int64_t elementwise_block = 2048;

template <class F>
HYBRIDSEQ_HOST_FORCEINLINE void elementwise_loop(const F& f, std::int64_t begin, std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i) f(i);
}
#if HYBRIDSEQ_ISA_DISPATCH
template <class F>
[[HYBRIDSEQ_TARGET_AVX512, gnu::flatten]] void elementwise_loop_avx512(const F& f, std::int64_t begin,
                                                                       std::int64_t end) {
  elementwise_loop(f, begin, end);
}
template <class F>
[[HYBRIDSEQ_TARGET_AVX2, gnu::flatten]] void elementwise_loop_avx2(const F& f, std::int64_t begin, std::int64_t end) {
  elementwise_loop(f, begin, end);
}
#endif

template <class T, class F>
struct ElementwiseBlocks {
  F f;
  std::int64_t n;
  Isa isa;
  void operator()(const std::int64_t block) const {
    const std::int64_t begin = block * elementwise_block;
    const std::int64_t end = n - begin < elementwise_block ? n : begin + elementwise_block;
#if HYBRIDSEQ_ISA_DISPATCH
    if constexpr (std::is_same_v<T, float>) {
      if (isa == Isa::avx512) return elementwise_loop_avx512(f, begin, end);
      if (isa == Isa::avx2) return elementwise_loop_avx2(f, begin, end);
    }
#endif
    elementwise_loop(f, begin, end);
  }
};
}  // namespace detail

/// f(i) for i in [0, n), where f is a light element function on scalars of type T costing about
/// `work_per_element` light updates (core::parallel_for's unit). Indices must be independent.
template <class T, class Space, class F>
void elementwise(const char* label, const Space& exec, std::int64_t n, std::int64_t work_per_element, const F& f) {
  if constexpr (core::host_space<Space>) {
    const std::int64_t blocks = (n + detail::elementwise_block - 1) / detail::elementwise_block;
    core::parallel_for(label, exec, blocks, detail::elementwise_block * work_per_element,
                       detail::ElementwiseBlocks<T, F>{f, n, host_isa()});
  } else {
    core::parallel_for(label, exec, n, work_per_element, f);
  }
}

}  // namespace hybridseq::kernels
