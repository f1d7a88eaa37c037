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
/// LayerNorm + untied head applied to the M latent rows. Both attentions are the shared tiled
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

#include "../compose/repeat.hpp"
#include "../core/check.hpp"
#include "../core/parameter.hpp"
#include "../core/time_slice.hpp"
#include "../core/workspace.hpp"
#include "../kernels/attention/tiled_attention.hpp"
#include "../kernels/rope.hpp"
#include "../layers/attention.hpp"
#include "../layers/ffn.hpp"
#include "../layers/layer_norm.hpp"
#include "../layers/linear.hpp"
#include "language_model.hpp"
#include "../compose/pre_norm_block.hpp"

namespace hybridseq::models {

/// The two-attention branch: history queries under `HistoryScheme` over the history keys,
/// latent queries under `PerceiverCross<M>` over all keys, one fused QKV projection and one
/// output projection. Dot-product scores, concatenated heads (GQA allowed).
///
/// Shapes: x (B, n, D) → y (B, n, D), n ≥ M; the history length n − M must suit HistoryScheme.
template <layers::AttentionShape A, class HistoryScheme, int M, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class DoubleAttention {
  static_assert(M >= 1, "hybridseq::models::DoubleAttention: at least one latent");
  static_assert(A.score == layers::Score::dot && A.merge == layers::HeadMerge::concat,
                "hybridseq::models::DoubleAttention: dot-product scores and concatenated heads only");
  static_assert(A.heads % A.kv_heads == 0 && A.rotary_dim % 2 == 0 && A.rotary_dim <= A.head_dim,
                "hybridseq::models::DoubleAttention: heads must be a multiple of kv_heads; rotary_dim even, <= head_dim");
  static constexpr int H = A.heads, Hkv = A.kv_heads, Dh = A.head_dim;
  static constexpr int R = (H + 2 * Hkv) * Dh;  // fused QKV row
  using Qkv = layers::Linear<layers::LinearShape{A.d_model, R, A.qkv_bias}, T, Space>;
  using Out = layers::Linear<layers::LinearShape{H * Dh, A.d_model, A.out_bias}, T, Space>;
  using LatentScheme = kernels::attention::PerceiverCross<M>;
  using Heads4 = Kokkos::View<T****, Kokkos::LayoutRight, typename Space::memory_space,
                              Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

 public:
  using scalar_type = T;
  using execution_space = Space;
  using history_scheme = HistoryScheme;
  static constexpr int d_in = A.d_model;
  static constexpr int d_out = A.d_model;
  static constexpr int latents = M;

  using Options = layers::AttentionOptions;  // max_cache unused: Double Attention does not decode
  struct Saved {
    typename Qkv::Saved qkv_in;
    Tensor<T***, Space> qkv;      // (B, n, R) after RoPE
    Tensor<T**, Space> cos, sin;  // (n, rotary/2)
    Tensor<T***, Space> o;        // (B, n, H·Dh): history rows then latent rows
    Tensor<T*, Space> lse_history, lse_latent;  // (B·H·h), (B·H·M)
    typename Out::Saved out_in;
  };

  explicit DoubleAttention(const Options& o = {})
      : options_(o), wqkv_({o.init_std}), wo_({o.out_init_std}), alpha_("hybridseq::models::DoubleAttention::alpha", H) {
    if (!(o.rope_base > 1.0)) fail<value_error>("hybridseq::models::DoubleAttention", "rope_base must be > 1, got ", o.rope_base);
    Kokkos::deep_copy(alpha_, T(1) / std::sqrt(T(Dh)));
  }

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& s) const {
    constexpr const char* api = "hybridseq::models::DoubleAttention::forward";
    core::check_same_shape(api, "y", y, "x", x);
    attend(ws, x, s);
    wo_.forward(ws, s.o, y, s.out_in);
  }

