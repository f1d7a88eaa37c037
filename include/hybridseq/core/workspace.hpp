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
#include "huge_pages.hpp"
#include "kokkos_compat.hpp"
#include "parallel.hpp"
#include "spaces.hpp"

namespace hybridseq::core {

class GradientListener;  // core/gradient_listener.hpp

/// Every Workspace allocation is padded to this many bytes (a cache line; enough for AVX-512).
inline constexpr std::size_t workspace_alignment = 64;

/// Bytes the arena takes for `count` values of type T: padded to workspace_alignment, as
/// Workspace::allocate does (the rounding every footprint formula uses).
template <class T>
constexpr std::size_t padded_bytes(std::int64_t count) {
  const auto bytes = static_cast<std::size_t>(count) * sizeof(T);
  return (bytes + workspace_alignment - 1) / workspace_alignment * workspace_alignment;
}

/// What a workspace query is asked about (CUTLASS's `get_workspace_size(args)`): a pass over
/// (batch, time) whose kernels split scratch over `concurrency` threads (core::compat::
/// concurrency of the execution space instance they run on: `WorkspaceQuery::of`), as a
/// training pass (dropout drawn: backward copies dropped gradients) or not.
struct WorkspaceQuery {
  std::int64_t batch = 1, time = 1;
  int concurrency = 1;
  bool training = false;

  template <ExecutionSpace Space>
  static WorkspaceQuery of(const Space& exec, std::int64_t batch, std::int64_t time, bool training = false) {
    return {batch, time, compat::concurrency(exec), training};
  }
  /// The same pass over another number of positions (a body's inner sequence).
  WorkspaceQuery at_time(std::int64_t t) const {
    WorkspaceQuery q = *this;
    q.time = t;
    return q;
  }
  /// Whether a dropout site of probability p draws a mask in this pass (DropoutSites::next).
  bool drops(double p) const { return training && std::uint32_t(p * 4294967296.0) != 0; }
};

/// A unit's arena use, in padded bytes above the mark at its entry (layers, compositions and
/// models answer `workspace(query)` with one; the testbed checks each against peak_bytes()):
///   saved:    left allocated by forward (what its Saved points into),
///   forward:  the peak reached during forward (≥ saved),
///   backward: the peak reached during backward, above its own entry (the saved bytes of every
///             forward stay below it; backward releases all it allocates).
struct Footprint {
  std::size_t saved = 0, forward = 0, backward = 0;

  /// A forward that releases nothing it allocates (saved == forward).
  static constexpr Footprint kept(std::size_t saved, std::size_t backward = 0) { return {saved, saved, backward}; }
  /// Peak of forward then backward from a fresh arena: what `Workspace ws(f.training_peak())` needs.
  constexpr std::size_t training_peak() const { return std::max(forward, saved + backward); }
  friend constexpr bool operator==(const Footprint&, const Footprint&) = default;
};

/// The composition rule of units that run one after another in one scope: each step peaks
/// `peak` bytes above what the earlier steps left and leaves `kept` bytes. Compositions
/// describe their forward (children's saves stacking up) and backward (gradient buffers
/// held while each child's backward runs) as such a list, in the order they allocate.
class ArenaSteps {
 public:
  /// A buffer allocated and kept to the end of the scope.
  constexpr ArenaSteps& hold(std::size_t bytes) { return run(bytes, bytes); }
  /// A step that peaks `peak` above the current level and leaves `kept`.
  constexpr ArenaSteps& run(std::size_t peak, std::size_t kept = 0) {
    peak_ = std::max(peak_, level_ + peak);
    level_ += kept;
    return *this;
  }
  /// A child's forward (its saved bytes stay) or backward (leaves nothing).
  constexpr ArenaSteps& forward(const Footprint& f) { return run(f.forward, f.saved); }
  constexpr ArenaSteps& backward(const Footprint& f) { return run(f.backward); }
  constexpr std::size_t level() const { return level_; }
  constexpr std::size_t peak() const { return peak_; }

 private:
  std::size_t level_ = 0, peak_ = 0;
};

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

  static constexpr std::size_t alignment = workspace_alignment;

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
    zero(t);
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

  /// Sizes an empty arena before its first allocation for a pass whose peak is `bytes` (a
  /// workspace query: `model.training_workspace(B, T, threads)`), so that the pass never
  /// adds a chunk: when the first chunk is smaller, the chunks are replaced by one of
  /// max(bytes, chunk size). A no-op while anything is allocated.
  void reserve(std::size_t bytes) {
    if (!live_.empty() || (!chunks_.empty() && chunks_[0].extent(0) >= bytes)) return;
    chunks_.clear();
    add_chunk(bytes);
    current_ = offset_ = in_use_ = 0;
  }

  /// Bytes of device memory the arena holds (all chunks).
  std::size_t capacity_bytes() const {
    std::size_t total = 0;
    for (const auto& c : chunks_) total += c.extent(0);
    return total;
  }

  /// The dropout sites of the current pass (core::TrainingPass turns them on).
  DropoutSites& dropout() { return dropout_; }

  /// Who hears of final gradients during backward (core/gradient_listener.hpp); null: nobody.
  GradientListener*& gradient_listener() { return gradient_listener_; }

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
    const std::size_t padded = padded_bytes<std::byte>(static_cast<std::int64_t>(bytes));
    if (chunks_.empty() || offset_ + padded > chunks_[current_].extent(0)) {
      // Move to the next chunk that fits; chunks past `current_` are free after a release.
      std::size_t next = chunks_.empty() ? 0 : current_ + 1;
      while (next < chunks_.size() && chunks_[next].extent(0) < padded) ++next;
      if (next >= chunks_.size()) {
        add_chunk(padded);
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

  // A chunk of at least `bytes` (the chunk size otherwise), left uninitialised: allocations
  // are uninitialised tensors.
  void add_chunk(std::size_t bytes) {
    chunks_.emplace_back(Kokkos::view_alloc(Kokkos::WithoutInitializing, "hybridseq::core::Workspace::chunk"),
                         std::max(chunk_bytes_, bytes));
    advise_huge_pages(chunks_.back());
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
  GradientListener* gradient_listener_ = nullptr;
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
