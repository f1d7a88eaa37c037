#pragma once
/// \file
/// Compressed Double Attention PerceiverAR (papers.md §2; reference code MetaMain/ECPTransformer,
/// `CompressedDoubleAttentionTransformer.py`): Double Attention (double_attention.hpp) whose
/// first layer compresses the history along the sequence axis by a learned
/// Linear(h → c), c = h/4 by default; later layers run Double Attention over the c + M rows.
///
/// First layer, x (B, n, D) with n = h + M exactly (the compression's width is compile-time):
///
///   [o_h ; o_l] = DoubleAttention-heads(LN₁(x))            (B, n, H·Dh), before W_o
///   o_c = P o_h + p,   x_c = P x_h + p                      along time: P (c, h), p (c)
///   z = [x_c ; x_l] + W_o [o_c ; o_l] + b_o                 (B, c + M, D)
///   y = z + FF(LN₂(z))
///
/// The compression is applied to the residual stream's history rows too, so that every row of
/// z has a residual. (The reference code adds x[:, 0 : c + M] instead, which gives the latent
/// rows the residual of history positions c … c + M − 1; that is not reproduced.) RoPE over
/// the whole head in every layer, at positions 0 … n − 1 in layer 1 and 0 … c + M − 1 after
/// (the reference rotates in layer 1 only). Loss and logits on the M latents.

#include <cmath>
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
#include "../layers/ffn.hpp"
#include "../layers/layer_norm.hpp"
#include "../layers/time_linear.hpp"
#include "double_attention.hpp"
#include "latent_language_model.hpp"

namespace hybridseq::models {

/// Compile-time shape: width, heads × head_dim, latents M, FFN width, the history length h
/// (n = h + M) and its compressed length c (0: h / 4).
struct CompressedDoubleShape {
  int d_model;
  int heads;
  int head_dim;
  int latents;
  int ffn;
  int history;
  int compressed = 0;
  bool rope = true;
};

namespace detail {

template <CompressedDoubleShape S>
inline constexpr int compressed_rows = S.compressed > 0 ? S.compressed : S.history / 4;

}  // namespace detail

/// The first layer: x (B, h + M, D) → y (B, c + M, D) (see the file comment). Parameters
/// `attn_norm.*`, `attn.{wqkv,wo}.*`, `compress.{weight,bias}`, `ffn.norm.*`, `ffn.block.*`.
template <CompressedDoubleShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class CompressedDoubleBlock {
  static constexpr int M = S.latents, Hist = S.history, C = detail::compressed_rows<S>, W = S.heads * S.head_dim;
  static_assert(Hist >= 1 && C >= 1,
                "hybridseq::models::CompressedDoubleBlock: history and its compression must be non-empty");
  using Norm = layers::LayerNorm<S.d_model, T, Space>;
  using Attn =
      layers::DoubleAttention<layers::AttentionShape{S.d_model, S.heads, S.heads, S.head_dim, S.rope ? S.head_dim : 0,
                                                     layers::Score::dot, false, false, true},
                              layers::schemes::Bidirectional, M, T, Space>;
  using Ffn =
      layers::Ffn<layers::FfnShape{S.d_model, S.ffn, layers::FfnKind::mlp, true, layers::Activation::gelu}, T, Space>;
  using FfnResidual = compose::PreNormResidual<Ffn, Norm>;
  using Compress = layers::TimeLinear<Hist, C, T, Space>;

 public:
  using scalar_type = T;
  using execution_space = Space;
  static constexpr int d_in = S.d_model;
  static constexpr int d_out = S.d_model;
  static constexpr int history = Hist;
  static constexpr int compressed = C;

  struct Options {
    typename Attn::Options attention{};
    typename Ffn::Options ffn{};
    typename Norm::Options norm{};
    double compress_init_std = 1.0 / std::sqrt(double(Hist));

    template <class F>
    void for_each_child(F&& f) {
      f(attention);
      f(ffn);
      f(norm);
    }
  };
  struct Saved {
    Tensor<const T***, Space> x;  // (B, n, D)
    typename Norm::Saved norm;
    Tensor<T***, Space> normed;  // (B, n, D)
    typename Attn::Saved attn;   // o (B, n, H·Dh)
    Tensor<T***, Space> oc;      // (B, C + M, H·Dh) [o_c ; o_l]
    Tensor<T***, Space> z;       // (B, C + M, D)
    typename FfnResidual::Saved ffn;
  };

  explicit CompressedDoubleBlock(const Options& o = {})
      : norm_(o.norm),
        attn_(o.attention),
        compress_(o.compress_init_std),
        ffn_({.alpha = 1.0, .block = o.ffn, .norm = o.norm}) {}

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& s) const {
    constexpr const char* api = "hybridseq::models::CompressedDoubleBlock::forward";
    core::check_shape(api, "x", x, core::B, core::T, core::dim(S.d_model));
    const std::int64_t b = x.extent(0), n = x.extent(1);
    check_length(api, n);
    core::check_shape(api, "y", y, core::dim(b), core::dim(C + M), core::dim(S.d_model));
    s.x = x;
    s.normed = ws.template allocate<T***>("compressed_double.normed", b, n, S.d_model);
    norm_.forward(ws, x, s.normed, s.norm);
    attn_.attend(ws, s.normed, s.attn);
    s.oc = ws.template allocate<T***>("compressed_double.oc", b, C + M, W);
    compress_.forward(s.attn.o, s.oc);
    core::copy_time<T, Space>(s.attn.o, Hist, s.oc, C, M);
    s.z = ws.template allocate<T***>("compressed_double.z", b, C + M, S.d_model);
    attn_.project(ws, s.oc, s.z, s.attn.out_in);
    {
      core::WorkspaceScope scope(ws);
      auto xc = ws.template allocate<T***>("compressed_double.xc", b, C + M, S.d_model);
      compress_.forward(x, xc);
      core::copy_time<T, Space>(x, Hist, xc, C, M);
      core::add_time<T, Space>(xc, 0, s.z, 0, C + M);
    }
    ffn_.forward(ws, s.z, y, s.ffn);
  }

