// The ECP-paper family: ECP (clean and reference-faithful), PerceiverAR, Double Attention,
// s-Split and Compressed Double Attention, through the
// testbed (gradients in double end to end, PyTorch goldens of loss, logits and every
// parameter gradient, save/load), ECP decoding against the full forward (2m-key rings), and
// the errors for sequence lengths the models cannot take.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include <hybridseq/models/compressed_double_attention.hpp>
#include <hybridseq/models/cost_model.hpp>
#include <hybridseq/models/double_attention.hpp>
#include <hybridseq/models/ecp.hpp>
#include <hybridseq/models/perceiver_ar.hpp>

#include "cases/ecp_cases.hpp"
#include "support/spaces.hpp"
#include "support/testbed.hpp"

using namespace hybridseq;

namespace {

static_assert(core::TrainableBranch<cases::EcpTiny<float, Kokkos::Serial>::body_type>);
static_assert(core::DecodableBranch<cases::EcpTiny<float, Kokkos::Serial>::body_type>);
static_assert(core::DecodableBranch<cases::EcpTinyFaithful<double, Kokkos::Serial>::body_type>);
static_assert(testing::ModelLayer<cases::PerceiverArTiny<float, Kokkos::Serial>>);

template <class E, class F>
void check_throws(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    FAIL("no exception");
  } catch (const E& e) {
    const std::string what = e.what();
    INFO(what);
    for (const auto& p : parts) CHECK(what.find(p) != std::string::npos);
  }
}

}  // namespace

HYBRIDSEQ_SPACE_TEST_CASE("ecp: finite-difference gradients in double, end to end", "[ecp][gradcheck]") {
  testing::for_each_case(cases::EcpFamilyCases{},
                         [&]<class Case>() { testing::check_gradients<Case, TestType>(5e-6); });
}

HYBRIDSEQ_SPACE_TEST_CASE("ecp: PyTorch goldens in float (logits, loss, every gradient)", "[ecp][golden]") {
  testing::for_each_golden_case(cases::EcpFamilyCases{},
                                [&]<class Case>() { testing::check_golden<Case, TestType>(1e-4, 1e-5); });
}

HYBRIDSEQ_SPACE_TEST_CASE("ecp: decoding (ECP rings, PerceiverAR history + latent window) equals the full forward",
                          "[ecp][decode]") {
  testing::for_each_case(cases::EcpDecodeCases{}, [&]<class Case>() {
    testing::check_decode_matches_forward<Case, TestType>({0, 1, 3, 5, 6, 10, 11, 19, 20});
  });
}

HYBRIDSEQ_SPACE_TEST_CASE("ecp: save/load round trip", "[ecp][io]") {
  testing::for_each_case(cases::EcpFamilyCases{}, [&]<class Case>() { testing::check_round_trip<Case, TestType>(); });
}

HYBRIDSEQ_SPACE_TEST_CASE("ecp: the decoding ring holds 2m positions per layer and truncates within it",
                          "[ecp][decode]") {
  using A = models::EcpAttention<models::ecp_attention_shape(cases::ecp_tiny), 4, double, TestType>;
  A attn;
  core::initialize(attn, 3);
  core::Workspace<TestType> ws;
  auto st = attn.make_state(1);
  CHECK(st.ring.k.extent(1) == 8);
  Tensor<double***, TestType> x("x", 1, 11, 8), y("y", 1, 11, 8);
  Kokkos::deep_copy(x, 0.5);
  attn.prefill(ws, st, x, y);  // positions 0..10: the ring holds [4, 11)
  CHECK(st.length == 11);
  CHECK(st.ring.length == 7);
  attn.truncate(st, 9);
  CHECK(st.length == 9);
  CHECK(st.ring.length == 5);
  check_throws<value_error>([&] { attn.truncate(st, 7); },
                            {"hybridseq::models::EcpAttention::truncate", "length 7", "[8, 9]", "positions [4, 9)"});
}

