#pragma once
/// \file
/// Teacher-forced greedy accuracy of the synthetic tasks (Cooper et al., arXiv 2603.08859):
/// "char" accuracy over scored positions and "string" accuracy over sequences.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "../core/error.hpp"
#include "batch.hpp"
#include "example.hpp"

namespace hybridseq::tasks {

/// Accuracy counts and rates. A position is scored when its target is not `null_target`; a
/// sequence counts when it has at least one scored position, and is correct when all of them
/// are. Rates are 0 when there is nothing to count (read `positions` / `sequences`).
struct Accuracy {
  double chr = 0;  // correct_positions / positions
  double str = 0;  // correct_sequences / sequences
  std::int64_t positions = 0, sequences = 0;
  std::int64_t correct_positions = 0, correct_sequences = 0;
};

namespace detail {
inline Accuracy with_rates(Accuracy a) {
  a.chr = a.positions > 0 ? static_cast<double>(a.correct_positions) / static_cast<double>(a.positions) : 0.0;
  a.str = a.sequences > 0 ? static_cast<double>(a.correct_sequences) / static_cast<double>(a.sequences) : 0.0;
  return a;
}
}  // namespace detail

/// Accuracy of `predictions` (row-major (B, T) argmax token ids, teacher-forced) on a batch.
/// Throws shape_error if the batch's vectors or `predictions` do not hold B·T elements.
inline Accuracy accuracy(const Batch& batch, std::span<const std::int32_t> predictions) {
  constexpr std::string_view api = "hybridseq::tasks::accuracy";
  const auto rows = static_cast<std::size_t>(batch.batch < 0 ? 0 : batch.batch);
  const auto cols = static_cast<std::size_t>(batch.len < 0 ? 0 : batch.len);
  const std::size_t n = rows * cols;
  if (batch.batch < 0 || batch.len < 0 || batch.ids.size() != n || batch.targets.size() != n)
    fail<shape_error>(api, "batch is (B,T) = (", batch.batch, ",", batch.len, ") with ", batch.ids.size(), " ids and ",
                      batch.targets.size(), " targets, expected B*T each");
  if (predictions.size() != n)
    fail<shape_error>(api, "predictions has ", predictions.size(), " elements, expected (B,T) = (", batch.batch, ",",
                      batch.len, ") = ", n);
  Accuracy a;
  for (std::size_t b = 0; b < rows; ++b) {
    std::int64_t scored = 0, correct = 0;
    for (std::size_t t = b * cols; t < (b + 1) * cols; ++t) {
      if (batch.targets[t] == null_target) continue;
      ++scored;
      correct += predictions[t] == batch.targets[t] ? 1 : 0;
    }
    a.positions += scored;
    a.correct_positions += correct;
    if (scored > 0) {
      ++a.sequences;
      a.correct_sequences += correct == scored ? 1 : 0;
    }
  }
  return detail::with_rates(a);
}

/// The accuracy over the union of what `a` and `b` counted (exact: counts are added).
inline Accuracy merge(const Accuracy& a, const Accuracy& b) {
  Accuracy m;
  m.positions = a.positions + b.positions;
  m.sequences = a.sequences + b.sequences;
  m.correct_positions = a.correct_positions + b.correct_positions;
  m.correct_sequences = a.correct_sequences + b.correct_sequences;
  return detail::with_rates(m);
}

/// total ← merge(total, accuracy(batch, predictions)).
inline void accumulate(Accuracy& total, const Batch& batch, std::span<const std::int32_t> predictions) {
  total = merge(total, accuracy(batch, predictions));
}

}  // namespace hybridseq::tasks
