// The layer contracts: which types model which concepts. These are compile-time facts; a
// regression fails the build of this file. The negative cases use types that miss exactly
// one requirement each.
#include <catch2/catch.hpp>

#include <hybridseq/core.hpp>
#include <hybridseq/layers.hpp>

using namespace hybridseq;

namespace {
using S = Kokkos::Serial;
using LinearF = layers::Linear<layers::LinearShape{4, 3}, float, S>;
using FfnD = layers::Ffn<layers::swiglu(4, 6), double, S>;

// Forward only: a Branch, not trainable.
struct ForwardOnly {
  using scalar_type = float;
  using execution_space = S;
  static constexpr int d_in = 4, d_out = 4;
  struct Saved {};
  void forward(core::Workspace<S>&, Tensor<const float***, S>, Tensor<float***, S>, Saved&) const {}
};
// Lacks a scalar type.
struct NoScalar {
  using execution_space = S;
};
}  // namespace

static_assert(core::Branch<LinearF> && core::TrainableBranch<LinearF>);
static_assert(core::TrainableBranch<FfnD>);
static_assert(core::TrainableBranch<layers::RmsNorm<8, float, S>>);
static_assert(core::TrainableBranch<layers::Rope<layers::RopeShape{2, 8, 8}, float, S>>);
static_assert(core::TrainableBranch<layers::DualFfn<layers::dual_ffn(4, 8, 2), float, S>>);
static_assert(!core::Stateful<LinearF> && core::PositionWise<LinearF> && core::DecodableBranch<LinearF>,
              "position-wise: decodable without a state");
static_assert(!core::DecodableBranch<ForwardOnly>, "no step() and not position-wise: not decodable");
static_assert(core::Branch<ForwardOnly> && !core::TrainableBranch<ForwardOnly>);
static_assert(!core::Module<NoScalar>);
static_assert(core::require_trainable_branch<LinearF>());
static_assert(core::HasParameters<LinearF>);

TEST_CASE("layers report their widths through the contract", "[core][host]") {
  REQUIRE(LinearF::d_in == 4);
  REQUIRE(LinearF::d_out == 3);
  LinearF l;
  REQUIRE(core::parameter_count(l) == 4 * 3 + 3);
  layers::Linear<layers::LinearShape{4, 3, false}, float, S> nobias;
  REQUIRE(core::parameter_count(nobias) == 12);
}
