// Catch2 main for every hybridseq test binary: Kokkos is initialised before the first test
// and finalised after the last, as Kokkos requires.
//
// `--isa baseline|avx2|avx512` caps the host kernels' ISA copy (kernels::limit_isa) for the
// whole run, so that CTest runs each family's goldens, gradient checks and oracle tests once per
// copy the machine has. A CPU without the named copy makes the run exit with 77, which CTest
// reports as skipped: running the best copy it has instead would pass for a test of the named one.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <Kokkos_Core.hpp>

#include <hybridseq/kernels/isa.hpp>

namespace {

constexpr int skipped = 77;

}  // namespace

int main(int argc, char* argv[]) {
  // Kokkos' OpenMP backend prints a binding advice to stdout when OMP_PROC_BIND is unset;
  // that text would be read as test names during discovery. Unit tests want no binding.
  setenv("OMP_PROC_BIND", "false", /*overwrite=*/0);
  Kokkos::ScopeGuard kokkos(argc, argv);

  Catch::Session session;
  std::string isa_name;
  session.cli(session.cli() | Catch::clara::Opt(isa_name, "baseline|avx2|avx512")["--isa"](
                                  "run every host kernel on this ISA copy (skipped, exit 77, where the CPU lacks it)"));
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;

  if (!isa_name.empty()) {
    using hybridseq::kernels::Isa;
    Isa isa{};
    if (isa_name == "baseline")
      isa = Isa::baseline;
    else if (isa_name == "avx2")
      isa = Isa::avx2;
    else if (isa_name == "avx512")
      isa = Isa::avx512;
    else {
      std::fprintf(stderr, "--isa: unknown ISA '%s' (expected baseline, avx2 or avx512)\n", isa_name.c_str());
      return 2;
    }
    if (hybridseq::kernels::host_isa() < isa) {
      std::printf("--isa %s: this CPU's best copy is %s; skipped\n", isa_name.c_str(),
                  hybridseq::kernels::isa_name(hybridseq::kernels::host_isa()));
      return skipped;
    }
    hybridseq::kernels::limit_isa(isa);
  }
  // Catch2 returns the number of failed assertions: 77 of them must not read as "skipped".
  const int rc = session.run();
  return rc == skipped ? 1 : rc;
}
