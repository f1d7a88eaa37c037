// Whole language models: PHA (and ablation variants), the GPT-NeoX Transformer, the Mamba LM
// and an SSM→TF→TF hybrid, through the testbed (gradients in double end to end, PyTorch
// goldens of logits, loss and every parameter gradient, save/load), decoding against the
// full forward, the ablation type list, and mixing weights.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <boost/hana/for_each.hpp>
#include <boost/hana/length.hpp>

#include <hybridseq/decode/session.hpp>
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
  // A whole model is differenced through its scalar loss (≈ 2.4), not term by term: at the
  // 4th-order stencil's step (3e-5 relative) round-off is ~1e-11 absolute, which against
  // the smallest gradient tensors (Mamba's A_log behind two TF layers, |g| ~ 1e-5) is a
  // relative 1–2e-6. Every other tensor checks to ≤ 1e-7.
  testing::for_each_case(cases::ModelCases{}, [&]<class Case>() { testing::check_gradients<Case, TestType>(5e-6); });
}

HYBRIDSEQ_SPACE_TEST_CASE("models: PyTorch goldens in float (logits, loss, every gradient)", "[models][golden]") {
  testing::for_each_golden_case(cases::ModelCases{},
                                [&]<class Case>() { testing::check_golden<Case, TestType>(1e-4, 1e-5); });
}

HYBRIDSEQ_SPACE_TEST_CASE("models: decoding equals the full forward", "[models][decode]") {
  testing::for_each_case(cases::ModelCases{}, [&]<class Case>() {
    testing::check_decode_matches_forward<Case, TestType>({0, 1, 4, 9});
  });
}

HYBRIDSEQ_SPACE_TEST_CASE("models: save/load round trip", "[models][io]") {
  testing::for_each_case(cases::ModelCases{}, [&]<class Case>() { testing::check_round_trip<Case, TestType>(); });
}

TEST_CASE("models: the PHA ablation grid is 35 distinct variants with distinct names", "[models][host]") {
  constexpr auto grid = models::pha_ablations<11, cases::pha_tiny, float, Kokkos::Serial>;
  STATIC_REQUIRE(decltype(hana::length(grid))::value == 35);
  std::set<std::string> names;
  int full = 0;
  hana::for_each(grid, [&](auto t) {
    using M = typename decltype(t)::type;
    names.insert(M::name());
    if (M::branches::size == 3) ++full;
  });
  CHECK(names.size() == 35);
  CHECK(full == 5);
  CHECK(names.count("pha") == 1);
  CHECK(names.count("pha[gss+ffn]") == 1);
  CHECK(names.count("pha[attn,seq]") == 1);
  CHECK(names.count("pha[no-norm,raw-softplus]") == 1);
}

TEST_CASE("models: a fourth branch kind in the list gives the 75-variant grid", "[models][host]") {
  // The only change: the list names a fourth kind (cases::pha_four_branches).
  constexpr auto grid = models::pha_ablations<11, cases::pha_tiny, float, Kokkos::Serial, cases::pha_four_branches>;
  STATIC_REQUIRE(decltype(hana::length(grid))::value == 15 * 5);
  std::set<std::string> names;
  int with_window = 0;
  hana::for_each(grid, [&](auto t) {
    using M = typename decltype(t)::type;
    names.insert(M::name());
    if (M::name().find("swa") != std::string::npos) ++with_window;
  });
  CHECK(names.size() == 75);
  CHECK(with_window == 8 * 5);  // the subsets holding the fourth kind
  CHECK(names.count("pha[gss+attn+ffn+swa]") == 1);
  CHECK(names.count("pha") == 1);  // the paper's three kinds are the paper's model, whatever list they came from
  CHECK(names.count("pha[swa,seq]") == 1);
  CHECK(names.count("pha[attn+swa,no-norm,raw-softplus]") == 1);
}

