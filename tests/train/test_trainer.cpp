// The training loop (accumulation, clipping, non-finite detection), checkpoints with exact
// resumption, and generation sessions over whole models.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <hybridseq/decode.hpp>
#include <hybridseq/models.hpp>
#include <hybridseq/tasks.hpp>
#include <hybridseq/train.hpp>

#include "cases/model_cases.hpp"
#include "support/spaces.hpp"
#include "support/testbed.hpp"

using namespace hybridseq;

namespace {

template <class Space>
using Hybrid = cases::HybridTiny<float, Space>;
inline constexpr int hybrid_vocab = cases::model_vocab;

/// A var-copy stream restricted to the tiny models' vocabulary of 11: 4 letters, shifts #1..#3.
inline tasks::AnyTask tiny_task() {
  return tasks::make_task("var-copy", {.n_v = 4, .min_shift = 1, .max_shift = 3});
}

/// With `dropout`, the rates of cases::DropoutCase (embeddings, block outputs, attention).
template <class Model>
Model make_model(std::uint64_t seed, int count = 1, bool dropout = false) {
  typename Model::Options o;
  o.body.count = count;
  if (dropout) {
    o.embed_dropout = 0.1;
    core::for_each_option<core::OutputDropout>(o, [](auto& d) { d.p = 0.2; });
    core::for_each_option<layers::AttentionOptions>(o, [](auto& a) { a.dropout = 0.25; });
  }
  Model m(o);
  core::initialize(m, seed);
  return m;
}

template <class Space>
auto task_source(const tasks::AnyTask& task, std::uint64_t seed, int accumulation = 1) {
  return tasks::task_batches<Space>(
      task, {.seed = seed, .batch = 4, .min_len = 12, .max_len = 16, .accumulation = accumulation});
}

template <class Model>
std::vector<std::vector<double>> parameters_of(Model& m) {
  std::vector<std::vector<double>> out;
  core::for_each_parameter(m, [&](std::string_view, auto& p) { out.push_back(testing::to_vector(p.value())); });
  return out;
}

}  // namespace

// With dropout on: its masks are keyed by (data seed, step, micro-batch), so they resume too.
HYBRIDSEQ_SPACE_TEST_CASE("trainer: resuming from a checkpoint reproduces the uninterrupted run exactly",
                          "[trainer][checkpoint]") {
  const auto task = tiny_task();
  REQUIRE(task.vocab_size() <= hybrid_vocab);
  const auto path =
      std::filesystem::temp_directory_path() / (std::string("hybridseq_resume_") + TestType::name() + ".safetensors");
  std::vector<train::Progress> reports;
  train::TrainerOptions o{
      .steps = 12,
      .accumulation = 2,
      .clip = 0.5,
      .schedule = {.decay = train::Schedule::Decay::cosine, .peak_lr = 3e-3, .warmup_steps = 3, .total_steps = 12},
      .adamw = {.weight_decay = 0.1},
      .data_seed = 42,
      .progress = [&reports](const train::Progress& p) { reports.push_back(p); }};
  const auto source = task_source<TestType>(task, o.data_seed, o.accumulation);

  auto a = make_model<Hybrid<TestType>>(1, 1, true);
  train::Trainer ta(a, o);
  const auto first = ta.run(source, 5);
  {
    auto plain = make_model<Hybrid<TestType>>(1);
    auto quiet = o;
    quiet.progress = {};
    train::Trainer tp(plain, quiet);
    CHECK(tp.run(source, 1).log[0].loss != first.log[0].loss);  // the masks dropped something
  }
  ta.save(path);
  const auto rest = ta.run(source);
  REQUIRE(first.log.size() == 5);
  REQUIRE(rest.log.size() == 7);
  // One report per step, with the schedule's lr; the second run starts from step 5.
  REQUIRE(reports.size() == 12);
  for (std::size_t i = 0; i < reports.size(); ++i) {
    INFO("report " << i);
    CHECK(reports[i].step == std::int64_t(i) + 1);
    CHECK(reports[i].total == 12);
    CHECK(reports[i].start_step == (i < 5 ? 0 : 5));
    CHECK(reports[i].last == (i == 4 || i == 11));
    CHECK(reports[i].lr == o.schedule(std::int64_t(i)));
    CHECK(reports[i].loss == (i < 5 ? first.log[i].loss : rest.log[i - 5].loss));
    CHECK(reports[i].tokens == std::int64_t(i < 5 ? i + 1 : i - 4) * 2 * 4 * 16);
  }

  auto b = make_model<Hybrid<TestType>>(999, 1, true);  // other initial parameters: all must come from the file
  train::Trainer tb(b, o);
  tb.resume(path);
  CHECK(tb.step() == 5);
  CHECK(tb.optimizer().step_count() == 5);
  const auto resumed = tb.run(source);
  REQUIRE(resumed.log.size() == rest.log.size());
  for (std::size_t i = 0; i < rest.log.size(); ++i) {
    INFO("step " << rest.log[i].step);
    CHECK(resumed.log[i].step == rest.log[i].step);
    CHECK(resumed.log[i].loss == rest.log[i].loss);  // bit-identical
    CHECK(resumed.log[i].grad_norm == rest.log[i].grad_norm);
  }
  CHECK(parameters_of(a) == parameters_of(b));
  // The loss went down over the run (a sanity check that training trains).
  CHECK(rest.log.back().loss < first.log.front().loss);

  // A checkpoint of another model, or of another data stream, is refused.
  auto other = make_model<cases::TransformerTiny<float, TestType>>(1, 2);
  train::Trainer to(other, o);
  CHECK_THROWS_AS(to.resume(path), io_error);
  auto o2 = o;
  o2.data_seed = 43;
  train::Trainer tc(b, o2);
  CHECK_THROWS_WITH(tc.resume(path), Catch::Contains("data seed 42"));
  std::filesystem::remove(path);
  CHECK_THROWS_AS(tb.resume(path), io_error);
}