  /// Arena use for x (B, n, D): normed under the norm's and the attention's saves, oc and z
  /// (the compressed residual xc released above them), then the FFN residual's on C + M
  /// rows; backward holds dz, doc, d_o and dnormed in turn.
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    const std::int64_t b = q.batch, n = q.time;
    const std::size_t model_n = core::padded_bytes<T>(b * n * S.d_model),
                      model_c = core::padded_bytes<T>(b * (C + M) * S.d_model),
                      heads_n = core::padded_bytes<T>(b * n * W), heads_c = core::padded_bytes<T>(b * (C + M) * W);
    const core::Footprint norm = norm_.workspace(q), attn = attn_.attend_workspace(q),
                          ffn = ffn_.workspace(q.at_time(C + M));
    core::ArenaSteps fwd, bwd;
    fwd.hold(model_n).forward(norm).forward(attn).hold(heads_c).hold(model_c).run(model_c).forward(ffn);
    bwd.hold(model_c).backward(ffn).hold(heads_c).hold(heads_n).hold(model_n).backward(attn).backward(norm);
    return {fwd.level(), fwd.peak(), bwd.peak()};
  }

  void backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    const std::int64_t b = s.x.extent(0), n = s.x.extent(1);
    core::check_shape("hybridseq::models::CompressedDoubleBlock::backward", "dx", dx, core::dim(b), core::dim(n),
                      core::dim(S.d_model));
    core::WorkspaceScope scope(ws);
    auto dz = ws.template allocate_zeroed<T***>("compressed_double.dz", b, C + M, S.d_model);
    ffn_.backward(ws, s.ffn, dy, dz);
    // Residual [x_c ; x_l].
    compress_.backward(s.x, dz, dx);
    core::add_time<T, Space>(dz, C, dx, Hist, M);
    // Attention: [o_c ; o_l] → o.
    auto doc = ws.template allocate_zeroed<T***>("compressed_double.doc", b, C + M, W);
    attn_.project_backward(ws, s.attn.out_in, dz, doc);
    auto d_o = ws.template allocate_zeroed<T***>("compressed_double.do", b, n, W);
    compress_.backward(s.attn.o, doc, d_o);
    core::add_time<T, Space>(doc, C, d_o, Hist, M);
    auto dnormed = ws.template allocate_zeroed<T***>("compressed_double.dnormed", b, n, S.d_model);
    attn_.attend_backward(ws, s.attn, d_o, dnormed);
    norm_.backward(ws, s.norm, dnormed, dx);
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("attn_norm", norm_);
    visit("attn", attn_);
    visit("compress", compress_);
    visit("ffn", ffn_);
  }

  static void check_length(std::string_view api, std::int64_t n) {
    if (n != Hist + M)
      fail<config_error>(api, "the sequence length T = ", n, " must be the history ", Hist, " + the latents ", M, " = ",
                         Hist + M, " (the compression Linear(", Hist, " → ", C, ") has a fixed width)");
  }

 private:
  Norm norm_;
  Attn attn_;
  Compress compress_;
  FfnResidual ffn_;
};

