#pragma once
/// \file
/// An arena for activations and scratch that records peak bytes.
///
/// Forward passes allocate what backward needs (the `Saved` structs) and kernels allocate
/// scratch from a Workspace instead of the heap. It is a bump allocator over chunks (the
/// llm.c/ggml habit): allocation is a pointer increment, release rewinds to a mark, and the
/// high-water mark `peak_bytes()` is exact, so memory claims ("attention workspace grows
/// linearly in T") are measured, not estimated. Every allocation carries a label
/// ("attention.qkv"); `peak_by_label()` says which labels held the bytes at the peak.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "dropout.hpp"
#include "error.hpp"
#include "spaces.hpp"

namespace hybridseq::core {

template <ExecutionSpace Space>
class Workspace {
 public:
  /// Where the arena was at some moment; `release(mark)` frees everything allocated after.
  struct Mark {
    std::size_t chunk = 0;
    std::size_t offset = 0;
    std::size_t in_use = 0;
    std::size_t allocations = 0;
  };

  static constexpr std::size_t alignment = 64;  // a cache line; also enough for AVX-512

  explicit Workspace(std::size_t chunk_bytes = std::size_t{16} << 20) : chunk_bytes_(chunk_bytes) {}

  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  Workspace(Workspace&&) noexcept = default;
  Workspace& operator=(Workspace&&) noexcept = default;

  /// An uninitialised tensor of the given extents, valid until the enclosing mark is released.
  template <class DataType, class... Extents>
  Tensor<DataType, Space> allocate(std::string_view label, Extents... extents) {
    using value_type = typename Tensor<DataType, Space>::value_type;
    std::size_t count = 1;
    ((count *= static_cast<std::size_t>(extents)), ...);
    auto* p = static_cast<value_type*>(allocate_bytes(label, count * sizeof(value_type)));
    return Tensor<DataType, Space>(p, static_cast<std::size_t>(extents)...);
  }

  /// As `allocate`, filled with zeros (for gradient accumulators).
  template <class DataType, class... Extents>
  Tensor<DataType, Space> allocate_zeroed(std::string_view label, Extents... extents) {
    auto t = allocate<DataType>(label, extents...);
    Kokkos::deep_copy(t, typename Tensor<DataType, Space>::value_type{});
    return t;
  }

  Mark mark() const { return {current_, offset_, in_use_, live_.size()}; }

  void release(const Mark& m) {
    if (m.chunk > current_ || (m.chunk == current_ && m.offset > offset_))
      fail<error>("hybridseq::core::Workspace::release", "mark (chunk ", m.chunk, ", offset ", m.offset,
                  ") is ahead of the arena (chunk ", current_, ", offset ", offset_, ")");
    current_ = m.chunk;
    offset_ = m.offset;
    in_use_ = m.in_use;
    for (std::size_t i = m.allocations; i < live_.size(); ++i) label_bytes_[live_[i].label] -= live_[i].bytes;
    live_.resize(std::min(m.allocations, live_.size()));
  }

  /// The dropout sites of the current pass (core::TrainingPass turns them on).
  DropoutSites& dropout() { return dropout_; }

  /// Bytes handed out and not yet released (alignment padding included).
  std::size_t bytes_in_use() const { return in_use_; }
  /// Largest `bytes_in_use()` since construction or the last `reset_peak()`.
  std::size_t peak_bytes() const { return peak_; }
  void reset_peak() {
    peak_ = in_use_;
    peak_label_bytes_ = label_bytes_;
  }
  /// Bytes each label held when `peak_bytes()` was reached (labels holding none left out);
  /// they sum to `peak_bytes()`. Allocations with the same label add up.
  std::map<std::string, std::size_t, std::less<>> peak_by_label() const {
    std::map<std::string, std::size_t, std::less<>> out;
    for (std::size_t i = 0; i < peak_label_bytes_.size(); ++i)
      if (peak_label_bytes_[i]) out.emplace(labels_[i], peak_label_bytes_[i]);
    return out;
  }

