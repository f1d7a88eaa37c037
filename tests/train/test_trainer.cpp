// The training loop (accumulation, clipping, non-finite detection), checkpoints with exact
// resumption, and generation sessions over whole models.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <hybridseq/decode.hpp>
#include <hybridseq/models.hpp>
#include <hybridseq/tasks.hpp>
#include <hybridseq/train.hpp>

#include "cases/model_cases.hpp"
#include "support/spaces.hpp"
#include "support/testbed.hpp"
#include <unistd.h>

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

namespace {

/// Everything a checkpoint load may write: parameters, both moments and the step count.
template <class Model, class Optimizer>
std::vector<std::vector<double>> training_state(Model& m, const Optimizer& opt) {
  auto out = parameters_of(m);
  opt.for_each_moment([&](std::string_view, const auto& mo, const auto& v) {
    out.push_back(testing::to_vector(mo));
    out.push_back(testing::to_vector(v));
  });
  out.push_back({double(opt.step_count())});
  return out;
}

/// Rewrites the checkpoint at `path` through `edit(metadata, tensors)` with a fresh, valid
/// checksum: a file whose only fault is the one the edit makes.
template <class Edit>
void rewrite_checkpoint(const std::filesystem::path& path, Edit&& edit) {
  const auto file = io::SafetensorsFile::open(path);
  auto metadata = file.metadata();
  metadata.erase(std::string(io::checksum_key));
  std::map<std::string, std::pair<std::vector<float>, std::vector<std::int64_t>>> tensors;
  for (const auto& t : file.tensors()) tensors[t.name] = {file.read<float>(t.name), t.shape};
  edit(metadata, tensors);
  io::SafetensorsWriter w;
  for (const auto& [k, v] : metadata) w.set_metadata(k, v);
  for (const auto& [name, t] : tensors) w.add<float>(name, t.first, t.second);
  w.add_checksum();
  w.write(path);
}

/// A fresh directory under the system temp dir for one test, removed afterwards.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / ("hybridseq_" + name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace

HYBRIDSEQ_SPACE_TEST_CASE("checkpoint: every refused load leaves the model and the optimizer byte-identical",
                          "[trainer][checkpoint]") {
  using M = Hybrid<TestType>;
  const ScratchDir dir(std::string("refused_") + TestType::name());
  const auto path = dir.path / "ckpt.safetensors";
  const auto task = tiny_task();
  train::TrainerOptions o{.steps = 4, .schedule = {.total_steps = 4}, .data_seed = 42};
  auto a = make_model<M>(1);
  train::Trainer ta(a, o);
  ta.run(task_source<TestType>(task, o.data_seed), 2);
  ta.save(path);
  const std::string good = [&] {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  const auto restore_good = [&] { std::ofstream(path, std::ios::binary | std::ios::trunc) << good; };

  // The target: a trained model whose state differs from the checkpoint's everywhere.
  auto b = make_model<M>(7);
  train::Trainer tb(b, o);
  tb.run(task_source<TestType>(task, o.data_seed), 1);
  const auto before = training_state(b, tb.optimizer());
  const auto unchanged = [&] {
    CHECK(training_state(b, tb.optimizer()) == before);
    CHECK(tb.step() == 1);
  };

  // One flipped byte in the data buffer: the checksum refuses it.
  {
    std::string bad = good;
    bad[bad.size() - 5] = static_cast<char>(bad[bad.size() - 5] ^ 0x01);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
    REQUIRE_THROWS_AS(tb.resume(path), io_error);
    REQUIRE_THROWS_WITH(tb.resume(path),
                        Catch::Contains("hybridseq::io::read_safetensors") && Catch::Contains("checksum mismatch"));
    unchanged();
  }
  // A negative step (the next step's learning rate would be NaN), a malformed seed.
  for (const auto& [key, value, message] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"step", "-3", "metadata 'step' is -3, must be >= 0"},
           {"adamw_step", "-1", "metadata 'adamw_step' is -1, must be >= 0"},
           {"data_seed", "-1", "metadata 'data_seed' is '-1', not a whole number"},
           {"step", "2x", "metadata 'step' is '2x', not a whole number"},
           {"hybridseq.checkpoint", "1", "unsupported checkpoint version '1'"}}) {
    INFO(key << " = " << value);
    restore_good();
    rewrite_checkpoint(path, [&](auto& meta, auto&) { meta[key] = value; });
    REQUIRE_THROWS_AS(tb.resume(path), io_error);
    REQUIRE_THROWS_WITH(tb.resume(path), Catch::Contains("hybridseq::train::Trainer::resume") &&
                                             Catch::Contains(path.string()) && Catch::Contains(message));
    unchanged();
  }
  // A NaN in the last optimizer tensor (with a valid checksum: a diverged or forged file).
  restore_good();
  rewrite_checkpoint(path, [](auto&, auto& tensors) {
    tensors.rbegin()->second.first.back() = std::numeric_limits<float>::quiet_NaN();
  });
  REQUIRE_THROWS_WITH(tb.resume(path), Catch::Contains("is nan (non-finite values refused)"));
  unchanged();
  // Another data stream: refused after reading, before writing.
  restore_good();
  auto o2 = o;
  o2.data_seed = 43;
  train::Trainer tc(b, o2);
  REQUIRE_THROWS_AS(tc.resume(path), config_error);
  REQUIRE_THROWS_WITH(tc.resume(path), Catch::Contains("was trained with data seed 42, this trainer uses 43"));
  CHECK(parameters_of(b) == std::vector(before.begin(), before.begin() + std::ptrdiff_t(parameters_of(b).size())));
  // load_checkpoint itself: a checkpoint of another model.
  auto other = make_model<cases::TransformerTiny<float, TestType>>(1, 2);
  train::AdamW<decltype(other)> other_opt(other, {});
  const auto other_before = training_state(other, other_opt);
  REQUIRE_THROWS_AS(train::load_checkpoint(path, other, other_opt), io_error);
  CHECK(training_state(other, other_opt) == other_before);
  // The good file still loads.
  tb.resume(path);
  CHECK(tb.step() == 2);
  CHECK(training_state(b, tb.optimizer()) == training_state(a, ta.optimizer()));
  CHECK_THROWS_WITH(
      train::save_checkpoint(path, a, ta.optimizer(), {.step = -1}),
      Catch::Contains("hybridseq::train::save_checkpoint") && Catch::Contains("step must be >= 0, got -1"));
}