/// The Compressed Double Attention body: x (B, h + M, D) → CompressedDoubleBlock →
/// (B, c + M, D) → Double Attention blocks ×(L−1) → the last M rows (the latents).
/// Parameters `first.*`, `layers.<i>.*`; Options::count = L layers (the first and L − 1 after).
template <CompressedDoubleShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class CompressedDoubleBody {
  static constexpr int M = S.latents, C = detail::compressed_rows<S>;

 public:
  using scalar_type = T;
  using execution_space = Space;
  static constexpr int d_in = S.d_model;
  static constexpr int d_out = S.d_model;
  using First = CompressedDoubleBlock<S, T, Space>;
  using Block =
      typename DoubleAttentionBody<DoubleAttentionShape{S.d_model, S.heads, S.head_dim, S.latents, S.ffn, 0, S.rope}, T,
                                   Space>::Block;
  using Layers = compose::Repeat<Block>;

  struct Options {
    int count = 2;  // L: the compressing first layer and L − 1 Double Attention blocks
    typename First::Options first{};
    typename Block::Options block{};

    template <class F>
    void for_each_child(F&& f) {
      f(first);
      f(block);
    }
  };
  struct Saved {
    typename First::Saved first;
    Tensor<T***, Space> h;  // (B, C + M, D) after layer 1
    typename Layers::Saved layers;
    Tensor<T***, Space> g;  // (B, C + M, D) after the later layers (= h when there are none)
  };

  explicit CompressedDoubleBody(const Options& o = {}) : first_(o.first) {
    if (o.count < 1) fail<value_error>("hybridseq::models::CompressedDoubleBody", "count must be >= 1, got ", o.count);
    if (o.count > 1) layers_.emplace(typename Layers::Options{o.count - 1, o.block});
  }

  static constexpr const char* model_name = "hybridseq::models::CompressedDoubleAttentionAr";
  static constexpr int latents = M;
  static constexpr std::int64_t output_time(std::int64_t) { return M; }
  static void check_length(std::string_view api, std::int64_t n) { First::check_length(api, n); }

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& s) const {
    const auto b = x.extent(0);
    s.h = ws.template allocate<T***>("compressed_double.h", b, C + M, S.d_model);
    first_.forward(ws, x, s.h, s.first);
    s.g = s.h;
    if (layers_) {
      s.g = ws.template allocate<T***>("compressed_double.g", b, C + M, S.d_model);
      layers_->forward(ws, s.h, s.g, s.layers);
    }
    core::copy_time<T, Space>(s.g, C, y, 0, M);
  }

  /// Arena use for x (B, n, D): h (B, C + M, D) under the first block's saves, then g under
  /// the later layers' (on C + M rows); backward holds dg (and dh) likewise.
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    const std::size_t rows = core::padded_bytes<T>(q.batch * (C + M) * S.d_model);
    const core::Footprint first = first_.workspace(q);
    core::ArenaSteps fwd, bwd;
    fwd.hold(rows).forward(first);
    bwd.hold(rows);
    if (layers_) {
      const core::Footprint later = layers_->workspace(q.at_time(C + M));
      fwd.hold(rows).forward(later);
      bwd.hold(rows).backward(later);
    }
    bwd.backward(first);
    return {fwd.level(), fwd.peak(), bwd.peak()};
  }

  void backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    core::WorkspaceScope scope(ws);
    const auto b = dy.extent(0);
    auto dg = ws.template allocate_zeroed<T***>("compressed_double.dg", b, C + M, S.d_model);
    core::copy_time<T, Space>(dy, 0, dg, C, M);
    Tensor<T***, Space> dh = dg;
    if (layers_) {
      dh = ws.template allocate_zeroed<T***>("compressed_double.dh", b, C + M, S.d_model);
      layers_->backward(ws, s.layers, dg, dh);
    }
    first_.backward(ws, s.first, dh, dx);
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("first", first_);
    if (layers_) visit("layers", *layers_);
  }

 private:
  First first_;
  std::optional<Layers> layers_;
};

/// The Compressed Double Attention language model:
///
///   ids (B, h + M) → E → CompressedDoubleBody → (B, M, D) → LN → head
///
/// Loss on the last M targets (targets (B, n)); `logits` (B, M, V). Options::body.count
/// = L − 1. Requires: n = h + M exactly (config_error naming the call).
template <int Vocab, CompressedDoubleShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
using CompressedDoubleAttentionAr =
    LatentLanguageModel<Vocab, core::literal(S), CompressedDoubleBody<core::literal(S), T, Space>>;

}  // namespace hybridseq::models
