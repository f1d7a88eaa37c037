// The README's twenty-line example, compiled and run by the test suite: compose Cooper et
// al.'s [SSM, TF, TF] hybrid from named layers, train it on selective copy with the Trainer
// (checkpointed; 5 % linear warm-up, then cosine decay to 0), then generate from it with a
// decoding session.
//
// Pass criterion: the mean loss on held-out batches must end below --max-loss (default 2.5,
// which needs copying: an untrained model scores ln 64 ≈ 4.2, guessing the letters' frequency
// about ln 26 ≈ 3.3; 2000 steps reach 2.13); otherwise the program exits with status 1.
//
//   quickstart [--steps N] [--max-loss L]
#include <CLI/CLI.hpp>

#include <cstdio>

#include <hybridseq/hybridseq.hpp>

using namespace hybridseq;

namespace {

/// Mean loss over 4 held-out batches (a seed the training stream does not use).
template <class Model>
double heldout_loss(const Model& model, core::Workspace<typename Model::execution_space>& ws,
                    const tasks::AnyTask& task) {
  using Space = typename Model::execution_space;
  double total = 0;
  for (int i = 0; i < 4; ++i) {
    const auto [ids, targets] =
        tasks::to_device<Space>(tasks::make_batch(task, /*seed=*/7, std::uint64_t(i), 32, 20, 50));
    total += double(model.evaluate(ws, ids, targets)) / 4;
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Compose, train and decode an SSM→attention hybrid"};
  std::int64_t steps = 2000;
  double max_loss = 2.5;
  app.add_option("--steps", steps, "training steps")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--max-loss", max_loss, "fail (exit 1) unless the held-out loss ends below this")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  setenv("OMP_PROC_BIND", "false", 0);
  Kokkos::ScopeGuard kokkos(argc, argv);
  try {
    // --- the README example ---
    using Space = DefaultSpace;
    using Ssm = models::MambaLayer<models::cooper_ssm(8), float, Space>;  // x + Mamba(RMSNorm(x))
    using Tf = models::NeoxLayer<models::cooper_tf(8, /*heads=*/2, /*window=*/20), float, Space>;
    using Hybrid = models::Stack</*vocab=*/64, Ssm, Tf, Tf>;  // [SSM, TF, TF] × count

    Hybrid model({.body = {.count = 1}});
    core::initialize(model, /*seed=*/1);
    const auto task = tasks::make_task("var-copy", {});
    train::Trainer trainer(model, {.steps = steps,
                                   .schedule = {.decay = train::Schedule::Decay::cosine,
                                                .peak_lr = 3e-3,
                                                .warmup_steps = steps / 20,
                                                .total_steps = steps},
                                   .adamw = {.weight_decay = 0.1},
                                   .progress = train::TerminalProgress("quickstart"),  // the library prints nothing
                                   .checkpoint = "quickstart.safetensors"});
    const double before = heldout_loss(model, trainer.workspace(), task);  // (not in the README)
    trainer.run(tasks::task_batches<Space>(task, {.seed = 2, .batch = 8, .min_len = 20, .max_len = 50}));
    decode::Session session(model, /*batch=*/1);  // KV caches + conv windows + SSM states
    const auto example = task.sample(/*seed=*/3, 0, 30);
    session.prefill(example.input, 30);
    const auto next = session.generate(8, {.temperature = 0.8, .top_k = 5, .seed = 4});
    // --- end of the README example ---

    std::printf("%lld parameters; prompt:", static_cast<long long>(core::parameter_count(model)));
    for (auto t : example.input) std::printf(" %s", task.token_name(t).c_str());
    std::printf("\nsampled continuation:");
    for (auto t : next) std::printf(" %s", task.token_name(t).c_str());
    const double after = heldout_loss(model, trainer.workspace(), task);
    std::printf("\nheld-out loss %.4f before training, %.4f after %lld steps (pass: below %.4f)\n", before, after,
                static_cast<long long>(steps), max_loss);
    if (!(after < max_loss)) {
      std::fprintf(stderr, "quickstart: FAILED: held-out loss %.4f is not below %.4f\n", after, max_loss);
      return 1;
    }
  } catch (const hybridseq::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