HYBRIDSEQ_SPACE_TEST_CASE("checkpoint: a directory path is refused up front and a stale temporary file is removed",
                          "[trainer][checkpoint]") {
  auto m = make_model<Hybrid<TestType>>(1);
  const ScratchDir dir(std::string("ckpt_path_") + TestType::name());
  REQUIRE_THROWS_AS(train::Trainer(m, {.steps = 2, .schedule = {.total_steps = 2}, .checkpoint = dir.path}), io_error);
  REQUIRE_THROWS_WITH(train::Trainer(m, {.steps = 2, .schedule = {.total_steps = 2}, .checkpoint = dir.path}),
                      Catch::Contains("hybridseq::train::Trainer") && Catch::Contains("is a directory"));
  train::AdamW<Hybrid<TestType>> opt(m, {});
  REQUIRE_THROWS_WITH(train::save_checkpoint(dir.path, m, opt, {}), Catch::Contains("is a directory"));
  CHECK(std::filesystem::is_empty(dir.path));
  CHECK_FALSE(std::filesystem::exists(io::temporary_path(dir.path)));
  // A write killed before its rename left a temporary file: the next trainer removes it.
  const auto path = dir.path / "ckpt.safetensors";
  std::ofstream(io::temporary_path(path)) << "torn";
  train::Trainer t(m, {.steps = 2, .schedule = {.total_steps = 2}, .checkpoint = path});
  CHECK_FALSE(std::filesystem::exists(io::temporary_path(path)));
  REQUIRE_THROWS_WITH(train::Trainer(m, {.steps = 2, .schedule = {.total_steps = 2}, .checkpoint_every = -1}),
                      Catch::Contains("checkpoint_every must be >= 0"));
}