namespace {
/// Sets every attention's max_cache and rope_base through a named model's options and checks
/// that both arrive: decoding runs past the default 4096-position cache and matches the full
/// forward there, the RoPE base reaches every attention (a base it refuses stops the build;
/// with more than one rotary frequency it changes the logits), and the default model's
/// refusal names an option the user can reach.
template <class Model>
void check_attention_options_reach(const char* model_name, bool rope_changes_logits) {
  using Space = Kokkos::Serial;
  constexpr int t = 4100, v = Model::vocab;
  typename Model::Options o;
  o.body.count = 1;
  Model stock(o);
  int reached = 0;
  core::for_each_option<layers::AttentionOptions>(o, [&](auto& a) {
    a.max_cache = 4200;
    a.rope_base = 500.0;
    ++reached;
  });
  REQUIRE(reached >= 1);
  {
    auto bad = o;
    int k = 0;
    core::for_each_option<layers::AttentionOptions>(bad, [&](auto& a) {
      if (++k == reached) a.rope_base = 0.5;  // only the last attention of the model
    });
    REQUIRE_THROWS_WITH(Model(bad), "hybridseq::layers::Attention: rope_base must be > 1, got 0.5");
  }
  Model model(o);
  core::initialize(stock, 3);
  core::initialize(model, 3);
  core::Workspace<Space> ws;

  Tensor<std::int32_t**, Space> ids("ids", 1, t);
  auto hi = Kokkos::create_mirror_view(ids);
  for (int i = 0; i < t; ++i) hi(0, i) = std::int32_t((i * 7 + i / 5) % v);
  Kokkos::deep_copy(ids, hi);
  Tensor<float***, Space> full("full", 1, t, v);
  model.logits(ws, ids, full);
  Tensor<float***, Space> stock_full("stock_full", 1, t, v);
  stock.logits(ws, ids, stock_full);

  auto st = model.make_state(1);
  const auto head = Kokkos::subview(ids, Kokkos::ALL, std::make_pair(0, t - 1));
  const auto last = Kokkos::subview(ids, Kokkos::ALL, std::make_pair(t - 1, t));
  Tensor<std::int32_t**, Space> prompt("prompt", 1, t - 1), next("next", 1, 1);
  Kokkos::deep_copy(prompt, head);
  Kokkos::deep_copy(next, last);
  Tensor<float***, Space> out("out", 1, t - 1, v), step("step", 1, 1, v);
  model.prefill(ws, st, prompt, out);
  model.prefill(ws, st, next, step);  // position 4099: past the default capacity
  const auto want = testing::to_vector(full), got = testing::to_vector(step),
             stock_want = testing::to_vector(stock_full);
  double worst = 0, rope_effect = 0;
  for (int c = 0; c < v; ++c) {
    const std::size_t i = std::size_t(t - 1) * v + c;
    worst = std::max(worst, double(std::abs(got[c] - want[i])));
    rope_effect = std::max(rope_effect, double(std::abs(want[i] - stock_want[i])));
  }
  INFO(model_name << ": |decode − forward| " << worst << ", |rope_base 500 − 10000| " << rope_effect);
  CHECK(worst < 2e-3);
  if (rope_changes_logits) CHECK(rope_effect > 1e-4);
  CHECK(st.length == t);

  auto stock_state = stock.make_state(1);
  Tensor<float***, Space> all("all", 1, t, v);
  REQUIRE_THROWS_WITH(stock.prefill(ws, stock_state, ids, all),
                      Catch::Contains("KV cache holds 4096 positions") &&
                          Catch::Contains("hybridseq::core::for_each_option<hybridseq::layers::AttentionOptions>"));
}
}  // namespace

TEST_CASE("models: attention max_cache and rope_base reach every attention of a Transformer, a Stack and a PHA",
          "[models][host][options]") {
  // Cooper's TF layer rotates 2 dims of each head: one frequency, base^0 = 1 whatever the base.
  check_attention_options_reach<cases::TransformerTiny<float, Kokkos::Serial>>("Transformer", false);
  check_attention_options_reach<cases::HybridTiny<float, Kokkos::Serial>>("Stack [SSM, TF, TF]", false);
  check_attention_options_reach<cases::PhaTiny::Layer<float, Kokkos::Serial>>("PHA", true);
}

