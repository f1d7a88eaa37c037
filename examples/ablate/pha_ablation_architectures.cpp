// The PHA ablation grid (models::pha_ablations, 35 compile-time variants), registered by
// iterating the Hana type list.
#include <boost/hana/for_each.hpp>

#include "experiment.hpp"

namespace hybridseq::ablate {

std::vector<Architecture> pha_ablation_architectures() {
  std::vector<Architecture> out;
  boost::hana::for_each(models::pha_ablations<vocab, pha_tiny, float, DefaultSpace>, [&](auto t) {
    using Model = typename decltype(t)::type;
    const std::string name = Model::name();
    if (name == "pha") return;  // registered by pha_architectures
    out.push_back({name, "PHA ablation variant",
                   [](const ExperimentConfig& c) { return run_experiment<Model>(Model::name(), 2, c); }});
  });
  return out;
}

}  // namespace hybridseq::ablate
