// PHA at tiny scale (d=8): the paper's model and, in pha_ablation_architectures.cpp, the
// whole compile-time ablation grid.
#include "experiment.hpp"

namespace hybridseq::ablate {

std::vector<Architecture> pha_architectures() {
  using Pha = models::Pha<vocab, pha_tiny, models::PhaLayout{}, float, DefaultSpace>;
  return {{"pha", "PHA, 2 blocks: GSS || cosine GQA || Dual-FFN, softplus mixing, DeepNorm",
           [](const ExperimentConfig& c) { return run_experiment<Pha>("pha", 2, c); }}};
}

}  // namespace hybridseq::ablate
