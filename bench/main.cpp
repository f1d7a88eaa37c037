// hybridseq-bench: Kokkos is initialised before Google Benchmark runs and finalised after.
#include <benchmark/benchmark.h>

#include <cstdlib>

#include <Kokkos_Core.hpp>

#include "registry.hpp"
#include "tool_support.hpp"

int main(int argc, char** argv) {
  hybridseq::tools::restart_with_runtime_settings(argv);
  setenv("OMP_PROC_BIND", "false", 0);  // silences Kokkos' advice on stdout (breaks JSON)
  Kokkos::ScopeGuard kokkos(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  hybridseq::bench::register_all();
  benchmark::AddCustomContext("kokkos_version", std::to_string(KOKKOS_VERSION));
  benchmark::AddCustomContext("host_isa", hybridseq::kernels::isa_name(hybridseq::kernels::host_isa()));
  const auto blas = hybridseq::kernels::blas_kernels();
  benchmark::AddCustomContext("openblas_kernels", blas.running);
  benchmark::AddCustomContext("openblas_better_kernels", blas.better);  // empty: nothing to gain
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  benchmark::AddCustomContext("gomp_spincount", spin ? spin : "");
  benchmark::AddCustomContext("omp_wait_policy", wait ? wait : "");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
