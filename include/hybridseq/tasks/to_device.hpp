#pragma once
/// \file
/// Host batches to device tensors: `to_device` copies one `Batch`; `task_batches` and
/// `corpus_batches` turn a synthetic task or a byte corpus into the trainer's data source,
/// `(step, micro) -> TokenBatch<Space>`, a pure function of (seed, step, micro).

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

#include "../core/error.hpp"
#include "../core/spaces.hpp"
#include "batch.hpp"
#include "text_corpus.hpp"

namespace hybridseq::tasks {

/// One (micro-)batch of token ids and next-token targets (−100 = unsupervised), both (B, T),
/// in `Space`'s memory. `auto [ids, targets] = to_device<Space>(batch)` works.
template <ExecutionSpace Space>
struct TokenBatch {
  Tensor<std::int32_t**, Space> ids;
  Tensor<std::int32_t**, Space> targets;
};

/// (ids, targets) of `batch` as (B, T) tensors in `Space`'s memory, ready for an embedding and
/// `LmHeadLoss` (whose ignore_index is `null_target`). Blocks until the copies are done.
/// Throws shape_error if the batch's vectors do not hold B·T elements.
template <ExecutionSpace Space>
TokenBatch<Space> to_device(const Batch& batch) {
  constexpr std::string_view api = "hybridseq::tasks::to_device";
  const auto rows = static_cast<std::size_t>(batch.batch < 0 ? 0 : batch.batch);
  const auto cols = static_cast<std::size_t>(batch.len < 0 ? 0 : batch.len);
  if (batch.batch < 0 || batch.len < 0 || batch.ids.size() != rows * cols || batch.targets.size() != rows * cols)
    fail<shape_error>(api, "batch is (B,T) = (", batch.batch, ",", batch.len, ") with ", batch.ids.size(), " ids and ",
                      batch.targets.size(), " targets, expected B*T each");
  using HostView = Kokkos::View<const std::int32_t**, Kokkos::LayoutRight, Kokkos::HostSpace,
                                Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  auto ids = make_tensor<std::int32_t**, Space>("hybridseq::tasks::to_device::ids", rows, cols);          // (B, T)
  auto targets = make_tensor<std::int32_t**, Space>("hybridseq::tasks::to_device::targets", rows, cols);  // (B, T)
  Kokkos::deep_copy(ids, HostView(batch.ids.data(), rows, cols));
  Kokkos::deep_copy(targets, HostView(batch.targets.data(), rows, cols));
  return {ids, targets};
}

/// A training stream over a synthetic task: micro-batch `micro` of step `step` is
/// `make_batch(task, seed, step·accumulation + micro, batch, min_len, max_len)`.
struct TaskStream {
  std::uint64_t seed = 1;
  int batch = 8;    // B
  int min_len = 1;  // training lengths [min_len, max_len]; T = max_len
  int max_len = 1;
  int accumulation = 1;  // micro-batches per step (the trainer's `accumulation`)
};

/// A training stream over a byte corpus: micro-batch `micro` of step `step` is
/// `corpus.sample_batch(seed, step·accumulation + micro, batch, len)`.
struct CorpusStream {
  std::uint64_t seed = 1;
  int batch = 16;        // B
  int len = 128;         // T
  int accumulation = 1;  // micro-batches per step (the trainer's `accumulation`)
};

namespace detail {
inline void check_stream(std::string_view api, int batch, int accumulation) {
  if (batch < 1) fail<value_error>(api, "batch is ", batch, ", expected >= 1");
  if (accumulation < 1) fail<value_error>(api, "accumulation is ", accumulation, ", expected >= 1");
}
inline std::uint64_t stream_index(std::string_view api, std::int64_t step, int micro, int accumulation) {
  if (step < 0 || micro < 0 || micro >= accumulation)
    fail<value_error>(api, "asked for step ", step, " micro-batch ", micro, "; the stream has ", accumulation,
                      " micro-batch(es) per step (set its accumulation to the trainer's)");
  return static_cast<std::uint64_t>(step) * static_cast<std::uint64_t>(accumulation) +
         static_cast<std::uint64_t>(micro);
}
}  // namespace detail

/// The trainer's data source over `task` (which must outlive it): `(step, micro) ->
/// TokenBatch<Space>`. value_error for a bad stream (here) or a micro-batch ≥ accumulation (on call).
template <ExecutionSpace Space, SyntheticTask Task>
auto task_batches(const Task& task, const TaskStream& stream) {
  constexpr std::string_view api = "hybridseq::tasks::task_batches";
  detail::check_stream(api, stream.batch, stream.accumulation);
  if (stream.min_len < 1 || stream.max_len < stream.min_len)
    fail<value_error>(api, "lengths are [", stream.min_len, ", ", stream.max_len,
                      "], expected 1 <= min_len <= max_len");
  return [&task, stream, api](std::int64_t step, int micro) {
    const auto index = detail::stream_index(api, step, micro, stream.accumulation);
    return to_device<Space>(make_batch(task, stream.seed, index, stream.batch, stream.min_len, stream.max_len));
  };
}
template <ExecutionSpace Space, SyntheticTask Task>
auto task_batches(const Task&&, const TaskStream&) = delete;  // the source keeps a reference: no temporaries

/// The trainer's data source over `corpus` (which must outlive it): `(step, micro) ->
/// TokenBatch<Space>`. value_error for a bad stream (here) or a micro-batch ≥ accumulation (on call).
template <ExecutionSpace Space>
auto corpus_batches(const ByteCorpus& corpus, const CorpusStream& stream) {
  constexpr std::string_view api = "hybridseq::tasks::corpus_batches";
  detail::check_stream(api, stream.batch, stream.accumulation);
  if (stream.len < 1) fail<value_error>(api, "len is ", stream.len, ", expected >= 1");
  return [&corpus, stream, api](std::int64_t step, int micro) {
    const auto index = detail::stream_index(api, step, micro, stream.accumulation);
    return to_device<Space>(corpus.sample_batch(stream.seed, index, stream.batch, stream.len));
  };
}
template <ExecutionSpace Space>
auto corpus_batches(const ByteCorpus&&, const CorpusStream&) = delete;  // the source keeps a reference

}  // namespace hybridseq::tasks
