#pragma once
/// \file
/// PerceiverAR (Hawthorne et al. 2022; papers.md §2; reference code MetaMain/ECPTransformer,
/// `PerceiverAR_baseline.py`). The input of length n = history + M ends in M latent
/// positions:
///
///   layer 1      causal cross-attention: queries = the M latent positions, keys/values = all
///                n positions (latent p sees inputs ≤ p); residual from the latent rows:
///                h = x[:, n−M:] + Attn(LN(x)),  h ← h + FF(LN(h))          (B, n, D) → (B, M, D)
///   layers 2..L  causal self-attention over the M latents only (PreNormBlock)
///   head         final LayerNorm + linear head; loss on the M latent positions only
///
/// Score entries: n·M − M(M−1)/2 in layer 1 (≈ n·M), M(M+1)/2 per later layer (≈ M²). Both
/// attentions are `layers::Attention` on the shared tiled kernel, through the
/// `PerceiverCross<M>` and `Causal` segment schemes.
///
/// Clean form: separate Q, K, V projections and RoPE over the whole head in every layer. The
/// reference code instead shares one K/V projection, rotates only in layer 1 and normalises
/// K/V with a LayerNorm over the head dim; those quirks are not reproduced here.
///
/// Decoding. Layer 1's keys and values depend only on the embeddings, so one cache over every
/// position serves all windows; the latent layers cache the current window of ≤ M latents.
///   absorb(ids)    appends history: layer-1 keys/values only, no outputs (O(t) work);
///                  the next token starts a new latent window.
///   prefill(ids)   consumes tokens as latents and writes their logits. When a window holds M
///                  latents, the next token starts a new one (the latent caches restart, layer
///                  1 keeps everything), so generation goes on until layer 1's cache is full
///                  (Options::body.cross.attention.max_cache positions, 4096 by default).
/// A token at position p in the window starting at s gets exactly the logits the full forward
/// gives row p − s for the input x[0, s + M) (latent p sees only inputs ≤ p): with
/// absorb(x[0, n − M)) and then prefill/steps over x[n − M, n), decoding equals forward(x).

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>

#include "../compose/pre_norm_block.hpp"
#include "../compose/repeat.hpp"
#include "../compose/residual.hpp"
#include "../core/check.hpp"
#include "../core/literal.hpp"
#include "../core/parameter.hpp"
#include "../core/time_slice.hpp"
#include "../core/workspace.hpp"
#include "../layers/attention.hpp"
#include "../layers/ffn.hpp"
#include "../layers/layer_norm.hpp"
#include "latent_language_model.hpp"

namespace hybridseq::models {

/// Compile-time shape of a PerceiverAR model: width, heads × head_dim, latents M, FFN width.
struct PerceiverArShape {
  int d_model;
  int heads;
  int head_dim;
  int latents;
  int ffn;
  bool rope = true;
};

namespace detail {

constexpr layers::AttentionShape perceiver_attention_shape(PerceiverArShape s) {
  return {s.d_model, s.heads, s.heads, s.head_dim, s.rope ? s.head_dim : 0, layers::Score::dot, false, false, true};
}

template <PerceiverArShape S, Scalar T, ExecutionSpace Space>
using PerceiverFfn =
    layers::Ffn<layers::FfnShape{S.d_model, S.ffn, layers::FfnKind::mlp, true, layers::Activation::gelu}, T, Space>;

}  // namespace detail

/// PerceiverAR's first layer: x (B, n, D) → y (B, M, D),
///   h = x[:, n−M:] + CrossAttn(LN₁(x)),   y = h + FF(LN₂(h)).
/// Parameters `attn_norm.*`, `attn.*` (layers::Attention), `ffn.norm.*`, `ffn.block.*`.
template <PerceiverArShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class PerceiverCrossBlock {
  static constexpr int M = S.latents;
  using Norm = layers::LayerNorm<S.d_model, T, Space>;
  using Attn = layers::Attention<detail::perceiver_attention_shape(S), layers::schemes::PerceiverCross<M>, T, Space>;
  using FfnResidual = compose::PreNormResidual<detail::PerceiverFfn<S, T, Space>, Norm>;

 public:
  using scalar_type = T;
  using execution_space = Space;
  static constexpr int d_in = S.d_model;
  static constexpr int d_out = S.d_model;
  static constexpr int latents = M;

  struct Options {
    typename Attn::Options attention{};
    typename detail::PerceiverFfn<S, T, Space>::Options ffn{};
    typename Norm::Options norm{};

    template <class F>
    void for_each_child(F&& f) {
      f(attention);
      f(ffn);
      f(norm);
    }
  };
  struct Saved {
    typename Norm::Saved norm;
    Tensor<T***, Space> normed;  // (B, n, D)
    typename Attn::Saved attn;
    Tensor<T***, Space> h;  // (B, M, D)
    typename FfnResidual::Saved ffn;
  };

  explicit PerceiverCrossBlock(const Options& o = {})
      : norm_(o.norm), attn_(o.attention), ffn_({.alpha = 1.0, .block = o.ffn, .norm = o.norm}) {}

  /// x (B, n, D), n ≥ M → y (B, M, D).
  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& s) const {
    constexpr const char* api = "hybridseq::models::PerceiverCrossBlock::forward";
    core::check_shape(api, "x", x, core::B, core::T, core::dim(S.d_model));
    const std::int64_t b = x.extent(0), n = x.extent(1);
    if (n < M) fail<config_error>(api, "the sequence length T = ", n, " is shorter than the latents M = ", M);
    core::check_shape(api, "y", y, core::dim(b), core::dim(M), core::dim(S.d_model));
    s.normed = ws.template allocate<T***>("perceiver.normed", b, n, S.d_model);
    norm_.forward(ws, x, s.normed, s.norm);
    s.h = ws.template allocate<T***>("perceiver.h", b, M, S.d_model);
    attn_.forward(ws, s.normed, s.h, s.attn);
    core::add_time<T, Space>(x, n - M, s.h, 0, M);  // the latent rows' residual
    ffn_.forward(ws, s.h, y, s.ffn);
  }

