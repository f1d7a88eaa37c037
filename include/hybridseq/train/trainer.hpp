#pragma once
/// \file
/// The training loop: gradient accumulation, global-norm clipping, AdamW with the learning
/// rate of a schedule, progress reports to a callback, periodic checkpoints and exact resumption.
///
/// Data comes from a callable `source(step, micro) -> TokenBatch<Space>`; it must be a pure
/// function of (step, micro) (`tasks::task_batches` and `tasks::corpus_batches` are), so a
/// checkpoint's step *is* the data stream's state and a resumed run sees exactly the batches
/// the uninterrupted one would have. Every micro-batch is a training pass (core::TrainingPass)
/// keyed by (data seed, step · accumulation + micro), so dropout masks are a function of the
/// step as well and resume exactly too. With deterministic kernels (ours are: no atomics in
/// reductions) the resumed losses are bit-identical on the same execution space.
///
/// One thread per process calls the library (core/threads.hpp): a Trainer constructed or run
/// from another thread is refused with a config_error.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/parameter.hpp"
#include "../core/threads.hpp"
#include "../core/workspace.hpp"
#include "../io/safetensors.hpp"
#include "../tasks/to_device.hpp"
#include "adamw.hpp"
#include "checkpoint.hpp"
#include "clip.hpp"
#include "progress.hpp"
#include "schedule.hpp"

namespace hybridseq::train {

/// One (micro-)batch of token ids and next-token targets (−100 = unsupervised), both (B, T).
template <ExecutionSpace Space>
using TokenBatch = tasks::TokenBatch<Space>;

struct TrainerOptions {
  std::int64_t steps = 1000;  // optimizer steps; must equal schedule.total_steps
  int accumulation = 1;       // micro-batches per step; the step's loss is their mean
  double clip = 1.0;          // global gradient-norm bound; 0 disables clipping
  Schedule schedule{};        // the learning rate of every step (the optimizer has none of its own)
  AdamWOptions adamw{};
  std::uint64_t data_seed = 1;                    // recorded in checkpoints; seeds the source and dropout
  ProgressCallback progress{};                    // called after every step (e.g. TerminalProgress); empty: silent
  std::filesystem::path checkpoint{};             // where to save; empty: never
  std::int64_t checkpoint_every = 0;              // steps between saves; 0: only at the end (if a path is set)
  std::map<std::string, std::string> metadata{};  // stored in checkpoints
  // Asked after every step; when it returns true, `run` saves a checkpoint (if a path is set)
  // and returns early with `TrainSummary::stopped` set. Tools point it at a flag that their
  // SIGINT/SIGTERM handler sets, so an interrupted run loses no finished step.
  std::function<bool()> stop_requested{};
};

struct StepLog {
  std::int64_t step;  // 1-based
  double loss;
  double lr;
  double grad_norm;  // before clipping
};

struct TrainSummary {
  std::vector<StepLog> log;
  std::int64_t tokens = 0;
  double seconds = 0;
  bool stopped = false;  // stop_requested() ended the run before `until`
  double tokens_per_second() const { return seconds > 0 ? double(tokens) / seconds : 0; }
};

template <class Model>
class Trainer {
  static_assert(core::require_trainable_branch<typename Model::body_type>(),
                "hybridseq::train::Trainer: the model's body must be trainable");

 public:
  using Space = typename Model::execution_space;
  using T = typename Model::scalar_type;

  Trainer(Model& model, const TrainerOptions& options)
      : thread_check_("hybridseq::train::Trainer"), model_(model), options_(options), optimizer_(model, options.adamw) {
    constexpr const char* api = "hybridseq::train::Trainer";
    core::check_parameters_usable(model, api);
    if (options.steps < 1) fail<value_error>(api, "steps must be >= 1, got ", options.steps);
    if (options.accumulation < 1) fail<value_error>(api, "accumulation must be >= 1, got ", options.accumulation);
    if (!(options.clip >= 0)) fail<value_error>(api, "clip must be >= 0 (0 = off), got ", options.clip);
    options.schedule.validate();
    if (options.schedule.total_steps != options.steps)
      fail<value_error>(api, "schedule.total_steps is ", options.schedule.total_steps, " but steps is ", options.steps,
                        " (the schedule must span the training)");
    if (options.checkpoint_every < 0)
      fail<value_error>(api, "checkpoint_every must be >= 0 (0 = only at the end), got ", options.checkpoint_every);
    if (!options.checkpoint.empty()) {
      // Refused now, not after hours of training when the first save fails.
      std::error_code ec;
      if (std::filesystem::is_directory(options.checkpoint, ec))
        fail<io_error>(api, "checkpoint path ", options.checkpoint.string(), " is a directory");
      // A temporary file left by a write that was killed is garbage: the checkpoint itself is
      // the last complete one.
      io::remove_stale_temporary(options.checkpoint);
    }
  }

