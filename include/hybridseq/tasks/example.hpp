#pragma once
/// \file
/// One synthetic example: an input sequence and its per-position targets.

#include <cstdint>
#include <vector>

namespace hybridseq::tasks {

/// Target of a position that is not scored: excluded from the loss and from the metrics. Equal to
/// PyTorch's ignore index and to `LmHeadLoss`'s default `ignore_index` (−100). The synthetic tasks'
/// <null> target (Cooper et al.) is encoded as this value, never as the <null> token id.
inline constexpr std::int32_t null_target = -100;

/// An input sequence x and its targets y, both of length T. y[t] is what the model must emit at
/// position t, having seen x[0..t] (teacher forcing), or `null_target` where nothing is scored.
struct Example {
  std::vector<std::int32_t> input;   // (T) token ids
  std::vector<std::int32_t> target;  // (T) token ids or null_target
};

}  // namespace hybridseq::tasks
