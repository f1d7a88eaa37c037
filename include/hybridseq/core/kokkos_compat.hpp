#pragma once
/// \file
/// The one place where Kokkos version differences live. hybridseq compiles against
/// Kokkos 3.4 (what Debian ships) and 4.x (what users install from source).

#include <Kokkos_Core.hpp>

#if defined(KOKKOS_VERSION) && KOKKOS_VERSION >= 40000
#define HYBRIDSEQ_KOKKOS_4 1
#else
#define HYBRIDSEQ_KOKKOS_4 0
#endif

#if defined(KOKKOS_ENABLE_OPENMP)
#define HYBRIDSEQ_HAS_OPENMP 1
#else
#define HYBRIDSEQ_HAS_OPENMP 0
#endif

/// Device-callable maths. Kokkos 3.4 has these in Kokkos::Experimental; 4.x moved them to
/// Kokkos:: (and deprecated the old names). Kernels write `math::exp(x)`.
namespace hybridseq::math {
#if HYBRIDSEQ_KOKKOS_4
using Kokkos::cos;
using Kokkos::erf;
using Kokkos::exp;
using Kokkos::expm1;
using Kokkos::fabs;
using Kokkos::isfinite;
using Kokkos::log;
using Kokkos::log1p;
using Kokkos::pow;
using Kokkos::sin;
using Kokkos::sqrt;
using Kokkos::tanh;
#else
using Kokkos::Experimental::cos;
using Kokkos::Experimental::erf;
using Kokkos::Experimental::exp;
using Kokkos::Experimental::expm1;
using Kokkos::Experimental::fabs;
using Kokkos::Experimental::isfinite;
using Kokkos::Experimental::log;
using Kokkos::Experimental::log1p;
using Kokkos::Experimental::pow;
using Kokkos::Experimental::sin;
using Kokkos::Experimental::sqrt;
using Kokkos::Experimental::tanh;
#endif
}  // namespace hybridseq::math

namespace hybridseq::core::compat {

/// Number of threads (host) or concurrent work items (device) of an execution space instance.
/// Kokkos 4 made `concurrency()` a member of the instance; 3.4 had a static function.
template <class Space>
int concurrency(const Space& exec) {
#if HYBRIDSEQ_KOKKOS_4
  return exec.concurrency();
#else
  (void)exec;
  return Space::concurrency();
#endif
}

}  // namespace hybridseq::core::compat
