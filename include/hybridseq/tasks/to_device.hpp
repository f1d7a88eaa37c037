#pragma once
/// \file
/// Copies a host `Batch` into device tensors.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

#include "../core/error.hpp"
#include "../core/spaces.hpp"
#include "batch.hpp"

namespace hybridseq::tasks {

/// (ids, targets) of `batch` as (B, T) tensors in `Space`'s memory, ready for an embedding and
/// `LmHeadLoss` (whose ignore_index is `null_target`). Blocks until the copies are done.
/// Throws shape_error if the batch's vectors do not hold B·T elements.
template <ExecutionSpace Space>
std::pair<Tensor<std::int32_t**, Space>, Tensor<std::int32_t**, Space>> to_device(const Batch& batch) {
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

}  // namespace hybridseq::tasks
