#pragma once
// A language model's training step as the Trainer takes it, for the benchmarks that time one:
// the parameters made contiguous once (core::make_contiguous), then per call zero_grad, forward
// + loss + backward on a fixed token pattern, global-norm clipping at 1 and an AdamW step
// (β2 0.95, weight decay 0.1), fenced.
#include <cstdint>

#include <hybridseq/core.hpp>
#include <hybridseq/train/adamw.hpp>
#include <hybridseq/train/clip.hpp>

#include "tokens.hpp"

namespace hybridseq::bench {

/// A model of `layers` blocks (Options::body.count), its parameters drawn from seed 1: how the
/// benchmarks build text_lm's models.
template <class Model>
Model built(int layers) {
  typename Model::Options o;
  o.body.count = layers;
  Model model(o);
  core::initialize(model, 1);
  return model;
}

template <class Model, class Space = typename Model::execution_space>
class TrainingStep {
 public:
  TrainingStep(Model& model, std::int64_t batch, std::int64_t time, std::int64_t vocab, double lr)
      : model_(model),
        ids_("ids", batch, time),
        targets_("targets", batch, time),
        optimizer_(contiguous(model)),
        lr_(lr) {
    fill_tokens<Space>(ids_, vocab);
    fill_tokens<Space>(targets_, vocab, 1);
  }

  void operator()() {
    core::zero_grad(model_);
    model_.train_step(ws_, ids_, targets_);
    train::clip_gradient_norm(model_, 1.0);
    optimizer_.step(lr_);
    Space().fence();
  }

 private:
  static train::AdamW<Model> contiguous(Model& model) {
    core::make_contiguous(model);  // before the optimizer, which allocates its moments to match
    return train::AdamW<Model>(model, train::AdamWOptions{.beta2 = 0.95, .weight_decay = 0.1});
  }

  Model& model_;
  Tensor<std::int32_t**, Space> ids_, targets_;
  core::Workspace<Space> ws_;
  train::AdamW<Model> optimizer_;
  double lr_;
};

}  // namespace hybridseq::bench
