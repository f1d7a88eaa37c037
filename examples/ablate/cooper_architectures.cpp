// Cooper et al.'s tiny models (hidden 8): pure SSM, pure sliding-window Transformer, the
// SSM→TF hybrids, and larger pure baselines for the parameter comparison.
#include "experiment.hpp"

namespace hybridseq::ablate {
namespace {
using Space = DefaultSpace;
constexpr auto ssm8 = models::cooper_ssm(8, 1);
constexpr auto ssm16 = models::cooper_ssm(16, 4);
constexpr auto tf8 = models::cooper_tf(8, 2, 20);
constexpr auto tf16 = models::cooper_tf(16, 2, 20);
using Ssm8 = models::MambaLayer<ssm8, float, Space>;
using Ssm16 = models::MambaLayer<ssm16, float, Space>;
using Tf8 = models::NeoxLayer<tf8, float, Space>;
using Tf16 = models::NeoxLayer<tf16, float, Space>;

template <class Model, int Layers>
ArchResult run(const ExperimentConfig& c, const char* name) {
  return run_experiment<Model>(name, Layers, c);
}
}  // namespace

std::vector<Architecture> cooper_architectures() {
  return {
      {"ssm", "2 Mamba layers, d=8, state 1",
       [](const ExperimentConfig& c) { return run<models::Stack<vocab, Ssm8>, 2>(c, "ssm"); }},
      {"ssm-big", "4 Mamba layers, d=16, state 4",
       [](const ExperimentConfig& c) { return run<models::Stack<vocab, Ssm16>, 4>(c, "ssm-big"); }},
      {"tf", "2 GPT-NeoX layers, d=8, sliding window 20",
       [](const ExperimentConfig& c) { return run<models::Stack<vocab, Tf8>, 2>(c, "tf"); }},
      {"tf-big", "4 GPT-NeoX layers, d=16, sliding window 20",
       [](const ExperimentConfig& c) { return run<models::Stack<vocab, Tf16>, 4>(c, "tf-big"); }},
      {"ssm-tf", "[SSM, TF], d=8",
       [](const ExperimentConfig& c) { return run<models::Stack<vocab, Ssm8, Tf8>, 1>(c, "ssm-tf"); }},
      {"ssm-tf-tf", "[SSM, TF, TF], d=8",
       [](const ExperimentConfig& c) { return run<models::Stack<vocab, Ssm8, Tf8, Tf8>, 1>(c, "ssm-tf-tf"); }},
  };
}

}  // namespace hybridseq::ablate
