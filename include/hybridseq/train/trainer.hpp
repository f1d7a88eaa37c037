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
///
/// Data-parallel training: given a communicator (parallel/communicator.hpp; e.g. parallel::Mpi
/// from parallel/mpi.hpp), every rank holds the whole model and trains its share of every step.
/// `accumulation` is then the number of *global* micro-batches of a step, and rank r of P
/// trains micro-batches [r·A/P, (r+1)·A/P) of them — its shard is a function of (data seed,
/// step, rank), so nothing but the step needs saving and a run resumes on any number of ranks
/// (A must divide by P). Each micro-batch's gradient is computed alone (from zero) and the
/// step's gradient is their sum in one fixed pairwise order over the micro-batch index: a
/// balanced binary tree, built on each rank over its own micro-batches and across ranks by the
/// communicator's sum_tree. With A/P and P powers of two that tree is the same for every P, so
/// 1, 2, 4, … ranks with the same global batch give bit-identical losses and parameters (with
/// other splits the order still is fixed for a given P: runs repeat exactly; across P they
/// agree to rounding). After the sum every rank holds the same global gradient, so the norm
/// and clipping are global and every rank takes the same optimizer step; the step's loss is the
/// mean over the scored targets of all A micro-batches (their summed losses added in
/// micro-batch order), the same on every rank.
/// At construction the ranks check that they agree on the model (parameter count, tensor
/// count, a hash of the names and shapes) and on the options that must match. Rank 0 alone
/// reports progress and writes checkpoints (recording the world size); every rank reads the
/// checkpoint it resumes from, so the path must be on a file system all ranks share.
/// Without a communicator (parallel::SingleProcess) the loop is the plain one: micro-batch
/// gradients accumulate in the kernels.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/gradient_listener.hpp"
#include "../core/parameter.hpp"
#include "../core/threads.hpp"
#include "../core/workspace.hpp"
#include "../io/safetensors.hpp"
#include "../parallel/communicator.hpp"
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
  int accumulation = 1;       // micro-batches per step (over all ranks); the step's loss is the
                              // mean over all their scored targets
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
  // Data-parallel runs: backward hands the last micro-batch's gradients to the sum across
  // ranks module by module, in runs of at least this many bytes (PyTorch DDP's buckets), so
  // the transfers overlap the rest of backward; 0: one sum after backward. Same bits either way.
  std::size_t gradient_bucket_bytes = std::size_t(1) << 20;
};

struct StepLog {
  std::int64_t step;  // 1-based
  double loss;
  double lr;
  double grad_norm;  // before clipping
};

struct TrainSummary {
  std::vector<StepLog> log;
  std::int64_t tokens = 0;  // input tokens of this run, over all ranks
  // Data-parallel runs: gradient bytes (per rank, over the run) whose sum across ranks started
  // while backward still ran (TrainerOptions::gradient_bucket_bytes).
  std::int64_t overlapped_gradient_bytes = 0;
  double seconds = 0;
  bool stopped = false;  // stop_requested() ended the run before `until`
  double tokens_per_second() const { return seconds > 0 ? double(tokens) / seconds : 0; }
};

namespace detail {
/// FNV-1a over the parameters' names, sizes and element sizes: ranks compare it to find out
/// whether they built the same model.
template <class Model>
std::uint64_t parameter_fingerprint(Model& model) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* data, std::size_t bytes) {
    for (std::size_t i = 0; i < bytes; ++i) h = (h ^ static_cast<const unsigned char*>(data)[i]) * 1099511628211ull;
  };
  core::for_each_parameter(model, [&](std::string_view name, auto& p) {
    const std::int64_t numel = p.numel();
    const std::size_t element = sizeof(typename std::remove_reference_t<decltype(p)>::scalar_type);
    mix(name.data(), name.size());
    mix(&numel, sizeof numel);
    mix(&element, sizeof element);
  });
  return h;
}

/// left ← left + right: the step of a fixed summation tree (floating-point addition is
/// commutative but not associative, so only the grouping decides the bits).
template <class Space, class View>
void add_into(const View& left, const View& right) {
  Kokkos::parallel_for(
      "hybridseq::train::Trainer::sum", Kokkos::RangePolicy<Space>(0, left.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i) { left(i) = left(i) + right(i); });
}
}  // namespace detail

