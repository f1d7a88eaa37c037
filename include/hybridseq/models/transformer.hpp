#pragma once
/// \file
/// The GPT-NeoX layer Cooper et al. use as their "TF" layer, and the Transformer LM built from
/// it (papers.md §3):
///
///   y = x + Attn(LN₁(x)) + MLP(LN₂(x))        parallel residual
///
/// written as a composition — ParallelBlock<SumMixer<3>, Identity, LN₁→Attn, LN₂→MLP> — so
/// the skip path is just a third branch. Attention has Q/K/V and output biases (NeoX), RoPE
/// on `rotary_dim` of each head, heads summed or concatenated, and a causal or sliding-window
/// mask: query i sees keys i − w < j ≤ i.

#include "../compose/mixers.hpp"
#include "../compose/parallel_block.hpp"
#include "../compose/repeat.hpp"
#include "../compose/sequential_block.hpp"
#include "../core/literal.hpp"
#include "../layers/attention.hpp"
#include "../layers/ffn.hpp"
#include "../layers/identity.hpp"
#include "../layers/layer_norm.hpp"
#include "../layers/rope.hpp"
#include "language_model.hpp"

namespace hybridseq::models {

/// Compile-time shape of one GPT-NeoX layer.
struct NeoxShape {
  int d_model;
  int heads;
  int head_dim;
  int rotary_dim;
  int mlp_width;
  int window = 0;  // 0: full causal attention; w > 0: sliding window of w keys
  layers::HeadMerge merge = layers::HeadMerge::concat;
  layers::Activation activation = layers::Activation::gelu;
};

/// Cooper et al.'s tiny TF layer: heads of size d summed, RoPE on 25 %, MLP 2d with SiLU,
/// sliding window w (20 by default, 100 in their selective-copy run).
constexpr NeoxShape cooper_tf(int d_model, int heads = 2, int window = 20) {
  return NeoxShape{d_model,
                   heads,
                   d_model,
                   layers::rotary_dim_for(d_model, 0.25),
                   2 * d_model,
                   window,
                   layers::HeadMerge::sum,
                   layers::Activation::silu};
}

namespace detail {
template <NeoxShape S>
using neox_scheme =
    std::conditional_t<S.window == 0, layers::schemes::Causal, layers::schemes::SlidingWindow<S.window>>;
}  // namespace detail

template <NeoxShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
struct NeoxLayer
    : compose::ParallelBlock<
          compose::SumMixer<3, T, Space>, layers::Identity<S.d_model, T, Space>,
          compose::SequentialBlock<
              layers::LayerNorm<S.d_model, T, Space>,
              layers::Attention<layers::AttentionShape{S.d_model, S.heads, S.heads, S.head_dim, S.rotary_dim,
                                                       layers::Score::dot, false, true, true, S.merge},
                                detail::neox_scheme<S>, T, Space>>,
          compose::SequentialBlock<
              layers::LayerNorm<S.d_model, T, Space>,
              layers::Ffn<layers::FfnShape{S.d_model, S.mlp_width, layers::FfnKind::mlp, true, S.activation}, T,
                          Space>>> {
  using NeoxLayer::ParallelBlock::ParallelBlock;
};

/// A stack of NeoX layers with a final LayerNorm and an LM head. Options::body.count is
/// the depth.
template <int Vocab, NeoxShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
struct Transformer : LanguageModel<Vocab, compose::Repeat<NeoxLayer<core::literal(S), T, Space>>,
                                   layers::LayerNorm<S.d_model, T, Space>> {
  using Transformer::LanguageModel::LanguageModel;
};

}  // namespace hybridseq::models