HYBRIDSEQ_SPACE_TEST_CASE("ecp: PerceiverAR generation past M restarts the latent window; each window equals a forward",
                          "[ecp][decode]") {
  // Decoding 3M tokens from an empty state: window w covers positions [wM, (w+1)M) and must
  // give the full forward's latent logits for the input x[0, (w+1)M).
  using Model = cases::PerceiverArTiny<double, TestType>;
  constexpr int M = Model::latents, V = Model::vocab, B = 2, n = 3 * M;
  Model model({.body = {.count = 3}});
  core::initialize(model, 11);
  core::Workspace<TestType> ws;
  std::vector<double> all(std::size_t(B) * n);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < n; ++t) all[std::size_t(b) * n + t] = (7 * t + 3 * b + t * t) % V;
  auto st = model.make_state(B);
  std::vector<double> got(std::size_t(B) * n * V);
  auto decode = [&](int t0, int t1) {
    Tensor<double***, TestType> part("part", B, t1 - t0, V);
    model.prefill(ws, st, testing::id_columns<TestType>(all, B, n, t0, t1), part);
    const auto p = testing::to_vector(part);
    for (int b = 0; b < B; ++b)
      for (int j = t0; j < t1; ++j)
        for (int c = 0; c < V; ++c)
          got[(std::size_t(b) * n + j) * V + c] = p[(std::size_t(b) * (t1 - t0) + j - t0) * V + c];
  };
  decode(0, 2 * M - 1);  // one prefill across the first window boundary
  const auto snap = model.snapshot(st);
  for (int t = 2 * M - 1; t < n; ++t) decode(t, t + 1);
  CHECK(st.length == n);
  CHECK(st.body.window_start == 2 * M);
  // Restoring the snapshot (taken one token before the second boundary) and replaying in one
  // chunk across that boundary gives the same logits.
  const auto stepped = got;
  model.restore(st, snap);
  CHECK(st.body.window_start == M);
  decode(2 * M - 1, n);
  double replay = 0;
  for (std::size_t i = 0; i < got.size(); ++i) replay = std::max(replay, std::abs(got[i] - stepped[i]));
  CHECK(replay <= 1e-12);
  // A refused call leaves the state as it was.
  Tensor<std::int32_t**, TestType> wrong_batch("ids", B + 1, 1);
  Tensor<double***, TestType> wrong_out("out", B + 1, 1, V);
  check_throws<shape_error>([&] { model.prefill(ws, st, wrong_batch, wrong_out); },
                            {"hybridseq::models::PerceiverArBody::prefill", "x"});
  CHECK(st.length == n);
  CHECK(st.body.window_start == 2 * M);
  for (int w = 0; w < 3; ++w) {
    const int len = (w + 1) * M;
    Tensor<double***, TestType> full("full", B, M, V);
    model.logits(ws, testing::id_columns<TestType>(all, B, n, 0, len), full);
    const auto want = testing::to_vector(full);
    double worst = 0;
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < M; ++j)
        for (int c = 0; c < V; ++c)
          worst = std::max(
              worst, std::abs(got[(std::size_t(b) * n + w * M + j) * V + c] - want[(std::size_t(b) * M + j) * V + c]));
    INFO("window " << w << ": max |decoded - forward| " << worst);
    CHECK(worst <= 1e-10);
  }
}

