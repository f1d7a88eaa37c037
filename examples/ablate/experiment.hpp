#pragma once
// One ablation experiment: train an architecture on a synthetic task, then measure it —
// parameters, final training loss, char/string accuracy at the training lengths, accuracy at
// longer lengths (length generalisation), out-of-distribution accuracy (another bit ratio /
// rate), throughput, and for PHA the learned mixing weights per layer.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <hybridseq/core/describe.hpp>
#include <hybridseq/models.hpp>
#include <hybridseq/tasks.hpp>
#include <hybridseq/train.hpp>

#include "../tool_support.hpp"
#include "spec.hpp"

#if HYBRIDSEQ_ABLATE_MPI
#include <hybridseq/parallel/mpi.hpp>
#endif

namespace hybridseq::ablate {

struct ExperimentConfig {
  tasks::AnyTask task;
  std::optional<tasks::AnyTask> ood_task{};  // same task, shifted distribution
  std::int64_t steps = 1000;
  int batch = 8;
  int min_len = 20, max_len = 50;   // training lengths
  std::vector<int> eval_lengths{};  // length generalisation (each evaluated at exactly that length)
  int eval_batches = 8, eval_batch = 32;
  double lr = 1e-3, weight_decay = 0.1, clip = 1.0;
  std::int64_t warmup = 100;
  train::Schedule::Decay decay = train::Schedule::Decay::cosine;  // after the warm-up, to 0
  std::uint64_t seed = 1;                                         // parameters; data uses seed + 1, evaluation seed + 2
  bool progress = true;                                           // a TerminalProgress line per architecture (stdout)
  bool describe = false;                   // print each model's tree (core::describe) instead of training it
  std::function<bool()> stop_requested{};  // polled after every step (the tool's SIGINT/SIGTERM flag)
#if HYBRIDSEQ_ABLATE_MPI
  // Set: every rank trains this variant together, `batch` split into one micro-batch per rank.
  parallel::Mpi* data_parallel = nullptr;
#endif
};

struct LengthAccuracy {
  int length;
  tasks::Accuracy accuracy;
};

struct ArchResult {
  std::string arch;
  std::int64_t parameters = 0;
  double final_loss = 0;  // mean training loss over the last 10 % of steps
  tasks::Accuracy accuracy;
  std::vector<LengthAccuracy> length_generalisation;
  std::optional<tasks::Accuracy> ood;
  double tokens_per_second = 0, seconds = 0;
  std::vector<double> loss_curve;                   // per step
  std::vector<std::vector<double>> mixing_weights;  // per mixing layer (PHA)
};

namespace detail {

/// A latent model (PerceiverAR and kin) predicts only its last logit_time(T) positions; a
/// target before them counts as missed, so its accuracy is over the same positions as every
/// other model's.
template <class Model>
tasks::Accuracy evaluate(Model& model, core::Workspace<typename Model::execution_space>& ws, const tasks::AnyTask& task,
                         std::uint64_t seed, int batches, int batch, int min_len, int max_len) {
  using Space = typename Model::execution_space;
  constexpr std::int32_t missed = -1;  // no token: never equal to a target
  tasks::Accuracy total;
  for (int i = 0; i < batches; ++i) {
    const auto b = tasks::make_batch(task, seed, std::uint64_t(i), batch, min_len, max_len);
    auto [ids, targets] = tasks::to_device<Space>(b);
    const int rows = int(Model::logit_time(b.len)), first = b.len - rows;
    Tensor<typename Model::scalar_type***, Space> logits("logits", b.batch, rows, model.vocab_size());
    model.logits(ws, ids, logits);
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, logits);
    std::vector<std::int32_t> pred(std::size_t(b.batch) * b.len, missed);
    for (int r = 0; r < b.batch; ++r)
      for (int t = 0; t < rows; ++t) {
        int best = 0;
        for (int v = 1; v < int(model.vocab_size()); ++v)
          if (h(r, t, v) > h(r, t, best)) best = v;
        pred[std::size_t(r) * b.len + first + t] = best;
      }
    tasks::accumulate(total, b, pred);
  }
  return total;
}

}  // namespace detail

