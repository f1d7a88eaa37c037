#pragma once
/// \file
/// Rotary position embedding as a layer over (B, T, H·Dh) activations.

#include <cmath>
#include <cstdint>
#include <string>

#include "../core/check.hpp"
#include "../core/workspace.hpp"
#include "../kernels/rope.hpp"

namespace hybridseq::layers {

/// Compile-time shape of RoPE: heads × head_dim, of which the first `rotary_dim` rotate.
struct RopeShape {
  int heads;
  int head_dim;
  int rotary_dim;  // even, ≤ head_dim; = head_dim for full RoPE
};

/// Rotary dims for a rotary fraction, as GPT-NeoX computes them: ⌊fraction · head_dim⌋,
/// rounded down to even (Cooper et al. use 0.25).
constexpr int rotary_dim_for(int head_dim, double fraction) {
  const int r = static_cast<int>(fraction * head_dim);
  return r - r % 2;
}

/// y (B, T, H·Dh) = RoPE(x) at positions offset .. offset + T − 1. No parameters.
template <RopeShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class Rope {
  static_assert(S.heads > 0 && S.head_dim > 0, "hybridseq::layers::Rope: heads and head_dim must be positive");
  static_assert(S.rotary_dim % 2 == 0 && S.rotary_dim >= 0 && S.rotary_dim <= S.head_dim,
                "hybridseq::layers::Rope: rotary_dim must be even and within [0, head_dim]");

 public:
  using scalar_type = T;
  using execution_space = Space;
  static constexpr int d_in = S.heads * S.head_dim;
  static constexpr int d_out = d_in;

  struct Options {
    double base = 10000.0;
  };
  struct Saved {
    Tensor<T**, Space> cos, sin;  // (T, rotary_dim/2)
  };

  explicit Rope(const Options& options = {}) : base_(options.base) {
    if (!(options.base > 1.0) || !std::isfinite(options.base))
      fail<value_error>("hybridseq::layers::Rope", "base must be finite and > 1, got ", options.base);
  }

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y,
               Saved& saved) const {
    forward_at(ws, x, y, saved, 0);
  }

  /// Forward at positions `offset` .. `offset` + T − 1 (decoding continues a sequence).
  void forward_at(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y,
                  Saved& saved, std::int64_t offset) const {
    check(x, y, "forward", "y");
    const Space exec{};
    saved.cos = ws.template allocate<T**>("rope.cos", x.extent(1), S.rotary_dim / 2);
    saved.sin = ws.template allocate<T**>("rope.sin", x.extent(1), S.rotary_dim / 2);
    kernels::rope_table<T>(exec, base_, offset, S.rotary_dim, saved.cos, saved.sin);
    kernels::rope_apply<T, false>(exec, heads(x), heads(y), saved.cos, saved.sin, S.rotary_dim, false);
  }

  void backward(core::Workspace<Space>&, const Saved& saved, Tensor<const T***, Space> dy,
                Tensor<T***, Space> dx) {
    check(dy, dx, "backward", "dx");
    kernels::rope_apply<T, true>(Space{}, heads(dy), heads(dx), saved.cos, saved.sin, S.rotary_dim, true);
  }

  template <class Visit>
  void visit_parameters(Visit&&) {}

 private:
  // (B, T, H·Dh) viewed as (B, T, H, Dh); contiguous by construction of the activations.
  template <class View>
  static auto heads(const View& v) {
    return Kokkos::View<typename View::value_type****, Kokkos::LayoutRight, typename Space::memory_space,
                        Kokkos::MemoryTraits<Kokkos::Unmanaged>>(v.data(), v.extent(0), v.extent(1), S.heads,
                                                                 S.head_dim);
  }

  template <class X, class Y>
  static void check(const X& x, const Y& y, const char* op, const char* yname) {
    const std::string api = std::string("hybridseq::layers::Rope::") + op;
    core::check_shape(api, "x", x, core::B, core::T, core::dim(d_in));
    core::check_shape(api, yname, y, core::dim(x.extent(0)), core::dim(x.extent(1)), core::dim(d_in));
  }

  double base_;
};

}  // namespace hybridseq::layers
