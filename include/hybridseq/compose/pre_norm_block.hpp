#pragma once
/// \file
/// PreNormBlock<Attn, Ffn, Norm>: the block of GPT-2 and of the ECP / PerceiverAR reference
/// code (MetaMain/ECPTransformer, `PreNorm` + `FeedForward`),
///
///   h = x + Attn(Norm₁(x));   y = h + Ffn(Norm₂(h))
///
/// as a composition: two pre-norm residuals in sequence, named `attn` and `ffn` (parameters
/// `attn.norm.*`, `attn.block.*`, `ffn.norm.*`, `ffn.block.*`). Options are the sequence's:
/// `o.layer<0>()` is the attention residual's (`.block` the attention's), `o.layer<1>()` the
/// FFN residual's.

#include "named.hpp"
#include "residual.hpp"
#include "sequential_block.hpp"

namespace hybridseq::compose {

template <class Attn, class Ffn, class Norm>
struct PreNormBlock
    : SequentialBlock<Named<"attn", PreNormResidual<Attn, Norm>>, Named<"ffn", PreNormResidual<Ffn, Norm>>> {
  using PreNormBlock::SequentialBlock::SequentialBlock;
  using attention_type = Attn;

  Attn& attention() { return this->template layer<0>().block(); }
  const Attn& attention() const { return this->template layer<0>().block(); }
};

}  // namespace hybridseq::compose
