// Bad input to the primitive layers: each error names the API and the actual values.
#include <catch2/catch.hpp>

#include <limits>
#include <utility>

#include <hybridseq/layers.hpp>

#include "support/spaces.hpp"

using namespace hybridseq;
using Catch::Matchers::Contains;

namespace {

using S = Kokkos::Serial;

/// A layer on the host with its own workspace and Saved state: forward(in, out) is the
/// layer's forward(ws, in, out, saved).
template <class Layer>
struct HostLayer {
  core::Workspace<S> ws;
  Layer layer;
  typename Layer::Saved saved;
  template <class In, class Out>
  decltype(auto) forward(In&& in, Out&& out) {
    return layer.forward(ws, std::forward<In>(in), std::forward<Out>(out), saved);
  }
};

}  // namespace

TEST_CASE("wrong shapes are refused with the API name and extents", "[layers][errors][host]") {
  HostLayer<layers::Linear<layers::LinearShape{128, 64}, float, S>> linear;
  Tensor<float***, S> x("x", 2, 17, 96), y("y", 2, 17, 64);
  REQUIRE_THROWS_AS(linear.forward(x, y), shape_error);
  REQUIRE_THROWS_WITH(linear.forward(x, y), "hybridseq::layers::Linear::forward: x is (2,17,96), expected (B,T,128)");
  Tensor<float***, S> x2("x", 2, 17, 128), y_bad("y", 2, 16, 64);
  REQUIRE_THROWS_WITH(linear.forward(x2, y_bad),
                      "hybridseq::layers::Linear::forward: y is (2,16,64), expected (2,17,64)");

  HostLayer<layers::RmsNorm<8, float, S>> norm;
  Tensor<float***, S> a("a", 1, 3, 7), b("b", 1, 3, 8);
  REQUIRE_THROWS_WITH(norm.forward(a, b), Contains("hybridseq::layers::RmsNorm::forward: x is (1,3,7)"));
}

TEST_CASE("token ids out of range are refused", "[layers][errors][host]") {
  HostLayer<layers::Embedding<layers::EmbeddingShape{10, 4}, float, S>> emb;
  Tensor<std::int32_t**, S> ids("ids", 2, 3);
  Tensor<float***, S> y("y", 2, 3, 4);
  REQUIRE_NOTHROW(emb.forward(ids, y));
  ids(1, 2) = 10;
  REQUIRE_THROWS_AS(emb.forward(ids, y), value_error);
  REQUIRE_THROWS_WITH(emb.forward(ids, y),
                      "hybridseq::layers::Embedding::forward: token id 10 at (b=1, t=2) is outside [0, 10)");
  ids(1, 2) = 0;
  ids(0, 1) = -3;
  REQUIRE_THROWS_WITH(emb.forward(ids, y), Contains("token id -3 at (b=0, t=1)"));
}

TEST_CASE("loss refuses bad targets and non-finite activations", "[layers][errors][host]") {
  HostLayer<layers::LmHeadLoss<layers::LmHeadShape{4, 5}, float, S>> head;
  Tensor<float***, S> x("x", 1, 3, 4);
  Tensor<std::int32_t**, S> targets("t", 1, 3);
  targets(0, 1) = -100;
  REQUIRE_NOTHROW(head.forward(x, targets));
  targets(0, 2) = 5;
  REQUIRE_THROWS_WITH(head.forward(x, targets),
                      Contains("target 5 at (b=0, t=2) is outside [0, 5) and is not ignore_index -100"));
  targets(0, 2) = 0;
  x(0, 2, 1) = std::numeric_limits<float>::quiet_NaN();
  REQUIRE_THROWS_AS(head.forward(x, targets), value_error);
  REQUIRE_THROWS_WITH(head.forward(x, targets), Contains("has a non-finite value nan at flat index 9"));
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