  void backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    constexpr const char* api = "hybridseq::models::DoubleAttention::backward";
    const std::int64_t b = s.qkv.extent(0), n = s.qkv.extent(1);
    core::check_shape(api, "dy", dy, core::dim(b), core::dim(n), core::dim(A.d_model));
    core::check_same_shape(api, "dx", dx, "dy", dy);
    core::WorkspaceScope scope(ws);
    auto d_o = ws.template allocate_zeroed<T***>("double_attention.do", b, n, H * Dh);
    wo_.backward(ws, s.out_in, dy, d_o);
    attend_backward(ws, s, d_o, dx);
  }

  /// The two attentions without the output projection: fills s.qkv and s.o (B, n, H·Dh),
  /// history rows then latent rows (s.out_in is left to the caller's projection).
  void attend(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Saved& s) const {
    constexpr const char* api = "hybridseq::models::DoubleAttention::forward";
    core::check_shape(api, "x", x, core::B, core::T, core::dim(A.d_model));
    const std::int64_t b = x.extent(0), n = x.extent(1);
    check_length(api, n);
    const std::int64_t h = n - M;
    const Space exec{};
    s.qkv = ws.template allocate<T***>("double_attention.qkv", b, n, R);
    wqkv_.forward(ws, x, s.qkv, s.qkv_in);
    if constexpr (A.rotary_dim > 0) {
      s.cos = ws.template allocate<T**>("double_attention.cos", n, A.rotary_dim / 2);
      s.sin = ws.template allocate<T**>("double_attention.sin", n, A.rotary_dim / 2);
      kernels::rope_table<T>(exec, options_.rope_base, 0, A.rotary_dim, s.cos, s.sin);
      auto heads = Heads4(s.qkv.data(), b, n, H + 2 * Hkv, Dh);
      kernels::rope_apply<T, false>(exec, heads, heads, s.cos, s.sin, A.rotary_dim, false, H + Hkv);
    }
    s.o = ws.template allocate<T***>("double_attention.o", b, n, H * Dh);
    s.lse_history = ws.template allocate<T*>("double_attention.lse_history", b * H * h);
    s.lse_latent = ws.template allocate<T*>("double_attention.lse_latent", b * H * M);
    if (h > 0) kernels::attention::forward<HistoryScheme, T>(exec, history_args(s));
    kernels::attention::forward<LatentScheme, T>(exec, latent_args(s));
  }

  /// Backward of `attend`: d_o (B, n, H·Dh) → dx += …, W_qkv gradients.
  void attend_backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> d_o,
                       Tensor<T***, Space> dx) {
    const std::int64_t b = s.qkv.extent(0), n = s.qkv.extent(1), h = n - M;
    const Space exec{};
    core::WorkspaceScope scope(ws);
    // Latent queries: dQ rows h.., dK and dV of every key (overwritten); dQ rows < h stay 0.
    auto dqkv = ws.template allocate_zeroed<T***>("double_attention.dqkv", b, n, R);
    auto delta_l = ws.template allocate<T*>("double_attention.delta_latent", b * H * M);
    kernels::attention::AttentionGrads<T> gl{rows<const T>(d_o.data() + h * H * Dh, n, H * Dh),
                                             rows<T>(dqkv.data() + h * R, n, R), rows<T>(dqkv.data() + H * Dh, n, R),
                                             rows<T>(dqkv.data() + (H + Hkv) * Dh, n, R), delta_l.data(), nullptr};
    kernels::attention::backward<LatentScheme, T>(exec, latent_args(s), gl);
    if (h > 0) {
      // History queries into their own buffer, then added: their dK, dV overlap the latents'.
      auto dh = ws.template allocate_zeroed<T***>("double_attention.dqkv_history", b, h, R);
      auto delta_h = ws.template allocate<T*>("double_attention.delta_history", b * H * h);
      kernels::attention::AttentionGrads<T> gh{rows<const T>(d_o.data(), n, H * Dh), rows<T>(dh.data(), h, R),
                                               rows<T>(dh.data() + H * Dh, h, R), rows<T>(dh.data() + (H + Hkv) * Dh, h, R),
                                               delta_h.data(), nullptr};
      kernels::attention::backward<HistoryScheme, T>(exec, history_args(s), gh);
      Kokkos::parallel_for(
          "hybridseq::models::DoubleAttention::add_history",
          Kokkos::MDRangePolicy<Space, Kokkos::Rank<3>>(exec, {0, 0, 0}, {b, h, std::int64_t(R)}),
          KOKKOS_LAMBDA(std::int64_t i, std::int64_t t, std::int64_t c) { dqkv(i, t, c) += dh(i, t, c); });
    }
    if constexpr (A.rotary_dim > 0) {
      auto heads = Heads4(dqkv.data(), b, n, H + 2 * Hkv, Dh);
      kernels::rope_apply<T, false>(exec, heads, heads, s.cos, s.sin, A.rotary_dim, /*inverse=*/true, H + Hkv);
    }
    wqkv_.backward(ws, s.qkv_in, dqkv, dx);
  }

  /// The output projection alone: y (B, t, D) = o (B, t, H·Dh) W_oᵀ (+ b), any t, and its
  /// backward (d_o += …, W_o gradients).
  void project(core::Workspace<Space>& ws, Tensor<const T***, Space> o, Tensor<T***, Space> y,
               typename Out::Saved& saved) const {
    wo_.forward(ws, o, y, saved);
  }
  void project_backward(core::Workspace<Space>& ws, const typename Out::Saved& saved, Tensor<const T***, Space> dy,
                        Tensor<T***, Space> d_o) {
    wo_.backward(ws, saved, dy, d_o);
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("wqkv", wqkv_);
    visit("wo", wo_);
  }

  /// n ≥ M, and the history n − M acceptable to the history scheme.
  static void check_length(std::string_view api, std::int64_t n) {
    if (n < M) fail<config_error>(api, "the sequence length T = ", n, " is shorter than the latents M = ", M);
    if constexpr (requires { HistoryScheme::segment; }) {
      if ((n - M) % HistoryScheme::segment != 0)
        fail<config_error>(api, "the history T − M = ", n - M, " (T = ", n, ", M = ", M,
                           ") must be a multiple of the s-Split segment length ", HistoryScheme::segment);
    }
  }

 private:
  template <class U>
  static kernels::attention::HeadRows<U> rows(U* data, std::int64_t time, std::int64_t row) {
    return {data, time * row, row, Dh};
  }

  kernels::attention::AttentionArgs<T> history_args(const Saved& s) const {
    const std::int64_t b = s.qkv.extent(0), n = s.qkv.extent(1), h = n - M;
    return {rows<const T>(s.qkv.data(), n, R), rows<const T>(s.qkv.data() + H * Dh, n, R),
            rows<const T>(s.qkv.data() + (H + Hkv) * Dh, n, R), rows<T>(s.o.data(), n, H * Dh),
            s.lse_history.data(), alpha_.data(), b, h, h, 0, H, Hkv, Dh};
  }
  kernels::attention::AttentionArgs<T> latent_args(const Saved& s) const {
    const std::int64_t b = s.qkv.extent(0), n = s.qkv.extent(1), h = n - M;
    return {rows<const T>(s.qkv.data() + h * R, n, R), rows<const T>(s.qkv.data() + H * Dh, n, R),
            rows<const T>(s.qkv.data() + (H + Hkv) * Dh, n, R), rows<T>(s.o.data() + h * H * Dh, n, H * Dh),
            s.lse_latent.data(), alpha_.data(), b, M, n, h, H, Hkv, Dh};
  }

  Options options_;
  Qkv wqkv_;
  Out wo_;
  Tensor<T*, Space> alpha_;  // (H) 1/√Dh
};

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
using double_history_scheme = std::conditional_t<S.split == 0, kernels::attention::Bidirectional,
                                                 kernels::attention::SSplit<(S.split > 0 ? S.split : 1)>>;