HYBRIDSEQ_SPACE_TEST_CASE("trainer: gradient accumulation over two half batches equals one full batch", "[trainer]") {
  // Every target supervised, equal counts per micro-batch: the mean of the two micro-batch
  // means is the full batch's mean, so the gradients agree to rounding.
  using M = cases::TransformerTiny<double, TestType>;
  const core::CounterRng rng(3, 3);
  tasks::Batch full{4, 10, {}, {}};
  for (int i = 0; i < 40; ++i) {
    full.ids.push_back(std::int32_t(rng.bits(i) % hybrid_vocab));
    full.targets.push_back(std::int32_t(rng.bits(100 + i) % hybrid_vocab));
  }
  auto half = [&](int h) {
    tasks::Batch b{2, 10, {}, {}};
    b.ids.assign(full.ids.begin() + 20 * h, full.ids.begin() + 20 * (h + 1));
    b.targets.assign(full.targets.begin() + 20 * h, full.targets.begin() + 20 * (h + 1));
    return b;
  };
  auto grads_after = [&](int accumulation) {
    auto m = make_model<M>(5, 2);
    train::Trainer t(m, {.steps = 1,
                         .accumulation = accumulation,
                         .clip = 0,
                         .schedule = {.decay = train::Schedule::Decay::constant, .peak_lr = 0.0, .total_steps = 1}});
    const auto log = t.run(
        [&](std::int64_t, int micro) { return tasks::to_device<TestType>(accumulation == 1 ? full : half(micro)); });
    std::vector<double> g;
    core::for_each_parameter(m, [&](std::string_view, auto& p) {
      const auto v = testing::to_vector(p.grad());
      g.insert(g.end(), v.begin(), v.end());
    });
    return std::pair{log.log[0].loss, g};
  };
  const auto [l1, g1] = grads_after(1);
  const auto [l2, g2] = grads_after(2);
  CHECK(l1 == Approx(l2).epsilon(1e-12));
  REQUIRE(g1.size() == g2.size());
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < g1.size(); ++i) {
    worst = std::max(worst, std::abs(g1[i] - g2[i]));
    scale = std::max(scale, std::abs(g1[i]));
  }
  CHECK(worst <= 1e-12 * scale);
}

HYBRIDSEQ_SPACE_TEST_CASE("trainer: a non-finite loss stops training with the step named", "[trainer]") {
  auto m = make_model<Hybrid<TestType>>(1);
  train::Trainer t(m, {.steps = 3, .schedule = {.total_steps = 3}});
  core::for_each_parameter(m, [](std::string_view name, auto& p) {
    if (name == "head.weight") Kokkos::deep_copy(p.value(), std::numeric_limits<float>::infinity());
  });
  const auto task = tiny_task();
  CHECK_THROWS_AS(t.run(task_source<TestType>(task, 1)), value_error);
  CHECK_THROWS_AS(train::Trainer(m, {.accumulation = 0}), value_error);
}

