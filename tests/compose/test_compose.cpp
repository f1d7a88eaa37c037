// Composition: parallel blocks with each mixer and sequential blocks, through the testbed
// (finite-difference gradients in double, including the mixing logits; save/load).
#include <catch2/catch.hpp>

#include <hybridseq/compose.hpp>
#include <hybridseq/layers.hpp>

#include "cases/primitive_cases.hpp"
#include "support/spaces.hpp"
#include "support/testbed.hpp"

using namespace hybridseq;

namespace hybridseq::cases {

template <class T, class S>
using NormedLinear = compose::SequentialBlock<Linear<LinearShape{6, 6}, T, S>, RmsNorm<6, T, S>>;

/// What the composition cases share: no PyTorch golden; batch 2 × time 3 unless a case says otherwise.
struct ComposeCase {
  static constexpr const char* golden = "";
  static constexpr int batch = 2, time = 3;
};

struct ParallelSoftplus : ComposeCase {
  template <class T, class S>
  using Layer = compose::ParallelBlock<compose::SoftplusMixer<3, true, T, S>, NormedLinear<T, S>,
                                       Ffn<FfnShape{6, 10}, T, S>, Ffn<swiglu(6, 4), T, S>>;
  static constexpr const char* name = "parallel_softplus";
};
struct ParallelRawSoftplus : ComposeCase {
  template <class T, class S>
  using Layer =
      compose::ParallelBlock<compose::SoftplusMixer<2, false, T, S>, NormedLinear<T, S>, Ffn<FfnShape{6, 10}, T, S>>;
  static constexpr const char* name = "parallel_raw_softplus";
};
struct ParallelMean : ComposeCase {
  template <class T, class S>
  using Layer = compose::ParallelBlock<compose::MeanMixer<2, T, S>, Linear<LinearShape{6, 6}, T, S>, RmsNorm<6, T, S>>;
  static constexpr const char* name = "parallel_mean";
};
struct Sequential3 : ComposeCase {
  template <class T, class S>
  using Layer = compose::SequentialBlock<Linear<LinearShape{6, 9}, T, S>, ActivationLayer<Activation::silu, 9, T, S>,
                                         Linear<LinearShape{9, 6, false}, T, S>>;
  static constexpr const char* name = "sequential3";
  static constexpr int time = 4;
};

struct PreNormCase : ComposeCase {
  template <class T, class S>
  using Layer = compose::PreNormResidual<Ffn<FfnShape{6, 10}, T, S>, RmsNorm<6, T, S>>;
  static constexpr const char* name = "prenorm_residual";
};
struct DeepNormCase : ComposeCase {
  template <class T, class S>
  using Layer = compose::DeepNorm<Ffn<FfnShape{6, 10}, T, S>, LayerNorm<6, T, S>>;
  static constexpr const char* name = "deepnorm";
  template <class L>
  static typename L::Options options() {
    return {.alpha = compose::deepnorm_alpha(3)};
  }
};
struct RepeatCase : ComposeCase {
  template <class T, class S>
  using Layer = compose::Repeat<compose::PreNormResidual<Linear<LinearShape{6, 6}, T, S>, LayerNorm<6, T, S>>>;
  static constexpr const char* name = "repeat3";
  template <class L>
  static typename L::Options options() {
    return {.count = 3};
  }
};

using ComposeCases =
    CaseList<ParallelSoftplus, ParallelRawSoftplus, ParallelMean, Sequential3, PreNormCase, DeepNormCase, RepeatCase>;

}  // namespace hybridseq::cases

HYBRIDSEQ_SPACE_TEST_CASE("composition: finite-difference gradients in double", "[compose][gradcheck]") {
  testing::for_each_case(cases::ComposeCases{}, [&]<class Case>() { testing::check_gradients<Case, TestType>(1e-6); });
}

HYBRIDSEQ_SPACE_TEST_CASE("composition: save/load round trip", "[compose][io]") {
  testing::for_each_case(cases::ComposeCases{}, [&]<class Case>() { testing::check_round_trip<Case, TestType>(); });
}

TEST_CASE("softplus mixer starts at equal weights; names are stable", "[compose][host]") {
  using S = Kokkos::Serial;
  cases::ParallelSoftplus::Layer<float, S> block;
  core::initialize(block, 1);
  for (double w : block.mixing_weights()) REQUIRE(w == Approx(1.0 / 3.0));
  std::vector<std::string> names;
  core::for_each_parameter(block, [&](std::string_view n, auto&) { names.emplace_back(n); });
  REQUIRE(names.front() == "0.0.weight");
  REQUIRE(names.back() == "mixer.logits");
  cases::ParallelRawSoftplus::Layer<float, S> raw;
  core::initialize(raw, 1);
  for (double w : raw.mixing_weights()) REQUIRE(w == Approx(1.0));  // softplus(log(e − 1)) = 1
  static_assert(core::TrainableBranch<cases::ParallelSoftplus::Layer<float, S>>);
}

TEST_CASE("Repeat names blocks by index; DeepNorm constants", "[compose][host]") {
  using S = Kokkos::Serial;
  cases::RepeatCase::Layer<float, S> stack(cases::RepeatCase::options<cases::RepeatCase::Layer<float, S>>());
  std::vector<std::string> names;
  core::for_each_parameter(
      stack, [&](std::string_view n, auto&) { names.emplace_back(n); }, "blocks");
  REQUIRE(names.size() == 3 * 4);
  REQUIRE(names[0] == "blocks.0.norm.weight");
  REQUIRE(names.back() == "blocks.2.block.bias");
  REQUIRE(compose::deepnorm_alpha(6) == Approx(std::pow(12.0, 0.25)));
  REQUIRE(compose::deepnorm_beta(6) == Approx(std::pow(48.0, -0.25)));
  REQUIRE_THROWS_AS(decltype(stack)({.count = 0}), value_error);
}
