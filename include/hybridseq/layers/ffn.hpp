#pragma once
/// \file
/// Feed-forward networks: the two-layer MLP (GELU by default) and the gated form
/// (SwiGLU with SiLU: Shazeer 2020).
///   mlp:   y = fc2(f(fc1(x)))
///   gated: y = down(f(gate(x)) ⊙ up(x))

#include <string>
#include <string_view>
#include <type_traits>

#include "../core/check.hpp"
#include "../core/workspace.hpp"
#include "activation.hpp"
#include "linear.hpp"

namespace hybridseq::layers {

enum class FfnKind { mlp, gated };

/// Compile-time shape of an FFN: model width d, hidden width f.
struct FfnShape {
  int d;
  int f;
  FfnKind kind = FfnKind::mlp;
  bool bias = true;
  Activation act = Activation::gelu;
};

/// SwiGLU as used by Llama: gated, SiLU, no biases.
constexpr FfnShape swiglu(int d, int f) {
  return FfnShape{d, f, FfnKind::gated, false, Activation::silu};
}

/// Runtime options shared by both FFN forms.
struct FfnOptions {
  double init_std = 0.02;      // input projections (fc1 / gate / up)
  double out_init_std = 0.02;  // output projection (fc2 / down)
};

namespace detail {

template <class T, class Space>
Tensor<T***, Space> hidden(core::Workspace<Space>& ws, const char* label, std::size_t b, std::size_t t, int f) {
  return ws.template allocate<T***>(label, b, t, static_cast<std::size_t>(f));
}

template <class X, class Y>
void check_ffn(const char* cls, const char* op, int d, const X& x, const char* yname, const Y& y) {
  const std::string api = std::string("hybridseq::layers::") + cls + "::" + op;
  core::check_shape(api, "x", x, core::B, core::T, core::dim(d));
  core::check_shape(api, yname, y, core::dim(x.extent(0)), core::dim(x.extent(1)), core::dim(d));
}

/// y = fc2(f(fc1(x)))
template <FfnShape S, Scalar T, ExecutionSpace Space>
class MlpFfn {
  using In = Linear<LinearShape{S.d, S.f, S.bias}, T, Space>;
  using Out = Linear<LinearShape{S.f, S.d, S.bias}, T, Space>;
  using Act = ActivationLayer<S.act, S.f, T, Space>;

 public:
  using scalar_type = T;
  using execution_space = Space;
  static constexpr int d_in = S.d;
  static constexpr int d_out = S.d;
  static constexpr bool position_wise = true;  // decodes by forward: no state across time
  using Options = FfnOptions;

  struct Saved {
    typename In::Saved fc1;
    Tensor<T***, Space> h;  // (B, T, F) pre-activation
    Tensor<T***, Space> a;  // (B, T, F) post-activation
    typename Out::Saved fc2;
  };

  explicit MlpFfn(const Options& o = {}) : fc1_({o.init_std}), fc2_({o.out_init_std}) {}

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& s) const {
    check_ffn("Ffn", "forward", S.d, x, "y", y);
    s.h = hidden<T>(ws, "ffn.h", x.extent(0), x.extent(1), S.f);
    s.a = hidden<T>(ws, "ffn.a", x.extent(0), x.extent(1), S.f);
    fc1_.forward(ws, x, s.h, s.fc1, kernels::activation_forward_op<S.act, T, Space>(core::flat(s.h), core::flat(s.a)));
    fc2_.forward(ws, s.a, y, s.fc2);
  }

  void backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    check_ffn("Ffn", "backward", S.d, dx, "dy", dy);
    core::WorkspaceScope scope(ws);
    auto da = ws.template allocate<T***>("ffn.da", dx.extent(0), dx.extent(1), S.f);
    auto dh = ws.template allocate<T***>("ffn.dh", dx.extent(0), dx.extent(1), S.f);
    fc2_.backward(ws, s.fc2, dy, da, Write::assign,
                  kernels::activation_backward_op<S.act, T, Write::assign, Space>(core::flat(s.h), core::flat(s.a),
                                                                                  core::flat(da), core::flat(dh)));
    fc1_.backward(ws, s.fc1, dh, dx);
  }

