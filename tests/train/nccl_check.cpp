// The NCCL backend compiles and links with the trainer (HYBRIDSEQ_CHECK_NCCL=ON). Run where a
// GPU is present, it trains a tiny model on one NCCL rank and checks that every loss and
// gradient norm equals the single-process run's bit for bit: with one micro-batch per step
// both take the gradient of that micro-batch alone, and NCCL's path sends it through the
// device (staging, tree sum = broadcast of one rank, allgather of the losses) and back.
#include <cstdio>
#include <vector>

#include <hybridseq/parallel/nccl.hpp>
#include <hybridseq/tasks.hpp>
#include <hybridseq/train.hpp>

#include "cases/model_cases.hpp"

using namespace hybridseq;

int main(int argc, char** argv) {
  setenv("OMP_PROC_BIND", "false", 0);
  Kokkos::ScopeGuard kokkos(argc, argv);
  using Model = cases::TransformerTiny<float, Kokkos::DefaultExecutionSpace>;
  const auto task = tasks::make_task("var-copy", {.n_v = 4, .min_shift = 1, .max_shift = 3});
  const train::TrainerOptions o{.steps = 8, .accumulation = 1, .clip = 0.25, .schedule = {.total_steps = 8}};
  const auto source = tasks::task_batches<Kokkos::DefaultExecutionSpace>(
      task, {.seed = 3, .batch = 2, .min_len = 12, .max_len = 16, .accumulation = 1});
  auto train = [&](auto comm) {
    Model m(Model::Options{});
    core::initialize(m, 7);
    train::Trainer t(m, o, std::move(comm));
    std::vector<double> log;
    for (const auto& l : t.run(source).log) log.insert(log.end(), {l.loss, l.grad_norm});
    return log;
  };
  try {
    const auto single = train(parallel::SingleProcess{});
    const auto nccl = train(parallel::Nccl::single());
    std::printf("nccl: %zu steps, loss %.6f -> %.6f; equals the single-process run bit for bit: %s\n", nccl.size() / 2,
                nccl.front(), nccl[nccl.size() - 2], nccl == single ? "yes" : "NO");
    return nccl == single ? 0 : 1;
  } catch (const error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