  /// Trains from the current step up to `until` (default: options.steps). Throws value_error
  /// naming the step if a loss or the gradient norm is not finite.
  template <class Source>
  TrainSummary run(Source&& source, std::int64_t until = -1) {
    constexpr const char* api = "hybridseq::train::Trainer::run";
    core::check_library_thread<Space>(api);
    const std::int64_t end = until < 0 ? options_.steps : std::min(until, options_.steps);
    TrainSummary summary;
    const auto start = std::chrono::steady_clock::now();
    const std::int64_t start_step = step_;
    for (; step_ < end; ++step_) {
      core::zero_grad(model_);
      double loss = 0;
      for (int micro = 0; micro < options_.accumulation; ++micro) {
        const TokenBatch<Space> batch = source(step_, micro);
        // An empty batch would "train" on loss 0 and report it as a result.
        if (batch.ids.extent(0) == 0 || batch.ids.extent(1) == 0)
          fail<value_error>(api, "step ", step_ + 1, " micro-batch ", micro, " is empty (", batch.ids.extent(0), " x ",
                            batch.ids.extent(1), " tokens)");
        // Sized up front, so the step never grows the arena (a no-op once it is large enough).
        ws_.reserve(
            model_.training_workspace(batch.ids.extent(0), batch.ids.extent(1), core::compat::concurrency(Space{})));
        core::TrainingPass training(ws_, options_.data_seed,
                                    std::uint64_t(step_) * std::uint64_t(options_.accumulation) + std::uint64_t(micro));
        loss += double(model_.train_step(ws_, batch.ids, batch.targets, T(1) / T(options_.accumulation)));
        summary.tokens += std::int64_t(batch.ids.size());
      }
      loss /= options_.accumulation;
      const double norm = options_.clip > 0 ? clip_gradient_norm(model_, options_.clip) : gradient_norm(model_);
      if (!std::isfinite(loss) || !std::isfinite(norm))
        fail<value_error>(api, "non-finite training at step ", step_ + 1, ": loss ", loss, ", gradient norm ", norm);
      const double lr = options_.schedule(step_);
      optimizer_.step(lr);
      summary.log.push_back({step_ + 1, loss, lr, norm});
      if (options_.progress)
        options_.progress({.step = step_ + 1,
                           .total = options_.steps,
                           .start_step = start_step,
                           .last = step_ + 1 == end,
                           .loss = loss,
                           .lr = lr,
                           .grad_norm = norm,
                           .tokens = summary.tokens,
                           .elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()});
      const bool periodic = options_.checkpoint_every > 0 && (step_ + 1) % options_.checkpoint_every == 0;
      if (!options_.checkpoint.empty() && periodic) save(options_.checkpoint, step_ + 1);
      if (options_.stop_requested && options_.stop_requested()) {
        summary.stopped = true;
        ++step_;
        if (!options_.checkpoint.empty() && !periodic) save(options_.checkpoint, step_);
        break;
      }
    }
    summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!summary.stopped && !options_.checkpoint.empty() && options_.checkpoint_every == 0)
      save(options_.checkpoint, step_);
    return summary;
  }

  /// Saves parameters, optimizer state, step and data seed.
  void save(const std::filesystem::path& path) { save(path, step_); }

  /// Restores a checkpoint written by `save`; the next `run` continues from its step. All or
  /// nothing: a checkpoint of another model, data stream or length of training is refused
  /// before the model, the optimizer or the step change.
  void resume(const std::filesystem::path& path) {
    constexpr const char* api = "hybridseq::train::Trainer::resume";
    core::check_library_thread<Space>(api);
    auto staged = stage_checkpoint(path, model_, optimizer_, api);
    const CheckpointInfo& info = staged.info;
    if (info.data_seed != options_.data_seed)
      fail<config_error>(api, path.string(), " was trained with data seed ", info.data_seed, ", this trainer uses ",
                         options_.data_seed);
    if (info.step > options_.steps)
      fail<config_error>(api, path.string(), " is at step ", info.step, ", beyond this trainer's ", options_.steps,
                         " steps");
    staged.apply();
    step_ = info.step;
  }

  std::int64_t step() const { return step_; }
  const AdamW<Model>& optimizer() const { return optimizer_; }
  core::Workspace<Space>& workspace() { return ws_; }

 private:
  void save(const std::filesystem::path& path, std::int64_t step) {
    save_checkpoint(path, model_, optimizer_, {step, options_.data_seed, options_.metadata});
  }

  core::LibraryThreadCheck<Space> thread_check_;  // first: refuses before the optimizer allocates
  Model& model_;
  TrainerOptions options_;
  AdamW<Model> optimizer_;
  core::Workspace<Space> ws_;
  std::int64_t step_ = 0;
};

}  // namespace hybridseq::train
