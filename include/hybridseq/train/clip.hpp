#pragma once
/// \file
/// Global-norm gradient clipping: g ← g · min(1, max_norm / ‖g‖₂) over all parameters.

#include <cmath>
#include <string_view>
#include <type_traits>

#include "../core/error.hpp"
#include "../core/parameter.hpp"

namespace hybridseq::train {

/// ‖g‖₂ over every parameter gradient of `module` (accumulated in double).
template <class Module>
double gradient_norm(Module& module) {
  double total = 0;
  core::for_each_parameter(module, [&](std::string_view, auto& p) {
    using Space = typename std::remove_reference_t<decltype(p)>::execution_space;
    const auto g = p.grad();
    double s = 0;
    Kokkos::parallel_reduce(
        "hybridseq::train::gradient_norm", Kokkos::RangePolicy<Space>(0, g.extent(0)),
        KOKKOS_LAMBDA(const std::int64_t i, double& acc) { acc += double(g(i)) * double(g(i)); }, s);
    total += s;
  });
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
  core::for_each_parameter(module, [&](std::string_view, auto& p) {
    using P = std::remove_reference_t<decltype(p)>;
    using T = typename P::scalar_type;
    const auto g = p.grad();
    Kokkos::parallel_for(
        "hybridseq::train::clip_gradient_norm", Kokkos::RangePolicy<typename P::execution_space>(0, g.extent(0)),
        KOKKOS_LAMBDA(const std::int64_t i) { g(i) *= T(scale); });
  });
  return norm;
}

}  // namespace hybridseq::train