TEST_CASE("models: a refused prefill leaves every layer's state unchanged ([SSM, TF, TF], PHA)",
          "[models][host][decode]") {
  const auto check = []<class Model>(Model*, const char* name) {
    using Space = Kokkos::Serial;
    constexpr int v = Model::vocab;
    typename Model::Options o;
    o.body.count = 1;
    core::for_each_option<layers::AttentionOptions>(o, [](auto& a) { a.max_cache = 8; });
    Model model(o);
    core::initialize(model, 5);
    core::Workspace<Space> ws;
    const auto ids = [](int b, int t, int from) {
      Tensor<std::int32_t**, Space> out("ids", b, t);
      auto h = Kokkos::create_mirror_view(out);
      for (int i = 0; i < b; ++i)
        for (int j = 0; j < t; ++j) h(i, j) = std::int32_t((3 * (from + j) + i) % v);
      Kokkos::deep_copy(out, h);
      return out;
    };
    auto st = model.make_state(1), fresh = model.make_state(1);
    Tensor<float***, Space> out6("out6", 1, 6, v), out4("out4", 1, 4, v), out2("out2", 1, 2, v), out2b("b", 1, 2, v);
    model.prefill(ws, st, ids(1, 6, 0), out6);
    model.prefill(ws, fresh, ids(1, 6, 0), out6);
    INFO(name);
    REQUIRE_THROWS_WITH(model.prefill(ws, st, ids(1, 4, 6), out4),
                        Catch::Contains("KV cache holds 8 positions; 6 used + 4 new exceeds it"));
    Tensor<float***, Space> wrong("wrong", 2, 1, v);
    REQUIRE_THROWS_WITH(model.prefill(ws, st, ids(2, 1, 6), wrong),
                        Catch::Contains("x holds 2 sequences; the decoding state holds 1"));
    CHECK(st.length == 6);
    model.prefill(ws, st, ids(1, 2, 6), out2);  // continues as if the refused calls never happened
    model.prefill(ws, fresh, ids(1, 2, 6), out2b);
    CHECK(testing::to_vector(out2) == testing::to_vector(out2b));
  };
  check(static_cast<cases::HybridTiny<float, Kokkos::Serial>*>(nullptr), "Stack [SSM, TF, TF]");
  check(static_cast<cases::PhaTiny::Layer<float, Kokkos::Serial>*>(nullptr), "PHA");
}

namespace {
std::vector<std::string>& recorded() {
  static std::vector<std::string> events;
  return events;
}
void record_allocation(Kokkos::Profiling::SpaceHandle, const char* label, const void*, std::uint64_t) {
  recorded().emplace_back(label);
}
// A View copied into a View of another memory space (a fill, deep_copy(view, value), names its
// source "Scalar"): on a GPU a copy to or from the host waits for the device. Host spaces have
// one memory space, so there the check holds by construction; it is for the Cuda half.
void record_view_copy(Kokkos::Profiling::SpaceHandle dst_space, const char* dst, const void*,
                      Kokkos::Profiling::SpaceHandle src_space, const char* src, const void*, std::uint64_t) {
  if (std::string_view(src) != "Scalar" && std::string_view(dst_space.name) != src_space.name)
    recorded().push_back(std::string(src_space.name) + ":" + src + " -> " + dst_space.name + ":" + dst);
}
/// What one call of f does, as recorded by a Kokkos tools callback: allocations (their labels)
/// or copies between memory spaces (source -> destination). The callback is removed however f ends.
enum class Recorded { allocations, space_copies };
template <class F>
std::string recorded_in(Recorded what, F&& f) {
  struct Recording {
    Recorded what;
    explicit Recording(Recorded w) : what(w) {
      recorded().clear();
      if (what == Recorded::allocations)
        Kokkos::Tools::Experimental::set_allocate_data_callback(record_allocation);
      else
        Kokkos::Tools::Experimental::set_begin_deep_copy_callback(record_view_copy);
    }
    ~Recording() {
      if (what == Recorded::allocations)
        Kokkos::Tools::Experimental::set_allocate_data_callback(nullptr);
      else
        Kokkos::Tools::Experimental::set_begin_deep_copy_callback(nullptr);
    }
  };
  {
    const Recording recording(what);
    f();
  }
  std::string events;
  for (const auto& e : recorded()) events += " " + e;
  return events;
}
}  // namespace

