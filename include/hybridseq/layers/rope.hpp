#pragma once
/// \file
/// Rotary position embedding as a layer over (B, T, H·Dh) activations.

#include <cmath>
#include <cstdint>
#include <string>

#include "../core/check.hpp"
#include "../core/error.hpp"
#include "../core/workspace.hpp"
#include "../kernels/rope.hpp"

namespace hybridseq::layers {

/// Compile-time shape of RoPE: heads × head_dim, of which the first `rotary_dim` rotate.
struct RopeShape {
  int heads;
  int head_dim;
  int rotary_dim;  // even, ≤ head_dim; = head_dim for full RoPE
};

/// Rotary dims for a rotary fraction, as GPT-NeoX computes them: ⌊fraction · head_dim⌋,
/// rounded down to even (Cooper et al. use 0.25).
constexpr int rotary_dim_for(int head_dim, double fraction) {
  const int r = static_cast<int>(fraction * head_dim);
  return r - r % 2;
}

/// Rotary embedding of head buffers — the one RoPE path of the library: the Rope layer,
/// every attention layer (through AttentionCore) and ECP's ring re-rotation use it.
/// Heads are (B, T, heads, Dh) views; `rotated` of them (the leading ones: q and k heads of a
/// fused QKV buffer) turn, in place.
template <Scalar T, ExecutionSpace Space>
class RotaryEmbedding {
 public:
  using Heads4 =
      Kokkos::View<T****, Kokkos::LayoutRight, typename Space::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using ConstHeads4 = Kokkos::View<const T****, Kokkos::LayoutRight, typename Space::memory_space,
                                   Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  /// cos/sin of the angles of `time` positions from an offset: (time, rotary_dim / 2).
  struct Table {
    Tensor<T**, Space> cos, sin;
  };

  /// `api` names the owning layer in the error for a bad base.
  RotaryEmbedding(int rotary_dim, double base, const char* api) : rotary_(rotary_dim), base_(base) {
    if (!(base > 1.0) || !std::isfinite(base)) fail<value_error>(api, "rope_base must be > 1, got ", base);
  }

  int rotary_dim() const { return rotary_; }
  double base() const { return base_; }

  Table table(core::Workspace<Space>& ws, std::int64_t time, std::int64_t offset) const {
    Table t{ws.template allocate<T**>("rope.cos", time, rotary_ / 2),
            ws.template allocate<T**>("rope.sin", time, rotary_ / 2)};
    kernels::rope_table<T>(Space{}, base_, offset, rotary_, t.cos, t.sin);
    return t;
  }
  /// Arena use of `table(ws, time, ·)`: cos and sin, (time, rotary_dim / 2) each.
  std::size_t table_bytes(std::int64_t time) const { return 2 * core::padded_bytes<T>(time * (rotary_ / 2)); }
  /// Turns the first `rotated` heads forward by the table's angles (rotated < 0: all heads).
  void rotate(const Heads4& heads, int rotated, const Table& t) const {
    kernels::rope_apply<T, false>(Space{}, heads, heads, t.cos, t.sin, rotary_, false, rotated);
  }
  /// The transpose: gradients of rotated heads back to their inputs, in place.
  void unrotate(const Heads4& grads, int rotated, const Table& t) const {
    kernels::rope_apply<T, false>(Space{}, grads, grads, t.cos, t.sin, rotary_, true, rotated);
  }
  /// out += R(−θ) in: the transpose, accumulating into another buffer.
  void unrotate_into(const ConstHeads4& grads, const Heads4& out, const Table& t) const {
    kernels::rope_apply<T, true>(Space{}, grads, out, t.cos, t.sin, rotary_, true);
  }
  /// The first `rows` rows of every sequence of a cache (B, capacity, heads, Dh), rotated for
  /// positions from.., re-rotated for positions to.. (a cache whose rows move). The two
  /// tables are built once for the whole batch.
  void move(core::Workspace<Space>& ws, const Heads4& cache, std::int64_t rows, std::int64_t from,
            std::int64_t to) const {
    core::WorkspaceScope scope(ws);
    const auto undo = table(ws, rows, from), redo = table(ws, rows, to);
    const std::int64_t h = cache.extent(2), dh = cache.extent(3), stride = cache.extent(1) * h * dh;
    for (std::size_t b = 0; b < cache.extent(0); ++b) {
      const Heads4 sequence(cache.data() + b * stride, 1, rows, h, dh);
      unrotate(sequence, -1, undo);
      rotate(sequence, -1, redo);
    }
  }

 private:
  int rotary_;
  double base_;
};

/// y (B, T, H·Dh) = RoPE(x) at positions offset .. offset + T − 1. No parameters.
template <RopeShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class Rope {
  static_assert(S.heads > 0 && S.head_dim > 0, "hybridseq::layers::Rope: heads and head_dim must be positive");
  static_assert(S.rotary_dim % 2 == 0 && S.rotary_dim >= 0 && S.rotary_dim <= S.head_dim,
                "hybridseq::layers::Rope: rotary_dim must be even and within [0, head_dim]");
  using Embedding = RotaryEmbedding<T, Space>;

 public:
  using scalar_type = T;
  using execution_space = Space;
  static constexpr int d_in = S.heads * S.head_dim;
  static constexpr int d_out = d_in;

  struct Options {
    double base = 10000.0;
  };
  struct Saved {
    typename Embedding::Table table;  // (T, rotary_dim/2)
  };

  explicit Rope(const Options& options = {}) : rope_(S.rotary_dim, options.base, "hybridseq::layers::Rope") {}

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& saved) const {
    forward_at(ws, x, y, saved, 0);
  }

  /// Forward at positions `offset` .. `offset` + T − 1 (decoding continues a sequence).
  void forward_at(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& saved,
                  std::int64_t offset) const {
    check(x, y, "forward", "y");
    Kokkos::deep_copy(Space{}, y, x);
    saved.table = rope_.table(ws, x.extent(1), offset);
    rope_.rotate(heads(y), -1, saved.table);
  }

  void backward(core::Workspace<Space>&, const Saved& saved, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    check(dy, dx, "backward", "dx");
    rope_.unrotate_into(heads(dy), heads(dx), saved.table);
  }

  /// Arena use: the saved table (forward_at's allocation).
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    return core::Footprint::kept(rope_.table_bytes(q.time));
  }

  template <class Visit>
  void visit_parameters(Visit&&) {}

 private:
  // (B, T, H·Dh) viewed as (B, T, H, Dh); contiguous by construction of the activations.
  template <class View>
  static auto heads(const View& v) {
    return Kokkos::View<typename View::value_type****, Kokkos::LayoutRight, typename Space::memory_space,
                        Kokkos::MemoryTraits<Kokkos::Unmanaged>>(v.data(), v.extent(0), v.extent(1), S.heads,
                                                                 S.head_dim);
  }

  template <class X, class Y>
  static void check(const X& x, const Y& y, const char* op, const char* yname) {
    core::check_sequence_io(std::string("hybridseq::layers::Rope::") + op, x, d_in, yname, y, d_in);
  }

  Embedding rope_;
};

}  // namespace hybridseq::layers
