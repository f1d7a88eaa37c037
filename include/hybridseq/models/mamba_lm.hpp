#pragma once
/// \file
/// The Mamba-1 residual layer `x + Mixer(RMSNorm(x))` (Cooper et al.'s "SSM" layer, Hugging
/// Face's MambaBlock) and the Mamba LM: embedding → N layers → RMSNorm (`norm_f`) → head.

#include "../compose/repeat.hpp"
#include "../compose/residual.hpp"
#include "../core/literal.hpp"
#include "../layers/mamba.hpp"
#include "../layers/rms_norm.hpp"
#include "language_model.hpp"

namespace hybridseq::models {

template <layers::MambaShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
struct MambaLayer : compose::PreNormResidual<layers::Mamba<S, T, Space>, layers::RmsNorm<S.d_model, T, Space>> {
  using MambaLayer::PreNormResidual::PreNormResidual;
};

/// Cooper et al.'s tiny SSM layer: d_state 1 by default, expand 2, conv 4, dt_rank ⌈d/16⌉.
constexpr layers::MambaShape cooper_ssm(int d_model, int d_state = 1) {
  return layers::MambaShape{d_model, d_state};
}

template <int Vocab, layers::MambaShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
struct MambaLm : LanguageModel<Vocab, compose::Repeat<MambaLayer<core::literal(S), T, Space>>,
                               layers::RmsNorm<S.d_model, T, Space>> {
  using MambaLm::LanguageModel::LanguageModel;
};

}  // namespace hybridseq::models