 private:
  void* allocate_bytes(std::string_view label, std::size_t bytes) {
    const std::size_t padded = (bytes + alignment - 1) / alignment * alignment;
    if (chunks_.empty() || offset_ + padded > chunks_[current_].extent(0)) {
      // Move to the next chunk that fits; chunks past `current_` are free after a release.
      std::size_t next = chunks_.empty() ? 0 : current_ + 1;
      while (next < chunks_.size() && chunks_[next].extent(0) < padded) ++next;
      if (next >= chunks_.size()) {
        chunks_.emplace_back("hybridseq::core::Workspace::chunk", std::max(chunk_bytes_, padded));
        next = chunks_.size() - 1;
      }
      current_ = next;
      offset_ = 0;
    }
    void* p = chunks_[current_].data() + offset_;
    offset_ += padded;
    in_use_ += padded;
    const std::size_t id = label_id(label);
    live_.push_back({id, padded});
    label_bytes_[id] += padded;
    if (in_use_ > peak_) {
      peak_ = in_use_;
      peak_label_bytes_ = label_bytes_;  // a few dozen counters, copied only on a new peak
    }
    return p;
  }

  std::size_t label_id(std::string_view label) {
    auto it = label_ids_.find(label);
    if (it == label_ids_.end()) {
      it = label_ids_.emplace(std::string(label), labels_.size()).first;
      labels_.emplace_back(label);
      label_bytes_.push_back(0);
    }
    return it->second;
  }

  // Chunk storage is raw bytes; View allocations are aligned well beyond 64 bytes.
  std::vector<Kokkos::View<std::byte*, typename Space::memory_space>> chunks_;
  std::size_t chunk_bytes_;
  std::size_t current_ = 0, offset_ = 0, in_use_ = 0, peak_ = 0;

  // Per-label attribution: every live allocation (label id, padded bytes), in order, so a
  // release knows what it frees; the bytes each label holds now and held at the peak.
  struct Live {
    std::size_t label, bytes;
  };
  std::vector<Live> live_;
  std::map<std::string, std::size_t, std::less<>> label_ids_;
  std::vector<std::string> labels_;
  std::vector<std::size_t> label_bytes_, peak_label_bytes_;

  DropoutSites dropout_;
};

/// Releases everything allocated in a scope: `{ WorkspaceScope s(ws); ... }`.
template <ExecutionSpace Space>
class WorkspaceScope {
 public:
  explicit WorkspaceScope(Workspace<Space>& ws) : ws_(ws), mark_(ws.mark()) {}
  ~WorkspaceScope() { ws_.release(mark_); }
  WorkspaceScope(const WorkspaceScope&) = delete;
  WorkspaceScope& operator=(const WorkspaceScope&) = delete;

 private:
  Workspace<Space>& ws_;
  typename Workspace<Space>::Mark mark_;
};

namespace detail {
/// Puts the workspace's dropout mode back at the end of a scope.
template <ExecutionSpace Space>
class DropoutModeScope {
 public:
  DropoutModeScope(const DropoutModeScope&) = delete;
  DropoutModeScope& operator=(const DropoutModeScope&) = delete;

 protected:
  explicit DropoutModeScope(Workspace<Space>& ws) : ws_(ws), saved_(ws.dropout()) {}
  ~DropoutModeScope() { ws_.dropout() = saved_; }

 private:
  Workspace<Space>& ws_;
  DropoutSites saved_;
};
}  // namespace detail

/// Dropout on for a scope: the forward passes run in it are training passes keyed by (seed,
/// pass) (core/dropout.hpp). The previous mode comes back at the end of the scope.
template <ExecutionSpace Space>
class TrainingPass : detail::DropoutModeScope<Space> {
 public:
  TrainingPass(Workspace<Space>& ws, std::uint64_t seed, std::uint64_t pass) : detail::DropoutModeScope<Space>(ws) {
    ws.dropout().start(seed, pass);
  }
};

/// Dropout off for a scope (evaluation, logits and decoding open one, even inside a training pass).
template <ExecutionSpace Space>
class InferencePass : detail::DropoutModeScope<Space> {
 public:
  explicit InferencePass(Workspace<Space>& ws) : detail::DropoutModeScope<Space>(ws) { ws.dropout().stop(); }
};

}  // namespace hybridseq::core
