// Catch2 main for every hybridseq test binary: Kokkos is initialised before the first test
// and finalised after the last, as Kokkos requires.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>

#include <Kokkos_Core.hpp>

int main(int argc, char* argv[]) {
  // Kokkos' OpenMP backend prints a binding advice to stdout when OMP_PROC_BIND is unset;
  // that text would be read as test names during discovery. Unit tests want no binding.
  setenv("OMP_PROC_BIND", "false", /*overwrite=*/0);
  Kokkos::ScopeGuard kokkos(argc, argv);
  return Catch::Session().run(argc, argv);
}
