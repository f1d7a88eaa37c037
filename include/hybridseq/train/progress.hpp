#pragma once
/// \file
/// A training progress display: one self-overwriting line (step, loss, tokens/s, ETA) on a
/// terminal, plain lines every `every` steps otherwise (logs, CI, pipes).

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include <unistd.h>

namespace hybridseq::train {

enum class ProgressMode { automatic, terminal, lines, quiet };

class Progress {
 public:
  Progress(std::string label, std::int64_t total_steps, ProgressMode mode = ProgressMode::automatic, int every = 100)
      : label_(std::move(label)), total_(total_steps), every_(every > 0 ? every : 1) {
    mode_ = mode == ProgressMode::automatic ? (isatty(fileno(stdout)) ? ProgressMode::terminal : ProgressMode::lines)
                                            : mode;
  }

  /// Reports step `step` (1-based) with its loss and the tokens processed so far.
  void update(std::int64_t step, double loss, double lr, std::int64_t tokens) {
    if (mode_ == ProgressMode::quiet) return;
    const double secs = std::chrono::duration<double>(clock::now() - start_).count();
    const double tps = secs > 0 ? double(tokens) / secs : 0;
    const double eta = step > 0 ? secs / double(step) * double(total_ - step) : 0;
    if (mode_ == ProgressMode::terminal) {
      std::printf("\r%s  step %lld/%lld  loss %.4f  lr %.2e  %.0f tok/s  ETA %.0fs   ", label_.c_str(),
                  static_cast<long long>(step), static_cast<long long>(total_), loss, lr, tps, eta);
      if (step == total_) std::printf("\n");
      std::fflush(stdout);
    } else if (step % every_ == 0 || step == total_ || step == 1) {
      std::printf("%s  step %lld/%lld  loss %.4f  lr %.2e  %.0f tok/s  ETA %.0fs\n", label_.c_str(),
                  static_cast<long long>(step), static_cast<long long>(total_), loss, lr, tps, eta);
      std::fflush(stdout);
    }
  }

 private:
  using clock = std::chrono::steady_clock;
  std::string label_;
  std::int64_t total_;
  int every_;
  ProgressMode mode_;
  clock::time_point start_ = clock::now();
};

}  // namespace hybridseq::train
