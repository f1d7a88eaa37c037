#pragma once
/// \file
/// Token embedding: y(b, t, :) = W(id(b, t), :).

#include <cstdint>
#include <string>

#include "../core/check.hpp"
#include "../core/options.hpp"
#include "../core/parallel.hpp"
#include "../core/parameter.hpp"
#include "../core/workspace.hpp"

namespace hybridseq::layers {

struct EmbeddingShape {
  int vocab;
  int dim;
};

namespace detail {
template <class T, class Space>
struct EmbeddingGather {
  TokenIds<Space> ids;             // (B, T)
  Tensor<const T**, Space> table;  // (V, D)
  Tensor<T***, Space> y;           // (B, T, D)
  // Index = b·T + t.
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t index) const {
    const std::int64_t b = index / std::int64_t(ids.extent(1)), t = index % std::int64_t(ids.extent(1));
    const std::int32_t id = ids(b, t);
    for (std::int64_t j = 0; j < std::int64_t(table.extent(1)); ++j) y(b, t, j) = table(id, j);
  }
};
// One thread per block of embedding columns, tokens in order: repeated ids accumulate without
// atomics and in a fixed order, so gradients are bit-identical at any thread count and block
// width. A host thread takes a cache line of columns (each token then adds a contiguous run
// of dy's row, not one float per 512-byte row); a device thread takes one column.
template <class T, class Space>
struct EmbeddingScatter {
  static constexpr std::int64_t columns = core::host_space<Space> ? 64 / std::int64_t(sizeof(T)) : 1;
  TokenIds<Space> ids;
  Tensor<const T***, Space> dy;
  Tensor<T**, Space> dtable;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t block) const {
    const std::int64_t d = std::int64_t(dtable.extent(1)), j0 = block * columns;
    const std::int64_t j1 = j0 + columns < d ? j0 + columns : d;
    for (std::int64_t b = 0; b < std::int64_t(ids.extent(0)); ++b)
      for (std::int64_t t = 0; t < std::int64_t(ids.extent(1)); ++t) {
        const std::int32_t id = ids(b, t);
        for (std::int64_t j = j0; j < j1; ++j) dtable(id, j) += dy(b, t, j);
      }
  }
};
}  // namespace detail

/// Throws value_error naming the first id outside [0, vocab) and its (b, t) position.
template <class Space>
void check_token_ids(std::string_view api, TokenIds<Space> ids, std::int64_t vocab) {
  const std::int64_t n = ids.extent(0) * ids.extent(1), cols = ids.extent(1);
  std::int64_t first = n;
  const auto earliest_bad = KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& m) {
    const std::int32_t id = ids(i / cols, i % cols);
    if ((id < 0 || id >= vocab) && i < m) m = i;
  };
  if (core::runs_inline<Space>(n))  // core/parallel.hpp's rule
    for (std::int64_t i = 0; i < n; ++i) earliest_bad(i, first);
  else
    Kokkos::parallel_reduce("hybridseq::layers::check_token_ids", Kokkos::RangePolicy<Space>(0, n), earliest_bad,
                            Kokkos::Min<std::int64_t>(first));
  if (first < n) {
    auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, ids);
    fail<value_error>(api, "token id ", host(first / cols, first % cols), " at (b=", first / cols, ", t=", first % cols,
                      ") is outside [0, ", vocab, ")");
  }
}

/// y (B, T, D) = W[ids (B, T)]. Ids are validated against the vocabulary on every call.
/// S.vocab may be core::dynamic: the vocabulary is then Options::vocab.
template <EmbeddingShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class Embedding {
  static_assert((S.vocab > 0 || S.vocab == core::dynamic) && S.dim > 0,
                "hybridseq::layers::Embedding: vocab (or core::dynamic) and dim must be positive");

 public:
  using scalar_type = T;
  using execution_space = Space;
  static constexpr int vocab = S.vocab;  // core::dynamic: see vocab_size()
  static constexpr int d_out = S.dim;

  struct Options {
    double init_std = 1.0;   // PyTorch's nn.Embedding default
    std::int64_t vocab = 0;  // the vocabulary when S.vocab is core::dynamic (0: the type's)
  };
  struct Saved {
    TokenIds<Space> ids;  // (B, T)
  };

  explicit Embedding(const Options& options = {})
      : weight_({core::resolve_extent("hybridseq::layers::Embedding", "Options::vocab", S.vocab, options.vocab), S.dim},
                core::Role::embedding, core::Init::normal(options.init_std)) {}

  /// Rows of the table: S.vocab, or Options::vocab when that is core::dynamic.
  std::int64_t vocab_size() const { return weight_.extent(0); }

  void forward(core::Workspace<Space>&, TokenIds<Space> ids, Tensor<T***, Space> y, Saved& saved) const {
    const char* api = "hybridseq::layers::Embedding::forward";
    core::check_shape(api, "y", y, core::dim(ids.extent(0)), core::dim(ids.extent(1)), core::dim(S.dim));
    check_token_ids<Space>(api, ids, vocab_size());
    saved.ids = ids;
    if (ids.size() == 0) return;
    core::parallel_for("hybridseq::layers::Embedding::forward", Space{}, std::int64_t(ids.size()), S.dim,
                       detail::EmbeddingGather<T, Space>{ids, weight_.template shaped<T**>(), y});
  }

  /// Accumulates dW; ids have no gradient.
  void backward(core::Workspace<Space>&, const Saved& saved, Tensor<const T***, Space> dy) {
    core::check_shape("hybridseq::layers::Embedding::backward", "dy", dy, core::dim(saved.ids.extent(0)),
                      core::dim(saved.ids.extent(1)), core::dim(S.dim));
    using Scatter = detail::EmbeddingScatter<T, Space>;
    Kokkos::parallel_for("hybridseq::layers::Embedding::backward",
                         Kokkos::RangePolicy<Space>(0, (S.dim + Scatter::columns - 1) / Scatter::columns),
                         Scatter{saved.ids, dy, weight_.template shaped_grad<T**>()});
  }

  /// Arena use: none (the gathered rows are the caller's y).
  core::Footprint workspace(const core::WorkspaceQuery&) const { return {}; }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("weight", weight_);
  }

  /// The table W (V, D), e.g. for an LM head that shares it (tied input/output embeddings).
  core::Parameter<T, Space>& weight() { return weight_; }
  const core::Parameter<T, Space>& weight() const { return weight_; }

 private:
  core::Parameter<T, Space> weight_;  // (V, D)
};

}  // namespace hybridseq::layers