template <class Model, parallel::Communicator Comm = parallel::SingleProcess>
class Trainer {
  static_assert(core::require_trainable_branch<typename Model::body_type>(),
                "hybridseq::train::Trainer: the model's body must be trainable");
  static constexpr bool distributed = !std::is_same_v<Comm, parallel::SingleProcess>;

 public:
  using Space = typename Model::execution_space;
  using T = typename Model::scalar_type;

  Trainer(Model& model, const TrainerOptions& options, Comm comm = {})
      : thread_check_("hybridseq::train::Trainer"),
        model_(model),
        options_(options),
        optimizer_(model, options.adamw),
        comm_(std::move(comm)) {
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
      // the last complete one. Only its writer removes it (another rank could race the writer).
      if (comm_.rank() == 0) io::remove_stale_temporary(options.checkpoint);
    }
    if constexpr (distributed) check_ranks_agree(api);
    // Last, once nothing can refuse: zero_grad, clipping and the optimizer then pass over one
    // run of memory per step instead of one per tensor (core::make_contiguous).
    core::make_contiguous(model_);
  }

  /// Trains from the current step up to `until` (default: options.steps). Throws value_error
  /// naming the step if a loss or the gradient norm is not finite. With a communicator, every
  /// rank must call it with the same `until` and a source that gives every rank the same
  /// micro-batch for the same (step, micro).
  template <class Source>
  TrainSummary run(Source&& source, std::int64_t until = -1) {
    constexpr const char* api = "hybridseq::train::Trainer::run";
    core::check_library_thread<Space>(api);
    const std::int64_t end = until < 0 ? options_.steps : std::min(until, options_.steps);
    TrainSummary summary;
    const auto start = std::chrono::steady_clock::now();
    const std::int64_t start_step = step_;
    for (; step_ < end; ++step_) {
      bool stop = false;
      double loss;
      if constexpr (distributed)
        loss = shard_gradients(source, summary, stop);
      else
        loss = gradients(source, summary);
      const double norm = options_.clip > 0 ? clip_gradient_norm(model_, options_.clip) : gradient_norm(model_);
      if (!std::isfinite(loss) || !std::isfinite(norm))
        fail<value_error>(api, "non-finite training at step ", step_ + 1, ": loss ", loss, ", gradient norm ", norm);
      const double lr = options_.schedule(step_);
      optimizer_.step(lr);
      summary.log.push_back({step_ + 1, loss, lr, norm});
      if (options_.progress && comm_.rank() == 0)
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
      if constexpr (!distributed) stop = options_.stop_requested && options_.stop_requested();
      if (stop) {
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

  /// Saves parameters, optimizer state, step and data seed (with a communicator: rank 0
  /// writes, every rank must call it, and every rank throws if the write failed).
  void save(const std::filesystem::path& path) { save(path, step_); }

  /// Restores a checkpoint written by `save`; the next `run` continues from its step. All or
  /// nothing: a checkpoint of another model, data stream or length of training is refused
  /// before the model, the optimizer or the step change — with a communicator, on every rank
  /// if any rank refuses it. A checkpoint written by any number of ranks resumes on any other.
  void resume(const std::filesystem::path& path) {
    constexpr const char* api = "hybridseq::train::Trainer::resume";
    core::check_library_thread<Space>(api);
    std::exception_ptr refused;
    std::int64_t step = -1;
    StagedCheckpoint staged;
    try {
      staged = stage_checkpoint(path, model_, optimizer_, api);
      const CheckpointInfo& info = staged.info;
      if (info.data_seed != options_.data_seed)
        fail<config_error>(api, path.string(), " was trained with data seed ", info.data_seed, ", this trainer uses ",
                           options_.data_seed);
      if (info.step > options_.steps)
        fail<config_error>(api, path.string(), " is at step ", info.step, ", beyond this trainer's ", options_.steps,
                           " steps");
      step = info.step;
    } catch (...) {
      if constexpr (!distributed) throw;
      refused = std::current_exception();
    }
    if constexpr (distributed) {
      // Every rank read the file; all apply it or none does.
      const std::vector<double> steps = gather({double(step)});
      if (refused) std::rethrow_exception(refused);
      for (int r = 0; r < comm_.size(); ++r) {
        if (steps[r] < 0)
          fail<io_error>(api, "rank ", r, " of ", comm_.size(), " could not use ", path.string(),
                         " (its own error names the cause); no rank resumed");
        if (steps[r] != double(step))
          fail<io_error>(api, "rank ", r, " read step ", steps[r], " from ", path.string(), ", rank ", comm_.rank(),
                         " read step ", step, " (the ranks see different files: the path must be shared)");
      }
    }
    staged.apply();
    step_ = step;
  }

  std::int64_t step() const { return step_; }
  const AdamW<Model>& optimizer() const { return optimizer_; }
  core::Workspace<Space>& workspace() { return ws_; }
  const Comm& communicator() const { return comm_; }

 private:
  /// The plain step: micro-batch gradients accumulate in the kernels; returns the step's loss.
  template <class Source>
  double gradients(Source& source, TrainSummary& summary) {
    core::zero_grad(model_);
    double loss = 0;
    std::int64_t scored = 0;
    for (int micro = 0; micro < options_.accumulation; ++micro) {
      loss += train_micro(source, micro);
      scored += scored_;
      summary.tokens += tokens_;
    }
    return finish_mean(loss, scored);
  }

  /// With accumulation, micro-batch j's gradient is that of its summed loss (n_j targets times
  /// its mean), so the step's gradient is the sum's; this divides it, and the summed losses, by
  /// the step's n = Σ n_j: the mean over every scored target of the step, whatever the split
  /// (a mean of micro-batch means would weight a micro-batch of few targets like a full one).
  double finish_mean(double summed_loss, std::int64_t scored) {
    if (options_.accumulation == 1) return summed_loss;  // already the mean
    if (scored == 0) return 0;
    core::for_each_run(model_, core::Gradients{}, [&](const auto& run) { detail::scale(run, 1.0 / double(scored)); });
    return summed_loss / double(scored);
  }

  /// The data-parallel step (see the file comment): this rank's micro-batches, each from a
  /// zero gradient, summed in a binary tree of flat buffers (level l holds the sum of 2^l
  /// consecutive micro-batches), then the tree sum across ranks. The model's gradient
  /// allocation is the last micro-batch's buffer: with one micro-batch per rank the sum across
  /// ranks runs on it in place; with more, its tree's total is copied back into it. The last
  /// micro-batch's fold into the tree and the sum across ranks run piece by piece as its
  /// backward finishes modules (GradientSum). Gathers the micro-batch losses, token counts
  /// and stop requests of every rank.
  template <class Source>
  double shard_gradients(Source& source, TrainSummary& summary, bool& stop) {
    const int per_rank = options_.accumulation / comm_.size();
    std::vector<Tensor<T*, Space>> level;    // level[l]: a pending partial sum of 2^l micro-batches, or empty
    std::vector<double> mine(per_rank + 3);  // summed losses, then scored targets, tokens, stop
    std::int64_t scored = 0, tokens = 0;
    for (int j = 0; j < per_rank; ++j) {
      core::zero_grad(model_);
      const bool last = j + 1 == per_rank;
      const Tensor<T*, Space> packed = last ? flat_layout().grads : take_buffer();
      GradientSum sum(*this, plan_fold(level, packed, last), packed, last);
      {
        std::optional<core::ListenToGradients<Space>> listen;
        if (last && options_.gradient_bucket_bytes > 0) listen.emplace(ws_, sum);
        mine[j] = train_micro(source, comm_.rank() * per_rank + j);
      }
      summary.overlapped_gradient_bytes += sum.finish();
      scored += scored_;
      tokens += tokens_;
    }

    mine[per_rank] = double(scored);
    mine[per_rank + 1] = double(tokens);
    mine[per_rank + 2] = options_.stop_requested && options_.stop_requested() ? 1 : 0;
    const std::vector<double> all = gather(mine);
    double loss = 0;
    std::int64_t step_scored = 0;
    for (int r = 0; r < comm_.size(); ++r) {
      const double* theirs = all.data() + std::size_t(r) * mine.size();
      for (int j = 0; j < per_rank; ++j) loss += theirs[j];  // micro-batch order: the plain loop's sum
      step_scored += std::int64_t(theirs[per_rank]);
      summary.tokens += std::int64_t(theirs[per_rank + 1]);
      stop = stop || theirs[per_rank + 2] != 0;  // one rank's signal stops all, at the same step
    }
    return finish_mean(loss, step_scored);
  }

  /// Where each parameter's gradient sits: storage order (core::for_each_parameter_in_storage_order),
  /// the order of the model's one gradient allocation (the constructor's core::make_contiguous),
  /// so that a run of parameters is one slice of it and of every flat buffer. Built on first use.
  struct FlatLayout {
    Tensor<T*, Space> grads;                             // the model's gradients, one run
    std::vector<std::int64_t> offsets;                   // gradient i at [offsets[i], offsets[i + 1])
    std::unordered_map<const void*, std::size_t> index;  // gradient data → i
  };

  /// The additions that fold a micro-batch's packed gradient into the pending partial sums:
  /// a binary counter's carry (earlier micro-batches on the left), and for the last one the
  /// leftovers too (the older, larger sums on the left), leaving the rank's total in `total`.
  /// Buffers the additions empty are returned to spare_ by GradientSum::finish.
  struct Fold {
    std::vector<std::pair<Tensor<T*, Space>, Tensor<T*, Space>>> adds;  // left ← left + right, in order
    Tensor<T*, Space> total;                                            // the last micro-batch: the rank's sum
    std::vector<Tensor<T*, Space>> freed;
  };
  Fold plan_fold(std::vector<Tensor<T*, Space>>& level, Tensor<T*, Space> sum, bool last) {
    Fold f;
    std::size_t l = 0;
    for (; l < level.size() && level[l].data(); ++l) {
      f.adds.emplace_back(level[l], sum);
      f.freed.push_back(sum);
      sum = level[l];
      level[l] = {};
    }
    if (l == level.size()) level.emplace_back();
    level[l] = sum;
    if (!last) return f;
    for (std::size_t k = level.size(); k-- > 0;) {
      if (!level[k].data()) continue;
      if (!f.total.data()) {
        f.total = level[k];
      } else {
        f.adds.emplace_back(f.total, level[k]);
        f.freed.push_back(level[k]);
      }
      level[k] = {};
    }
    return f;
  }

  /// One micro-batch's gradients on their way into the step's sum, a piece (a run of
  /// parameters, one slice of the gradients and of the flat buffers) at a time: copied out of
  /// the gradients (unless they are the micro-batch's buffer), folded into the partial sums
  /// (Fold) and, for the last micro-batch, started across ranks. As a GradientListener it hears
  /// backward announce final gradients (core/gradient_listener.hpp) and sends a run once it
  /// holds gradient_bucket_bytes; finish() takes whatever backward did not announce. A module's
  /// weights and its biases or gains lie in different storage groups, so announced gradients
  /// grow a few runs at once. Every rank hears the same announcements in the same order, so
  /// every rank starts the same pieces in the same order, as the communicator requires. Piece
  /// by piece or whole, every element sees the same additions in the same order: the bits do
  /// not depend on the pieces.
  class GradientSum final : public core::GradientListener {
   public:
    GradientSum(Trainer& trainer, Fold fold, Tensor<T*, Space> packed, bool send)
        : trainer_(trainer),
          flat_(trainer.flat_layout()),
          fold_(std::move(fold)),
          packed_(packed),
          send_(send),
          started_(flat_.offsets.size() - 1, false) {}

    void gradient_final(const void* data) override {
      const auto it = flat_.index.find(data);
      if (it == flat_.index.end() || started_[it->second]) return;
      const std::size_t i = it->second;
      started_[i] = true;
      // Into the runs, kept sorted, neighbours merged: a module's parameters and the next
      // module's (backward runs last to first) join where storage has them side by side.
      const auto at = std::lower_bound(open_.begin(), open_.end(), std::pair(i, i + 1));
      const auto next = open_.insert(at, {i, i + 1});
      if (next + 1 != open_.end() && next[1].first == i + 1) {
        next->second = next[1].second;
        open_.erase(next + 1);
      }
      if (next != open_.begin() && next[-1].second == i) {
        next[-1].second = next->second;
        open_.erase(next);
      }
    }
    void module_final() override {
      std::erase_if(open_, [&](const std::pair<std::size_t, std::size_t>& run) {
        const bool full = std::size_t(flat_.offsets[run.second] - flat_.offsets[run.first]) * sizeof(T) >=
                          trainer_.options_.gradient_bucket_bytes;
        if (full) flush(run.first, run.second);
        return full;
      });
      if (send_) trainer_.comm_.sum_tree_progress();
    }

    /// After backward: the open runs, then the rest in maximal runs, then (last micro-batch) the
    /// wait for the sum across ranks and the total back in the gradients. Returns the bytes
    /// started during backward.
    std::int64_t finish() {
      const std::int64_t overlapped = sent_;
      for (const auto& [lo, hi] : open_) flush(lo, hi);
      open_.clear();
      for (std::size_t i = 0; i < started_.size();) {
        if (started_[i]) {
          ++i;
          continue;
        }
        const std::size_t lo = i;
        while (i < started_.size() && !started_[i]) started_[i++] = true;
        flush(lo, i);
      }
      const auto is_gradients = [&](const Tensor<T*, Space>& b) { return b.data() == flat_.grads.data(); };
      if (send_) {
        trainer_.comm_.sum_tree_finish();
        if (!is_gradients(fold_.total)) {
          Kokkos::deep_copy(flat_.grads, fold_.total);
          trainer_.spare_.push_back(fold_.total);
        }
      }
      for (const auto& b : fold_.freed)
        if (!is_gradients(b)) trainer_.spare_.push_back(b);
      return overlapped;
    }

   private:
    /// Copies, folds and (last micro-batch) starts the parameters [lo, hi).
    void flush(std::size_t lo, std::size_t hi) {
      const std::pair<std::int64_t, std::int64_t> piece(flat_.offsets[lo], flat_.offsets[hi]);
      if (piece.first == piece.second) return;
      if (packed_.data() != flat_.grads.data())
        Kokkos::deep_copy(Kokkos::subview(packed_, piece), Kokkos::subview(flat_.grads, piece));
      for (const auto& [left, right] : fold_.adds)
        detail::add_into<Space>(Kokkos::subview(left, piece), Kokkos::subview(right, piece));
      if (send_) {
        trainer_.comm_.sum_tree_start(Kokkos::subview(fold_.total, piece));
        sent_ += (piece.second - piece.first) * std::int64_t(sizeof(T));
      }
    }

    Trainer& trainer_;
    const FlatLayout& flat_;
    Fold fold_;
    Tensor<T*, Space> packed_;
    bool send_;
    std::vector<bool> started_;
    std::vector<std::pair<std::size_t, std::size_t>> open_;  // runs of announced gradients not yet sent, sorted
    std::int64_t sent_ = 0;                                  // bytes started across ranks
  };

  /// One micro-batch's forward and backward, gradients added: of its mean loss without
  /// accumulation, else of its summed loss (finish_mean divides). Returns that loss and leaves
  /// its scored targets in scored_ and its input tokens in tokens_.
  template <class Source>
  double train_micro(Source& source, int micro) {
    constexpr const char* api = "hybridseq::train::Trainer::run";
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
    tokens_ = std::int64_t(batch.ids.size());
    core::WorkspaceScope scope(ws_);
    typename Model::Saved saved;
    const T mean = model_.forward(ws_, batch.ids, batch.targets, saved);
    scored_ = model_.scored_targets(saved);
    const std::int64_t times = options_.accumulation == 1 ? 1 : scored_;
    model_.backward(ws_, saved, T(times));
    return double(mean) * double(times);
  }

  Tensor<T*, Space> take_buffer() {
    if (spare_.empty()) return Tensor<T*, Space>("hybridseq::train::Trainer::gradient", core::parameter_count(model_));
    Tensor<T*, Space> b = spare_.back();
    spare_.pop_back();
    return b;
  }

  const FlatLayout& flat_layout() {
    if (!flat_layout_.offsets.empty()) return flat_layout_;
    std::int64_t at = 0;
    core::for_each_parameter_in_storage_order(model_, [&](std::string_view, auto& p) {
      flat_layout_.index.emplace(p.grad().data(), flat_layout_.offsets.size());
      flat_layout_.offsets.push_back(at);
      at += p.numel();
    });
    flat_layout_.offsets.push_back(at);
    int runs = 0;
    core::for_each_run(model_, core::Gradients{}, [&](const auto& run) {
      if constexpr (std::is_same_v<typename std::decay_t<decltype(run)>::value_type, T>) flat_layout_.grads = run;
      ++runs;
    });
    if (runs != 1 || std::int64_t(flat_layout_.grads.extent(0)) != at)
      fail("hybridseq::train::Trainer", "the data-parallel step needs the model's gradients in one allocation (", runs,
           " runs of memory hold ", at, " values): was a parameter re-allocated after the Trainer was made?");
    return flat_layout_;
  }
  std::vector<double> gather(const std::vector<double>& mine) {
    std::vector<double> all(mine.size() * std::size_t(comm_.size()));
    comm_.allgather(std::span<const double>(mine), std::span<double>(all));
    return all;
  }

  /// The same model and the same step-defining options on every rank, and a global batch that
  /// splits evenly; the same verdict on every rank (from the gathered values), so none hangs.
  void check_ranks_agree(const char* api) {
    const int ranks = comm_.size();
    if (options_.accumulation % ranks != 0)
      fail<config_error>(api, "accumulation (the global micro-batches of a step) is ", options_.accumulation,
                         ", not divisible by the ", ranks, " ranks of the ", comm_.name(),
                         " communicator (each rank trains accumulation / ranks of them)");
    const std::uint64_t hash = detail::parameter_fingerprint(model_);
    std::int64_t tensors = 0;
    core::for_each_parameter(model_, [&](std::string_view, auto&) { ++tensors; });
    const std::vector<double> mine = {double(core::parameter_count(model_)),
                                      double(tensors),
                                      double(hash >> 32),
                                      double(hash & 0xffffffffu),
                                      double(options_.steps),
                                      double(options_.data_seed >> 32),
                                      double(options_.data_seed & 0xffffffffu),
                                      options_.clip,
                                      options_.schedule.peak_lr,
                                      double(options_.gradient_bucket_bytes)};
    const std::vector<double> all = gather(mine);
    auto hex = [](double hi, double lo) {
      char text[24];
      std::snprintf(text, sizeof text, "%08llx%08llx", static_cast<unsigned long long>(hi),
                    static_cast<unsigned long long>(lo));
      return std::string(text);
    };
    for (int r = 1; r < ranks; ++r) {
      const double* a = all.data();
      const double* b = all.data() + std::size_t(r) * mine.size();
      if (!std::equal(a, a + 4, b))
        fail<config_error>(api, "rank ", r, " built a different model than rank 0: ", b[0], " parameters in ", b[1],
                           " tensors (names and shapes hash ", hex(b[2], b[3]), ") vs ", a[0], " in ", a[1], " (",
                           hex(a[2], a[3]), "); every rank must build the same model");
      if (!std::equal(a + 4, a + mine.size(), b + 4))
        fail<config_error>(api, "rank ", r, " trains with other options than rank 0: steps ", b[4], " vs ", a[4],
                           ", data seed ", hex(b[5], b[6]), " vs ", hex(a[5], a[6]), ", clip ", b[7], " vs ", a[7],
                           ", peak lr ", b[8], " vs ", a[8], ", gradient_bucket_bytes ", b[9], " vs ", a[9]);
    }
  }

  void save(const std::filesystem::path& path, std::int64_t step) {
    if constexpr (!distributed) {
      save_checkpoint(path, model_, optimizer_, {step, options_.data_seed, options_.metadata});
    } else {
      // Rank 0 writes (the state is the same on every rank); all learn whether it succeeded,
      // so none trains on believing a checkpoint exists.
      std::exception_ptr failed;
      if (comm_.rank() == 0) {
        try {
          auto metadata = options_.metadata;
          metadata["hybridseq.world_size"] = std::to_string(comm_.size());
          save_checkpoint(path, model_, optimizer_, {step, options_.data_seed, metadata});
        } catch (...) {
          failed = std::current_exception();
        }
      }
      const std::vector<double> ok = gather({failed ? 0.0 : 1.0});
      if (failed) std::rethrow_exception(failed);
      if (ok[0] == 0)
        fail<io_error>("hybridseq::train::Trainer::save", "rank 0 could not write ", path.string(),
                       " (its own error names the cause)");
    }
  }

  core::LibraryThreadCheck<Space> thread_check_;  // first: refuses before the optimizer allocates
  Model& model_;
  TrainerOptions options_;
  AdamW<Model> optimizer_;
  Comm comm_;
  core::Workspace<Space> ws_;
  std::vector<Tensor<T*, Space>> spare_;  // flat gradient buffers between steps (data-parallel path)
  FlatLayout flat_layout_;                // their layout (flat_layout())
  std::int64_t tokens_ = 0;               // the last micro-batch's input tokens
  std::int64_t scored_ = 0;               // and the targets its loss scored
  std::int64_t step_ = 0;
};

}  // namespace hybridseq::train