HYBRIDSEQ_SPACE_TEST_CASE("trainer: a stop request ends the run after the current step, with a checkpoint",
                          "[trainer][checkpoint]") {
  using M = Hybrid<TestType>;
  const ScratchDir dir(std::string("stop_") + TestType::name());
  const auto path = dir.path / "ckpt.safetensors";
  const auto task = tiny_task();
  int asked = 0;
  train::TrainerOptions o{.steps = 10,
                          .schedule = {.total_steps = 10},
                          .checkpoint = path,
                          .checkpoint_every = 4,
                          .stop_requested = [&asked] { return ++asked == 3; }};
  auto a = make_model<M>(1);
  train::Trainer ta(a, o);
  const auto summary = ta.run(task_source<TestType>(task, o.data_seed));
  CHECK(summary.stopped);
  CHECK(summary.log.size() == 3);
  CHECK(ta.step() == 3);
  // The checkpoint holds step 3, and resuming from it continues the uninterrupted run exactly.
  auto b = make_model<M>(9);
  o.stop_requested = {};
  o.checkpoint.clear();
  train::Trainer tb(b, o);
  tb.resume(path);
  CHECK(tb.step() == 3);
  CHECK(training_state(b, tb.optimizer()) == training_state(a, ta.optimizer()));
}

HYBRIDSEQ_SPACE_TEST_CASE("trainer: an empty batch is refused with the step named, not trained on as loss 0",
                          "[trainer]") {
  auto m = make_model<Hybrid<TestType>>(1);
  const auto before = parameters_of(m);
  train::Trainer t(m, {.steps = 3, .schedule = {.total_steps = 3}});
  for (const auto& [b, len] : {std::pair{0, 8}, std::pair{2, 0}}) {
    const auto empty = [b = b, len = len](std::int64_t, int) {
      return train::TokenBatch<TestType>{Tensor<std::int32_t**, TestType>("ids", b, len),
                                         Tensor<std::int32_t**, TestType>("targets", b, len)};
    };
    REQUIRE_THROWS_AS(t.run(empty), value_error);
    REQUIRE_THROWS_WITH(t.run(empty), Catch::Contains("hybridseq::train::Trainer::run") &&
                                          Catch::Contains("step 1 micro-batch 0 is empty"));
  }
  CHECK(parameters_of(m) == before);
  CHECK(t.step() == 0);
}