  /// Arena use for x (B, n, D): normed (B, n, D) and h (B, M, D) held under the norm's and
  /// the cross-attention's saves, then the FFN residual's on the M latents; backward holds
  /// dh, then dnormed.
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    const std::size_t normed = core::padded_bytes<T>(q.batch * q.time * S.d_model),
                      h = core::padded_bytes<T>(q.batch * M * S.d_model);
    const core::Footprint n = norm_.workspace(q), a = attn_.workspace(q), f = ffn_.workspace(q.at_time(M));
    core::ArenaSteps fwd, bwd;
    fwd.hold(normed).forward(n).hold(h).forward(a).forward(f);
    bwd.hold(h).backward(f).hold(normed).backward(a).backward(n);
    return {fwd.level(), fwd.peak(), bwd.peak()};
  }

  /// dy (B, M, D) → dx (B, n, D) (accumulated), parameter gradients accumulated.
  void backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    core::WorkspaceScope scope(ws);
    const std::int64_t b = s.normed.extent(0), n = s.normed.extent(1);
    core::check_shape("hybridseq::models::PerceiverCrossBlock::backward", "dx", dx, core::dim(b), core::dim(n),
                      core::dim(S.d_model));
    auto dh = ws.template allocate_zeroed<T***>("perceiver.dh", b, M, S.d_model);
    ffn_.backward(ws, s.ffn, dy, dh);
    auto dnormed = ws.template allocate_zeroed<T***>("perceiver.dnormed", b, n, S.d_model);
    attn_.backward(ws, s.attn, dh, dnormed);
    norm_.backward(ws, s.norm, dnormed, dx);
    core::add_time<T, Space>(dh, 0, dx, n - M, M);
  }

  // ---- decoding: the cache holds every position's keys and values ----
  using State = typename Attn::State;
  State make_state(int batch) const { return attn_.make_state(batch); }

  /// History x (B, t, D): keys and values only.
  void absorb(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x) const {
    core::WorkspaceScope scope(ws);
    attn_.append(ws, st, normalized(ws, x));
  }

  /// Latents x (B, t, D) → y (B, t, D): each new position attends to every position so far.
  void prefill(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x, Tensor<T***, Space> y) const {
    core::WorkspaceScope scope(ws);
    const std::int64_t b = x.extent(0), t = x.extent(1);
    auto h = ws.template allocate<T***>("perceiver.h", b, t, S.d_model);
    attn_.prefill(ws, st, normalized(ws, x), h);
    core::add_time<T, Space>(x, 0, h, 0, t);
    core::NoState none;
    core::prefill(ffn_, ws, none, h, y);
  }
  State snapshot(const State& st) const { return attn_.snapshot(st); }
  void restore(State& st, const State& snap) const { attn_.restore(st, snap); }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("attn_norm", norm_);
    visit("attn", attn_);
    visit("ffn", ffn_);
  }

 private:
  Tensor<T***, Space> normalized(core::Workspace<Space>& ws, Tensor<const T***, Space> x) const {
    auto out = ws.template allocate<T***>("perceiver.normed", x.extent(0), x.extent(1), S.d_model);
    typename Norm::Saved saved;
    norm_.forward(ws, x, out, saved);
    return out;
  }

  Norm norm_;
  Attn attn_;
  FfnResidual ffn_;
};