  /// Arena use: forward keeps h and a, backward holds da and dh, all (B, T, F).
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    const std::size_t hidden = core::padded_bytes<T>(q.batch * q.time * S.f);
    return core::Footprint::kept(2 * hidden, 2 * hidden);
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("fc1", fc1_);
    visit("fc2", fc2_);
  }
  /// DeepNorm's β-init: both projections scaled by β.
  void rescale_for_deepnorm(double beta) {
    fc1_.scale_weights(beta);
    fc2_.scale_weights(beta);
  }

 private:
  In fc1_;
  Out fc2_;
};

/// y = down(f(gate(x)) ⊙ up(x))
template <FfnShape S, Scalar T, ExecutionSpace Space>
class GatedFfn {
  using In = Linear<LinearShape{S.d, S.f, S.bias}, T, Space>;
  using Out = Linear<LinearShape{S.f, S.d, S.bias}, T, Space>;
  using F = kernels::ActivationFn<S.act>;

 public:
  using scalar_type = T;
  using execution_space = Space;
  static constexpr int d_in = S.d;
  static constexpr int d_out = S.d;
  static constexpr bool position_wise = true;  // decodes by forward: no state across time
  using Options = FfnOptions;

  struct Saved {
    typename In::Saved gate_in, up_in;
    Tensor<T***, Space> g, u, a;  // (B, T, F): gate pre-activation, up, f(g) ⊙ u
    typename Out::Saved down;
  };

  explicit GatedFfn(const Options& o = {}) : gate_({o.init_std}), up_({o.init_std}), down_({o.out_init_std}) {}

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& s) const {
    check_ffn("Ffn<gated>", "forward", S.d, x, "y", y);
    s.g = hidden<T>(ws, "ffn.g", x.extent(0), x.extent(1), S.f);
    s.u = hidden<T>(ws, "ffn.u", x.extent(0), x.extent(1), S.f);
    s.a = hidden<T>(ws, "ffn.a", x.extent(0), x.extent(1), S.f);
    gate_.forward(ws, x, s.g, s.gate_in);
    up_.forward(ws, x, s.u, s.up_in);
    const auto g = core::flat(s.g), u = core::flat(s.u), a = core::flat(s.a);
    Kokkos::parallel_for(
        "hybridseq::layers::Ffn<gated>::gate", Kokkos::RangePolicy<Space>(0, a.extent(0)),
        KOKKOS_LAMBDA(const std::int64_t i) { a(i) = F::value(g(i)) * u(i); });
    down_.forward(ws, s.a, y, s.down);
  }

  void backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    check_ffn("Ffn<gated>", "backward", S.d, dx, "dy", dy);
    core::WorkspaceScope scope(ws);
    auto da = ws.template allocate<T***>("ffn.da", dx.extent(0), dx.extent(1), S.f);
    auto dg = ws.template allocate<T***>("ffn.dg", dx.extent(0), dx.extent(1), S.f);
    auto du = ws.template allocate<T***>("ffn.du", dx.extent(0), dx.extent(1), S.f);
    down_.backward(ws, s.down, dy, da, Write::assign);
    const auto g = core::flat(s.g), u = core::flat(s.u), fa = core::flat(da), fg = core::flat(dg), fu = core::flat(du);
    Kokkos::parallel_for(
        "hybridseq::layers::Ffn<gated>::gate_backward", Kokkos::RangePolicy<Space>(0, fa.extent(0)),
        KOKKOS_LAMBDA(const std::int64_t i) {
          const T gi = g(i), f = F::value(gi);
          fg(i) = fa(i) * u(i) * kernels::derivative_given_value<S.act>(gi, f);
          fu(i) = fa(i) * f;
        });
    gate_.backward(ws, s.gate_in, dg, dx);
    up_.backward(ws, s.up_in, du, dx);
  }

  /// Arena use: forward keeps g, u and a, backward holds da, dg and du, all (B, T, F).
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    const std::size_t hidden = core::padded_bytes<T>(q.batch * q.time * S.f);
    return core::Footprint::kept(3 * hidden, 3 * hidden);
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("gate", gate_);
    visit("up", up_);
    visit("down", down_);
  }
  void rescale_for_deepnorm(double beta) {
    gate_.scale_weights(beta);
    up_.scale_weights(beta);
    down_.scale_weights(beta);
  }

 private:
  In gate_, up_;
  Out down_;
};

}  // namespace detail

