#pragma once
/// \file
/// ECP: Efficient Context Propagation (papers.md §2; reference code MetaMain/ECPTransformer,
/// `ECPAttentionTransformer`). The sequence n = s·m is split into s segments of length m;
/// a query at t in segment j = ⌊t/m⌋ attends
///
///   j = 0:  {τ ≤ t}                 j ≥ 1:  {τ : (j−1)·m ≤ τ ≤ t}
///
/// i.e. queries come from the current segment, keys/values from the previous + current pair.
/// Score entries per layer: 2nm − m² (12.1 % of n² at n = 4096, m = 256). The loss is on all
/// n positions. Blocks are the reference's pre-norm ones,
///
///   x ← x + Attn(LN(x));   x ← x + FF(LN(x)),   FF = Linear(d, f) – GELU – Linear(f, d)
///
/// and the head is a final LayerNorm + linear head (LanguageModel). The attention runs
/// on the shared tiled kernel through the `EcpPairs<m>` segment scheme.
///
/// Two forms, chosen by `EcpShape::faithful`:
///  * clean (default): `layers::Attention` (separate Q, K, V projections, RoPE over the whole
///    head in every layer when `rope`, one output projection with bias);
///  * faithful: the reference code's quirks — K and V are one projection (`to_kv`, so V is
///    rotated together with K), RoPE only in layer 0 (on q and kv), and the first segment
///    has its own output projection (`to_out_0`). The reference's K/V LayerNorm (`self.norm`)
///    is computed and never used; it is omitted here (its parameters have no gradient there).
///    The reference head's bias is also omitted (LanguageModel's head has none), and RoPE
///    pairs dims rotate-half (NeoX) where lucidrains' RotaryEmbedding interleaves them: the
///    same function up to a fixed permutation of each head's dims in W_q / W_kv.
///
/// Decoding keeps a ring of 2m keys per layer: positions [(j−1)·m, t] are all a query in
/// segment j ever sees. When a query reaches segment j + 1 the older half is dropped and
/// the newer moved to the front. A prefill chunk is split at segment boundaries so that the
/// ring never holds more than 2m positions.
///  * clean: `layers::Attention` rotates by the position in its cache, so the moved keys are
///    re-rotated by −m (RoPE scores depend only on τ − t; the move keeps that difference);
///  * faithful: RoPE also rotates the values, which depends on absolute positions, so the
///    faithful branch rotates at absolute positions and only the mask uses ring positions.

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
#include "../layers/ecp_faithful_attention.hpp"
#include "../layers/ffn.hpp"
#include "../layers/layer_norm.hpp"
#include "../layers/linear.hpp"
#include "language_model.hpp"