/// PerceiverAR's body: embeddings x (B, n, D) → the M latents' features (B, M, D), as
/// PerceiverCrossBlock followed by L − 1 causal blocks (Options::count = L) over the
/// latents. Parameters `cross.*`, `latent.<i>.*`.
template <PerceiverArShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class PerceiverArBody {
  static constexpr int M = S.latents;

 public:
  using scalar_type = T;
  using execution_space = Space;
  static constexpr int d_in = S.d_model;
  static constexpr int d_out = S.d_model;
  static constexpr int latents = M;
  using Cross = PerceiverCrossBlock<S, T, Space>;
  using LatentBlock =
      compose::PreNormBlock<layers::Attention<detail::perceiver_attention_shape(S), layers::schemes::Causal, T, Space>,
                            detail::PerceiverFfn<S, T, Space>, layers::LayerNorm<S.d_model, T, Space>>;
  using Latent = compose::Repeat<LatentBlock>;

  struct Options {
    int count = 2;  // L: the cross-attention layer and L − 1 latent blocks
    typename Cross::Options cross{};
    typename LatentBlock::Options block{};

    template <class F>
    void for_each_child(F&& f) {
      f(cross);
      f(block);
    }
  };
  struct Saved {
    typename Cross::Saved cross;
    Tensor<T***, Space> h;  // (B, M, D) after layer 1, when there are latent layers
    typename Latent::Saved latent;
  };

  explicit PerceiverArBody(const Options& o = {}) : cross_(o.cross) {
    if (o.count < 1) fail<value_error>("hybridseq::models::PerceiverArBody", "count must be >= 1, got ", o.count);
    auto block = o.block;
    block.template layer<0>().block.max_cache = M;  // a latent cache never holds more than one window
    if (o.count > 1) latent_.emplace(typename Latent::Options{o.count - 1, block});
  }

  static constexpr const char* model_name = "hybridseq::models::PerceiverAr";
  /// The M latents are the last M of n positions.
  static constexpr std::int64_t output_time(std::int64_t) { return M; }
  static void check_length(std::string_view api, std::int64_t n) {
    if (n < M)
      fail<config_error>(api, "the sequence length T = ", n, " is shorter than the latents M = ", M,
                         " (PerceiverAR needs n = history + M)");
  }

  /// x (B, n, D), n ≥ M → y (B, M, D).
  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& s) const {
    if (!latent_) return cross_.forward(ws, x, y, s.cross);
    s.h = ws.template allocate<T***>("perceiver.h", x.extent(0), M, S.d_model);
    cross_.forward(ws, x, s.h, s.cross);
    latent_->forward(ws, s.h, y, s.latent);
  }

  /// Arena use for x (B, n, D): the cross block's alone, or h (B, M, D) held under it and
  /// the latent blocks on the M latents (dh under their backward).
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    const core::Footprint cross = cross_.workspace(q);
    if (!latent_) return cross;
    const std::size_t h = core::padded_bytes<T>(q.batch * M * S.d_model);
    const core::Footprint latent = latent_->workspace(q.at_time(M));
    core::ArenaSteps fwd, bwd;
    fwd.hold(h).forward(cross).forward(latent);
    bwd.hold(h).backward(latent).backward(cross);
    return {fwd.level(), fwd.peak(), bwd.peak()};
  }

  void backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    if (!latent_) return cross_.backward(ws, s.cross, dy, dx);
    core::WorkspaceScope scope(ws);
    auto dh = ws.template allocate_zeroed<T***>("perceiver.dh", dy.extent(0), M, S.d_model);
    latent_->backward(ws, s.latent, dy, dh);
    cross_.backward(ws, s.cross, dh, dx);
  }

  // ---- decoding (see the file comment) ----
  struct State {
    typename Cross::State cross;    // layer 1: keys/values of every position so far
    typename Latent::State latent;  // layers 2..L: the current window's latents
    std::int64_t length = 0;        // positions consumed
    std::int64_t window_start = 0;  // first position of the current latent window
  };

  /// Layer 1's cache holds Options::cross.attention.max_cache positions (history + latents).
  State make_state(int batch) const {
    State st{cross_.make_state(batch), {}, 0, 0};
    if (latent_) st.latent = core::make_state(*latent_, batch);
    return st;
  }

  /// History x (B, t, D): layer-1 keys/values only; the next position starts a new window.
  void absorb(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x) const {
    check_room(st, x, "hybridseq::models::PerceiverArBody::absorb");
    cross_.absorb(ws, st.cross, x);
    st.length += std::int64_t(x.extent(1));
    start_window(st, int(x.extent(0)));
  }

  /// Latents x (B, t, D) → y (B, t, D), starting a new window whenever the current holds M.
  void prefill(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x, Tensor<T***, Space> y) const {
    check_room(st, x, "hybridseq::models::PerceiverArBody::prefill");
    const std::int64_t b = x.extent(0), t = x.extent(1);
    for (std::int64_t t0 = 0; t0 < t;) {
      if (st.length - st.window_start == M) start_window(st, int(b));
      const std::int64_t len = std::min(t - t0, M - (st.length - st.window_start));
      core::WorkspaceScope scope(ws);
      Tensor<const T***, Space> xc = x;
      Tensor<T***, Space> yc = y;
      if (len < t) {
        auto part = ws.template allocate<T***>("perceiver.x_window", b, len, S.d_model);
        core::copy_time<T, Space>(x, t0, part, 0, len);
        xc = part;
        yc = ws.template allocate<T***>("perceiver.y_window", b, len, S.d_model);
      }
      if (latent_) {
        auto h = ws.template allocate<T***>("perceiver.h", b, len, S.d_model);
        cross_.prefill(ws, st.cross, xc, h);
        core::prefill(*latent_, ws, st.latent, h, yc);
      } else {
        cross_.prefill(ws, st.cross, xc, yc);
      }
      if (len < t) core::copy_time<T, Space>(yc, 0, y, t0, len);
      st.length += len;
      t0 += len;
    }
  }

  State snapshot(const State& st) const {
    State copy{cross_.snapshot(st.cross), {}, st.length, st.window_start};
    if (latent_) copy.latent = core::snapshot(*latent_, st.latent);
    return copy;
  }
  void restore(State& st, const State& snap) const {
    cross_.restore(st.cross, snap.cross);
    if (latent_) core::restore(*latent_, st.latent, snap.latent);
    st.length = snap.length;
    st.window_start = snap.window_start;
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("cross", cross_);
    if (latent_) visit("latent", *latent_);
  }

  int latent_layers() const { return latent_ ? latent_->size() : 0; }

 private:
  /// Checks the batch and layer 1's cache before any state changes, so that a refused call
  /// leaves the state as it was.
  static void check_room(const State& st, Tensor<const T***, Space> x, const char* api) {
    const std::int64_t batch = st.cross.k.extent(0), capacity = st.cross.k.extent(1);
    core::check_shape(api, "x", x, core::dim(batch), core::T, core::dim(S.d_model));
    if (st.length + std::int64_t(x.extent(1)) > capacity)
      fail<config_error>(api, "layer 1's cache holds ", capacity, " positions; ", st.length, " used + ", x.extent(1),
                         " new exceeds it (raise Options::body.cross.attention.max_cache, or ",
                         layers::raise_max_cache_hint, ")");
  }

  void start_window(State& st, int batch) const {
    st.window_start = st.length;
    if (latent_) st.latent = core::make_state(*latent_, batch);
  }

  Cross cross_;
  std::optional<Latent> latent_;
};

/// The PerceiverAR language model: embedding → PerceiverArBody → LayerNorm → LM head,
/// logits and loss on the M latent positions (LanguageModel with the body's output_time).
/// Options::body.count = L. Requires n ≥ M (config_error naming
/// hybridseq::models::PerceiverAr::<call>).
template <int Vocab, PerceiverArShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
using PerceiverAr = LatentLanguageModel<Vocab, core::literal(S), PerceiverArBody<core::literal(S), T, Space>>;

}  // namespace hybridseq::models
