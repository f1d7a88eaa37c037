#pragma once
// Every ISA copy of the host kernels (kernels/isa.hpp) this machine can run, for tests that
// hold each copy against the oracles.
#include <hybridseq/kernels/isa.hpp>

namespace hybridseq::testing {

/// Runs `f()` once per ISA copy this machine can run, each forced with kernels::limit_isa.
template <class F>
void for_each_isa(F&& f) {
  const kernels::Isa best = kernels::host_isa();
  for (auto isa : {kernels::Isa::baseline, kernels::Isa::avx2, kernels::Isa::avx512}) {
    if (isa > best) break;
    const kernels::Isa previous = kernels::limit_isa(isa);
    f();
    kernels::limit_isa(previous);
  }
}

}  // namespace hybridseq::testing