HYBRIDSEQ_SPACE_TEST_CASE("trainer: refuses a schedule that does not span the training, or a bad one", "[trainer]") {
  auto m = make_model<Hybrid<TestType>>(1);
  CHECK_THROWS_WITH(
      train::Trainer(m, {.steps = 3, .schedule = {.total_steps = 4}}),
      Catch::Contains("hybridseq::train::Trainer") && Catch::Contains("schedule.total_steps is 4 but steps is 3"));
  CHECK_THROWS_WITH(train::Trainer(m, {.steps = 3, .schedule = {.warmup_steps = 5, .total_steps = 3}}),
                    Catch::Contains("hybridseq::train::Schedule") && Catch::Contains("got 5"));
  CHECK_NOTHROW(train::Trainer(m, {}));  // the defaults agree (1000 steps)
}

TEST_CASE("tasks::task_batches: batch k of step s is make_batch(seed, s·accumulation + k)", "[trainer][host]") {
  using Space = Kokkos::Serial;
  const auto task = tiny_task();
  const auto source =
      tasks::task_batches<Space>(task, {.seed = 7, .batch = 3, .min_len = 12, .max_len = 16, .accumulation = 2});
  const auto [ids, targets] = source(4, 1);
  const auto want = tasks::make_batch(task, 7, 4 * 2 + 1, 3, 12, 16);
  REQUIRE(ids.extent(0) == 3);
  REQUIRE(ids.extent(1) == 16);
  auto hi = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, ids);
  auto ht = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, targets);
  for (int r = 0; r < 3; ++r)
    for (int t = 0; t < 16; ++t) {
      CHECK(hi(r, t) == want.ids[std::size_t(r) * 16 + t]);
      CHECK(ht(r, t) == want.targets[std::size_t(r) * 16 + t]);
    }
  CHECK_THROWS_WITH(source(4, 2), Catch::Contains("hybridseq::tasks::task_batches") &&
                                      Catch::Contains("micro-batch 2; the stream has 2"));
  CHECK_THROWS_WITH(tasks::task_batches<Space>(task, {.batch = 0, .min_len = 1, .max_len = 2}),
                    Catch::Contains("batch is 0"));
  CHECK_THROWS_WITH(tasks::task_batches<Space>(task, {.min_len = 5, .max_len = 2}),
                    Catch::Contains("lengths are [5, 2]"));
}

HYBRIDSEQ_SPACE_TEST_CASE("decode: greedy generation is the argmax of the full forward, and sampling replays",
                          "[decode]") {
  using M = cases::HybridTiny<double, TestType>;
  auto m = make_model<M>(11);
  const int b = 2, prompt = 5, n = 6;
  std::vector<std::int32_t> tokens;
  for (int i = 0; i < b * prompt; ++i) tokens.push_back(std::int32_t((i * 7 + 3) % hybrid_vocab));
  decode::Session session(m, b);
  session.prefill(tokens, prompt);
  const auto snap = session.snapshot();
  const auto greedy = session.generate(n);
  CHECK(session.length() == prompt + n);

  // Full forward over prompt + generated: each generated token is the argmax at the position before it.
  const int t = prompt + n;
  Tensor<std::int32_t**, TestType> ids("ids", b, t);
  auto h = Kokkos::create_mirror_view(ids);
  for (int r = 0; r < b; ++r)
    for (int j = 0; j < t; ++j) h(r, j) = j < prompt ? tokens[r * prompt + j] : greedy[r * n + j - prompt];
  Kokkos::deep_copy(ids, h);
  Tensor<double***, TestType> logits("logits", b, t, M::vocab);
  core::Workspace<TestType> ws;
  m.logits(ws, ids, logits);
  auto lh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, logits);
  for (int r = 0; r < b; ++r)
    for (int j = prompt - 1; j < t - 1; ++j) {
      int best = 0;
      for (int v = 1; v < M::vocab; ++v)
        if (lh(r, j, v) > lh(r, j, best)) best = v;
      CHECK(h(r, j + 1) == best);
    }

  const decode::Sampling s{.temperature = 1.0, .top_k = 4, .seed = 9};
  session.restore(snap);
  const auto first = session.generate(n, s);
  session.restore(snap);
  const auto again = session.generate(n, s);
  CHECK(first == again);
  CHECK_THROWS_AS(session.generate(1, {.temperature = -1}), value_error);
  CHECK_THROWS_AS(session.prefill({1, 2, 3}, 2), shape_error);
}
