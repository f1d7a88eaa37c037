#pragma once
/// \file
/// Double Attention PerceiverAR and its s-Split form (papers.md §2; reference code
/// MetaMain/ECPTransformer, `DoubleAttentionTransformer.py`, `sSplitAttentionTransformer.py`).
///
/// The input of length n = h + M ends in M latents. Every layer runs two attentions over one
/// Q/K/V projection and concatenates their outputs along time before one output projection:
///
///   history queries t < h   attend the history only, without a causal mask:
///                           Double: all of [0, h)          (scheme Bidirectional)
///                           s-Split: their own segment of length S, [⌊t/S⌋·S, ⌊t/S⌋·S + S)
///                                                          (scheme SSplit<S>; no flow between segments)
///   latent queries t ≥ h    attend all n positions, causally (τ ≤ t)   (scheme PerceiverCross<M>)
///
///   y = W_o [o_history ; o_latent] (+ b_o)
///
/// History outputs see "future" history tokens, which is harmless because the loss is on the
/// latents only. Blocks are the reference's pre-norm ones (PreNormBlock), the head a final
/// LayerNorm + LM head applied to the M latent rows. Both attentions are the shared tiled
/// kernel, called twice on the same fused QKV buffer.
///
/// Clean form: separate Q, K, V (fused), RoPE over the whole head in every layer. The reference
/// code's shared K/V projection with a K/V LayerNorm, and (s-Split) RoPE in layer 1 only, are
/// not reproduced. Compressed Double Attention (compressed_double_attention.hpp) builds on this.
/// No decoding: history queries see later history positions.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "../compose/pre_norm_block.hpp"
#include "../compose/repeat.hpp"
#include "../core/check.hpp"
#include "../core/literal.hpp"
#include "../core/parameter.hpp"
#include "../core/time_slice.hpp"
#include "../core/workspace.hpp"
#include "../layers/attention.hpp"
#include "../layers/double_attention.hpp"
#include "../layers/ffn.hpp"
#include "../layers/layer_norm.hpp"
#include "../layers/linear.hpp"
#include "latent_language_model.hpp"

namespace hybridseq::models {

/// Compile-time shape of a Double Attention model: width, heads × head_dim, latents M, FFN
/// width, and the s-Split segment length (0: the whole history is one unmasked block).
struct DoubleAttentionShape {
  int d_model;
  int heads;
  int head_dim;
  int latents;
  int ffn;
  int split = 0;
  bool rope = true;
};

namespace detail {
template <DoubleAttentionShape S>
using double_history_scheme = std::conditional_t<S.split == 0, layers::schemes::Bidirectional,
                                                 layers::schemes::SSplit<(S.split > 0 ? S.split : 1)>>;
constexpr layers::AttentionShape double_attention_shape(DoubleAttentionShape s) {
  return {s.d_model, s.heads, s.heads, s.head_dim, s.rope ? s.head_dim : 0, layers::Score::dot, false, false, true};
}
}  // namespace detail

/// The Double Attention body: L blocks over all n rows, returning the last M (the latents).
/// Parameters `<i>.*` (Options::count = L blocks).
template <DoubleAttentionShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class DoubleAttentionBody {
  static_assert(S.split >= 0, "hybridseq::models::DoubleAttentionAr: split must be >= 0");
  static constexpr int M = S.latents;

 public:
  using scalar_type = T;
  using execution_space = Space;
  static constexpr int d_in = S.d_model;
  static constexpr int d_out = S.d_model;
  using Attn =
      layers::DoubleAttention<detail::double_attention_shape(S), detail::double_history_scheme<S>, M, T, Space>;
  using Block = compose::PreNormBlock<
      Attn,
      layers::Ffn<layers::FfnShape{S.d_model, S.ffn, layers::FfnKind::mlp, true, layers::Activation::gelu}, T, Space>,
      layers::LayerNorm<S.d_model, T, Space>>;
  using Blocks = compose::Repeat<Block>;
  using Options = typename Blocks::Options;
  struct Saved {
    typename Blocks::Saved blocks;
    Tensor<T***, Space> h;  // (B, n, D)
  };

  explicit DoubleAttentionBody(const Options& o = {}) : blocks_(o) {}

  static constexpr const char* model_name = "hybridseq::models::DoubleAttentionAr";
  static constexpr int latents = M;
  static constexpr std::int64_t output_time(std::int64_t) { return M; }
  static void check_length(std::string_view api, std::int64_t n) { Attn::check_length(api, n); }

  /// x (B, n, D) → y (B, M, D): the latent rows of the last block's output.
  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& s) const {
    const std::int64_t n = x.extent(1);
    s.h = ws.template allocate<T***>("double_attention.h", x.extent(0), n, S.d_model);
    blocks_.forward(ws, x, s.h, s.blocks);
    core::copy_time<T, Space>(s.h, n - M, y, 0, M);
  }
  /// Arena use for x (B, n, D): h (B, n, D) held under the blocks' (forward) and dh under theirs (backward).
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    const std::size_t h = core::padded_bytes<T>(q.batch * q.time * S.d_model);
    const core::Footprint f = blocks_.workspace(q);
    return {h + f.saved, h + f.forward, h + f.backward};
  }

  void backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    core::WorkspaceScope scope(ws);
    const std::int64_t n = s.h.extent(1);
    auto dh = ws.template allocate_zeroed<T***>("double_attention.dh", dy.extent(0), n, S.d_model);
    core::copy_time<T, Space>(dy, 0, dh, n - M, M);
    blocks_.backward(ws, s.blocks, dh, dx);
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    blocks_.visit_parameters(visit);
  }
  Blocks& blocks() { return blocks_; }
  const Blocks& blocks() const { return blocks_; }

 private:
  Blocks blocks_;
};

/// The Double Attention (split = 0) or s-Split Double Attention (split = S) language model:
///
///   ids (B, n) → E[ids] → blocks ×L (each compose::PreNormBlock<DoubleAttention, FF>) → rows n−M.. →
///   LN → head
///
/// Loss: mean cross-entropy of the last M targets (targets (B, n); the history's are ignored).
/// `logits` gives (B, M, V). Options::body.count = L; parameters `body.<i>.*`.
///
/// Requires: n ≥ M and, for s-Split, n − M a multiple of S (config_error naming
/// hybridseq::models::DoubleAttentionAr::<call>).
template <int Vocab, DoubleAttentionShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
using DoubleAttentionAr = LatentLanguageModel<Vocab, core::literal(S), DoubleAttentionBody<core::literal(S), T, Space>>;

}  // namespace hybridseq::models
