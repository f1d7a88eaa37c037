#pragma once
/// \file
/// Learning-rate schedules: linear warm-up, then constant, linear or cosine decay to
/// `min_ratio` · peak at `total_steps`.

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace hybridseq::train {

struct Schedule {
  enum class Decay { constant, linear, cosine };
  double peak_lr = 1e-3;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;
  Decay decay = Decay::cosine;
  double min_ratio = 0.0;

  /// Learning rate for step s (0-based).
  double operator()(std::int64_t s) const {
    if (s < warmup_steps) return peak_lr * double(s + 1) / double(warmup_steps);
    if (decay == Decay::constant || total_steps <= warmup_steps) return peak_lr;
    const double p = std::clamp(double(s - warmup_steps) / double(total_steps - warmup_steps), 0.0, 1.0);
    const double f = decay == Decay::linear ? 1.0 - p : 0.5 * (1.0 + std::cos(3.14159265358979323846 * p));
    return peak_lr * (min_ratio + (1.0 - min_ratio) * f);
  }
};

}  // namespace hybridseq::train
