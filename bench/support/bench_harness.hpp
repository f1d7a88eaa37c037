#pragma once
// Drives one case's layer at benchmark size: random parameters and inputs, a workspace
// whose peak is the layer's own (forward: saved activations; backward: + scratch).
#include <cstdint>

#include <hybridseq/core.hpp>

#include "tokens.hpp"

namespace hybridseq::bench {

template <class L>
concept LossLayer = requires {
  L::vocab;
  L::d_in;
};

template <class Case, class Space>
class Harness {
 public:
  using L = typename Case::template Layer<float, Space>;

  Harness(int batch, int time) : x_("x", batch, time, L::d_in), dx_("dx", batch, time, L::d_in) {
    core::initialize(layer_, 42);
    core::fill(Space{}, core::flat(x_), core::Init::normal(1.0), 42, 1);
    if constexpr (LossLayer<L>) {
      targets_ = Tensor<std::int32_t**, Space>("targets", batch, time);
      fill_tokens<Space>(targets_, L::vocab);
    } else {
      y_ = Tensor<float***, Space>("y", batch, time, L::d_out);
      dy_ = Tensor<float***, Space>("dy", batch, time, L::d_out);
      core::fill(Space{}, core::flat(dy_), core::Init::normal(1.0), 42, 2);
    }
    forward();  // backward needs a forward's Saved
    ws_.reset_peak();
  }

  void forward() {
    ws_.release(base_);
    if constexpr (LossLayer<L>)
      layer_.forward(ws_, x_, targets_, saved_);
    else
      layer_.forward(ws_, x_, y_, saved_);
  }

  /// Backward from the most recent forward's saved state (scratch released each call).
  void backward() {
    core::WorkspaceScope scope(ws_);
    if constexpr (LossLayer<L>)
      layer_.backward(ws_, saved_, dx_);
    else
      layer_.backward(ws_, saved_, dy_, dx_);
  }

  std::size_t peak_workspace_bytes() const { return ws_.peak_bytes(); }
  std::size_t activation_bytes() const { return (x_.size() + (LossLayer<L> ? 0 : y_.size())) * sizeof(float); }

 private:
  L layer_;
  core::Workspace<Space> ws_;
  typename core::Workspace<Space>::Mark base_{};
  typename L::Saved saved_;
  Tensor<float***, Space> x_, dx_, y_, dy_;
  Tensor<std::int32_t**, Space> targets_;
};

}  // namespace hybridseq::bench