HYBRIDSEQ_SPACE_TEST_CASE(
    "models: training and decoding steps (and a session's) allocate nothing after the first, and a "
    "training step copies nothing between memory spaces (PHA, Transformer, [SSM, TF])",
    "[models]") {
  // The arena takes its chunks in the first step; every later step finds its memory there or in
  // the layers (parameters, gradients, the gradients' column partials, decoding state): on a
  // GPU an allocation synchronises the device. Allocations are counted through Kokkos' tools
  // interface, over 210 rows (4 row blocks of the column reductions) and 70 positions (2 query
  // tiles), then over decoded tokens.
  using S = TestType;
  if (Kokkos::Tools::profileLibraryLoaded()) {
    WARN("a Kokkos tool is attached: its callbacks are not ours to replace, so allocations are not counted");
    return;
  }
  const auto check = [&]<class Case>(Case) {
    using L = typename Case::template Layer<float, S>;
    L model(Case::template options<L>());
    core::initialize(model, 5);
    const std::int64_t b = 3, t = 70;
    std::vector<int> id(b * t), target(b * t);
    for (std::size_t i = 0; i < id.size(); ++i) {
      id[i] = int(i * 7 % cases::model_vocab);
      target[i] = int((i * 5 + 1) % cases::model_vocab);
    }
    Tensor<std::int32_t**, S> ids("ids", b, t), targets("targets", b, t);
    testing::from_vector(ids, id);
    testing::from_vector(targets, target);
    core::Workspace<S> ws;
    const auto step = [&] {
      core::zero_grad(model);
      model.train_step(ws, ids, targets);
      S().fence();
    };
    step();
    const std::string in_training = recorded_in(Recorded::allocations, step);
    INFO(Case::name << " allocated in its second training step:" << in_training);
    CHECK(in_training.empty());
    // Nor does a step copy between memory spaces (the mixers once read their logits back to the
    // host); what it still reads back are reductions (the loss, the finiteness and id checks).
    const std::string copied = recorded_in(Recorded::space_copies, step);
    INFO(Case::name << " copied between memory spaces in a training step:" << copied);
    CHECK(copied.empty());

    auto state = model.make_state(1);
    Tensor<std::int32_t**, S> token("token", 1, 1);
    Tensor<float***, S> logits("logits", 1, 1, cases::model_vocab);
    const auto decode = [&] {
      for (int p = 0; p < 3; ++p) model.prefill(ws, state, token, logits);
      S().fence();
    };
    decode();
    const std::string in_decoding = recorded_in(Recorded::allocations, decode);
    INFO(Case::name << " allocated in decoding tokens 4-6:" << in_decoding);
    CHECK(in_decoding.empty());

    // A session's generated tokens and their logits go to buffers made with the session, and
    // sampling runs where the logits are: only the B sampled ids come back to the host.
    decode::Session session(model, 2);
    session.prefill({1, 2, 3, 4, 5, 6}, 3);
    session.generate(2);
    const auto generate = [&] {
      session.generate(3, {.temperature = 0.7, .top_k = 5, .seed = 1});
      S().fence();
    };
    const std::string in_session = recorded_in(Recorded::allocations, generate);
    INFO(Case::name << "'s session allocated in generating tokens 3-5:" << in_session);
    CHECK(in_session.empty());
    const std::string session_copies = recorded_in(Recorded::space_copies, generate);
    INFO(Case::name << "'s session copied between memory spaces in generating tokens 6-8:" << session_copies);
    CHECK(session_copies.find("logits") == std::string::npos);
    CHECK(session_copies.find("last_rows") == std::string::npos);
  };
  check(cases::PhaTiny{});
  check(cases::TransformerCase{});
  check(cases::HybridCase{});
}

TEST_CASE("models: dropout acts in training passes only, with masks fixed by (seed, pass)", "[models][host][dropout]") {
  using Space = Kokkos::Serial;
  using Model = cases::HybridTiny<float, Space>;
  constexpr int v = Model::vocab, b = 2, t = 9;
  auto with_dropout = cases::HybridDropout::options<Model>();
  auto without = with_dropout;
  without.embed_dropout = 0;
  core::for_each_option<core::OutputDropout>(without, [](auto& d) { d.p = 0; });
  core::for_each_option<layers::AttentionOptions>(without, [](auto& a) { a.dropout = 0; });
  Model model(with_dropout), plain(without);
  core::initialize(model, 3);
  core::initialize(plain, 3);
  core::Workspace<Space> ws;
  Tensor<std::int32_t**, Space> ids("ids", b, t), targets("targets", b, t);
  auto hi = Kokkos::create_mirror_view(ids);
  auto ht = Kokkos::create_mirror_view(targets);
  for (int i = 0; i < b; ++i)
    for (int j = 0; j < t; ++j) hi(i, j) = (5 * j + i) % v, ht(i, j) = (7 * j + 2 * i + 1) % v;
  Kokkos::deep_copy(ids, hi);
  Kokkos::deep_copy(targets, ht);
  const auto training_loss = [&](std::uint64_t seed, std::uint64_t pass) {
    core::TrainingPass<Space> training(ws, seed, pass);
    typename Model::Saved s;
    core::WorkspaceScope scope(ws);
    return model.forward(ws, ids, targets, s);
  };
  const float reference = plain.evaluate(ws, ids, targets);
  {
    typename Model::Saved s;
    core::WorkspaceScope scope(ws);
    CHECK(model.forward(ws, ids, targets, s) == reference);  // outside a training pass: no dropout
  }
  const float a = training_loss(7, 3);
  CHECK(a != reference);
  CHECK(training_loss(7, 3) == a);  // the same key, the same masks
  CHECK(training_loss(7, 4) != a);  // another pass, other masks
  CHECK(training_loss(8, 3) != a);  // another seed, other masks
  {
    core::TrainingPass<Space> training(ws, 7, 3);  // evaluate, logits and decoding never drop
    CHECK(model.evaluate(ws, ids, targets) == reference);
    Tensor<float***, Space> logits("logits", b, t, v), logits_plain("logits_plain", b, t, v), stepped("s", b, t, v);
    model.logits(ws, ids, logits);
    plain.logits(ws, ids, logits_plain);
    CHECK(testing::to_vector(logits) == testing::to_vector(logits_plain));
    auto st = model.make_state(b);
    model.prefill(ws, st, ids, stepped);
    const auto want = testing::to_vector(logits_plain), got = testing::to_vector(stepped);
    double worst = 0;
    for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - want[i])));
    CHECK(worst < 1e-5);
  }
  // Out-of-range rates are refused by the layer that owns them, naming the option.
  auto bad = without;
  bad.embed_dropout = 1.0;
  REQUIRE_THROWS_WITH(Model(bad), "hybridseq::models::LanguageModel: Options::embed_dropout must be in [0, 1), got 1");
  bad = without;
  core::for_each_option<layers::AttentionOptions>(bad, [](auto& o) { o.dropout = -0.5; });
  REQUIRE_THROWS_WITH(Model(bad), Catch::Contains("AttentionOptions::dropout must be in [0, 1), got -0.5"));
  bad = without;
  core::for_each_option<core::OutputDropout>(bad, [](auto& d) { d.p = 2; });
  REQUIRE_THROWS_WITH(Model(bad), Catch::Contains("Options::dropout.p must be in [0, 1), got 2"));
}

