#pragma once
// Benchmark translation units register a function that adds their benchmarks; main calls them
// after Kokkos is up (registration may allocate tensors). A new bench/<x>_benchmarks.cpp needs
// no edit elsewhere:
//   const hybridseq::bench::Registration registration(&register_my_benchmarks);
// or, for benchmarks templated on the execution space, once per host space of the build:
//   const hybridseq::bench::Registration registration(
//       [] { hybridseq::bench::for_each_host_space([]<class Space>() { register_space<Space>(); }); });
#include <vector>

#include <Kokkos_Core.hpp>

#include <hybridseq/core/kokkos_compat.hpp>

namespace hybridseq::bench {

using RegisterFn = void (*)();

inline std::vector<RegisterFn>& registrations() {
  static std::vector<RegisterFn> fns;
  return fns;
}

struct Registration {
  explicit Registration(RegisterFn fn) { registrations().push_back(fn); }
};

/// Calls `f.template operator()<Space>()` for Serial and, when the build has it, OpenMP.
template <class F>
void for_each_host_space(F&& f) {
  f.template operator()<Kokkos::Serial>();
#if HYBRIDSEQ_HAS_OPENMP
  f.template operator()<Kokkos::OpenMP>();
#endif
}

inline void register_all() {
  for (RegisterFn fn : registrations()) fn();
}

}  // namespace hybridseq::bench
