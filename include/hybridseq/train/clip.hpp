#pragma once
/// \file
/// Global-norm gradient clipping: g ← g · min(1, max_norm / ‖g‖₂) over all parameters.

#include <algorithm>
#include <cmath>

#include "../core/error.hpp"
#include "../core/parallel.hpp"
#include "../core/parameter.hpp"
#include "../kernels/elementwise.hpp"

namespace hybridseq::train {

namespace detail {
/// Elements per block of squared_norm on a host.
inline constexpr std::int64_t norm_block = 4096;

// The per-tensor kernels of clipping. Free functions rather than lambdas inside the generic
// parameter visitors below: nvcc rejects a device lambda defined inside a generic lambda.
/// Σ g(i)² in double. On a host, per block of norm_block elements, each summed in lanes
/// (kernels::lane_sum: independent partial sums, where one running sum is a chain of dependent
/// adds at one per 4 cycles); on a device, per element.
template <class Grad>
double squared_norm(const Grad& g) {
  using Space = typename Grad::execution_space;
  const std::int64_t n = g.extent(0);
  double s = 0;
  if constexpr (core::host_space<Space>) {
    core::parallel_sum(
        "hybridseq::train::gradient_norm", Space{}, (n + norm_block - 1) / norm_block, norm_block,
        [=](const std::int64_t block, double& acc) {
          const std::int64_t begin = block * norm_block, size = std::min(norm_block, n - begin);
          acc += kernels::lane_sum<double>(size, [&](const std::int64_t i) {
            const double v = g(begin + i);
            return v * v;
          });
        },
        s);
  } else {
    core::parallel_sum(
        "hybridseq::train::gradient_norm", Space{}, n, 1,
        KOKKOS_LAMBDA(const std::int64_t i, double& acc) { acc += double(g(i)) * double(g(i)); }, s);
  }
  return s;
}

template <class Grad>
void scale(const Grad& g, double by) {
  const auto factor = typename Grad::non_const_value_type(by);
  core::parallel_for(
      "hybridseq::train::clip_gradient_norm", typename Grad::execution_space{}, g.extent(0), 1,
      KOKKOS_LAMBDA(const std::int64_t i) { g(i) *= factor; });
}
}  // namespace detail

/// ‖g‖₂ over every parameter gradient of `module` (accumulated in double; one pass over
/// memory per run of core::for_each_run).
template <class Module>
double gradient_norm(Module& module) {
  double total = 0;
  core::for_each_run(module, core::Gradients{}, [&](const auto& run) { total += detail::squared_norm(run); });
  return std::sqrt(total);
}

/// Scales gradients so their global norm is at most `max_norm`; returns the norm before
/// clipping. A non-finite norm is an error: one NaN gradient would poison every parameter.
template <class Module>
double clip_gradient_norm(Module& module, double max_norm) {
  const double norm = gradient_norm(module);
  if (!std::isfinite(norm))
    fail<value_error>("hybridseq::train::clip_gradient_norm", "gradient norm is ", norm,
                      " (a NaN or Inf gradient reached the optimizer)");
  if (norm <= max_norm || norm == 0) return norm;
  const double scale = max_norm / norm;
  core::for_each_run(module, core::Gradients{}, [&](const auto& run) { detail::scale(run, scale); });
  return norm;
}

}  // namespace hybridseq::train
