// The README's twenty-line example, compiled and run by the test suite: compose Cooper et
// al.'s [SSM, TF, TF] hybrid from named layers, train it on selective copy with the Trainer
// (checkpointed), then generate from it with a decoding session.
//
//   quickstart [--steps N]
#include <CLI/CLI.hpp>

#include <cstdio>

#include <hybridseq/hybridseq.hpp>

using namespace hybridseq;

int main(int argc, char** argv) {
  CLI::App app{"Compose, train and decode an SSM→attention hybrid"};
  std::int64_t steps = 2000;
  app.add_option("--steps", steps, "training steps")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  setenv("OMP_PROC_BIND", "false", 0);
  Kokkos::ScopeGuard kokkos(argc, argv);
  try {
    // --- the README example ---
    using Space = DefaultSpace;
    using Ssm = models::MambaLayer<models::cooper_ssm(8), float, Space>;                // x + Mamba(RMSNorm(x))
    using Tf = models::NeoxLayer<models::cooper_tf(8, /*heads=*/2, /*window=*/20), float, Space>;
    using Hybrid = models::Stack</*vocab=*/64, Ssm, Tf, Tf>;                           // [SSM, TF, TF] × count

    Hybrid model({.body = {.count = 1}});
    core::initialize(model, /*seed=*/1);
    const auto task = tasks::make_task("var-copy", {});
    train::Trainer trainer(model, {.steps = steps,
                                   .schedule = {.peak_lr = 3e-3, .warmup_steps = 100, .total_steps = steps},
                                   .adamw = {.weight_decay = 0.1},
                                   .checkpoint = "quickstart.safetensors"});
    trainer.run([&](std::int64_t step, int) {
      auto [ids, targets] = tasks::to_device<Space>(tasks::make_batch(task, /*seed=*/2, step, 8, 20, 50));
      return train::TokenBatch<Space>{ids, targets};
    });
    decode::Session session(model, /*batch=*/1);  // KV caches + conv windows + SSM states
    const auto example = task.sample(/*seed=*/3, 0, 30);
    session.prefill(example.input, 30);
    const auto next = session.generate(8, {.temperature = 0.8, .top_k = 5, .seed = 4});
    // --- end of the README example ---

    std::printf("%lld parameters; prompt:", static_cast<long long>(core::parameter_count(model)));
    for (auto t : example.input) std::printf(" %s", task.token_name(t).c_str());
    std::printf("\nsampled continuation:");
    for (auto t : next) std::printf(" %s", task.token_name(t).c_str());
    std::printf("\n");
  } catch (const hybridseq::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
