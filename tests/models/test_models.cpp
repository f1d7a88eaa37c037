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

/// Host vector of ids (B, T) → device ids for columns [t0, t1).
template <class Space>
Tensor<std::int32_t**, Space> columns(const std::vector<double>& ids, int b, int t, int t0, int t1) {
  Tensor<std::int32_t**, Space> out("ids", b, t1 - t0);
  auto h = Kokkos::create_mirror_view(out);
  for (int i = 0; i < b; ++i)
    for (int j = t0; j < t1; ++j) h(i, j - t0) = static_cast<std::int32_t>(ids[std::size_t(i) * t + j]);
  Kokkos::deep_copy(out, h);
  return out;
}

/// Logits of prefill(ids[:, :k]) followed by one step per remaining token equal the full
/// forward's, in double; restoring a snapshot taken after the prefill replays the steps.
template <class Case, class Space>
void check_decode_matches_forward() {
  testing::Harness<Case, double, Space> h;
  h.randomize(7);
  const int b = h.batch, t = h.time, v = h.layer.vocab;
  Tensor<double***, Space> full("full", b, t, v);
  h.layer.logits(h.ws, h.ids, full);
  const auto want = testing::to_vector(full);
  const auto ids = testing::to_vector(h.ids);
  for (int k : {0, 1, t / 2, t}) {
    auto st = h.layer.make_state(b);
    std::vector<double> got(want.size());
    auto put = [&](const Tensor<double***, Space>& part, int t0) {
      const auto p = testing::to_vector(part);
      const int len = int(part.extent(1));
      for (int i = 0; i < b; ++i)
        for (int j = 0; j < len; ++j)
          for (int c = 0; c < v; ++c) got[(std::size_t(i) * t + t0 + j) * v + c] = p[(std::size_t(i) * len + j) * v + c];
    };
    if (k > 0) {
      Tensor<double***, Space> part("part", b, k, v);
      h.layer.prefill(h.ws, st, columns<Space>(ids, b, t, 0, k), part);
      put(part, 0);
    }
    const auto snap = h.layer.snapshot(st);
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1) h.layer.restore(st, snap);
      for (int j = k; j < t; ++j) {
        Tensor<double***, Space> one("one", b, 1, v);
        h.layer.prefill(h.ws, st, columns<Space>(ids, b, t, j, j + 1), one);
        put(one, j);
      }
      double worst = 0;
      for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
      INFO(Case::name << ": prefill " << k << " + steps, pass " << pass << ", max |Δ| " << worst);
      CHECK(worst <= 1e-10);
      CHECK(st.length == t);
    }
  }
}

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
    DYNAMIC_SECTION(Case::name) { check_decode_matches_forward<Case, TestType>(); }
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
