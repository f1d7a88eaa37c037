#pragma once
/// \file
/// Element-wise host loops on the CPU's vector width.
///
/// The library is built for the compiler's baseline target, so a Kokkos loop over a branch-free
/// polynomial (GELU, SiLU, softplus) or a row's arithmetic vectorises four lanes wide without
/// FMA. `elementwise` runs such a loop in contiguous blocks of indices instead, each block's
/// loop compiled once per ISA copy (isa.hpp) with the index function flattened into it, the copy
/// chosen once per call. An index is whatever the kernel makes it: an element, a row, a head's
/// vector. Float only: double is the reference path of the finite-difference checks and keeps
/// one copy. Device spaces take one index per thread, or, for a kernel that `SplitsOnDevices`,
/// one part of an index per thread.

#include <concepts>
#include <cstdint>
#include <type_traits>

#include "../core/parallel.hpp"
#include "../core/spaces.hpp"
#include "isa.hpp"
#include "tile_gemm.hpp"

namespace hybridseq::kernels {

/// A kernel whose index is a row of work on the host and `parts()` threads' work on a device:
/// f(i) does index i whole (its parts in order, unit-stride, vectorised on the host's vector
/// width), f.part(i, j) does part j of it alone, summing the same terms in the same order. A
/// GPU needs the finer grain: a row per thread gave an H200 too few threads, each reading a
/// row of its own (bias and norm gradients, cross-entropy, RoPE heads).
template <class F>
concept SplitsOnDevices = requires(const F& f, std::int64_t i) {
  { f.parts() } -> std::convertible_to<std::int64_t>;
  f.part(i, i);
};

/// Reduces term(0) … term(n − 1) with `combine` in `reduce_lanes` interleaved partials (lane l
/// takes the terms j ≡ l mod reduce_lanes, in order), combined pairwise at the end. A running
/// reduction is a chain of dependent operations that the compiler may not reorder (no
/// -ffast-math): one per latency, scalar. The lanes are independent, so an ISA copy runs them
/// as vectors of its width. The order depends on n alone: the same result on every run, thread
/// count and ISA copy (up to FMA contraction). Every lane starts from `init`, which must be
/// combine's identity (or, for an idempotent combine, any of the terms).
inline constexpr int reduce_lanes = 16;

template <class T, class Term, class Combine>
KOKKOS_FORCEINLINE_FUNCTION T lane_reduce(const std::int64_t n, const T init, const Term& term,
                                          const Combine& combine) {
  T acc[reduce_lanes];
  HYBRIDSEQ_UNROLL
  for (int l = 0; l < reduce_lanes; ++l) acc[l] = init;
  std::int64_t j = 0;
  for (; j + reduce_lanes <= n; j += reduce_lanes) {
    HYBRIDSEQ_UNROLL
    for (int l = 0; l < reduce_lanes; ++l) acc[l] = combine(acc[l], term(j + l));
  }
  HYBRIDSEQ_UNROLL
  for (int l = 0; l < reduce_lanes; ++l)  // the tail: a constant trip count keeps acc in registers
    if (j + l < n) acc[l] = combine(acc[l], term(j + l));
  HYBRIDSEQ_UNROLL
  for (int width = reduce_lanes / 2; width > 0; width /= 2) {
    HYBRIDSEQ_UNROLL
    for (int l = 0; l < width; ++l) acc[l] = combine(acc[l], acc[l + width]);
  }
  return acc[0];
}

/// Σ_{j<n} term(j) in lane_reduce's order.
template <class T, class Term>
KOKKOS_FORCEINLINE_FUNCTION T lane_sum(const std::int64_t n, const Term& term) {
  return lane_reduce<T>(n, T(0), term, [](const T a, const T b) { return a + b; });
}

/// max_{j<n} term(j) in lane_reduce's order, for n ≥ 1.
template <class T, class Term>
KOKKOS_FORCEINLINE_FUNCTION T lane_max(const std::int64_t n, const Term& term) {
  return lane_reduce<T>(n, T(term(0)), term, [](const T a, const T b) { return b > a ? b : a; });
}

#if HYBRIDSEQ_ISA_DISPATCH
/// A float kernel that brings its own host vector loop, `vector_loop<S>(begin, end)` over indices
/// [begin, end) on simd::Avx512 or simd::Avx2 vectors (tile_gemm.hpp), which
/// elementwise_loop_avx512 / _avx2 inline into their ISA's copy: for arithmetic the compiler
/// does not vectorise by itself (a libm call that may set errno) or vectorises badly (a short
/// row's lane_reduce, whose final combine it spills: simd::lane_total folds it in registers).
/// The scalar f(i) stays the definition: devices, the baseline copy and the oracles. (Only
/// builds with ISA copies, HYBRIDSEQ_ISA_DISPATCH, have vector loops to bring.)
template <class F>
concept HostVectorLoop = requires(const F& f, std::int64_t i) {
  f.template vector_loop<simd::Avx512>(i, i);
  f.template vector_loop<simd::Avx2>(i, i);
};
#endif

namespace detail {
/// f.part(i / parts, i % parts) for index i: a SplitsOnDevices kernel on a device.
template <class F>
struct EachPart {
  F f;
  std::int64_t parts;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const { f.part(i / parts, i % parts); }
};

/// Light element updates per block of a host loop (the unit for which an ISA copy is chosen):
/// large enough that choosing costs nothing, small enough that a loop worth forking
/// (core::inline_work) has a block for each of several threads.
inline constexpr std::int64_t elementwise_block_work = std::int64_t(1) << 12;

// The loop calls a local copy of the kernel: its members (pointers, extents, scalars) then
// stay in registers, where through `f` every store to an output could alias them, reloading
// them per element and keeping the loop scalar.
template <class F>
HYBRIDSEQ_HOST_FORCEINLINE void elementwise_loop(const F& f, std::int64_t begin, std::int64_t end) {
  const F local = f;
  for (std::int64_t i = begin; i < end; ++i) local(i);
}
#if HYBRIDSEQ_ISA_DISPATCH
template <class F>
[[HYBRIDSEQ_TARGET_AVX512, gnu::flatten]] void elementwise_loop_avx512(const F& f, std::int64_t begin,
                                                                       std::int64_t end) {
  if constexpr (HostVectorLoop<F>)
    F(f).template vector_loop<simd::Avx512>(begin, end);  // on a local copy, as elementwise_loop (above)
  else
    elementwise_loop(f, begin, end);
}
template <class F>
[[HYBRIDSEQ_TARGET_AVX2, gnu::flatten]] void elementwise_loop_avx2(const F& f, std::int64_t begin, std::int64_t end) {
  if constexpr (HostVectorLoop<F>)
    F(f).template vector_loop<simd::Avx2>(begin, end);  // on a local copy, as elementwise_loop (above)
  else
    elementwise_loop(f, begin, end);
}
#endif

template <class T, class F>
struct ElementwiseBlocks {
  F f;
  std::int64_t n, per_block;
  Isa isa;
  void operator()(const std::int64_t block) const {
    const std::int64_t begin = block * per_block;
    const std::int64_t end = n - begin < per_block ? n : begin + per_block;
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

/// f(i) for i in [0, n), where f computes on scalars of type T and each index costs about
/// `work_per_index` light element updates (core::parallel_for's unit); on a device, f.part(i, j)
/// for every part j instead when f SplitsOnDevices. Indices must be independent; small loops
/// run on the calling thread (core::parallel_for's rule).
template <class T, class Space, class F>
void elementwise(const char* label, const Space& exec, std::int64_t n, std::int64_t work_per_index, const F& f) {
  if constexpr (core::host_space<Space>) {
    const std::int64_t work = work_per_index > 1 ? work_per_index : 1;
    const std::int64_t per_block = detail::elementwise_block_work > work ? detail::elementwise_block_work / work : 1;
    const std::int64_t blocks = (n + per_block - 1) / per_block;
    core::parallel_for(label, exec, blocks, per_block * work,
                       detail::ElementwiseBlocks<T, F>{f, n, per_block, host_isa()});
  } else if constexpr (SplitsOnDevices<F>) {
    const std::int64_t parts = f.parts();
    core::parallel_for(label, exec, n * parts, work_per_index / (parts > 0 ? parts : 1), detail::EachPart<F>{f, parts});
  } else {
    core::parallel_for(label, exec, n, work_per_index, f);
  }
}

/// An element-wise kernel together with what `elementwise` needs to run it: its label and its
/// work per index. A product's epilogue takes one (gemm.hpp), to run on C's elements as the
/// product finishes them.
template <class F>
struct ElementwiseOp {
  const char* label;
  std::int64_t work_per_index;
  F f;
};

/// op.f(i) for i in [0, n): `elementwise` with the op's label and work.
template <class T, class Space, class F>
void elementwise(const Space& exec, std::int64_t n, const ElementwiseOp<F>& op) {
  elementwise<T>(op.label, exec, n, op.work_per_index, op.f);
}

}  // namespace hybridseq::kernels
