// Whole language models: PHA (and ablation variants), the GPT-NeoX Transformer, the Mamba LM
// and an SSM→TF→TF hybrid, through the testbed (gradients in double end to end, PyTorch
// goldens of logits, loss and every parameter gradient, save/load), decoding against the
// full forward, the ablation type list, and mixing weights.
#include <catch2/catch.hpp>

#include <boost/hana/for_each.hpp>
#include <boost/hana/length.hpp>

#include <set>
#include <string>
#include <vector>

#include <hybridseq/models.hpp>

#include "cases/model_cases.hpp"
#include "support/spaces.hpp"
#include "support/testbed.hpp"

using namespace hybridseq;
namespace hana = boost::hana;

namespace {

using PhaF = cases::PhaTiny::Layer<float, Kokkos::Serial>;
static_assert(core::DecodableBranch<PhaF::body_type>);
static_assert(core::TrainableBranch<PhaF::body_type>);
static_assert(core::DecodableBranch<cases::HybridTiny<float, Kokkos::Serial>::body_type>);

}  // namespace

HYBRIDSEQ_SPACE_TEST_CASE("models: finite-difference gradients in double, end to end", "[models][gradcheck]") {
  cases::for_each_case(cases::ModelCases{}, [&]<class Case>() {
    // A whole model is differenced through its scalar loss (≈ 2.4), not term by term: at the
    // 4th-order stencil's step (3e-5 relative) round-off is ~1e-11 absolute, which against
    // the smallest gradient tensors (Mamba's A_log behind two TF layers, |g| ~ 1e-5) is a
    // relative 1–2e-6. Every other tensor checks to ≤ 1e-7.
    DYNAMIC_SECTION(Case::name) { testing::check_gradients<Case, TestType>(5e-6); }
  });
}

HYBRIDSEQ_SPACE_TEST_CASE("models: PyTorch goldens in float (logits, loss, every gradient)", "[models][golden]") {
  cases::for_each_case(cases::ModelCases{}, [&]<class Case>() {
    if constexpr (cases::has_golden<Case>) {
      DYNAMIC_SECTION(Case::name) { testing::check_golden<Case, TestType>(1e-4, 1e-5); }
    }
  });
}

HYBRIDSEQ_SPACE_TEST_CASE("models: decoding equals the full forward", "[models][decode]") {
  cases::for_each_case(cases::ModelCases{}, [&]<class Case>() {
    DYNAMIC_SECTION(Case::name) { testing::check_decode_matches_forward<Case, TestType>({0, 1, 4, 9}); }
  });
}

HYBRIDSEQ_SPACE_TEST_CASE("models: save/load round trip", "[models][io]") {
  cases::for_each_case(cases::ModelCases{}, [&]<class Case>() {
    DYNAMIC_SECTION(Case::name) { testing::check_round_trip<Case, TestType>(); }
  });
}

TEST_CASE("models: the PHA ablation grid is 35 distinct variants with distinct names", "[models][host]") {
  constexpr auto grid = models::pha_ablations<11, cases::pha_tiny, float, Kokkos::Serial>;
  STATIC_REQUIRE(decltype(hana::length(grid))::value == 35);
  std::set<std::string> names;
  int full = 0;
  hana::for_each(grid, [&](auto t) {
    using M = typename decltype(t)::type;
    names.insert(M::layout.name());
    if (M::layout.branches() == 3) ++full;
  });
  CHECK(names.size() == 35);
  CHECK(full == 5);
  CHECK(names.count("pha") == 1);
  CHECK(names.count("pha[gss+ffn]") == 1);
  CHECK(names.count("pha[attn,seq]") == 1);
  CHECK(names.count("pha[no-norm,raw-softplus]") == 1);
}

TEST_CASE("models: PHA sets DeepNorm's alpha from its depth; beta-init scales V, W_o and FFNs", "[models][host]") {
  using Pha = models::Pha<11, cases::pha_tiny, models::PhaLayout{.branch_norm = false}, double, Kokkos::Serial>;
  typename Pha::Options o;
  o.body.count = 3;
  Pha plain(o);
  o.beta_init = true;
  Pha scaled(o);
  CHECK(plain.body()[0].alpha() == Approx(std::pow(6.0, 0.25)));
  plain.initialize(5);
  scaled.initialize(5);
  const double beta = std::pow(24.0, -0.25);
  std::vector<std::pair<std::string, double>> ratios;
  std::vector<std::vector<double>> a;
  core::for_each_parameter(plain, [&](std::string_view, auto& p) { a.push_back(testing::to_vector(p.value())); });
  std::size_t k = 0;
  core::for_each_parameter(scaled, [&](std::string_view name, auto& p) {
    const auto b = testing::to_vector(p.value());
    const auto& ref = a[k++];
    const std::string n(name);
    const bool ffn = n.find(".2.primary.") != std::string::npos || n.find(".2.auxiliary.") != std::string::npos;
    const bool wo = n.find(".1.wo.") != std::string::npos;
    if ((ffn || wo) && n.ends_with("weight")) {
      for (std::size_t i = 0; i < b.size(); ++i) CHECK(b[i] == Approx(beta * ref[i]));
    } else if (n.ends_with("wqkv.weight")) {
      // rows: q (2 heads × 4), k (1 × 4), v (1 × 4); only v is scaled.
      for (std::size_t i = 0; i < b.size(); ++i) CHECK(b[i] == Approx(i >= 12 * 8 ? beta * ref[i] : ref[i]));
    } else {
      CHECK(b == ref);
    }
  });
}

HYBRIDSEQ_SPACE_TEST_CASE("models: PHA mixing weights start equal and are readable per layer", "[models]") {
  typename cases::PhaTiny::Layer<double, TestType>::Options o;
  o.body.count = 2;
  cases::PhaTiny::Layer<double, TestType> m(o);
  m.initialize(1);
  for (int l = 0; l < 2; ++l) {
    const auto w = m.body()[l].block().mixing_weights();
    for (double x : w) CHECK(x == Approx(1.0 / 3.0));
  }
}