// A template test case only because nvcc 13 cannot emit this model's Options named outside a
// template (an undeclared template parameter object); the test runs once, in double.
TEMPLATE_TEST_CASE(
    "models: init_std draws every matrix and the embeddings from N(0, std), biases 0, the rest unchanged",
    "[models][host]", double) {
  using Model = cases::HybridTiny<TestType, Kokkos::Serial>;
  typename Model::Options normal;
  normal.init_std = 0.02;
  Model own, model(normal);
  core::initialize(own, 5);
  core::initialize(model, 5);
  std::map<std::string, std::vector<double>> before;
  core::for_each_parameter(
      own, [&](std::string_view name, auto& p) { before[std::string(name)] = testing::to_vector(p.value()); });
  int matrices = 0, biases = 0, kept = 0;
  core::for_each_parameter(model, [&](std::string_view name, auto& p) {
    const auto v = testing::to_vector(p.value());
    INFO(name);
    if ((p.role() == core::Role::weight && p.rank() == 2) || p.role() == core::Role::embedding) {
      double sq = 0;
      for (double x : v) sq += x * x;
      const double std = std::sqrt(sq / double(v.size()));
      CHECK(std > 0.02 * (1 - 4 / std::sqrt(double(v.size()))));  // 4 standard errors of the estimate
      CHECK(std < 0.02 * (1 + 4 / std::sqrt(double(v.size()))));
      ++matrices;
    } else if (p.role() == core::Role::bias) {
      CHECK(std::all_of(v.begin(), v.end(), [](double x) { return x == 0; }));
      const auto& was = before[std::string(name)];
      biases += std::any_of(was.begin(), was.end(), [](double x) { return x != 0; });
    } else {
      CHECK(v == before[std::string(name)]);  // conv kernels, norm gains, A_log, D
      ++kept;
    }
  });
  CHECK(matrices >= 6);  // Mamba's in, x, dt and out projections, attention's, the embedding table
  CHECK(biases >= 2);    // zeroed, though their own init is not: Mamba's conv and dt biases
  CHECK(kept >= 3);
  normal.init_std = -0.02;
  REQUIRE_THROWS_WITH(Model(normal),
                      "hybridseq::models::LanguageModel: Options::init_std must be >= 0 (0: the "
                      "layers' own), got -0.02");
}

TEST_CASE("models: PHA sets DeepNorm's alpha from its depth; beta-init scales V, W_o and FFNs", "[models][host]") {
  using Pha = models::Pha<11, cases::pha_tiny, models::PhaLayout{.branch_norm = false}, double, Kokkos::Serial>;
  typename Pha::Options o;
  o.body.count = 3;
  Pha plain(o);
  o.beta_init = true;
  Pha scaled(o);
  CHECK(plain.body()[0].alpha() == Approx(std::pow(6.0, 0.25)));
  core::initialize(plain, 5);  // β-init runs through the model's after_initialize hook
  core::initialize(scaled, 5);
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
  core::initialize(m, 1);
  for (int l = 0; l < 2; ++l) {
    const auto w = m.body()[l].block().mixing_weights();
    for (double x : w) CHECK(x == Approx(1.0 / 3.0));
  }
}

