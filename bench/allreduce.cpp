// hybridseq-allreduce-bench: the time of one gradient sum across the ranks of `mpirun` against
// the gradient's size, for parallel::Mpi's reproducible tree (the trainer's default) and for
// MPI_Allreduce (MpiOptions::reproducible = false). Median of --reps sums per size.
//
//   mpirun -np 2 hybridseq-allreduce-bench [--max-mib 256] [--reps 9]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <hybridseq/parallel/mpi.hpp>

using namespace hybridseq;

namespace {

double median_seconds(parallel::Mpi& comm, Kokkos::View<float*, Kokkos::HostSpace> buffer, int reps) {
  std::vector<double> times;
  for (int i = 0; i < reps + 1; ++i) {  // the first sum warms the buffers and connections up
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = std::chrono::steady_clock::now();
    comm.sum_tree(buffer);
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // A sum is done when the slowest rank has it.
    double slowest = 0;
    MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (i > 0) times.push_back(slowest);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  parallel::MpiSession mpi(argc, argv);
  Kokkos::ScopeGuard kokkos(argc, argv);
  int max_mib = 256, reps = 9;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--max-mib" && value >= 1) {
      max_mib = value;
    } else if (flag == "--reps" && value >= 1) {
      reps = value;
    } else {
      std::fprintf(stderr, "hybridseq-allreduce-bench: unknown or bad option %s %s\n", argv[i], argv[i + 1]);
      return 2;
    }
  }
  parallel::Mpi tree(MPI_COMM_WORLD), ring(MPI_COMM_WORLD, {.reproducible = false});
  if (tree.rank() == 0) {
    std::printf("%d ranks; median of %d sums; bus bandwidth = 2(P-1)/P x bytes / time\n", tree.size(), reps);
    std::printf("%12s %14s %14s %12s %12s\n", "bytes", "tree (ms)", "allreduce (ms)", "tree GB/s", "ring GB/s");
  }
  const double factor = 2.0 * (tree.size() - 1) / tree.size();
  for (std::size_t bytes = 4096; bytes <= std::size_t(max_mib) << 20; bytes *= 4) {
    Kokkos::View<float*, Kokkos::HostSpace> buffer("gradient", bytes / sizeof(float));
    Kokkos::deep_copy(buffer, 1.0f / float(tree.size()));
    const double t = median_seconds(tree, buffer, reps), r = median_seconds(ring, buffer, reps);
    if (tree.rank() == 0)
      std::printf("%12zu %14.3f %14.3f %12.2f %12.2f\n", bytes, t * 1e3, r * 1e3, factor * bytes / t / 1e9,
                  factor * bytes / r / 1e9);
  }
  return 0;
}