/// Trains a fresh `Model` with the spec's runtime options under `config` and measures it.
template <class Model>
ArchResult run_experiment(const std::string& name, const spec::Runtime& runtime, const ExperimentConfig& config) {
  using Space = typename Model::execution_space;
  typename Model::Options options;
  options.body.count = runtime.repeat;
  const std::int64_t task_vocab = config.task.vocab_size();
  if (runtime.vocab && runtime.vocab < task_vocab)
    fail<config_error>("hybridseq-ablate", name, ": vocab ", runtime.vocab, " is smaller than task ",
                       config.task.name(), "'s ", task_vocab, " tokens");
  options.vocab = runtime.vocab ? runtime.vocab : task_vocab;
  options.tie_embeddings = runtime.tied;
  options.embed_dropout = runtime.embed_dropout;
  options.init_std = runtime.init_std;
  if constexpr (requires {
                  options.alpha;
                  options.beta_init;
                }) {
    options.alpha = runtime.alpha;
    options.beta_init = runtime.beta_init;
  }
  Model model(options);
  if (config.describe) {
    std::printf("%s:\n%s\n", name.c_str(), core::describe(model).c_str());
    ArchResult r;
    r.arch = name;
    r.parameters = core::parameter_count(model);
    return r;
  }
  core::initialize(model, config.seed);

  train::TrainerOptions to;
  to.steps = config.steps;
  to.clip = config.clip;
  // Linear warm-up over `warmup` steps, then the chosen decay to 0 (docs/results.md says so too).
  to.schedule = {
      .decay = config.decay, .peak_lr = config.lr, .warmup_steps = config.warmup, .total_steps = config.steps};
  to.adamw = {.weight_decay = config.weight_decay};
  to.data_seed = config.seed + 1;
  if (config.progress)
    to.progress = train::TerminalProgress(name, {.every = int(std::max<std::int64_t>(1, config.steps / 10))});
  to.stop_requested = config.stop_requested;
  // Data-parallel: the step's batch is one micro-batch per rank (the trainer's accumulation).
  int ranks = 1;
#if HYBRIDSEQ_ABLATE_MPI
  if (config.data_parallel) ranks = config.data_parallel->size();
#endif
  if (config.batch % ranks != 0)
    fail<config_error>("hybridseq-ablate", "--batch ", config.batch, " is not divisible by the ", ranks,
                       " ranks training each variant together (--ranks data-parallel)");
  const int micro_batch = config.batch / ranks;
  to.accumulation = ranks;
  // A latent model scores its last M positions and needs at least M: every length it will see
  // (batches are padded to their longest length) is checked before training, not after.
  if constexpr (requires { Model::latents; }) {
    std::vector<int> lengths{config.max_len};
    lengths.insert(lengths.end(), config.eval_lengths.begin(), config.eval_lengths.end());
    for (int len : lengths)
      if (len < Model::latents)
        fail<config_error>("hybridseq-ablate", name, " has ", Model::latents,
                           " latents and needs sequences at least that long; this run pads to ", len,
                           " (--max-len or --eval-lengths)");
  }
  // Training at max_len and evaluating eval_batch sequences (logits included) at the longest
  // evaluated length must fit in memory: checked before either allocates.
  int longest = config.max_len;
  for (int len : config.eval_lengths) longest = std::max(longest, len);
  tools::check_memory("hybridseq-ablate",
                      "--batch " + std::to_string(micro_batch) + " x --max-len " + std::to_string(config.max_len),
                      tools::estimate_step_bytes(model, micro_batch, config.max_len));
  tools::check_memory(
      "hybridseq-ablate",
      "evaluating " + std::to_string(config.eval_batch) + " sequences of length " + std::to_string(longest),
      tools::estimate_step_bytes(model, config.eval_batch, longest) +
          double(config.eval_batch) * longest * model.vocab_size() * sizeof(typename Model::scalar_type));
  const auto source = tasks::task_batches<Space>(config.task, {.seed = to.data_seed,
                                                               .batch = micro_batch,
                                                               .min_len = config.min_len,
                                                               .max_len = config.max_len,
                                                               .accumulation = ranks});
  ArchResult r;
  auto train = [&](auto&& trainer) {
    const auto summary = trainer.run(source);
    if (summary.stopped)
      fail<error>("hybridseq-ablate", name, " stopped by signal after step ", trainer.step(), "; no results written");
    r.seconds = summary.seconds;
    r.tokens_per_second = summary.tokens_per_second();
    for (const auto& s : summary.log) r.loss_curve.push_back(s.loss);
    return std::move(trainer.workspace());
  };
  core::Workspace<Space> ws;
#if HYBRIDSEQ_ABLATE_MPI
  if (config.data_parallel)
    ws = train(train::Trainer(model, to, *config.data_parallel));
  else
#endif
    ws = train(train::Trainer(model, to));

  r.arch = name;
  r.parameters = core::parameter_count(model);
  const std::size_t steps = r.loss_curve.size();
  const std::size_t tail = std::max<std::size_t>(1, steps / 10);
  for (std::size_t i = steps - std::min(tail, steps); i < steps; ++i)
    r.final_loss += r.loss_curve[i] / double(std::min(tail, steps));

  const std::uint64_t eval_seed = config.seed + 2;
  r.accuracy = detail::evaluate(model, ws, config.task, eval_seed, config.eval_batches, config.eval_batch,
                                config.min_len, config.max_len);
  for (int len : config.eval_lengths)
    r.length_generalisation.push_back(
        {len, detail::evaluate(model, ws, config.task, eval_seed, config.eval_batches, config.eval_batch, len, len)});
  if (config.ood_task)
    r.ood = detail::evaluate(model, ws, *config.ood_task, eval_seed, config.eval_batches, config.eval_batch,
                             config.min_len, config.max_len);
  core::for_each_module(model, [&](std::string_view, auto& m) {
    if constexpr (requires { m.mixing_weights(); }) {
      const auto w = m.mixing_weights();
      r.mixing_weights.emplace_back(w.begin(), w.end());
    }
  });
  return r;
}

/// A compiled architecture: its compile-time spec (spec::Variant::type_key) and its runner.
/// Generated translation units (hybridseq-spec presets, or the tool's on-demand variants)
/// define one Registration per type.
struct Compiled {
  std::string type_key;
  ArchResult (*run)(const std::string& name, const spec::Runtime&, const ExperimentConfig&);
};

inline std::vector<Compiled>& compiled_variants() {
  static std::vector<Compiled> all;
  return all;
}

/// The compiled variant of `type_key`, or null.
inline const Compiled* find_compiled(const std::string& type_key) {
  for (const auto& c : compiled_variants())
    if (c.type_key == type_key) return &c;
  return nullptr;
}

struct Registration {
  Registration(std::string type_key, decltype(Compiled::run) run) {
    compiled_variants().push_back({std::move(type_key), run});
  }
};

}  // namespace hybridseq::ablate
