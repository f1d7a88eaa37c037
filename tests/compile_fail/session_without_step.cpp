// expect: cannot be decoded token by token
// A model whose body keeps state across time but has no step/prefill, handed to a decode session.
#include <hybridseq/decode/session.hpp>
#include <hybridseq/layers/rms_norm.hpp>
#include <hybridseq/models/language_model.hpp>

using namespace hybridseq;
using Space = DefaultSpace;

struct NoStep {  // a sequence mixer (not position-wise) without decoding support
  using scalar_type = float;
  using execution_space = Space;
  static constexpr int d_in = 8, d_out = 8;
  struct Options {};
  struct Saved {};
  explicit NoStep(const Options& = {}) {}
  void forward(core::Workspace<Space>&, Tensor<const float***, Space>, Tensor<float***, Space>, Saved&) const {}
  void backward(core::Workspace<Space>&, const Saved&, Tensor<const float***, Space>, Tensor<float***, Space>) {}
  template <class Visit>
  void visit_parameters(Visit&&) {}
};

using Model = models::LanguageModel<11, NoStep, layers::RmsNorm<8, float, Space>>;

void decode_it(const Model& model) {
  decode::Session session(model, 1);
}
