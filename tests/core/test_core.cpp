// Core: errors and shape checks, flat tuple, RNG/initialisers, workspace, parameter visitor,
// GEMM facade against its naive oracle.
#include <catch2/catch.hpp>

#include <hybridseq/core.hpp>
#include <hybridseq/kernels/gemm.hpp>
#include <hybridseq/kernels/reference/gemm.hpp>

#include <map>
#include <string>
#include <vector>

#include "support/spaces.hpp"

using namespace hybridseq;
using Catch::Matchers::Contains;

TEST_CASE("check_shape names the API and the actual extents", "[core][host]") {
  Tensor<float***, Kokkos::Serial> x("x", 2, 17, 96);
  REQUIRE_NOTHROW(core::check_shape("api", "x", x, core::B, core::T, core::dim(96)));
  REQUIRE_THROWS_AS(core::check_shape("hybridseq::layers::Linear::forward", "x", x, core::B, core::T,
                                      core::dim(128)),
                    shape_error);
  REQUIRE_THROWS_WITH(core::check_shape("hybridseq::layers::Linear::forward", "x", x, core::B, core::T,
                                        core::dim(128)),
                      "hybridseq::layers::Linear::forward: x is (2,17,96), expected (B,T,128)");
}

TEST_CASE("check_finite reports the first non-finite element", "[core][host]") {
  Tensor<double*, Kokkos::Serial> v("v", 5);
  REQUIRE_NOTHROW(core::check_finite("api", "v", v));
  v(3) = std::numeric_limits<double>::infinity();
  v(4) = std::numeric_limits<double>::quiet_NaN();
  REQUIRE_THROWS_WITH(core::check_finite("api", "v", v), Contains("non-finite value inf at flat index 3"));
}

TEST_CASE("flat tuple stores, indexes and iterates in order", "[core][host]") {
  core::FlatTuple<int, double, std::string> t;
  core::get<0>(t) = 3;
  core::get<1>(t) = 2.5;
  core::get<2>(t) = "x";
  static_assert(decltype(t)::size == 3);
  static_assert(std::is_same_v<core::element_t<1, decltype(t)>, double>);
  std::vector<std::size_t> order;
  core::for_each_indexed(t, [&](auto&, auto i) { order.push_back(i()); });
  REQUIRE(order == std::vector<std::size_t>{0, 1, 2});
  REQUIRE(core::get<0>(t) == 3);
  REQUIRE(core::get<2>(t) == "x");
}

TEST_CASE("counter RNG: moments, independence of streams", "[core][host]") {
  const core::CounterRng rng(42, 7), other(42, 8);
  double sum = 0, sq = 0;
  int same = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double z = rng.normal(i);
    sum += z;
    sq += z * z;
    same += rng.bits(i) == other.bits(i);
  }
  REQUIRE(std::abs(sum / n) < 0.01);
  REQUIRE(std::abs(sq / n - 1.0) < 0.01);
  REQUIRE(same == 0);
  REQUIRE(rng.uniform(0) > 0.0);
  REQUIRE(rng.uniform(0) < 1.0);
}

namespace {
template <class Space>
struct TinyModule {
  core::Parameter<double, Space> w{{3, 4}, core::Role::weight, core::Init::normal(0.5)};
  core::Parameter<double, Space> g{{4}, core::Role::norm_gain, core::Init::ones()};
  template <class V>
  void visit_parameters(V&& visit) {
    visit("w", w);
    visit("g", g);
  }
};
template <class Space>
struct Outer {
  TinyModule<Space> blocks[2];
  core::Parameter<double, Space> head{{2}, core::Role::bias, core::Init::uniform(-1, 1)};
  template <class V>
  void visit_parameters(V&& visit) {
    for (int i = 0; i < 2; ++i) visit(std::to_string(i), blocks[i]);
    visit("head", head);
  }
};

template <class Space>
std::map<std::string, std::vector<double>> snapshot(Outer<Space>& m) {
  std::map<std::string, std::vector<double>> out;
  core::for_each_parameter(m, [&](std::string_view name, auto& p) {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, p.value());
    out[std::string(name)] = std::vector<double>(h.data(), h.data() + h.extent(0));
  });
  return out;
}
}  // namespace

