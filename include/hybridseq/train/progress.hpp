#pragma once
/// \file
/// Training progress. The library does not print: the trainer hands a `Progress` record to a
/// `ProgressCallback` after every optimizer step (none by default). `TerminalProgress` is a
/// ready-made callback for tools: on a terminal it redraws one line (`\r`), elsewhere (logs,
/// CI, pipes) it prints a plain line every `every` steps, on the first step of a run and on
/// its last.
///
/// Rates and the ETA count only the steps done in this process: after resuming from step k
/// of N, at step s after `elapsed` seconds, rate = (s − k) / elapsed and ETA = (N − s) / rate.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include <unistd.h>

namespace hybridseq::train {

/// One optimizer step as the trainer reports it.
struct Progress {
  std::int64_t step = 0;        // steps completed, this one included (1-based)
  std::int64_t total = 0;       // steps of the whole training (TrainerOptions::steps)
  std::int64_t start_step = 0;  // the step this run started from (k after a resume from step k, else 0)
  bool last = false;            // the last step of this run (total, or run's `until`)
  double loss = 0;              // this step's loss (mean over its micro-batches)
  double lr = 0;                // the schedule's learning rate used for this step
  double grad_norm = 0;         // global gradient norm before clipping
  std::int64_t tokens = 0;      // input tokens processed by this run
  double elapsed = 0;           // seconds since this run started

  /// Tokens per second in this run (0 before any time has passed).
  double tokens_per_second() const { return elapsed > 0 ? double(tokens) / elapsed : 0; }
  /// Steps per second in this run: (step − start_step) / elapsed (0 before any time has passed).
  double steps_per_second() const { return elapsed > 0 ? double(step - start_step) / elapsed : 0; }
  /// Seconds to `total` at this run's rate: (total − step) / rate; NaN while the rate is unknown.
  double eta_seconds() const {
    const double rate = steps_per_second();
    if (step >= total) return 0;
    return rate > 0 ? double(total - step) / rate : std::numeric_limits<double>::quiet_NaN();
  }
};

/// Called by the trainer after every optimizer step; empty: nothing is reported.
using ProgressCallback = std::function<void(const Progress&)>;

struct TerminalProgressOptions {
  int every = 100;                    // plain-line mode: a line every `every` steps (≥ 1)
  std::FILE* stream = stdout;         // where to write (not owned)
  std::optional<bool> terminal = {};  // redraw one line? default: isatty(fileno(stream))
};

/// A progress display for command-line tools, usable as a `ProgressCallback`.
class TerminalProgress {
 public:
  explicit TerminalProgress(std::string label, const TerminalProgressOptions& options = {})
      : label_(std::move(label)),
        every_(options.every > 0 ? options.every : 1),
        stream_(options.stream ? options.stream : stdout),
        terminal_(options.terminal ? *options.terminal : isatty(fileno(stream_)) != 0) {}

  bool terminal() const { return terminal_; }

  /// The report for `p`, without line ending: "label  step s/N  loss …  lr …  … tok/s  ETA …s".
  std::string line(const Progress& p) const {
    const double eta = p.eta_seconds();
    char eta_text[32];
    if (std::isfinite(eta))
      std::snprintf(eta_text, sizeof eta_text, "%.0fs", eta);
    else
      std::snprintf(eta_text, sizeof eta_text, "?");
    char buf[512];
    std::snprintf(buf, sizeof buf, "%s  step %lld/%lld  loss %.4f  lr %.2e  %.0f tok/s  ETA %s", label_.c_str(),
                  static_cast<long long>(p.step), static_cast<long long>(p.total), p.loss, p.lr, p.tokens_per_second(),
                  eta_text);
    return buf;
  }

  void operator()(const Progress& p) const {
    if (terminal_) {
      std::fprintf(stream_, "\r%s   ", line(p).c_str());
      if (p.last) std::fputc('\n', stream_);
      std::fflush(stream_);
    } else if (p.step % every_ == 0 || p.last || p.step == p.start_step + 1) {
      std::fprintf(stream_, "%s\n", line(p).c_str());
      std::fflush(stream_);
    }
  }

 private:
  std::string label_;
  int every_;
  std::FILE* stream_;
  bool terminal_;
};

}  // namespace hybridseq::train
