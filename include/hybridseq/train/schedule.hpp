#pragma once
/// \file
/// The learning-rate schedule, the one owner of the learning rate: a linear warm-up, then
/// constant, linear decay or cosine decay. With W = warmup_steps, N = total_steps, P = peak_lr,
/// r = min_ratio and step s (0-based: the lr of the update that completes step s + 1):
///
///   s < W:            lr = P · (s + 1) / W                       (reaches P at s = W − 1)
///   constant:         lr = P
///   linear:           lr = P · (r + (1 − r) · (1 − p))           p = clamp((s − W) / (N − W), 0, 1)
///   cosine:           lr = P · (r + (1 − r) · ½(1 + cos πp))
///
/// so a decaying schedule is P at s = W and r·P at s = N (and after). The trainer asks the
/// schedule for every step's lr and hands it to the optimizer; the optimizer has none of its own.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string_view>

#include "../core/error.hpp"

namespace hybridseq::train {

struct Schedule {
  enum class Decay { constant, linear, cosine };
  Decay decay = Decay::cosine;      // what follows the warm-up
  double peak_lr = 1e-3;            // P: the lr at the end of the warm-up
  std::int64_t warmup_steps = 0;    // W: linear warm-up steps (0: start at P)
  std::int64_t total_steps = 1000;  // N: where a decay reaches its floor; the trainer's `steps`
  double min_ratio = 0.0;           // r: the floor r·P of linear and cosine (0 ≤ r ≤ 1); constant: must be 0

  /// Throws value_error naming `hybridseq::train::Schedule` and the offending values.
  void validate() const {
    constexpr std::string_view api = "hybridseq::train::Schedule";
    if (!std::isfinite(peak_lr) || peak_lr < 0)
      fail<value_error>(api, "peak_lr must be finite and >= 0, got ", peak_lr);
    if (total_steps < 1) fail<value_error>(api, "total_steps must be >= 1, got ", total_steps);
    if (warmup_steps < 0 || warmup_steps > total_steps)
      fail<value_error>(api, "warmup_steps must be in [0, total_steps = ", total_steps, "], got ", warmup_steps);
    if (!(min_ratio >= 0 && min_ratio <= 1)) fail<value_error>(api, "min_ratio must be in [0, 1], got ", min_ratio);
    if (decay == Decay::constant && min_ratio != 0)
      fail<value_error>(api, "min_ratio ", min_ratio, " has no effect on a constant schedule (use linear or cosine)");
  }

  /// Learning rate for step s (0-based); s ≥ 0. Validates first (value_error).
  double operator()(std::int64_t s) const {
    validate();
    if (s < 0) fail<value_error>("hybridseq::train::Schedule", "step must be >= 0, got ", s);
    if (s < warmup_steps) return peak_lr * double(s + 1) / double(warmup_steps);
    if (decay == Decay::constant || total_steps <= warmup_steps) return peak_lr;
    const double p = std::clamp(double(s - warmup_steps) / double(total_steps - warmup_steps), 0.0, 1.0);
    const double f = decay == Decay::linear ? 1.0 - p : 0.5 * (1.0 + std::cos(std::numbers::pi * p));
    return peak_lr * (min_ratio + (1.0 - min_ratio) * f);
  }
};

}  // namespace hybridseq::train
