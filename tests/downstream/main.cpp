// Includes the umbrella header of an installed hybridseq, runs a layer forward/backward and
// checks one value, so a broken install (headers, config, dependencies) fails here.
#include <cmath>
#include <cstdio>

#include <hybridseq/hybridseq.hpp>

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  using namespace hybridseq;
  using Space = Kokkos::DefaultHostExecutionSpace;
  layers::Linear<layers::LinearShape{4, 2, false}, double, Space> linear;
  core::initialize(linear, 1);
  Kokkos::deep_copy(linear.weight().value(), 0.5);
  core::Workspace<Space> ws;
  Tensor<double***, Space> x("x", 1, 3, 4), y("y", 1, 3, 2);
  Kokkos::deep_copy(x, 1.0);
  decltype(linear)::Saved saved;
  linear.forward(ws, x, y, saved);
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, y);
  const bool ok = std::abs(h(0, 2, 1) - 2.0) < 1e-12;
  std::printf("downstream: y(0,2,1) = %g (%s)\n", h(0, 2, 1), ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