HYBRIDSEQ_SPACE_TEST_CASE("trainer: gradient accumulation over two half batches equals one full batch", "[trainer]") {
  // The halves score 17 and 20 targets (the first has 3 unsupervised ones): the step's loss is
  // the mean over all 37, as the full batch's is, not the mean of the two halves' means.
  using M = cases::TransformerTiny<double, TestType>;
  const core::CounterRng rng(3, 3);
  tasks::Batch full{4, 10, {}, {}};
  for (int i = 0; i < 40; ++i) {
    full.ids.push_back(std::int32_t(rng.bits(i) % hybrid_vocab));
    full.targets.push_back(i == 2 || i == 9 || i == 15 ? tasks::null_target
                                                       : std::int32_t(rng.bits(100 + i) % hybrid_vocab));
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

HYBRIDSEQ_SPACE_TEST_CASE("decode: restoring a snapshot not taken from this session is refused, state unchanged",
                          "[decode]") {
  using M = cases::HybridTiny<double, TestType>;
  auto m = make_model<M>(11);
  auto twin = make_model<M>(11);
  const std::vector<std::int32_t> prompt{1, 2, 3, 4, 5, 6};
  decode::Session session(m, 2), narrow(m, 1), elsewhere(twin, 2);
  session.prefill(prompt, 3);
  narrow.prefill({1, 2, 3}, 3);
  elsewhere.prefill(prompt, 3);
  const auto logits = session.last_logits();
  const auto expect_unchanged = [&] {
    CHECK(session.length() == 3);
    CHECK(session.last_logits() == logits);
  };
  REQUIRE_THROWS_AS(session.restore({}), value_error);
  REQUIRE_THROWS_WITH(session.restore({}), Catch::Contains("hybridseq::decode::Session::restore") &&
                                               Catch::Contains("the snapshot is empty (default-constructed"));
  expect_unchanged();
  REQUIRE_THROWS_AS(session.restore(narrow.snapshot()), shape_error);
  REQUIRE_THROWS_WITH(session.restore(narrow.snapshot()),
                      Catch::Contains("the snapshot holds 1 sequences; this session holds 2"));
  expect_unchanged();
  REQUIRE_THROWS_WITH(session.restore(elsewhere.snapshot()),
                      Catch::Contains("the snapshot was taken from a session over another model"));
  expect_unchanged();
  // The session goes on as if the refused calls never happened; a sibling session's snapshot
  // over the same model restores.
  decode::Session sibling(m, 2);
  sibling.prefill(prompt, 3);
  const auto snap = sibling.snapshot();
  CHECK(session.generate(4) == sibling.generate(4));
  session.restore(snap);
  CHECK(session.length() == 3);
  CHECK(session.last_logits() == logits);
}

HYBRIDSEQ_SPACE_TEST_CASE("threads: a Trainer or a Session used from a second thread is refused, naming both",
                          "[trainer][decode]") {
  using M = Hybrid<TestType>;
  auto m = make_model<M>(1);
  const train::TrainerOptions o{.steps = 1, .schedule = {.total_steps = 1}};
  train::Trainer here(m, o);  // this thread is the library's
  decode::Session session(m, 1);
  const auto before = parameters_of(m);
  std::string trainer_error, run_error, session_error;
  std::thread([&] {
    try {
      train::Trainer there(m, o);
    } catch (const config_error& e) {
      trainer_error = e.what();
    }
    try {
      const auto task = tiny_task();
      here.run(task_source<TestType>(task, 1));
    } catch (const config_error& e) {
      run_error = e.what();
    }
    try {
      session.prefill({1, 2}, 2);
    } catch (const config_error& e) {
      session_error = e.what();
    }
  }).join();
  INFO(trainer_error);
  // Kokkos 3.4's OpenMP space exists only on the initialising thread; Serial is shared, and the
  // library refuses a second thread itself.
  const auto refused = [](const std::string& what, const std::string& api) {
    return what.rfind(api + ": ", 0) == 0 && (what.find("execution space is not initialized on thread") != what.npos ||
                                              what.find("while hybridseq is used from thread") != what.npos);
  };
  CHECK(refused(trainer_error, "hybridseq::train::Trainer"));
  CHECK(refused(run_error, "hybridseq::train::Trainer::run"));
  CHECK(refused(session_error, "hybridseq::decode::Session::prefill"));
  CHECK(parameters_of(m) == before);
  CHECK(here.step() == 0);
  CHECK(session.length() == 0);
}

HYBRIDSEQ_SPACE_TEST_CASE("trainer, session: an uninitialised model or non-finite weights are refused up front",
                          "[trainer][decode]") {
  using M = Hybrid<TestType>;
  typename M::Options options;
  options.body.count = 1;
  M fresh(options);  // constructed, never initialised: every parameter is 0
  const train::TrainerOptions o{.steps = 1, .schedule = {.total_steps = 1}};
  REQUIRE_THROWS_AS(train::Trainer(fresh, o), value_error);
  REQUIRE_THROWS_WITH(train::Trainer(fresh, o),
                      Catch::StartsWith("hybridseq::train::Trainer: all ") &&
                          Catch::Contains("parameters are 0: the model was never initialised"));
  REQUIRE_THROWS_WITH(decode::Session(fresh, 1), Catch::StartsWith("hybridseq::decode::Session: all "));
  auto m = make_model<M>(1);
  core::for_each_parameter(m, [](std::string_view name, auto& p) {
    if (name == "head.weight") Kokkos::deep_copy(Kokkos::subview(p.value(), std::pair(3, 4)), std::nanf(""));
  });
  REQUIRE_THROWS_AS(decode::Session(m, 1), value_error);
  REQUIRE_THROWS_WITH(decode::Session(m, 1), Catch::Contains("parameter 'head.weight' element 3 is nan"));
  REQUIRE_THROWS_WITH(train::Trainer(m, o), Catch::Contains("parameter 'head.weight' element 3 is nan"));
}