namespace hybridseq::models {

/// Compile-time shape of an ECP model: width, heads × head_dim, segment length m, FFN width
/// (4·d in the reference), RoPE on/off, and the reference code's quirks (see the file comment).
struct EcpShape {
  int d_model;
  int heads;
  int head_dim;
  int segment;
  int ffn;
  bool rope = true;
  bool faithful = false;
};

namespace detail {

inline std::int64_t ecp_ring_first(std::int64_t length, std::int64_t kept) {
  return length - kept;
}

}  // namespace detail

/// The clean ECP attention branch: `layers::Attention` over `EcpPairs<M>`, whose decoding
/// keeps a ring of 2M keys instead of the whole sequence. Training (forward / backward /
/// parameters) is Attention's own.
template <layers::AttentionShape A, int M, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class EcpAttention : public layers::Attention<A, layers::schemes::EcpPairs<M>, T, Space> {
  using Base = layers::Attention<A, layers::schemes::EcpPairs<M>, T, Space>;

 public:
  using Options = typename Base::Options;
  static constexpr int segment = M;

  explicit EcpAttention(const Options& o = {}) : Base(o) {}

  /// The ring: Attention's cache of capacity 2M (positions relative to its first row, which
  /// is always a segment start) and the number of positions consumed.
  struct State {
    typename Base::State ring;
    std::int64_t length = 0;
  };

  State make_state(std::int64_t batch) const { return State{Base::make_state(batch, 2 * M), 0}; }

  /// Appends x (B, T, D) after `state.length` positions and writes y (B, T, D), equal to the
  /// full forward's rows for those positions. Any T (not only whole segments).
  void prefill(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x, Tensor<T***, Space> y) const {
    constexpr const char* api = "hybridseq::models::EcpAttention::prefill";
    core::check_shape(api, "x", x, core::dim(st.ring.k.extent(0)), core::T, core::dim(A.d_model));
    core::check_same_shape(api, "y", y, "x", x);
    core::for_each_segment_piece<T, Space>(
        ws, st.length, M, x, y, [&] { shift(ws, st); },
        [&](Tensor<const T***, Space> xc, Tensor<T***, Space> yc) {
          Base::prefill(ws, st.ring, xc, yc);
          st.length += std::int64_t(xc.extent(1));
        });
  }
  /// Rolls back to `length` positions; the ring must still hold what a query there sees.
  void truncate(State& st, std::int64_t length) const {
    const std::int64_t first = detail::ecp_ring_first(st.length, st.ring.length);
    const std::int64_t lowest = first == 0 ? 0 : first + M;
    if (length < lowest || length > st.length)
      fail<value_error>("hybridseq::models::EcpAttention::truncate", "length ", length, " is outside [", lowest, ", ",
                        st.length, "]: the ring of 2m = ", 2 * M, " keys holds positions [", first, ", ", st.length,
                        ")");
    Base::truncate(st.ring, st.ring.length - (st.length - length));
    st.length = length;
  }

  State snapshot(const State& st) const { return State{Base::snapshot(st.ring), st.length}; }
  void restore(State& st, const State& snap) const {
    Base::restore(st.ring, snap.ring);
    st.length = snap.length;
  }

 private:
  /// At a segment start with a full ring: keep the newer segment (re-rotated by −M, so that
  /// its RoPE angles match its new ring positions).
  void shift(core::Workspace<Space>& ws, State& st) const {
    if (st.ring.length == 2 * M) Base::shift_cache(ws, st.ring, M);
  }
};

/// The attention shape of the clean ECP branch: H heads of Dh (no GQA), RoPE over the whole
/// head, no Q/K/V bias, output bias (the reference's `to_out`). A function, not a variable
/// template: nvcc re-emits a variable template's argument as `__T…` (core/literal.hpp).
constexpr layers::AttentionShape ecp_attention_shape(EcpShape s) {
  return {s.d_model, s.heads, s.heads, s.head_dim, s.rope ? s.head_dim : 0, layers::Score::dot, false, false, true};
}

template <EcpShape S, Scalar T, ExecutionSpace Space>
using EcpAttentionOf =
    std::conditional_t<S.faithful, layers::EcpFaithfulAttention<ecp_attention_shape(S), S.segment, T, Space>,
                       EcpAttention<ecp_attention_shape(S), S.segment, T, Space>>;

/// One ECP block: x + Attn(LN(x)), then + FF(LN(·)), FF = Linear(d, f)–GELU–Linear(f, d).
template <EcpShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
using EcpBlock = compose::PreNormBlock<
    EcpAttentionOf<S, T, Space>,
    layers::Ffn<layers::FfnShape{S.d_model, S.ffn, layers::FfnKind::mlp, true, layers::Activation::gelu}, T, Space>,
    layers::LayerNorm<S.d_model, T, Space>>;

/// ECP's body: Options::count EcpBlocks, refusing training / evaluation lengths that are not
/// whole segments (decoding takes any length).
template <EcpShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class EcpBody : public compose::Repeat<EcpBlock<S, T, Space>> {
 public:
  using compose::Repeat<EcpBlock<S, T, Space>>::Repeat;
  static constexpr const char* model_name = "hybridseq::models::Ecp";

  static void check_length(std::string_view api, std::int64_t t) {
    if (t % S.segment != 0 || t == 0)
      fail<config_error>(
          api, "the sequence length T = ", t, " must be a positive multiple of the segment length m = ", S.segment,
          " (ECP splits n = s·m; pad to ", std::max<std::int64_t>(1, (t + S.segment - 1) / S.segment) * S.segment, ")");
  }
};

/// The ECP language model: Options::body.count blocks, final LayerNorm, LM head (tied or not).
///
/// Requires: training / evaluation / logits on T a multiple of S.segment (config_error naming
/// the call otherwise; pad the batch). Decoding (make_state / prefill) takes any length.
template <int Vocab, EcpShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class Ecp : public LanguageModel<Vocab, EcpBody<core::literal(S), T, Space>, layers::LayerNorm<S.d_model, T, Space>> {
  static_assert(S.segment >= 1, "hybridseq::models::Ecp: the segment length must be at least 1");
  using Base = LanguageModel<Vocab, EcpBody<core::literal(S), T, Space>, layers::LayerNorm<S.d_model, T, Space>>;

 public:
  using Options = typename Base::Options;
  static constexpr EcpShape shape = S;
  static constexpr int segment = S.segment;

  explicit Ecp(const Options& o = {}) : Base(o) {
    if constexpr (S.faithful)
      for (int i = 0; i < this->body().size(); ++i) this->body()[i].attention().set_rotary(i == 0);
  }
};

}  // namespace hybridseq::models
