// Bad input to the primitive layers: each error names the API and the actual values.
#include <catch2/catch.hpp>

#include <limits>

#include <hybridseq/layers.hpp>

#include "support/spaces.hpp"

using namespace hybridseq;
using Catch::Matchers::Contains;

TEST_CASE("wrong shapes are refused with the API name and extents", "[layers][errors][host]") {
  using S = Kokkos::Serial;
  core::Workspace<S> ws;
  layers::Linear<layers::LinearShape{128, 64}, float, S> linear;
  decltype(linear)::Saved saved;
  Tensor<float***, S> x("x", 2, 17, 96), y("y", 2, 17, 64);
  REQUIRE_THROWS_AS(linear.forward(ws, x, y, saved), shape_error);
  REQUIRE_THROWS_WITH(linear.forward(ws, x, y, saved),
                      "hybridseq::layers::Linear::forward: x is (2,17,96), expected (B,T,128)");
  Tensor<float***, S> x2("x", 2, 17, 128), y_bad("y", 2, 16, 64);
  REQUIRE_THROWS_WITH(linear.forward(ws, x2, y_bad, saved),
                      "hybridseq::layers::Linear::forward: y is (2,16,64), expected (2,17,64)");

  layers::RmsNorm<8, float, S> norm;
  decltype(norm)::Saved ns;
  Tensor<float***, S> a("a", 1, 3, 7), b("b", 1, 3, 8);
  REQUIRE_THROWS_WITH(norm.forward(ws, a, b, ns), Contains("hybridseq::layers::RmsNorm::forward: x is (1,3,7)"));
}

TEST_CASE("token ids out of range are refused", "[layers][errors][host]") {
  using S = Kokkos::Serial;
  core::Workspace<S> ws;
  layers::Embedding<layers::EmbeddingShape{10, 4}, float, S> emb;
  decltype(emb)::Saved saved;
  Tensor<std::int32_t**, S> ids("ids", 2, 3);
  Tensor<float***, S> y("y", 2, 3, 4);
  REQUIRE_NOTHROW(emb.forward(ws, ids, y, saved));
  ids(1, 2) = 10;
  REQUIRE_THROWS_AS(emb.forward(ws, ids, y, saved), value_error);
  REQUIRE_THROWS_WITH(emb.forward(ws, ids, y, saved),
                      "hybridseq::layers::Embedding::forward: token id 10 at (b=1, t=2) is outside [0, 10)");
  ids(1, 2) = 0;
  ids(0, 1) = -3;
  REQUIRE_THROWS_WITH(emb.forward(ws, ids, y, saved), Contains("token id -3 at (b=0, t=1)"));
}

TEST_CASE("loss refuses bad targets and non-finite activations", "[layers][errors][host]") {
  using S = Kokkos::Serial;
  core::Workspace<S> ws;
  layers::LmHeadLoss<layers::LmHeadShape{4, 5}, float, S> head;
  decltype(head)::Saved saved;
  Tensor<float***, S> x("x", 1, 3, 4);
  Tensor<std::int32_t**, S> targets("t", 1, 3);
  targets(0, 1) = -100;
  REQUIRE_NOTHROW(head.forward(ws, x, targets, saved));
  targets(0, 2) = 5;
  REQUIRE_THROWS_WITH(head.forward(ws, x, targets, saved),
                      Contains("target 5 at (b=0, t=2) is outside [0, 5) and is not ignore_index -100"));
  targets(0, 2) = 0;
  x(0, 2, 1) = std::numeric_limits<float>::quiet_NaN();
  REQUIRE_THROWS_AS(head.forward(ws, x, targets, saved), value_error);
  REQUIRE_THROWS_WITH(head.forward(ws, x, targets, saved), Contains("has a non-finite value nan at flat index 9"));
}

HYBRIDSEQ_SPACE_TEST_CASE("loss with every target ignored is zero and adds no gradient", "[layers]") {
  core::Workspace<TestType> ws;
  layers::LmHeadLoss<layers::LmHeadShape{4, 5}, double, TestType> head;
  core::initialize(head, 3);
  typename decltype(head)::Saved saved;
  Tensor<double***, TestType> x("x", 2, 3, 4), dx("dx", 2, 3, 4);
  Kokkos::deep_copy(x, 0.5);
  Tensor<std::int32_t**, TestType> targets("t", 2, 3);
  Kokkos::deep_copy(targets, -100);
  REQUIRE(head.forward(ws, x, targets, saved) == 0.0);
  head.backward(ws, saved, dx);
  double s = 0;
  Kokkos::parallel_reduce(
      Kokkos::RangePolicy<TestType>(0, 24), KOKKOS_LAMBDA(int i, double& acc) { acc += std::abs(dx.data()[i]); }, s);
  REQUIRE(s == 0.0);
}