HYBRIDSEQ_SPACE_TEST_CASE("ecp: lengths the models cannot take fail with the call and the values", "[ecp][errors]") {
  {
    cases::EcpTiny<float, TestType> m;
    core::Workspace<TestType> ws;
    Tensor<std::int32_t**, TestType> ids("ids", 2, 10), targets("targets", 2, 10);
    Tensor<float***, TestType> logits("logits", 2, 10, cases::ecp_vocab);
    const std::vector<std::string> parts{"T = 10", "multiple of the segment length m = 4", "pad to 12"};
    auto with = [&](std::string api) {
      auto p = parts;
      p.push_back("hybridseq::models::Ecp::" + api + ": ");
      return p;
    };
    check_throws<config_error>([&] { m.evaluate(ws, ids, targets); }, with("evaluate"));
    check_throws<config_error>([&] { m.train_step(ws, ids, targets); }, with("train_step"));
    check_throws<config_error>([&] { m.logits(ws, ids, logits); }, with("logits"));
    typename cases::EcpTiny<float, TestType>::Saved s;
    check_throws<config_error>([&] { m.forward(ws, ids, targets, s); }, with("forward"));
  }
  {
    cases::EcpTinyFaithful<float, TestType> m;
    core::Workspace<TestType> ws;
    Tensor<std::int32_t**, TestType> ids("ids", 1, 6), targets("targets", 1, 6);
    check_throws<config_error>([&] { m.evaluate(ws, ids, targets); },
                               {"hybridseq::models::Ecp::evaluate: ", "T = 6", "pad to 8"});
  }
  {
    cases::PerceiverArTiny<float, TestType> m;
    core::Workspace<TestType> ws;
    Tensor<std::int32_t**, TestType> ids("ids", 2, 3), targets("targets", 2, 3);
    check_throws<config_error>([&] { m.evaluate(ws, ids, targets); },
                               {"hybridseq::models::PerceiverAr::evaluate: ", "T = 3", "latents M = 4"});
    Tensor<float***, TestType> logits("logits", 2, 4, cases::ecp_vocab);
    check_throws<config_error>([&] { m.logits(ws, ids, logits); },
                               {"hybridseq::models::PerceiverAr::logits: ", "T = 3", "latents M = 4"});
    Tensor<std::int32_t**, TestType> ids5("ids", 2, 5), wrong("targets", 2, 4);
    check_throws<shape_error>([&] { m.evaluate(ws, ids5, wrong); },
                              {"hybridseq::models::PerceiverAr::evaluate", "targets"});
  }
  {
    cases::SSplitAttentionTiny<float, TestType> m;
    core::Workspace<TestType> ws;
    Tensor<std::int32_t**, TestType> ids("ids", 2, 10), targets("targets", 2, 10);
    check_throws<config_error>([&] { m.evaluate(ws, ids, targets); },
                               {"hybridseq::models::DoubleAttentionAr::evaluate: ", "history T − M = 6 (T = 10, M = 4)",
                                "multiple of the s-Split segment length 4"});
    cases::CompressedDoubleTiny<float, TestType> c;
    check_throws<config_error>([&] { c.evaluate(ws, ids, targets); },
                               {"hybridseq::models::CompressedDoubleAttentionAr::evaluate: ", "T = 10",
                                "history 8 + the latents 4 = 12", "Linear(8 → 2)"});
    cases::DoubleAttentionTiny<float, TestType> d;
    Tensor<std::int32_t**, TestType> short_ids("ids", 2, 3);
    Tensor<float***, TestType> logits("logits", 2, 4, cases::ecp_vocab);
    check_throws<config_error>([&] { d.logits(ws, short_ids, logits); },
                               {"hybridseq::models::DoubleAttentionAr::logits: ", "T = 3", "latents M = 4"});
  }
}

namespace {
/// Latent-loss models: a history target does not count, a latent one does; latent p's logits
/// depend on tokens ≤ p only (the last token changes only the last row) and on the history.
template <class Case, class Space>
void check_latent_loss_and_causality() {
  testing::Harness<Case, double, Space> h;
  h.randomize(11);
  const int b = h.batch, n = h.time, v = cases::ecp_vocab, m = h.layer.latents;
  const double base = h.objective();
  const auto t = testing::to_vector(h.targets);
  auto with_target = [&](int col) {
    auto u = t;
    u[col] = (int(t[col]) + 1) % v;
    testing::from_vector(h.targets, u);
  };
  with_target(1);
  CHECK(h.objective() == base);
  with_target(n - 1);
  CHECK(h.objective() != base);
  testing::from_vector(h.targets, t);

  auto logits_for = [&](int col) {
    auto ids = testing::to_vector(h.ids);
    if (col >= 0)
      for (int i = 0; i < b; ++i) ids[std::size_t(i) * n + col] = double((int(ids[std::size_t(i) * n + col]) + 1) % v);
    testing::from_vector(h.ids, ids);
    Tensor<double***, Space> out("logits", b, m, v);
    h.layer.logits(h.ws, h.ids, out);
    return testing::to_vector(out);
  };
  const auto ids0 = testing::to_vector(h.ids);
  const auto ref = logits_for(-1);
  for (double x : ref) CHECK(std::isfinite(x));
  const auto last = logits_for(n - 1);
  testing::from_vector(h.ids, ids0);
  const auto first = logits_for(0);
  testing::from_vector(h.ids, ids0);
  for (int i = 0; i < b; ++i)
    for (int r = 0; r < m; ++r) {
      double d_last = 0, d_first = 0;
      for (int c = 0; c < v; ++c) {
        const std::size_t k = (std::size_t(i) * m + r) * v + c;
        d_last = std::max(d_last, std::abs(last[k] - ref[k]));
        d_first = std::max(d_first, std::abs(first[k] - ref[k]));
      }
      INFO(Case::name << ": batch " << i << ", latent row " << r);
      if (r + 1 < m)
        CHECK(d_last == 0.0);
      else
        CHECK(d_last > 0.0);
      CHECK(d_first > 0.0);
    }
}
}  // namespace

