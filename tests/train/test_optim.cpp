// AdamW against torch.optim.AdamW (golden), decay scopes, gradient clipping, schedules (closed
// forms at the key steps) and the terminal progress display (ETA after a resume, plain lines).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numbers>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <hybridseq/io/safetensors.hpp>
#include <hybridseq/train.hpp>

#include "support/golden.hpp"
#include "support/spaces.hpp"

using namespace hybridseq;

namespace {
template <class Space>
struct TwoParams {
  using execution_space = Space;
  core::Parameter<float, Space> w{{3, 4}, core::Role::weight, core::Init::zeros()};
  core::Parameter<float, Space> g{{4}, core::Role::norm_gain, core::Init::ones()};
  template <class V>
  void visit_parameters(V&& visit) {
    visit("w", w);
    visit("g", g);
  }
};

template <class View>
void set(const View& v, const std::vector<float>& data) {
  auto h = Kokkos::create_mirror_view(v);
  for (std::size_t i = 0; i < data.size(); ++i) h(i) = data[i];
  Kokkos::deep_copy(v, h);
}
template <class View>
std::vector<float> get(const View& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, v);
  return std::vector<float>(h.data(), h.data() + h.extent(0));
}
}  // namespace

HYBRIDSEQ_SPACE_TEST_CASE("AdamW matches torch.optim.AdamW, decay only on weights", "[train]") {
  const auto file = io::SafetensorsFile::open(testing::golden_dir() / "adamw.safetensors");
  TwoParams<TestType> m;
  set(m.w.value(), file.read<float>("params/w"));
  set(m.g.value(), file.read<float>("params/g"));
  train::AdamW<TwoParams<TestType>, TestType> opt(m, {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
  const double lrs[] = {1e-2, 5e-3, 2e-2};
  double worst = 0;
  for (int step = 0; step < 3; ++step) {
    const std::string s = std::to_string(step);
    set(m.w.grad(), file.read<float>("grads/" + s + "/w"));
    set(m.g.grad(), file.read<float>("grads/" + s + "/g"));
    opt.step(lrs[step]);
    for (auto [name, got] : {std::pair{"w", get(m.w.value())}, std::pair{"g", get(m.g.value())}}) {
      const auto want = file.read<float>("after/" + s + "/" + name);
      for (std::size_t i = 0; i < want.size(); ++i) {
        worst = std::max(worst, double(std::abs(got[i] - want[i])));
        REQUIRE(got[i] == Approx(want[i]).margin(2e-6));
      }
    }
  }
  REQUIRE(opt.step_count() == 3);
  INFO("worst abs error " << worst);
}

HYBRIDSEQ_SPACE_TEST_CASE("global-norm clipping scales to the limit and refuses NaN", "[train]") {
  TwoParams<TestType> m;
  set(m.w.grad(), std::vector<float>(12, 1.0f));
  set(m.g.grad(), std::vector<float>(4, 1.0f));
  REQUIRE(train::gradient_norm(m) == Approx(4.0));
  REQUIRE(train::clip_gradient_norm(m, 1.0) == Approx(4.0));
  REQUIRE(train::gradient_norm(m) == Approx(1.0));
  REQUIRE(get(m.g.grad())[0] == Approx(0.25));
  REQUIRE(train::clip_gradient_norm(m, 2.0) == Approx(1.0));  // under the limit: unchanged
  REQUIRE(get(m.g.grad())[0] == Approx(0.25));
  set(m.g.grad(), {0.0f, std::nanf(""), 0.0f, 0.0f});
  REQUIRE_THROWS_AS(train::clip_gradient_norm(m, 1.0), value_error);
}

namespace {
// A weight of `Weight` and a bias of `Bias` values (N(0, 0.5²) at initialisation).
template <class Space, std::size_t Weight, std::size_t Bias>
struct WeightAndBias {
  using execution_space = Space;
  core::Parameter<float, Space> w{{Weight}, core::Role::weight, core::Init::normal(0.5)};
  core::Parameter<float, Space> b{{Bias}, core::Role::bias, core::Init::normal(0.5)};
  template <class V>
  void visit_parameters(V&& visit) {
    visit("w", w);
    visit("b", b);
  }
};
// Sizes that are not multiples of any vector width: the host copies' vector loops and their
// scalar tails both run.
template <class Space>
using OddSizes = WeightAndBias<Space, 37 * 29, 13>;
// Gradients of 3 blocks of the host's norm reduction and a part block (3 · 4096 + 37), and a
// short one: every lane of the blocks, the lanes' tails, and the blocks' sum.
template <class Space>
using LongGradients = WeightAndBias<Space, 12325, 5>;
}  // namespace

HYBRIDSEQ_SPACE_TEST_CASE("the gradient norm over long gradients is the norm in double", "[train]") {
  LongGradients<TestType> m;
  double want = 0;
  for (auto* p : {&m.w, &m.b}) {
    std::vector<float> g(p->grad().extent(0));
    for (std::size_t i = 0; i < g.size(); ++i) {
      g[i] = float(std::sin(0.1 * double(i) + double(g.size())));
      want += double(g[i]) * double(g[i]);
    }
    set(p->grad(), g);
  }
  REQUIRE(train::gradient_norm(m) == Approx(std::sqrt(want)).epsilon(1e-13));
}

TEST_CASE("schedules: warm-up then linear, cosine or constant, exact at the key steps", "[train][host]") {
  // P = 2e-3, W = 10, N = 110, r = 0.1: warm-up P·(s+1)/W; decays start at P at s = W, pass
  // the midpoint at s = W + (N−W)/2 = 60, reach r·P at s = N and stay there.
  using D = train::Schedule::Decay;
  const double P = 2e-3, r = 0.1;
  const std::int64_t W = 10, N = 110, mid = W + (N - W) / 2;
  for (auto decay : {D::constant, D::linear, D::cosine}) {
    const train::Schedule s{
        .decay = decay, .peak_lr = P, .warmup_steps = W, .total_steps = N, .min_ratio = decay == D::constant ? 0.0 : r};
    INFO("decay " << int(decay));
    CHECK(s(0) == Approx(P / double(W)).epsilon(1e-15));  // step 0: P/W
    CHECK(s(4) == Approx(P * 5.0 / double(W)).epsilon(1e-15));
    CHECK(s(W - 1) == Approx(P).epsilon(1e-15));  // end of warm-up
    CHECK(s(W) == Approx(P).epsilon(1e-15));
    const double floor = decay == D::constant ? P : r * P;
    CHECK(s(N) == Approx(floor).epsilon(1e-15));       // end
    CHECK(s(10 * N) == Approx(floor).epsilon(1e-15));  // past the end: the floor
  }
  const train::Schedule lin{.decay = D::linear, .peak_lr = P, .warmup_steps = W, .total_steps = N, .min_ratio = r};
  const train::Schedule cos{.decay = D::cosine, .peak_lr = P, .warmup_steps = W, .total_steps = N, .min_ratio = r};
  const train::Schedule con{.decay = D::constant, .peak_lr = P, .warmup_steps = W, .total_steps = N};
  CHECK(lin(mid) == Approx(P * (r + (1 - r) * 0.5)).epsilon(1e-15));  // midpoint
  CHECK(cos(mid) == Approx(P * (r + (1 - r) * 0.5)).epsilon(1e-15));
  CHECK(con(mid) == Approx(P).epsilon(1e-15));
  // A quarter of the way: linear 3/4, cosine ½(1 + cos π/4).
  CHECK(lin(W + 25) == Approx(P * (r + (1 - r) * 0.75)).epsilon(1e-15));
  CHECK(cos(W + 25) == Approx(P * (r + (1 - r) * 0.5 * (1 + std::cos(std::numbers::pi / 4)))).epsilon(1e-15));
  CHECK(lin(N - 1) == Approx(P * (r + (1 - r) * 0.01)).epsilon(1e-15));  // the last update of N steps
  // No warm-up: P from step 0, the decay starts at once.
  const train::Schedule cold{.decay = D::cosine, .peak_lr = 1.0, .warmup_steps = 0, .total_steps = 4};
  CHECK(cold(0) == 1.0);
  CHECK(cold(2) == Approx(0.5).epsilon(1e-15));
  CHECK(cold(4) == Approx(0.0).margin(1e-15));
  // Warm-up over the whole run: the decay never starts.
  const train::Schedule warm{.decay = D::linear, .peak_lr = 1.0, .warmup_steps = 4, .total_steps = 4};
  CHECK(warm(1) == 0.5);
  CHECK(warm(3) == 1.0);
  CHECK(warm(4) == 1.0);
}

TEST_CASE("schedules refuse bad arguments, naming the API and the values", "[train][host]") {
  using D = train::Schedule::Decay;
  auto refused = [](const train::Schedule& s, const std::string& what) {
    CHECK_THROWS_AS(s.validate(), value_error);
    CHECK_THROWS_WITH(s(0), Catch::Contains("hybridseq::train::Schedule") && Catch::Contains(what));
  };
  refused({.peak_lr = -1e-3}, "peak_lr must be finite and >= 0, got -0.001");
  refused({.peak_lr = std::nan("")}, "peak_lr must be finite");
  refused({.total_steps = 0}, "total_steps must be >= 1, got 0");
  refused({.warmup_steps = 20, .total_steps = 10}, "warmup_steps must be in [0, total_steps = 10], got 20");
  refused({.warmup_steps = -1}, "got -1");
  refused({.min_ratio = 1.5}, "min_ratio must be in [0, 1], got 1.5");
  refused({.decay = D::constant, .min_ratio = 0.1}, "no effect on a constant schedule");
  CHECK_THROWS_WITH(train::Schedule{}(-1), Catch::Contains("step must be >= 0, got -1"));
  CHECK_NOTHROW(train::Schedule{.decay = D::constant, .peak_lr = 0, .total_steps = 1}.validate());
}

namespace {
template <class Space>
struct WeightBiasScalar {
  using execution_space = Space;
  core::Parameter<float, Space> w{{2, 2}, core::Role::weight, core::Init::ones()};
  core::Parameter<float, Space> b{{2}, core::Role::bias, core::Init::ones()};
  core::Parameter<float, Space> s{{1}, core::Role::scalar, core::Init::ones()};
  template <class V>
  void visit_parameters(V&& visit) {
    visit("w", w);
    visit("b", b);
    visit("s", s);
  }
};
}  // namespace

HYBRIDSEQ_SPACE_TEST_CASE("AdamW decay scope: matrices only, or every parameter", "[train]") {
  // Zero gradients: the Adam term is 0, so a step is θ ← θ − lr·λ·θ where decay applies.
  const double lr = 0.1, wd = 0.5;
  const float decayed = float(1.0 - lr * wd);
  for (auto scope : {train::DecayScope::matrices, train::DecayScope::all}) {
    INFO("scope " << int(scope));
    WeightBiasScalar<TestType> m;
    for (auto* p : {&m.w, &m.b, &m.s}) {
      Kokkos::deep_copy(p->value(), 1.0f);
      Kokkos::deep_copy(p->grad(), 0.0f);
    }
    train::AdamW<WeightBiasScalar<TestType>, TestType> opt(m, {.weight_decay = wd, .decay_scope = scope});
    opt.step(lr);
    const float other = scope == train::DecayScope::all ? decayed : 1.0f;
    for (float x : get(m.w.value())) CHECK(x == Approx(decayed).epsilon(1e-6));  // matrix: always
    for (float x : get(m.b.value())) CHECK(x == Approx(other).epsilon(1e-6));    // bias
    CHECK(get(m.s.value())[0] == Approx(other).epsilon(1e-6));                   // scalar
  }
}

namespace {
// Parameters of every role in declaration order weight, bias, gain, weight; the first is larger
// than core::inline_work, so its passes run as parallel regions.
template <class Space>
struct Mixed {
  using execution_space = Space;
  core::Parameter<float, Space> w1{{256, 160}, core::Role::weight, core::Init::normal(0.5)};
  core::Parameter<float, Space> b1{{160}, core::Role::bias, core::Init::normal(0.5)};
  core::Parameter<float, Space> g{{160}, core::Role::norm_gain, core::Init::normal(0.5, 1)};
  core::Parameter<float, Space> w2{{160, 7}, core::Role::weight, core::Init::normal(0.5)};
  template <class V>
  void visit_parameters(V&& visit) {
    visit("w1", w1);
    visit("b1", b1);
    visit("g", g);
    visit("w2", w2);
  }
};

template <class Space>
void set_gradients(Mixed<Space>& m, int step) {
  int k = 0;
  core::for_each_parameter(m, [&](std::string_view, auto& p) {
    std::vector<float> g(std::size_t(p.numel()));
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = float(std::sin(0.37 * double(i) + 1.3 * k + 0.71 * step));
    set(p.grad(), g);
    ++k;
  });
}
}  // namespace

HYBRIDSEQ_SPACE_TEST_CASE("AdamW on this ISA copy follows the update in double, vector loops and tails", "[train]") {
  INFO("ISA copy " << kernels::isa_name(kernels::host_isa()));
  OddSizes<TestType> m;
  core::initialize(m, 3);
  const double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, wd = 0.1;
  train::AdamW<OddSizes<TestType>, TestType> opt(m, {.beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = wd});
  struct Reference {
    std::vector<double> theta, first, second;
    double decay;
  };
  std::vector<Reference> ref;
  core::for_each_parameter(m, [&](std::string_view, auto& p) {
    const auto v = get(p.value());
    ref.push_back({std::vector<double>(v.begin(), v.end()), std::vector<double>(v.size()),
                   std::vector<double>(v.size()), core::decays(p.role()) ? wd : 0.0});
  });
  const double lrs[] = {1e-2, 3e-2, 2e-2};
  for (int step = 1; step <= 3; ++step) {
    int k = 0;
    core::for_each_parameter(m, [&](std::string_view, auto& p) {
      std::vector<float> g(std::size_t(p.numel()));
      for (std::size_t i = 0; i < g.size(); ++i) g[i] = float(std::sin(0.61 * double(i) + 2.3 * k + 0.9 * step));
      set(p.grad(), g);
      Reference& r = ref[std::size_t(k++)];
      for (std::size_t i = 0; i < g.size(); ++i) {
        r.first[i] = beta1 * r.first[i] + (1 - beta1) * g[i];
        r.second[i] = beta2 * r.second[i] + (1 - beta2) * double(g[i]) * g[i];
        const double mhat = r.first[i] / (1 - std::pow(beta1, step)), vhat = r.second[i] / (1 - std::pow(beta2, step));
        r.theta[i] -= lrs[step - 1] * (mhat / (std::sqrt(vhat) + eps) + r.decay * r.theta[i]);
      }
    });
    opt.step(lrs[step - 1]);
    k = 0;
    core::for_each_parameter(m, [&](std::string_view name, auto& p) {
      const auto got = get(p.value());
      const Reference& r = ref[std::size_t(k++)];
      for (std::size_t i = 0; i < got.size(); ++i) {
        INFO(name << "[" << i << "] after step " << step);
        REQUIRE(got[i] == Approx(r.theta[i]).margin(1e-6));
      }
    });
  }
}

HYBRIDSEQ_SPACE_TEST_CASE("make_contiguous: one run per pass, same values, same training", "[train]") {
  Mixed<TestType> separate, joined;
  core::initialize(separate, 7);
  core::initialize(joined, 7);
  set_gradients(joined, -1);
  const auto grad_before = get(joined.b1.grad());
  core::make_contiguous(joined);
  // Storage order: the decaying weights first, then the others, each in declaration order.
  const float* base = joined.w1.value().data();
  CHECK(joined.w2.value().data() == base + joined.w1.numel());
  CHECK(joined.b1.value().data() == joined.w2.value().data() + joined.w2.numel());
  CHECK(joined.g.value().data() == joined.b1.value().data() + joined.b1.numel());
  CHECK(joined.g.grad().data() == joined.b1.grad().data() + joined.b1.numel());
  CHECK(get(joined.b1.grad()) == grad_before);  // contents moved with the storage
  core::for_each_parameter(separate, [&](std::string_view name, auto& p) {
    core::for_each_parameter(joined, [&](std::string_view other, auto& q) {
      if (name == other) CHECK(get(p.value()) == get(q.value()));
    });
  });
  int runs = 0, separate_runs = 0;
  core::for_each_run(joined, core::Gradients{}, [&](const auto& run) {
    ++runs;
    CHECK(std::int64_t(run.extent(0)) == core::parameter_count(joined));
  });
  core::for_each_run(separate, core::Values{}, [&](const auto&) { ++separate_runs; });
  CHECK(runs == 1);
  CHECK(separate_runs == 4);
  core::make_contiguous(joined);  // already contiguous: nothing moves (a second Trainer on the model)
  CHECK(joined.w1.value().data() == base);

  // Training on either storage gives the same bits: zero_grad, clipping and AdamW run per run
  // of memory, and every element sees the same arithmetic.
  const train::AdamWOptions options{.beta2 = 0.95, .weight_decay = 0.1};
  train::AdamW<Mixed<TestType>, TestType> opt_separate(separate, options), opt_joined(joined, options);
  for (int step = 0; step < 3; ++step) {
    for (auto* m : {&separate, &joined}) {
      core::zero_grad(*m);
      CHECK(train::gradient_norm(*m) == 0);
      set_gradients(*m, step);
    }
    const double norm_separate = train::clip_gradient_norm(separate, 5.0);
    const double norm_joined = train::clip_gradient_norm(joined, 5.0);
    CHECK(norm_joined == Approx(norm_separate).epsilon(1e-14));
    REQUIRE(norm_joined > 5.0);  // clipping is on
    opt_separate.step(1e-2);
    opt_joined.step(1e-2);
  }
  for (auto [a, b] : {std::pair{&separate.w1, &joined.w1}, std::pair{&separate.b1, &joined.b1},
                      std::pair{&separate.g, &joined.g}, std::pair{&separate.w2, &joined.w2}}) {
    CHECK(get(a->value()) == get(b->value()));
  }
}

TEST_CASE("Parameter::relocate refuses storage of another size and keeps its own", "[train][host]") {
  core::Parameter<float, Kokkos::Serial> p{{4}, core::Role::bias, core::Init::ones()};
  Kokkos::deep_copy(p.value(), 2.0f);
  const float* before = p.value().data();
  const Tensor<float*, Kokkos::Serial> small("small", 3), right("right", 4);
  CHECK_THROWS_WITH(p.relocate(small, right), Catch::Contains("hybridseq::core::Parameter::relocate") &&
                                                  Catch::Contains("holds 3 values and 4 gradients") &&
                                                  Catch::Contains("the parameter has 4"));
  CHECK(p.value().data() == before);
  CHECK(get(p.value()) == std::vector<float>(4, 2.0f));
}

TEST_CASE("AdamW refuses invalid options and learning rates", "[train][host]") {
  TwoParams<Kokkos::Serial> m;
  using Opt = train::AdamW<TwoParams<Kokkos::Serial>, Kokkos::Serial>;
  REQUIRE_THROWS_WITH(Opt(m, {.beta1 = 1.0}), Catch::Matchers::Contains("hybridseq::train::AdamW: invalid options"));
  REQUIRE_THROWS_WITH(Opt(m, {.weight_decay = -1}), Catch::Matchers::Contains("weight_decay=-1"));
  Opt opt(m, {});
  CHECK_THROWS_WITH(opt.step(-1e-3), Catch::Contains("hybridseq::train::AdamW::step") && Catch::Contains("-0.001"));
  CHECK_THROWS_AS(opt.step(std::nan("")), value_error);
  CHECK(opt.step_count() == 0);
}

TEST_CASE("progress: rate and ETA count only this process's steps (after a resume)", "[train][host]") {
  // Resumed from step 600 of 1000; 100 steps in 50 s: 2 steps/s, 300 steps left: 150 s
  // (not 50/700·300 ≈ 21 s, the whole run's steps over this process's time).
  const train::Progress p{.step = 700, .total = 1000, .start_step = 600, .tokens = 6400, .elapsed = 50};
  CHECK(p.steps_per_second() == Approx(2.0));
  CHECK(p.eta_seconds() == Approx(150.0));
  CHECK(p.tokens_per_second() == Approx(128.0));
  const train::Progress fresh{.step = 250, .total = 1000, .start_step = 0, .elapsed = 25};
  CHECK(fresh.eta_seconds() == Approx(75.0));
  CHECK(std::isnan(train::Progress{.step = 600, .total = 1000, .start_step = 600, .elapsed = 0}.eta_seconds()));
  CHECK(train::Progress{.step = 1000, .total = 1000, .start_step = 600, .elapsed = 9}.eta_seconds() == 0);
}

namespace {
std::string read_all(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  for (int c; (c = std::fgetc(f)) != EOF;) out.push_back(char(c));
  return out;
}
}  // namespace

TEST_CASE("progress: plain lines off a terminal, one redrawn line on one", "[train][host]") {
  const auto report = [](std::int64_t step, bool last) {
    return train::Progress{.step = step,
                           .total = 10,
                           .start_step = 2,
                           .last = last,
                           .loss = 1.5,
                           .lr = 1e-3,
                           .tokens = 100 * (step - 2),
                           .elapsed = 0.5 * double(step - 2)};
  };
  {
    std::FILE* f = std::tmpfile();
    REQUIRE(f != nullptr);
    const train::TerminalProgress lines("run", {.every = 4, .stream = f});  // a file is not a terminal
    CHECK_FALSE(lines.terminal());
    for (std::int64_t s = 3; s <= 10; ++s) lines(report(s, s == 10));
    // The first step of the run (3), every 4th (4, 8) and the last (10); no carriage returns.
    CHECK(read_all(f) ==
          "run  step 3/10  loss 1.5000  lr 1.00e-03  200 tok/s  ETA 4s\n"
          "run  step 4/10  loss 1.5000  lr 1.00e-03  200 tok/s  ETA 3s\n"
          "run  step 8/10  loss 1.5000  lr 1.00e-03  200 tok/s  ETA 1s\n"
          "run  step 10/10  loss 1.5000  lr 1.00e-03  200 tok/s  ETA 0s\n");
    std::fclose(f);
  }
  {
    std::FILE* f = std::tmpfile();
    REQUIRE(f != nullptr);
    const train::TerminalProgress term("run", {.every = 4, .stream = f, .terminal = true});
    CHECK(term.terminal());
    term(report(3, false));
    term(report(10, true));
    CHECK(read_all(f) ==
          "\rrun  step 3/10  loss 1.5000  lr 1.00e-03  200 tok/s  ETA 4s   "
          "\rrun  step 10/10  loss 1.5000  lr 1.00e-03  200 tok/s  ETA 0s   \n");
    std::fclose(f);
  }
}
