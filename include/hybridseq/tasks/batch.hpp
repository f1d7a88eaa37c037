#pragma once
/// \file
/// Batches of synthetic examples with per-row random lengths, padded to a common length.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "../core/error.hpp"
#include "../core/rng.hpp"
#include "draws.hpp"
#include "example.hpp"

namespace hybridseq::tasks {

/// A batch of examples, row-major (B, T): ids(b, t) = ids[b·T + t]. Rows shorter than T are
/// padded with the task's padding token (<null>, or 0 for MQAR) and `null_target`.
struct Batch {
  int batch = 0, len = 0;             // B, T
  std::vector<std::int32_t> ids;      // (B, T) input token ids
  std::vector<std::int32_t> targets;  // (B, T) target ids or null_target (−100)
};

/// A synthetic task: a vocabulary, printable tokens, a padding token, and examples that are a
/// pure function of (seed, index, len).
template <class T>
concept SyntheticTask = requires(const T& task, std::uint64_t seed, int n) {
  { task.vocab_size() } -> std::convertible_to<int>;
  { task.token_name(n) } -> std::convertible_to<std::string>;
  { task.pad_id() } -> std::convertible_to<std::int32_t>;
  { task.sample(seed, seed, n) } -> std::same_as<Example>;
};

namespace detail {
inline constexpr std::uint64_t length_stream = core::stream_of("hybridseq::tasks::make_batch::length");
}  // namespace detail

/// Length of example `index` in a batch drawn with lengths in [min_len, max_len]: uniform, from a
/// stream of its own, so it does not depend on the batch size or on the task.
inline int example_length(std::uint64_t seed, std::uint64_t index, int min_len, int max_len) {
  detail::Draws d(seed, detail::length_stream ^ core::mix64(index));
  return min_len + d.below(max_len - min_len + 1);
}

/// Batch `step` of a stream of examples: row b is `task.sample(seed, i, L_i)` with example
/// index i = step·B + b (so batches never repeat across steps for a seed; use another seed
/// for evaluation sets) and L_i = `example_length(seed, i, min_len, max_len)`. Rows are
/// padded to T = max(max_len, pad_to) with `task.pad_id()` inputs and `null_target` targets
/// (the length-generalisation protocol: train on 20–50, evaluate longer lengths, padded).
/// Requires B ≥ 1, 1 ≤ min_len ≤ max_len, pad_to ≤ 0 or pad_to ≥ max_len (value_error
/// otherwise); lengths below the task's minimum fail in `sample`.
template <SyntheticTask Task>
Batch make_batch(const Task& task, std::uint64_t seed, std::uint64_t step, int batch, int min_len, int max_len,
                 int pad_to = 0) {
  constexpr std::string_view api = "hybridseq::tasks::make_batch";
  if (batch < 1) fail<value_error>(api, "batch is ", batch, ", expected >= 1");
  if (min_len < 1 || max_len < min_len)
    fail<value_error>(api, "lengths are [", min_len, ", ", max_len, "], expected 1 <= min_len <= max_len");
  if (pad_to > 0 && pad_to < max_len) fail<value_error>(api, "pad_to is ", pad_to, ", below max_len ", max_len);
  const int len = pad_to > 0 ? pad_to : max_len;
  const auto rows = static_cast<std::size_t>(batch), cols = static_cast<std::size_t>(len);
  Batch out{batch, len, std::vector<std::int32_t>(rows * cols, static_cast<std::int32_t>(task.pad_id())),
            std::vector<std::int32_t>(rows * cols, null_target)};
  for (std::size_t b = 0; b < rows; ++b) {
    const std::uint64_t index = step * static_cast<std::uint64_t>(batch) + b;
    const Example ex = task.sample(seed, index, example_length(seed, index, min_len, max_len));
    std::copy(ex.input.begin(), ex.input.end(), out.ids.begin() + static_cast<std::ptrdiff_t>(b * cols));
    std::copy(ex.target.begin(), ex.target.end(), out.targets.begin() + static_cast<std::ptrdiff_t>(b * cols));
  }
  return out;
}

}  // namespace hybridseq::tasks
