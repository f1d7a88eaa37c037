#pragma once
// A sequence mixer (not position-wise) of width 8 with a forward, a backward only when
// WithBackward, and never a step/prefill: the branch the trainer and the decode session refuse.
#include <hybridseq/layers/rms_norm.hpp>
#include <hybridseq/models/language_model.hpp>

template <bool WithBackward>
struct SequenceMixer {
  using Space = hybridseq::DefaultSpace;
  using scalar_type = float;
  using execution_space = Space;
  static constexpr int d_in = 8, d_out = 8;
  struct Options {};
  struct Saved {};
  explicit SequenceMixer(const Options& = {}) {}
  void forward(hybridseq::core::Workspace<Space>&, hybridseq::Tensor<const float***, Space>,
               hybridseq::Tensor<float***, Space>, Saved&) const {}
  void backward(hybridseq::core::Workspace<Space>&, const Saved&, hybridseq::Tensor<const float***, Space>,
                hybridseq::Tensor<float***, Space>) requires WithBackward {}
  template <class Visit>
  void visit_parameters(Visit&&) {}
};

/// A language model whose whole body is that mixer.
template <bool WithBackward>
using MixerModel = hybridseq::models::LanguageModel<11, SequenceMixer<WithBackward>,
                                                    hybridseq::layers::RmsNorm<8, float, hybridseq::DefaultSpace>>;