TEST_CASE("models: describe() prints a PHA and an ECP model with their parameter counts", "[models][host]") {
  const auto check = [](auto& model) {
    const std::string text = core::describe(model);
    INFO(text);
    const auto tree = core::summarize(model);
    REQUIRE(!tree.empty());
    CHECK(tree.front().parameter_count == core::parameter_count(model));
    CHECK(text.ends_with("total  params=" + std::to_string(core::parameter_count(model)) + "\n"));
    std::int64_t own = 0;  // every parameter is listed once, under the module that owns it
    for (const auto& s : tree)
      for (const auto& [name, shape] : s.parameters) {
        std::int64_t n = 1;
        for (auto e : shape) n *= e;
        own += n;
      }
    CHECK(own == core::parameter_count(model));
    return text;
  };
  typename cases::PhaTiny::Layer<float, Kokkos::Serial>::Options po;
  po.body.count = 2;
  cases::PhaTiny::Layer<float, Kokkos::Serial> pha(po);
  const std::string p = check(pha);
  CHECK(p.starts_with("Pha  params=" + std::to_string(core::parameter_count(pha)) +
                      "\n  embed  Embedding  weight (11, 8)  params=88\n"));
  CHECK(p.find("\n            body.1.block.1.0.wqkv  Linear  weight (16, 8)  params=128\n") != std::string::npos);

  using Ecp = models::Ecp<11, models::EcpShape{8, 2, 4, 4, 32}, float, Kokkos::Serial>;
  typename Ecp::Options eo;
  eo.body.count = 2;
  Ecp ecp(eo);
  const std::string e = check(ecp);
  CHECK(e.starts_with("Ecp  params=" + std::to_string(core::parameter_count(ecp)) + "\n"));
  CHECK(e.find("\n      body.0.attn  PreNormResidual  params=280\n"
               "        body.0.attn.norm  LayerNorm  weight (8)  bias (8)  params=16\n"
               "        body.0.attn.block  EcpAttention  params=264\n") != std::string::npos);
}

namespace {

/// A tied and an untied model of one case, in double on Serial.
template <class Case>
struct TiedPair {
  using L = typename Case::template Layer<double, Kokkos::Serial>;
  static typename L::Options options(bool tie) {
    auto o = testing::options_of<Case, L>();
    o.tie_embeddings = tie;
    return o;
  }
  L tied{options(true)}, untied{options(false)};
};

template <class M>
std::set<std::string> parameter_names(M& m) {
  std::set<std::string> names;
  core::for_each_parameter(m, [&](std::string_view n, auto&) { names.insert(std::string(n)); });
  return names;
}

template <class M>
std::vector<double> parameter_of(M& m, std::string_view name, bool grad = false) {
  std::vector<double> out;
  core::for_each_parameter(m, [&](std::string_view n, auto& p) {
    if (n == name) out = testing::to_vector(grad ? p.grad() : p.value());
  });
  REQUIRE(!out.empty());
  return out;
}

}  // namespace

TEST_CASE("models: tied embeddings list embed.weight once: count = untied - V*D, no head.weight", "[models][host]") {
  const auto check = []<class Case>() {
    INFO(Case::name);
    TiedPair<Case> m;
    using L = typename TiedPair<Case>::L;
    CHECK(m.tied.tied_embeddings());
    CHECK(!m.untied.tied_embeddings());
    CHECK(core::parameter_count(m.tied) == core::parameter_count(m.untied) - std::int64_t(L::vocab) * L::d_model);
    auto tied = parameter_names(m.tied), untied = parameter_names(m.untied);
    CHECK(tied.count("embed.weight") == 1);
    CHECK(tied.count("head.weight") == 0);
    CHECK(untied.count("head.weight") == 1);
    untied.erase("head.weight");
    CHECK(tied == untied);
    int embed_visits = 0;  // listed once: zero_grad, the optimizer and checkpoints see one tensor
    core::for_each_parameter(m.tied, [&](std::string_view n, auto&) { embed_visits += n == "embed.weight"; });
    CHECK(embed_visits == 1);
    // Initialised once, by the embedding's init: the same stream as the untied embedding's.
    core::initialize(m.tied, 5);
    core::initialize(m.untied, 5);
    CHECK(parameter_of(m.tied, "embed.weight") == parameter_of(m.untied, "embed.weight"));
  };
  check.operator()<cases::PhaTied>();
  check.operator()<cases::TransformerTiedCase>();
}

