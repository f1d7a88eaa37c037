// hybridseq-allreduce-bench: the time of one gradient sum across the ranks of `mpirun` against
// the gradient's size, for parallel::Mpi's reproducible tree (the trainer's default) and for
// MPI_Allreduce (MpiOptions::reproducible = false). Median of --reps sums per size.
// With --train R instead: text_lm's Transformer (examples/text_lm_models.hpp) trained
// data-parallel, B = 16 sequences of T = 128 per rank and step, with the gradient sum after
// backward (TrainerOptions::gradient_bucket_bytes = 0) and overlapped with backward (the
// default), in R interleaved rounds of 5 steps: the median step time of each.
//
//   mpirun -np 2 hybridseq-allreduce-bench [--max-mib 256] [--reps 9] [--train R]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <hybridseq/parallel/mpi.hpp>
#include <hybridseq/train/trainer.hpp>

#include "support/tokens.hpp"
#include "support/training_step.hpp"
#include "text_lm_models.hpp"

using namespace hybridseq;

namespace {

double median_seconds(parallel::Mpi& comm, Kokkos::View<float*, Kokkos::HostSpace> buffer, int reps) {
  std::vector<double> times;
  for (int i = 0; i < reps + 1; ++i) {  // the first sum warms the buffers and connections up
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = std::chrono::steady_clock::now();
    comm.sum_tree_start(buffer);
    comm.sum_tree_finish();
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // A sum is done when the slowest rank has it.
    double slowest = 0;
    MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (i > 0) times.push_back(slowest);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

/// The --train comparison (see the file comment); rank 0 prints it.
void train_comparison(parallel::Mpi& world, int rounds) {
  using Model = text_lm::Transformer;
  using Space = text_lm::Space;
  constexpr int steps_per_round = 5;
  const std::int64_t steps = 1 + std::int64_t(rounds) * steps_per_round;  // one warm-up step
  Tensor<std::int32_t**, Space> ids("ids", 16, 128), targets("targets", 16, 128);
  bench::fill_tokens<Space>(ids, text_lm::V);
  bench::fill_tokens<Space>(targets, text_lm::V, 1);
  const auto source = [&](std::int64_t, int) { return train::TokenBatch<Space>{ids, targets}; };

  struct Setting {
    const char* name;
    std::size_t bucket_bytes;
    std::unique_ptr<Model> model;
    std::unique_ptr<train::Trainer<Model, parallel::Mpi>> trainer;
    std::vector<double> step_seconds;
    std::int64_t overlapped = 0;
  };
  Setting settings[2] = {{"sum after backward", 0, {}, {}, {}, 0},
                         {"overlapped with backward", train::TrainerOptions{}.gradient_bucket_bytes, {}, {}, {}, 0}};
  for (auto& s : settings) {
    s.model = std::make_unique<Model>(bench::built<Model>(text_lm::transformer_layers));
    train::TrainerOptions options{.steps = steps,
                                  .accumulation = world.size(),
                                  .clip = 1.0,
                                  .schedule = {.peak_lr = 1e-3, .warmup_steps = 0, .total_steps = steps},
                                  .adamw = {.beta2 = 0.95, .weight_decay = 0.1}};
    options.gradient_bucket_bytes = s.bucket_bytes;
    s.trainer = std::make_unique<train::Trainer<Model, parallel::Mpi>>(*s.model, options, world);
    s.trainer->run(source, 1);  // the arena, the optimizer's moments and the flat buffers
  }
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      Setting& s = settings[(r + k) % 2];  // alternate which goes first
      MPI_Barrier(MPI_COMM_WORLD);
      const auto start = std::chrono::steady_clock::now();
      const auto summary = s.trainer->run(source, s.trainer->step() + steps_per_round);
      s.step_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
                               steps_per_round);
      s.overlapped += summary.overlapped_gradient_bytes;
    }
  }
  if (world.rank() != 0) return;
  const double gradient_mib = double(core::parameter_count(*settings[0].model)) * sizeof(float) / (1 << 20);
  std::printf(
      "text_lm Transformer, %d ranks x B 16 x T 128 per step, %.2f MiB of gradients; median of %d rounds of %d steps\n",
      world.size(), gradient_mib, rounds, steps_per_round);
  double median[2];
  for (int i = 0; i < 2; ++i) {
    auto& t = settings[i].step_seconds;
    std::sort(t.begin(), t.end());
    median[i] = t[t.size() / 2];
    std::printf("%-26s %9.2f ms/step  (best %.2f, %.2f MiB per step started during backward)\n", settings[i].name,
                median[i] * 1e3, t.front() * 1e3,
                double(settings[i].overlapped) / (1 << 20) / (double(rounds) * steps_per_round));
  }
  std::printf("after / overlapped: %.3f\n", median[0] / median[1]);
}

}  // namespace

int main(int argc, char** argv) {
  parallel::MpiSession mpi(argc, argv);
  Kokkos::ScopeGuard kokkos(argc, argv);
  int max_mib = 256, reps = 9, train_rounds = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--max-mib" && value >= 1) {
      max_mib = value;
    } else if (flag == "--reps" && value >= 1) {
      reps = value;
    } else if (flag == "--train" && value >= 1) {
      train_rounds = value;
    } else {
      std::fprintf(stderr, "hybridseq-allreduce-bench: unknown or bad option %s %s\n", argv[i], argv[i + 1]);
      return 2;
    }
  }
  parallel::Mpi tree(MPI_COMM_WORLD), ring(MPI_COMM_WORLD, {.reproducible = false});
  if (train_rounds > 0) {
    train_comparison(tree, train_rounds);
    return 0;
  }
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
