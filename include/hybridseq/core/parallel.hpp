#pragma once
/// \file
/// Host loops that fork only when the work pays for the fork.
///
/// Every Kokkos::parallel_for on the OpenMP space is an OpenMP fork/join: the workers wake
/// (or stop spinning), take their share and meet the caller at a barrier. On an idle machine
/// that costs microseconds; beside another busy process a worker that has lost its core holds
/// the whole team at the barrier until the scheduler gives it a time slice back, which takes
/// milliseconds. A training step launches hundreds of kernels, most of them over a few thousand
/// elements (a bias, a norm's weight, one parameter's optimizer update), so paying the fork for
/// each is what made training collapse beside a busy neighbour. Loops whose work is below
/// `inline_work` therefore run on the calling thread, without a parallel region; larger ones
/// go to Kokkos as before. Which one runs depends only on the problem's size, so results stay
/// the same from run to run. Loops run inline are invisible to Kokkos' profiling hooks.
///
/// Device spaces always launch: a kernel there is asynchronous and the data is not host memory.

#include <cstdint>
#include <type_traits>

#include "spaces.hpp"

namespace hybridseq::core {

/// Work, counted in element updates of a light kernel (a few flops and loads each), below which
/// a host loop runs on the calling thread: at that size a fork saves little even on an idle
/// machine, and under contention it costs far more than the loop itself.
inline constexpr std::int64_t inline_work = std::int64_t(1) << 15;

/// Execution spaces whose kernels run on host threads over host memory (Serial, OpenMP).
template <class Space>
inline constexpr bool host_space = std::is_same_v<typename Space::memory_space, Kokkos::HostSpace>;

/// Whether a loop of `work` light element updates on `Space` runs on the calling thread.
template <class Space>
constexpr bool runs_inline(std::int64_t work) {
  if constexpr (host_space<Space>)
    return work < inline_work;
  else
    return false;
}

/// f(i) for i in [0, n), where each index costs about `work_per_index` light element updates:
/// on the calling thread when the total is small, else as a Kokkos parallel_for on `exec`.
template <class Space, class F>
void parallel_for(const char* label, const Space& exec, std::int64_t n, std::int64_t work_per_index, const F& f) {
  if constexpr (host_space<Space>) {
    if (runs_inline<Space>(n * work_per_index)) {
      for (std::int64_t i = 0; i < n; ++i) f(i);
      return;
    }
  }
  Kokkos::parallel_for(label, Kokkos::RangePolicy<Space>(exec, 0, n), f);
}

/// sums = Σ f(i, acc...) contributions for i in [0, n) (f adds into its accumulators, one per
/// sum), with parallel_for's inline rule. The grouping of a sum depends on where it ran:
/// bit-identical between runs of the same problem on the same thread count, not across thread
/// counts.
template <class Space, class F, class... R>
void parallel_sum(const char* label, const Space& exec, std::int64_t n, std::int64_t work_per_index, const F& f,
                  R&... sums) {
  if constexpr (host_space<Space>) {
    if (runs_inline<Space>(n * work_per_index)) {
      ((sums = R{}), ...);
      for (std::int64_t i = 0; i < n; ++i) f(i, sums...);
      return;
    }
  }
  Kokkos::parallel_reduce(label, Kokkos::RangePolicy<Space>(exec, 0, n), f, sums...);
}

/// v = value, with parallel_for's inline rule (for a contiguous v).
template <class View>
void fill(const View& v, const typename View::non_const_value_type& value) {
  using Space = typename View::execution_space;
  using T = typename View::non_const_value_type;
  const auto n = static_cast<std::int64_t>(v.span());
  if constexpr (host_space<Space>) {
    if (v.span_is_contiguous() && runs_inline<Space>(n)) {
      T* p = v.data();
      for (std::int64_t i = 0; i < n; ++i) p[i] = value;
      return;
    }
  }
  Kokkos::deep_copy(v, value);
}

/// v = 0, with parallel_for's inline rule (for a contiguous v).
template <class View>
void zero(const View& v) {
  fill(v, typename View::non_const_value_type{});
}

}  // namespace hybridseq::core
