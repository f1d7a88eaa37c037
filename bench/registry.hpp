#pragma once
// Benchmark translation units register a function that adds their benchmarks; main calls them
// after Kokkos is up (registration may allocate tensors). A new bench/<x>_benchmarks.cpp needs
// no edit elsewhere:
//   static const hybridseq::bench::Registration registration(&register_my_benchmarks);
#include <vector>

namespace hybridseq::bench {

using RegisterFn = void (*)();

inline std::vector<RegisterFn>& registrations() {
  static std::vector<RegisterFn> fns;
  return fns;
}

struct Registration {
  explicit Registration(RegisterFn fn) { registrations().push_back(fn); }
};

inline void register_all() {
  for (RegisterFn fn : registrations()) fn();
}

}  // namespace hybridseq::bench
