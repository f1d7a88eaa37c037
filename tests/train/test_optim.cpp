// AdamW against torch.optim.AdamW (golden), gradient clipping and schedules.
#include <catch2/catch.hpp>

#include <hybridseq/io/safetensors.hpp>
#include <hybridseq/train.hpp>

#include <cmath>
#include <filesystem>
#include <string>

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
  const auto file = io::SafetensorsFile::open(std::filesystem::path(HYBRIDSEQ_GOLDEN_DIR) / "adamw.safetensors");
  TwoParams<TestType> m;
  set(m.w.value(), file.read<float>("params/w"));
  set(m.g.value(), file.read<float>("params/g"));
  train::AdamW<TwoParams<TestType>, TestType> opt(m, {.lr = 0, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                                                      .weight_decay = 0.1});
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

TEST_CASE("schedules: warm-up, linear and cosine decay", "[train][host]") {
  train::Schedule s{.peak_lr = 1.0, .warmup_steps = 4, .total_steps = 14, .decay = train::Schedule::Decay::linear};
  REQUIRE(s(0) == Approx(0.25));
  REQUIRE(s(3) == Approx(1.0));
  REQUIRE(s(4) == Approx(1.0));
  REQUIRE(s(9) == Approx(0.5));
  REQUIRE(s(14) == Approx(0.0));
  s.decay = train::Schedule::Decay::cosine;
  s.min_ratio = 0.1;
  REQUIRE(s(9) == Approx(0.1 + 0.9 * 0.5));
  REQUIRE(s(14) == Approx(0.1));
  REQUIRE(s(100) == Approx(0.1));
}

TEST_CASE("AdamW refuses invalid options", "[train][host]") {
  TwoParams<Kokkos::Serial> m;
  using Opt = train::AdamW<TwoParams<Kokkos::Serial>, Kokkos::Serial>;
  REQUIRE_THROWS_WITH(Opt(m, {.lr = 1e-3, .beta1 = 1.0}), Catch::Matchers::Contains("hybridseq::train::AdamW: invalid options"));
}
