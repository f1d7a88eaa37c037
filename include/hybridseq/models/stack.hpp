#pragma once
/// \file
/// Stack<Vocab, Layers...>: a layer pattern repeated `Options::body.count` times, with a
/// final LayerNorm and an LM head — SSM→attention hybrids and every per-layer pattern:
///
///   Stack<V, MambaLayer<s>, NeoxLayer<t>>                  Cooper's [SSM, TF]
///   Stack<V, MambaLayer<s>, NeoxLayer<t>, NeoxLayer<t>>    Cooper's [SSM, TF, TF]
///   Stack<V, NeoxLayer<t>, MambaLayer<s> ×7>  (count 4)    Jamba's 1 attention : 7 SSM, 32 layers
///
/// The number of types is the pattern's length, not the depth.

#include "../compose/repeat.hpp"
#include "../compose/sequential_block.hpp"
#include "../layers/layer_norm.hpp"
#include "language_model.hpp"

namespace hybridseq::models {

namespace detail {
template <class First, class...>
struct first_layer {
  using type = First;
};
template <class... Layers>
using stack_norm =
    layers::LayerNorm<first_layer<Layers...>::type::d_in, typename first_layer<Layers...>::type::scalar_type,
                      typename first_layer<Layers...>::type::execution_space>;
}  // namespace detail

template <int Vocab, class... Layers>
struct Stack
    : LanguageModel<Vocab, compose::Repeat<compose::SequentialBlock<Layers...>>, detail::stack_norm<Layers...>> {
  using Stack::LanguageModel::LanguageModel;
};

}  // namespace hybridseq::models