HYBRIDSEQ_SPACE_TEST_CASE("ecp: latent-loss models supervise and depend causally on the latents", "[ecp]") {
  check_latent_loss_and_causality<cases::PerceiverArCase, TestType>();
  check_latent_loss_and_causality<cases::DoubleAttentionCase, TestType>();
  check_latent_loss_and_causality<cases::SSplitAttentionCase, TestType>();
  check_latent_loss_and_causality<cases::CompressedDoubleCase, TestType>();
}

// ---- the cost model ----

namespace {
namespace cost = models::cost;
using kernels::attention::EcpPairs;

// The paper's figure: at n = 4096, m = 256 ECP computes 2nm − m² score entries, 12.1 % of n².
static_assert(cost::ecp_paper_entries(4096, 256) == 2 * 4096 * 256 - 256 * 256);
static_assert(kernels::attention::visited_entries<EcpPairs<256>>(4096, 256) == cost::ecp_paper_entries(4096, 256));
static_assert(cost::ecp_score_fraction(4096, 256) > 0.1205 && cost::ecp_score_fraction(4096, 256) < 0.1215);
static_assert(cost::ecp_score_fraction(4096, 256) == 2031616.0 / 16777216.0);
// Exact visible pairs: s segments, the first causal (m(m+1)/2), the others m² + m(m+1)/2.
static_assert(cost::ecp_layer<models::EcpShape{256, 4, 64, 256, 1024}>(1, 4096).visible_entries ==
              16 * (256 * 257 / 2) + 15 * 256 * 256);
static_assert(cost::perceiver_ar_layer<models::PerceiverArShape{256, 4, 64, 1024, 1024}>(1, 4096, 1).visible_entries ==
              1024 * 1025 / 2);

/// Visible pairs counted from the definitions in papers.md §2, query by query.
std::int64_t count_visible(int n, int latents, auto&& sees) {
  std::int64_t c = 0;
  for (int t = n - latents; t < n; ++t)
    for (int tau = 0; tau < n; ++tau) c += sees(t, tau) ? 1 : 0;
  return c;
}

/// Workspace bytes alive after `block.forward` from an empty arena.
template <class Block, class Space>
std::int64_t forward_bytes(Block& block, int b, int n, int n_out) {
  core::Workspace<Space> ws;
  Tensor<float***, Space> x("x", b, n, Block::d_in), y("y", b, n_out, Block::d_out);
  Kokkos::deep_copy(x, 0.25f);
  typename Block::Saved s;
  block.forward(ws, x, y, s);
  return std::int64_t(ws.bytes_in_use());
}
}  // namespace