HYBRIDSEQ_SPACE_TEST_CASE("parameter visitor: dotted names, counts, init, zero_grad", "[core]") {
  Outer<TestType> m;
  std::vector<std::string> names;
  core::for_each_parameter(m, [&](std::string_view n, auto&) { names.emplace_back(n); });
  REQUIRE(names == std::vector<std::string>{"0.w", "0.g", "1.w", "1.g", "head"});
  REQUIRE(core::parameter_count(m) == 2 * (12 + 4) + 2);

  core::initialize(m, 1234);
  auto s = snapshot(m);
  REQUIRE(s["0.g"] == std::vector<double>(4, 1.0));
  REQUIRE(s["0.w"] != s["1.w"]);  // streams keyed by name differ
  for (double v : s["head"]) REQUIRE((v > -1 && v < 1));

  // Same seed, same values, on a different execution space and thread count.
  Outer<Kokkos::Serial> reference;
  core::initialize(reference, 1234);
  REQUIRE(snapshot(reference) == s);

  Kokkos::deep_copy(m.blocks[1].w.grad(), 3.0);
  core::zero_grad(m);
  auto g = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, m.blocks[1].w.grad());
  for (std::size_t i = 0; i < g.extent(0); ++i) REQUIRE(g(i) == 0.0);
}

HYBRIDSEQ_SPACE_TEST_CASE("workspace records exact peak bytes and rewinds", "[core]") {
  core::Workspace<TestType> ws(1024);
  REQUIRE(ws.peak_bytes() == 0);
  const auto m0 = ws.mark();
  auto a = ws.template allocate<float**>("a", 10, 10);  // 400 B -> 448 aligned
  REQUIRE(ws.bytes_in_use() == 448);
  {
    core::WorkspaceScope scope(ws);
    auto b = ws.template allocate<double*>("b", 200);  // 1600 B: larger than a chunk
    REQUIRE(ws.bytes_in_use() == 448 + 1600);
    b(199) = 1.0;
  }
  REQUIRE(ws.bytes_in_use() == 448);
  REQUIRE(ws.peak_bytes() == 448 + 1600);
  auto c = ws.template allocate_zeroed<float*>("c", 3);
  REQUIRE(c(2) == 0.0f);
  ws.release(m0);
  REQUIRE(ws.bytes_in_use() == 0);
  ws.reset_peak();
  REQUIRE(ws.peak_bytes() == 0);
  (void)a;
}

HYBRIDSEQ_SPACE_TEST_CASE("gemm facade matches the naive oracle for every op", "[core][kernels]") {
  using Space = TestType;
  const int m = 7, n = 5, k = 9;
  for (auto op_a : {kernels::Op::none, kernels::Op::transpose})
    for (auto op_b : {kernels::Op::none, kernels::Op::transpose}) {
      Tensor<double**, Space> a("a", op_a == kernels::Op::none ? m : k, op_a == kernels::Op::none ? k : m);
      Tensor<double**, Space> b("b", op_b == kernels::Op::none ? k : n, op_b == kernels::Op::none ? n : k);
      Tensor<double**, Space> c("c", m, n), expected("e", m, n);
      core::fill(Space{}, core::flat(a), core::Init::normal(1), 1, 1);
      core::fill(Space{}, core::flat(b), core::Init::normal(1), 1, 2);
      core::fill(Space{}, core::flat(c), core::Init::normal(1), 1, 3);
      Kokkos::deep_copy(expected, c);
      kernels::gemm(Space{}, op_a, op_b, 0.5, a, b, 2.0, c);
      kernels::reference::gemm(op_a, op_b, 0.5, a, b, 2.0, expected);
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) REQUIRE(c(i, j) == Approx(expected(i, j)).epsilon(1e-12));
    }
  Tensor<double**, Space> a("a", 3, 4), b("b", 5, 2), c("c", 3, 2);
  REQUIRE_THROWS_WITH(kernels::gemm(Space{}, kernels::Op::none, kernels::Op::none, 1.0, a, b, 0.0, c),
                      "hybridseq::kernels::gemm: op(A) is (3,4), op(B) is (5,2), C is (3,2)");
}
