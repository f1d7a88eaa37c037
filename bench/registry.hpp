#pragma once
// Each benchmark translation unit contributes a register function; main calls them all
// after Kokkos is up (registration allocates tensors).
namespace hybridseq::bench {
void register_primitive_benchmarks();
inline void register_all() { register_primitive_benchmarks(); }
}  // namespace hybridseq::bench
