#pragma once
/// \file
/// The language model of a latent body (PerceiverAR, Double and Compressed-Double attention):
/// embedding → Body → LayerNorm → LM head, with logits and loss on the body's M latent rows
/// (LanguageModel with the body's output_time). `Shape` is the body's shape struct; it names
/// the width `d_model` and the `latents` M. The named models are aliases of it
/// (models::PerceiverAr, DoubleAttentionAr, CompressedDoubleAttentionAr); their layer types
/// are the body's (`Model::body_type::Block`).

#include <string_view>

#include "../layers/layer_norm.hpp"
#include "language_model.hpp"

namespace hybridseq::models {

template <int Vocab, auto Shape, class Body>
class LatentLanguageModel
    : public LanguageModel<
          Vocab, Body, layers::LayerNorm<Shape.d_model, typename Body::scalar_type, typename Body::execution_space>> {
  static_assert(Shape.latents >= 1, "hybridseq::models: a latent language model needs at least one latent");

 public:
  using LanguageModel<
      Vocab, Body,
      layers::LayerNorm<Shape.d_model, typename Body::scalar_type, typename Body::execution_space>>::LanguageModel;
  static constexpr int latents = Shape.latents;
  static constexpr auto shape = Shape;
  /// core::describe's kind: the model's own name (PerceiverAr, DoubleAttentionAr, ...).
  static constexpr std::string_view kind =
      std::string_view(Body::model_name).substr(std::string_view(Body::model_name).rfind("::") + 2);
};

}  // namespace hybridseq::models
