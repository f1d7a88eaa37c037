#pragma once
// Every ISA copy of the host kernels (kernels/isa.hpp) this machine can run, for tests that
// hold each copy against the oracles.
#include <hybridseq/kernels/isa.hpp>

namespace hybridseq::testing {

/// Runs `f()` once per ISA copy this machine can run, each forced with kernels::limit_isa; the
/// cap is lifted again even when `f` throws (a failed check must not change later tests).
template <class F>
void for_each_isa(F&& f) {
  struct Cap {
    kernels::Isa previous;
    explicit Cap(kernels::Isa isa) : previous(kernels::limit_isa(isa)) {}
    ~Cap() { kernels::limit_isa(previous); }
  };
  const kernels::Isa best = kernels::host_isa();
  for (auto isa : {kernels::Isa::baseline, kernels::Isa::avx2, kernels::Isa::avx512}) {
    if (isa > best) break;
    const Cap cap(isa);
    f();
  }
}

}  // namespace hybridseq::testing