TEST_CASE("models: a tied model equals the untied one with head.weight = embed.weight; E's gradient is the sum",
          "[models][host]") {
  const auto check = []<class Case>() {
    INFO(Case::name);
    testing::Harness<Case, double, Kokkos::Serial> h;  // the tied case, randomised, with ids and targets
    h.randomize(11);
    TiedPair<Case> m;
    const auto e = parameter_of(h.layer, "embed.weight");
    core::for_each_parameter(m.untied, [&](std::string_view n, auto& p) {
      testing::from_vector(p.value(), n == "head.weight" ? e : parameter_of(h.layer, n));
    });
    const double tied_loss = h.analytic();
    core::zero_grad(m.untied);
    core::Workspace<Kokkos::Serial> ws;
    const double untied_loss = m.untied.train_step(ws, h.ids, h.targets);
    CHECK(tied_loss == Approx(untied_loss).epsilon(1e-14));
    using L = typename TiedPair<Case>::L;
    Tensor<double***, Kokkos::Serial> a("a", h.batch, h.time, L::vocab), b("b", h.batch, h.time, L::vocab);
    h.layer.logits(h.ws, h.ids, a);
    m.untied.logits(ws, h.ids, b);
    const auto la = testing::to_vector(a), lb = testing::to_vector(b);
    for (std::size_t i = 0; i < la.size(); ++i) REQUIRE(la[i] == Approx(lb[i]).epsilon(1e-13).margin(1e-13));
    const auto ge = parameter_of(m.untied, "embed.weight", true), gh = parameter_of(m.untied, "head.weight", true);
    const auto gt = parameter_of(h.layer, "embed.weight", true);
    for (std::size_t i = 0; i < gt.size(); ++i) REQUIRE(gt[i] == Approx(ge[i] + gh[i]).epsilon(1e-12).margin(1e-14));
  };
  check.operator()<cases::PhaTied>();
  check.operator()<cases::TransformerTiedCase>();
}

TEST_CASE("models: untied and tied checkpoints do not load into each other (strict name check)", "[models][host]") {
  using Catch::Matchers::Contains;
  TiedPair<cases::TransformerTiedCase> m;
  core::initialize(m.tied, 1);
  core::initialize(m.untied, 2);
  const auto dir = std::filesystem::temp_directory_path();
  const auto untied_path = dir / "hybridseq_tie_untied.safetensors", tied_path = dir / "hybridseq_tie_tied.safetensors";
  io::save_parameters(m.untied, untied_path);
  io::save_parameters(m.tied, tied_path);
  CHECK(io::SafetensorsFile::open(tied_path).tensors().size() + 1 ==
        io::SafetensorsFile::open(untied_path).tensors().size());
  REQUIRE_THROWS_AS(io::load_parameters(m.tied, untied_path), io_error);
  REQUIRE_THROWS_WITH(io::load_parameters(m.tied, untied_path),
                      Contains("has 1 tensor(s) the model does not have: 'head.weight'"));
  REQUIRE_THROWS_WITH(io::load_parameters(m.untied, tied_path), Contains("has no tensor 'head.weight'"));
  io::load_parameters(m.tied, tied_path);  // and each loads its own kind
  io::load_parameters(m.untied, untied_path);
  std::filesystem::remove(untied_path);
  std::filesystem::remove(tied_path);
}

TEST_CASE("models: a core::dynamic vocabulary comes from Options::vocab; contradictions are refused",
          "[models][host]") {
  using Catch::Matchers::Contains;
  using Runtime = cases::HybridRuntimeVocabTiny<float, Kokkos::Serial>;
  using Fixed = cases::HybridTiny<float, Kokkos::Serial>;
  Runtime::Options o;
  o.vocab = 34;
  Runtime m(o);
  CHECK(m.vocab_size() == 34);
  std::map<std::string, std::vector<std::int64_t>> shapes;
  core::for_each_parameter(m, [&](std::string_view n, auto& p) {
    shapes[std::string(n)] = {p.extent(0), p.rank() > 1 ? p.extent(1) : 0};
  });
  CHECK(shapes["embed.weight"] == std::vector<std::int64_t>{34, Runtime::d_model});
  CHECK(shapes["head.weight"] == std::vector<std::int64_t>{34, Runtime::d_model});
  CHECK(Fixed().vocab_size() == cases::model_vocab);

  REQUIRE_THROWS_WITH(Runtime(), Contains("hybridseq::models::LanguageModel") &&
                                     Contains("Options::vocab is 0; the type leaves it to run time"));
  Fixed::Options wrong;
  wrong.vocab = 12;
  REQUIRE_THROWS_WITH(Fixed(wrong), Contains("Options::vocab is 12 but the type fixes it at 11"));
  auto child = o;
  child.embed.vocab = 30;
  REQUIRE_THROWS_WITH(Runtime(child), Contains("Options::embed.vocab is 30 but the model's vocabulary is 34"));

  core::initialize(m, 3);
  core::Workspace<Kokkos::Serial> ws;
  Tensor<std::int32_t**, Kokkos::Serial> ids("ids", 1, 3), targets("targets", 1, 3);
  ids(0, 1) = 33;
  CHECK(std::isfinite(m.evaluate(ws, ids, targets)));
  ids(0, 2) = 34;
  REQUIRE_THROWS_WITH(m.evaluate(ws, ids, targets), Contains("token id 34 at (b=0, t=2) is outside [0, 34)"));
  decode::Session session(m, 2);
  session.prefill({1, 2, 33, 4}, 2);
  CHECK(session.last_logits().size() == 2 * 34);
}