TEST_CASE("ecp: cost model entry counts follow the definitions", "[ecp][cost][host]") {
  for (int n : {4, 12, 20, 130}) {
    const int m = 4;
    CHECK(cost::ecp_layer<cases::ecp_tiny>(1, n).visible_entries ==
          count_visible(n, n, [&](int t, int tau) { return tau <= t && (t / m == 0 || tau >= (t / m - 1) * m); }));
    CHECK(cost::perceiver_ar_layer<cases::perceiver_tiny>(1, n, 0).visible_entries ==
          count_visible(n, m, [&](int t, int tau) { return tau <= t; }));
    CHECK(cost::perceiver_ar_layer<cases::perceiver_tiny>(1, n, 1).visible_entries ==
          count_visible(m, m, [&](int t, int tau) { return tau <= t; }));
    const int h = n - m;
    CHECK(cost::double_attention_layer<cases::double_tiny>(1, n).visible_entries ==
          count_visible(n, n, [&](int t, int tau) { return t < h ? tau < h : tau <= t; }));
    if (h % 4 == 0)
      CHECK(cost::double_attention_layer<cases::ssplit_tiny>(1, n).visible_entries ==
            count_visible(n, n, [&](int t, int tau) { return t < h ? (tau < h && tau / 4 == t / 4) : tau <= t; }));
  }
  // Compressed Double (h 8 → c 2, M 4): layer 1 as Double over 12, later layers Double over 6.
  CHECK(cost::compressed_double_layer<cases::compressed_tiny>(1, 0).visible_entries ==
        count_visible(12, 12, [&](int t, int tau) { return t < 8 ? tau < 8 : tau <= t; }));
  CHECK(cost::compressed_double_layer<cases::compressed_tiny>(1, 1).visible_entries ==
        count_visible(6, 6, [&](int t, int tau) { return t < 2 ? tau < 2 : tau <= t; }));
  // The kernel's 64 × 64 tiles follow the band more closely than the paper's m × m blocks:
  // visible (1 509 376) < visited (1 638 400) < 2nm − m² (2 031 616).
  constexpr auto big = cost::ecp_layer<models::EcpShape{256, 4, 64, 256, 1024}>(1, 4096);
  CHECK(big.visible_entries == 1509376);
  CHECK(big.visited_entries == 1638400);
  CHECK(big.visited_entries < cost::ecp_paper_entries(4096, 256));
  // FLOPs: QKV 3·2nd², scores + PV 4·d·E, output 2nd², FFN 4ndf.
  CHECK(big.flops ==
        6LL * 4096 * 256 * 256 + 4LL * 256 * big.visible_entries + 2LL * 4096 * 256 * 256 + 4LL * 4096 * 256 * 1024);
}

HYBRIDSEQ_SPACE_TEST_CASE("ecp: cost model activation bytes equal the workspace after forward", "[ecp][cost]") {
  for (int n : {12, 16}) {
    INFO("n = " << n);
    {
      models::EcpBlock<cases::ecp_tiny, float, TestType> block;
      CHECK(forward_bytes<decltype(block), TestType>(block, 2, n, n) ==
            cost::ecp_layer<cases::ecp_tiny>(2, n).activation_bytes);
    }
    for (int layer : {0, 1}) {
      models::EcpBlock<cases::ecp_tiny_faithful, float, TestType> block;
      block.attention().set_rotary(layer == 0);
      CHECK(forward_bytes<decltype(block), TestType>(block, 2, n, n) ==
            cost::ecp_layer<cases::ecp_tiny_faithful>(2, n, layer).activation_bytes);
    }
    {
      using P = cases::PerceiverArTiny<float, TestType>;
      typename P::body_type::Cross cross;
      CHECK(forward_bytes<decltype(cross), TestType>(cross, 2, n, 4) ==
            cost::perceiver_ar_layer<cases::perceiver_tiny>(2, n, 0).activation_bytes);
      typename P::body_type::LatentBlock latent;
      CHECK(forward_bytes<decltype(latent), TestType>(latent, 2, 4, 4) ==
            cost::perceiver_ar_layer<cases::perceiver_tiny>(2, n, 1).activation_bytes);
    }
    {
      typename cases::DoubleAttentionTiny<float, TestType>::body_type::Block block;
      CHECK(forward_bytes<decltype(block), TestType>(block, 2, n, n) ==
            cost::double_attention_layer<cases::double_tiny>(2, n).activation_bytes);
      typename cases::SSplitAttentionTiny<float, TestType>::body_type::Block split;
      CHECK(forward_bytes<decltype(split), TestType>(split, 2, n, n) ==
            cost::double_attention_layer<cases::ssplit_tiny>(2, n).activation_bytes);
    }
    if (n == 12) {  // Compressed Double takes exactly n = h + M = 12, and gives c + M = 6 rows
      using C = cases::CompressedDoubleTiny<float, TestType>;
      typename C::body_type::First first;
      CHECK(forward_bytes<decltype(first), TestType>(first, 2, n, 6) ==
            cost::compressed_double_layer<cases::compressed_tiny>(2, 0).activation_bytes);
      typename C::body_type::Block later;
      CHECK(forward_bytes<decltype(later), TestType>(later, 2, 6, 6) ==
            cost::compressed_double_layer<cases::compressed_tiny>(2, 1).activation_bytes);
    }
  }
}
