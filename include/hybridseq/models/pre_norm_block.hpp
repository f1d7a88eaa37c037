#pragma once
/// \file
/// PreNormBlock<Attn, Ffn, Norm>: the block of the ECP / PerceiverAR reference code
/// (MetaMain/ECPTransformer, `PreNorm` + `FeedForward`), and of GPT-2:
///
///   h = x + Attn(Norm₁(x));   y = h + Ffn(Norm₂(h))
///
/// Two PreNormResidual's in sequence, held as named members (parameters `attn.norm.*`,
/// `attn.block.*`, `ffn.norm.*`, `ffn.block.*`) so that a model can reach its attention
/// branch (`attention()`), e.g. to switch RoPE per layer in ECP's faithful mode.

#include "../compose/residual.hpp"
#include "../core/concepts.hpp"
#include "../core/decoding.hpp"
#include "../core/workspace.hpp"

namespace hybridseq::models {

template <class Attn, class Ffn, class Norm>
class PreNormBlock {
  static_assert(core::Branch<Attn> && core::Branch<Ffn> && core::Branch<Norm>,
                "hybridseq::models::PreNormBlock: attention, FFN and norm must be Branches");
  static_assert(Attn::d_in == Attn::d_out && Ffn::d_in == Attn::d_out && Ffn::d_out == Ffn::d_in,
                "hybridseq::models::PreNormBlock: attention and FFN must keep the model width");
  using AttnResidual = compose::PreNormResidual<Attn, Norm>;
  using FfnResidual = compose::PreNormResidual<Ffn, Norm>;

 public:
  using scalar_type = typename Attn::scalar_type;
  using execution_space = typename Attn::execution_space;
  using T = scalar_type;
  using Space = execution_space;
  static constexpr int d_in = Attn::d_in;
  static constexpr int d_out = Attn::d_out;
  using attention_type = Attn;

  struct Options {
    typename Attn::Options attention{};
    typename Ffn::Options ffn{};
    typename Norm::Options norm{};
  };
  struct Saved {
    typename AttnResidual::Saved attn;
    Tensor<T***, Space> h;  // (B, T, D) after the attention residual
    typename FfnResidual::Saved ffn;
  };

  explicit PreNormBlock(const Options& o = {})
      : attn_({.alpha = 1.0, .block = o.attention, .norm = o.norm}), ffn_({.alpha = 1.0, .block = o.ffn, .norm = o.norm}) {}

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& s) const {
    s.h = ws.template allocate<T***>("pre_norm_block.h", x.extent(0), x.extent(1), d_in);
    attn_.forward(ws, x, s.h, s.attn);
    ffn_.forward(ws, s.h, y, s.ffn);
  }

  void backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    core::WorkspaceScope scope(ws);
    auto dh = ws.template allocate_zeroed<T***>("pre_norm_block.dh", dy.extent(0), dy.extent(1), d_in);
    ffn_.backward(ws, s.ffn, dy, dh);
    attn_.backward(ws, s.attn, dh, dx);
  }

  // ---- decoding: available when the attention decodes ----
  static constexpr bool decodable = core::DecodableBranch<AttnResidual> && core::DecodableBranch<FfnResidual>;
  using State = core::state_t<AttnResidual>;

  State make_state(int batch) const
    requires decodable
  {
    return core::make_state(attn_, batch);
  }
  void prefill(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x, Tensor<T***, Space> y) const
    requires decodable
  {
    core::WorkspaceScope scope(ws);
    auto h = ws.template allocate<T***>("pre_norm_block.h", x.extent(0), x.extent(1), d_in);
    core::prefill(attn_, ws, st, x, h);
    core::NoState none;
    core::prefill(ffn_, ws, none, h, y);
  }
  void step(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x, Tensor<T***, Space> y) const
    requires decodable
  {
    prefill(ws, st, x, y);
  }
  State snapshot(const State& st) const
    requires decodable
  {
    return core::snapshot(attn_, st);
  }
  void restore(State& st, const State& snap) const
    requires decodable
  {
    core::restore(attn_, st, snap);
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("attn", attn_);
    visit("ffn", ffn_);
  }

  Attn& attention() { return attn_.block(); }

 private:
  AttnResidual attn_;
  FfnResidual ffn_;
};

}  // namespace hybridseq::models