#if defined(KOKKOS_ENABLE_CUDA)
// Backend against backend, in the CUDA configuration (run by scripts/device-check.sh on a GPU):
// the same model (parameters are drawn on the host for every space, see core::initialize), the
// same batch, one training step at text_lm's benchmark shape (B 16, T 128, width 128, ~0.9 M
// parameters): loss and every parameter gradient on Kokkos::Cuda against Kokkos::Serial. The
// two sum in different orders (cuBLAS, the team kernels), so in float the bound is relative:
// 1e-5 for the loss, 1e-3 of each gradient's largest entry.
namespace {
// Classes rather than alias templates: nvcc mis-emits alias templates of class constants.
template <class S>
struct BenchTransformer : models::Transformer<256, models::NeoxShape{128, 4, 32, 32, 512}, float, S> {
  using models::Transformer<256, models::NeoxShape{128, 4, 32, 32, 512}, float, S>::Transformer;
};
template <class S>
struct BenchPha
    : models::Pha<256, models::PhaShape{128, 4, 2, 32, 512, 128, 64, 512, 128}, models::PhaLayout{}, float, S> {
  using models::Pha<256, models::PhaShape{128, 4, 2, 32, 512, 128, 64, 512, 128}, models::PhaLayout{}, float, S>::Pha;
};

template <template <class> class Model>
void check_backends(int layers) {
  const std::int64_t b = 16, t = 128;
  std::vector<int> ids(b * t), targets(b * t);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = int(i * 7919 % 256);
    targets[i] = int((i + 1) * 7919 % 256);
  }
  const auto step = [&]<class S>(S) {
    typename Model<S>::Options o;
    o.body.count = layers;
    Model<S> model(o);
    core::initialize(model, 3);
    Tensor<std::int32_t**, S> id("ids", b, t), target("targets", b, t);
    testing::from_vector(id, ids);
    testing::from_vector(target, targets);
    core::Workspace<S> ws;
    core::zero_grad(model);
    const double loss = model.train_step(ws, id, target);
    std::map<std::string, std::vector<double>> grads;
    core::for_each_parameter(
        model, [&](std::string_view name, auto& p) { grads[std::string(name)] = testing::to_vector(p.grad()); });
    return std::pair{loss, grads};
  };
  const auto [loss_cuda, grads_cuda] = step(Kokkos::Cuda{});
  const auto [loss_serial, grads_serial] = step(Kokkos::Serial{});
  CHECK(std::abs(loss_cuda - loss_serial) <= 1e-5 * std::abs(loss_serial));
  REQUIRE(grads_cuda.size() == grads_serial.size());
  double worst = 0;
  for (const auto& [name, serial] : grads_serial) {
    const auto& cuda = grads_cuda.at(name);
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < serial.size(); ++i) {
      diff = std::max(diff, std::abs(cuda[i] - serial[i]));
      scale = std::max(scale, std::abs(serial[i]));
    }
    const double relative = scale > 0 ? diff / scale : diff;
    worst = std::max(worst, relative);
    INFO(name << ": largest difference " << diff << " against largest entry " << scale);
    CHECK(relative <= 1e-3);
  }
  testing::report("cuda_vs_serial_worst_gradient", "train_step", "Cuda", worst);
  testing::report("cuda_vs_serial_loss", "train_step", "Cuda",
                  std::abs(loss_cuda - loss_serial) / std::abs(loss_serial));
}
}  // namespace

TEMPLATE_TEST_CASE("backends: a training step on Kokkos::Cuda equals Kokkos::Serial's at benchmark shape",
                   "[models][backends]", Kokkos::Cuda) {
  SECTION("transformer") {
    check_backends<BenchTransformer>(4);
  }
  SECTION("pha") {
    check_backends<BenchPha>(2);
  }
}
#endif
