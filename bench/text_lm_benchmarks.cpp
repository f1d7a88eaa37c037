// text_lm's models (examples/text_lm_models.hpp: Transformer, PHA, ECP at ~0.9 M parameters)
// as text_lm trains and decodes them, for the side-by-side comparison with PyTorch
// (bench/vs_pytorch.py, docs/results.md):
//
//   text_lm_train/<arch>/B:16/T:128   one training step as text_lm's Trainer takes it
//                                     (parameters made contiguous once):
//                                     zero_grad, forward + loss + backward, global-norm
//                                     clipping at 1, AdamW step; counters tokens/s,
//                                     launches/step (Kokkos kernel launches of one more step)
//                                     and allocations/step (Kokkos allocations of another)
//   text_lm_decode/transformer/tokens:256   decoding: 256 given tokens fed one at a time
//                                     (LanguageModel::prefill of 1) from an empty KV cache
//                                     (no sampling); counters tokens/s and launches/token
//
// The build's default execution space only (the tools' space); threads from OMP_NUM_THREADS.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>

#include "registry.hpp"
#include "support/launches.hpp"
#include "support/timing.hpp"
#include "support/training_step.hpp"
#include "text_lm_models.hpp"

namespace hybridseq::bench {
namespace {

using text_lm::Space;

template <class Model>
void train_step(benchmark::State& state, int layers) {
  const std::int64_t b = state.range(0), t = state.range(1);
  auto model = built<Model>(layers);
  TrainingStep step(model, b, t, text_lm::V, 1e-3);
  step();  // the arena's first allocation and the optimizer's moments, outside the timing
  for (auto _ : state) step();
  state.counters["tokens/s"] = per_second(double(b * t));
  if (const auto launches = kokkos_launches(step)) state.counters["launches/step"] = double(*launches);
  if (const auto allocations = kokkos_allocations(step)) state.counters["allocations/step"] = double(*allocations);
  state.counters["parameters"] = double(core::parameter_count(model));
}

template <class Model>
void decode(benchmark::State& state, int layers) {
  const std::int64_t tokens = state.range(0);
  auto model = built<Model>(layers);
  core::Workspace<Space> ws;
  Tensor<std::int32_t**, Space> id("id", 1, 1);
  Tensor<float***, Space> logit("logit", 1, 1, text_lm::V);
  const auto generate = [&] {
    auto st = model.make_state(1);
    for (std::int64_t p = 0; p < tokens; ++p) {
      core::fill(id, std::int32_t(p * 7919 % text_lm::V));
      model.prefill(ws, st, id, logit);
    }
    Space().fence();
  };
  for (auto _ : state) generate();
  state.counters["tokens/s"] = per_second(double(tokens));
  if (const auto launches = kokkos_launches(generate)) state.counters["launches/token"] = double(*launches) / tokens;
}

const Registration registration([] {
  const auto train = [](const char* arch, auto fn) {
    benchmark::RegisterBenchmark((std::string("text_lm_train/") + arch).c_str(), fn)
        ->Args({16, 128})
        ->ArgNames({"B", "T"})
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  };
  train("transformer", [](benchmark::State& s) { train_step<text_lm::Transformer>(s, text_lm::transformer_layers); });
  train("pha", [](benchmark::State& s) { train_step<text_lm::Pha>(s, text_lm::pha_blocks); });
  train("ecp",
        [](benchmark::State& s) { train_step<text_lm::Ecp<text_lm::default_segment, false>>(s, text_lm::ecp_layers); });
  benchmark::RegisterBenchmark(
      "text_lm_decode/transformer",
      [](benchmark::State& s) { decode<text_lm::Transformer>(s, text_lm::transformer_layers); })
      ->Arg(256)
      ->ArgName("tokens")
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
});

}  // namespace
}  // namespace hybridseq::bench