template <DoubleAttentionShape S>
inline constexpr layers::AttentionShape double_attention_shape{
    S.d_model, S.heads, S.heads, S.head_dim, S.rope ? S.head_dim : 0, layers::Score::dot, false, false, true};
}  // namespace detail

/// The Double Attention body: L blocks over all n rows, returning the last M (the latents).
/// Parameters `<i>.*` (Options::count = L blocks).
template <DoubleAttentionShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class DoubleAttentionBody {
  static constexpr int M = S.latents;

 public:
  using scalar_type = T;
  using execution_space = Space;
  static constexpr int d_in = S.d_model;
  static constexpr int d_out = S.d_model;
  using Attn = DoubleAttention<detail::double_attention_shape<S>, detail::double_history_scheme<S>, M, T, Space>;
  using Block = compose::PreNormBlock<Attn,
                             layers::Ffn<layers::FfnShape{S.d_model, S.ffn, layers::FfnKind::mlp, true,
                                                          layers::Activation::gelu},
                                         T, Space>,
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
class DoubleAttentionAr
    : public LanguageModel<Vocab, DoubleAttentionBody<S, T, Space>, layers::LayerNorm<S.d_model, T, Space>> {
  static_assert(Vocab > 0 && S.latents >= 1 && S.split >= 0,
                "hybridseq::models::DoubleAttentionAr: needs a vocabulary, at least one latent, split >= 0");
  using Base = LanguageModel<Vocab, DoubleAttentionBody<S, T, Space>, layers::LayerNorm<S.d_model, T, Space>>;

 public:
  using Base::Base;
  static constexpr int latents = S.latents;
  static constexpr DoubleAttentionShape shape = S;
  using Attn = typename DoubleAttentionBody<S, T, Space>::Attn;
  using Block = typename DoubleAttentionBody<S, T, Space>::Block;
};

}  // namespace hybridseq::models
