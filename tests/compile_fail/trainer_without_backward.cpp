// expect: this branch has no backward.*so it cannot be trained
// A model whose body has a forward but no backward, handed to the trainer.
#include <hybridseq/layers/rms_norm.hpp>
#include <hybridseq/models/language_model.hpp>
#include <hybridseq/train/trainer.hpp>

using namespace hybridseq;
using Space = DefaultSpace;

struct ForwardOnly {
  using scalar_type = float;
  using execution_space = Space;
  static constexpr int d_in = 8, d_out = 8;
  struct Options {};
  struct Saved {};
  explicit ForwardOnly(const Options& = {}) {}
  void forward(core::Workspace<Space>&, Tensor<const float***, Space>, Tensor<float***, Space>, Saved&) const {}
  template <class Visit>
  void visit_parameters(Visit&&) {}
};

using Model = models::LanguageModel<11, ForwardOnly, layers::RmsNorm<8, float, Space>>;

void train_it(Model& model) {
  train::Trainer trainer(model, {});
}