/// A feed-forward branch (B, T, d) → (B, T, d); the form is chosen by `S.kind`. A class rather
/// than an alias of the chosen form: nvcc 13 cannot re-emit an alias template expanded with a
/// class-type constant (docs/design.md, "CUDA").
template <FfnShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class Ffn
    : public std::conditional_t<S.kind == FfnKind::mlp, detail::MlpFfn<S, T, Space>, detail::GatedFfn<S, T, Space>> {
  using Form = std::conditional_t<S.kind == FfnKind::mlp, detail::MlpFfn<S, T, Space>, detail::GatedFfn<S, T, Space>>;

 public:
  using Form::Form;
  static constexpr std::string_view kind = S.kind == FfnKind::mlp ? "MlpFfn" : "GatedFfn";  // core::describe
};

/// Compile-time shape of the Dual-FFN branch (PHA): a primary FFN and a narrower auxiliary
/// one read the same input and are summed (papers.md §1, an [open] point; default widths
/// 4d and 1d).
struct DualFfnShape {
  FfnShape primary;
  FfnShape auxiliary;
};

constexpr DualFfnShape dual_ffn(int d, int f_primary, int f_auxiliary) {
  return DualFfnShape{FfnShape{d, f_primary}, FfnShape{d, f_auxiliary}};
}

/// y = primary(x) + auxiliary(x).
template <DualFfnShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class DualFfn {
  static_assert(S.primary.d == S.auxiliary.d,
                "hybridseq::layers::DualFfn: primary and auxiliary FFNs must share the model width");
  using Primary = Ffn<S.primary, T, Space>;
  using Auxiliary = Ffn<S.auxiliary, T, Space>;

 public:
  using scalar_type = T;
  using execution_space = Space;
  static constexpr int d_in = S.primary.d;
  static constexpr int d_out = S.primary.d;
  static constexpr bool position_wise = true;  // decodes by forward: no state across time

  struct Options {
    FfnOptions primary{}, auxiliary{};
  };
  struct Saved {
    typename Primary::Saved primary;
    typename Auxiliary::Saved auxiliary;
  };

  explicit DualFfn(const Options& o = {}) : primary_(o.primary), auxiliary_(o.auxiliary) {}

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& s) const {
    detail::check_ffn("DualFfn", "forward", d_in, x, "y", y);
    primary_.forward(ws, x, y, s.primary);
    // The auxiliary output is needed only until it is added; its scratch sits below the
    // saved activations, so it cannot be released early without a second arena.
    auto aux = ws.template allocate<T***>("dual_ffn.aux", x.extent(0), x.extent(1), d_out);
    auxiliary_.forward(ws, x, aux, s.auxiliary);
    const auto fy = core::flat(y);
    const auto fa = core::flat(aux);
    Kokkos::parallel_for(
        "hybridseq::layers::DualFfn::sum", Kokkos::RangePolicy<Space>(0, fy.extent(0)),
        KOKKOS_LAMBDA(const std::int64_t i) { fy(i) += fa(i); });
  }

  void backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    primary_.backward(ws, s.primary, dy, dx);
    auxiliary_.backward(ws, s.auxiliary, dy, dx);
  }

  /// Arena use: the primary's saves, then the auxiliary output (kept, see forward) under
  /// the auxiliary's; backward runs one FFN's after the other.
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    const core::Footprint p = primary_.workspace(q), a = auxiliary_.workspace(q);
    core::ArenaSteps fwd;
    fwd.forward(p).hold(core::padded_bytes<T>(q.batch * q.time * d_out)).forward(a);
    return {fwd.level(), fwd.peak(), std::max(p.backward, a.backward)};
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("primary", primary_);
    visit("auxiliary", auxiliary_);
  }

 private:
  Primary primary_;
  Auxiliary auxiliary_;
};

}  // namespace hybridseq::layers
