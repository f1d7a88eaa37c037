#pragma once
/// \file
/// GSS, the Gated State Space branch (Mehta et al. 2022, "Long Range Language Modeling via
/// Gated State Spaces", pseudocode 3.2; reference: lucidrains/gated-state-spaces-pytorch):
///   u  = GELU(x W_u)                      W_u: E×F, no bias
///   v  = GELU(x W_v)                      W_v: E×H, no bias
///   ũ  = LayerNorm(v)                     over H, gain and bias
///   y_h = (K_h * ũ_h)[0..L) + D_h ũ_h     DSS kernel, per channel (kernels/dss.hpp)
///   o  = ((y W_g) ⊙ u) W_o + b_o          W_g: H×F no bias; W_o: F×E with bias
/// In PHA the block's pre-norm and residual live outside the branch, so this is exactly x → o
/// (the reference's outer LayerNorm and `+ residual` belong to the block).

#include <cmath>
#include <cstdint>
#include <string>

#include "../core/check.hpp"
#include "../core/parameter.hpp"
#include "../core/workspace.hpp"
#include "../kernels/activations.hpp"
#include "../kernels/dss.hpp"
#include "../kernels/elementwise.hpp"
#include "layer_norm.hpp"
#include "linear.hpp"

namespace hybridseq::layers {

/// Compile-time shape of a GSS branch: model width E, gate width F, SSM width H, state size N.
struct GssShape {
  int d_model;
  int d_gate;
  int d_ssm;
  int d_state;
};

/// The reference implementation's defaults: F = 4E, H = 256, N = 512.
constexpr GssShape gss_shape(int d_model) {
  return GssShape{d_model, 4 * d_model, 256, 512};
}

namespace detail {

using GssGelu = kernels::ActivationFn<kernels::Activation::gelu>;
/// Light updates per element of the gate kernels (kernels::elementwise's unit).
inline constexpr std::int64_t gelu_work = kernels::detail::activation_work<kernels::Activation::gelu>;

// out = g ⊙ GELU(hu). u = GELU(hu) is never stored: backward recomputes it from hu, which it
// needs anyway for GELU′.
template <class T, class Space>
struct GssGate {
  Tensor<const T*, Space> g, hu;
  Tensor<T*, Space> out;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const { out(i) = g(i) * GssGelu::value(hu(i)); }
};

// From d(gu) (overwritten with dg): dg = d(gu) ⊙ GELU(hu), dhu = d(gu) ⊙ g ⊙ GELU′(hu), GELU′
// from hu and the GELU(hu) just made (cheaper than from hu alone).
template <class T, class Space>
struct GssGateBackward {
  Tensor<const T*, Space> g, hu;
  Tensor<T*, Space> dgu_to_dg, dhu;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    const T d = dgu_to_dg(i), x = hu(i), u = GssGelu::value(x);
    dhu(i) = d * g(i) * GssGelu::derivative(x, u);
    dgu_to_dg(i) = d * u;
  }
};

// dv ← dv ⊙ GELU′(hv), in place, from hv and the v = GELU(hv) forward kept.
template <class T, class Space>
struct GssGeluBackwardInPlace {
  Tensor<const T*, Space> hv, v;
  Tensor<T*, Space> dv;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const { dv(i) *= GssGelu::derivative(hv(i), v(i)); }
};

}  // namespace detail

/// The GSS branch (B, T, E) → (B, T, E), trainable and decodable.
///
/// Parameters: to_u.weight (F,E), to_v.weight (H,E), norm.weight/bias (H), lambda_re (N),
/// lambda_im (N), c_re/c_im (H,N), d (H), to_gate.weight (F,H), to_out.weight (E,F),
/// to_out.bias (E).
/// Training and prefill mix the sequence with `Options::mixing` (FFT convolution on host
/// spaces by default, the exact recurrence elsewhere); `step` runs the recurrence, O(H·N)
/// per token.
template <GssShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class Gss {
  static_assert(S.d_model > 0 && S.d_gate > 0 && S.d_ssm > 0 && S.d_state > 0,
                "hybridseq::layers::Gss: every width (d_model, d_gate, d_ssm, d_state) must be positive");
  static constexpr int E = S.d_model, F = S.d_gate, H = S.d_ssm, N = S.d_state;
  using ToU = Linear<LinearShape{E, F, false}, T, Space>;
  using ToV = Linear<LinearShape{E, H, false}, T, Space>;
  using Norm = LayerNorm<H, T, Space>;
  using ToGate = Linear<LinearShape{H, F, false}, T, Space>;
  using ToOut = Linear<LinearShape{F, E, true}, T, Space>;
  static constexpr bool host_space = kernels::detail::dss_host_space<Space>;

 public:
  using scalar_type = T;
  using execution_space = Space;
  static constexpr int d_in = E;
  static constexpr int d_out = E;
  static constexpr GssShape shape = S;

  /// Runtime options. Defaults follow the reference implementation: PyTorch's nn.Linear
  /// initialises U(±1/√fan_in), whose std is 1/√(3·fan_in), and Linear here draws normal
  /// weights with that std (biases start at zero); Λre, Λim, C and D are torch.randn, i.e.
  /// N(0, 1); LayerNorm's eps is nn.LayerNorm's.
  struct Options {
    double norm_eps = 1e-5;
    double to_u_init_std = 1.0 / std::sqrt(3.0 * E);
    double to_v_init_std = 1.0 / std::sqrt(3.0 * E);
    double to_gate_init_std = 1.0 / std::sqrt(3.0 * H);
    double to_out_init_std = 1.0 / std::sqrt(3.0 * F);
    double ssm_init_std = 1.0;
    /// Training algorithm (kernels/dss.hpp has the measurements). Non-host spaces default to
    /// `scan`: `fft` parallelises over H/8 channel groups only, far too few work items for a GPU.
    kernels::DssAlgorithm mixing = host_space ? kernels::DssAlgorithm::fft : kernels::DssAlgorithm::scan;
    int kernel_chunk = 256;  // rows of ℓ per Vandermonde GEMM (fft)
    int scan_chunk = 0;      // checkpoint interval of the scan's backward; 0: ⌈√T⌉
  };

  struct Saved {
    typename ToU::Saved to_u;
    typename ToV::Saved to_v;
    typename Norm::Saved norm;
    typename ToGate::Saved to_gate;
    typename ToOut::Saved to_out;
    Tensor<T***, Space> hu;  // (B, T, F) x W_u, before GELU
    Tensor<T***, Space> hv;  // (B, T, H) x W_v, before GELU
    Tensor<T***, Space> v;   // (B, T, H) GELU(hv), LayerNorm's input
    Tensor<T***, Space> ut;  // (B, T, H) ũ
    Tensor<T***, Space> ys;  // (B, T, H) SSM output, to_gate's input
    Tensor<T***, Space> g;   // (B, T, F) y W_g
    Tensor<T***, Space> gu;  // (B, T, F) g ⊙ u, to_out's input
    kernels::DssModes<T, Space> modes;
    Tensor<T**, Space> k;  // (T, H) SSM kernel (fft only)
    kernels::DssAlgorithm mixing = kernels::DssAlgorithm::fft;
  };

  /// Per-sequence decoding state. The modes are discretised from the parameters by
  /// `make_state` and again by every `prefill`; `step` reuses them, because re-discretising
  /// (H·N complex products) per token would cost as much as the recurrence itself. Change
  /// the parameters → prefill (or make a new state) before stepping again.
  struct State {
    Tensor<T***, Space> s_re, s_im;  // (B, H, N) complex state s_{h,n}
    kernels::DssModes<T, Space> modes;
    std::int64_t position = 0;  // tokens consumed
    int batch() const { return static_cast<int>(s_re.extent(0)); }
  };

  explicit Gss(const Options& options = {})
      : options_(options),
        to_u_({options.to_u_init_std}),
        to_v_({options.to_v_init_std}),
        norm_({options.norm_eps}),
        // Λ and D get no weight decay (Role::scalar), as S4/DSS/Mamba train them; C is a
        // projection (Role::weight).
        lambda_re_({N}, core::Role::scalar, core::Init::normal(options.ssm_init_std)),
        lambda_im_({N}, core::Role::scalar, core::Init::normal(options.ssm_init_std)),
        c_re_({H, N}, core::Role::weight, core::Init::normal(options.ssm_init_std)),
        c_im_({H, N}, core::Role::weight, core::Init::normal(options.ssm_init_std)),
        d_({H}, core::Role::scalar, core::Init::normal(options.ssm_init_std)),
        to_gate_({options.to_gate_init_std}),
        to_out_({options.to_out_init_std}) {
    const char* api = "hybridseq::layers::Gss::Gss";
    if (options.kernel_chunk <= 0) fail<value_error>(api, "kernel_chunk is ", options.kernel_chunk, ", must be > 0");
    if (options.scan_chunk < 0) fail<value_error>(api, "scan_chunk is ", options.scan_chunk, ", must be >= 0");
  }

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& s) const {
    check(x, y, "forward", "y");
    const Space exec{};
    const std::size_t b = x.extent(0), t = x.extent(1);
    s.mixing = options_.mixing;
    s.hu = ws.template allocate<T***>("gss.hu", b, t, F);
    s.hv = ws.template allocate<T***>("gss.hv", b, t, H);
    s.v = ws.template allocate<T***>("gss.v", b, t, H);
    s.ut = ws.template allocate<T***>("gss.ut", b, t, H);
    s.ys = ws.template allocate<T***>("gss.ys", b, t, H);
    to_u_.forward(ws, x, s.hu, s.to_u);
    to_v_.forward(ws, x, s.hv, s.to_v);
    kernels::activation_forward<kernels::Activation::gelu, T>(exec, core::flat(s.hv), core::flat(s.v));
    norm_.forward(ws, s.v, s.ut, s.norm);
    s.modes = kernels::allocate_dss_modes<T>(ws, H, N);
    discretize(exec, s.modes);
    if (options_.mixing == kernels::DssAlgorithm::fft) {
      s.k = ws.template allocate<T**>("gss.k", t, H);
      kernels::dss_kernel_forward<T>(exec, ws, s.modes, s.k, options_.kernel_chunk);
      kernels::dss_conv_fft_forward<T>(exec, ws, s.k, s.ut, d_.value(), s.ys);
    } else {
      // The zero initial state is scratch: released before anything backward needs is allocated.
      core::WorkspaceScope scope(ws);
      auto s_re = ws.template allocate_zeroed<T***>("gss.scan_state", b, H, N);
      auto s_im = ws.template allocate_zeroed<T***>("gss.scan_state", b, H, N);
      kernels::dss_scan_forward<T>(exec, s.modes, d_.value(), s.ut, s.ys, s_re, s_im);
    }
    s.g = ws.template allocate<T***>("gss.g", b, t, F);
    s.gu = ws.template allocate<T***>("gss.gu", b, t, F);
    to_gate_.forward(ws, s.ys, s.g, s.to_gate);
    gate(exec, s.g, s.hu, s.gu);
    to_out_.forward(ws, s.gu, y, s.to_out);
  }

  /// Accumulates dx += ∂L/∂x and every parameter gradient from dy = ∂L/∂o.
  void backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    const char* api = "hybridseq::layers::Gss::backward";
    core::check_shape(api, "dx", dx, core::dim(s.hu.extent(0)), core::dim(s.hu.extent(1)), core::dim(E));
    core::check_shape(api, "dy", dy, core::dim(s.hu.extent(0)), core::dim(s.hu.extent(1)), core::dim(E));
    const Space exec{};
    const std::size_t b = dx.extent(0), t = dx.extent(1);
    core::WorkspaceScope scope(ws);
    auto dg = ws.template allocate_zeroed<T***>("gss.dg", b, t, F);  // d(gu), then dg in place
    auto dhu = ws.template allocate<T***>("gss.dhu", b, t, F);
    to_out_.backward(ws, s.to_out, dy, dg);
    kernels::elementwise<T>(
        "hybridseq::layers::Gss::gate_backward", exec, dg.size(), detail::gelu_work,
        detail::GssGateBackward<T, Space>{core::flat(s.g), core::flat(s.hu), core::flat(dg), core::flat(dhu)});
    auto dys = ws.template allocate_zeroed<T***>("gss.dys", b, t, H);
    to_gate_.backward(ws, s.to_gate, dg, dys);

    auto dut = ws.template allocate_zeroed<T***>("gss.dut", b, t, H);
    {
      core::WorkspaceScope mixing_scope(ws);
      auto mg = kernels::allocate_dss_mode_grads<T>(ws, H, N);
      if (s.mixing == kernels::DssAlgorithm::fft) {
        auto dk = ws.template allocate<T**>("gss.dk", t, H);
        kernels::dss_conv_fft_backward<T>(exec, ws, s.k, s.ut, d_.value(), dys, dut, dk, d_.grad());
        kernels::dss_kernel_backward<T>(exec, ws, s.modes, dk, mg, options_.kernel_chunk);
      } else {
        kernels::dss_scan_backward<T>(exec, ws, s.modes, d_.value(), s.ut, dys, dut, mg, d_.grad(),
                                      options_.scan_chunk);
      }
      kernels::dss_discretize_backward<T>(exec, lambda_re_.value(), lambda_im_.value(), c_re_.template shaped<T**>(),
                                          c_im_.template shaped<T**>(), mg, lambda_re_.grad(), lambda_im_.grad(),
                                          c_re_.template shaped_grad<T**>(), c_im_.template shaped_grad<T**>());
    }
    auto dv = ws.template allocate_zeroed<T***>("gss.dv", b, t, H);
    norm_.backward(ws, s.norm, dut, dv);
    kernels::elementwise<T>(
        "hybridseq::layers::Gss::gelu_backward", exec, dv.size(), detail::gelu_work,
        detail::GssGeluBackwardInPlace<T, Space>{core::flat(s.hv), core::flat(s.v), core::flat(dv)});
    to_v_.backward(ws, s.to_v, dv, dx);
    to_u_.backward(ws, s.to_u, dhu, dx);
  }

  /// Arena use for x (B, T, E) under Options::mixing on q.concurrency threads. Forward keeps
  /// hu, hv, v, ũ, ys, the norm's saves, the modes (and K for fft), then g and gu; its peak
  /// is the mixing scratch above the modes. Backward holds dg, dhu, dys, dũ, then either the
  /// mixing scope (mode gradients, dK and the larger kernel's scratch for fft; the scan's
  /// scratch) or dv.
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    const std::int64_t b = q.batch, t = q.time, rows = b * t;
    const bool fft = options_.mixing == kernels::DssAlgorithm::fft;
    const std::size_t wide = core::padded_bytes<T>(rows * F), narrow = core::padded_bytes<T>(rows * H),
                      k = fft ? core::padded_bytes<T>(t * H) : 0;
    const std::size_t before_mixing =
        wide + 4 * narrow + norm_.workspace(q).saved + kernels::dss_modes_bytes<T>(H, N) + k;
    const std::size_t mixing = fft ? std::max(kernels::dss_kernel_forward_scratch<T>(t, N, options_.kernel_chunk),
                                              kernels::dss_conv_fft_scratch<T, Space>(b, t, H, q.concurrency, false))
                                   : 2 * core::padded_bytes<T>(b * H * N);
    const std::size_t saved = before_mixing + 2 * wide;
    const std::size_t mixing_backward =
        kernels::dss_mode_grads_bytes<T>(H, N) +
        (fft ? k + std::max(kernels::dss_conv_fft_scratch<T, Space>(b, t, H, q.concurrency, true),
                            kernels::dss_kernel_backward_scratch<T>(t, H, N, options_.kernel_chunk))
             : kernels::dss_scan_backward_scratch<T>(b, t, H, N, options_.scan_chunk, q.concurrency));
    return {saved, std::max(saved, before_mixing + mixing), 2 * wide + 2 * narrow + std::max(mixing_backward, narrow)};
  }

  // ---- decoding ---------------------------------------------------------------------------

  /// A zero state for `batch` sequences, with the modes discretised from the current parameters.
  State make_state(int batch) const {
    if (batch < 0) fail<value_error>("hybridseq::layers::Gss::make_state", "batch is ", batch, ", must be >= 0");
    State st;
    st.s_re = Tensor<T***, Space>("hybridseq::gss::state_re", batch, H, N);
    st.s_im = Tensor<T***, Space>("hybridseq::gss::state_im", batch, H, N);
    st.modes = {Tensor<double**, Space>("hybridseq::gss::lambda", 2, N), Tensor<T**, Space>("hybridseq::gss::a", 2, N),
                Tensor<T**, Space>("hybridseq::gss::c", H, 2 * N)};
    discretize(Space{}, st.modes);
    return st;
  }

  /// Consumes a prompt x (B, T, E) from the state and writes its outputs y (B, T, E):
  /// identical (up to rounding) to `forward` on the concatenation of everything the state has
  /// consumed and x. Re-discretises the modes from the current parameters first. With
  /// mixing = fft: the FFT convolution, plus the carried state's readout when the state is
  /// not fresh, and the new state by Vandermonde GEMMs (no O(T·H·N) recurrence).
  /// Refuses, before anything changes, a continuation of another batch than the state's.
  void check_fits(const State& st, std::int64_t batch, std::int64_t) const {
    if (batch != st.batch())
      fail<shape_error>("hybridseq::layers::Gss::prefill", "x holds ", batch, " sequences; the decoding state holds ",
                        st.batch());
  }

  void prefill(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x, Tensor<T***, Space> y) const {
    const char* api = "hybridseq::layers::Gss::prefill";
    core::check_shape(api, "x", x, core::dim(st.batch()), core::T, core::dim(E));
    core::check_shape(api, "y", y, core::dim(x.extent(0)), core::dim(x.extent(1)), core::dim(E));
    discretize(Space{}, st.modes);
    advance(ws, st, x, y, options_.mixing);
  }

  /// One token per sequence: x (B, 1, E) → y (B, 1, E), O(E·F + E·H + H·F + H·N) per sequence.
  void step(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x, Tensor<T***, Space> y) const {
    const char* api = "hybridseq::layers::Gss::step";
    core::check_shape(api, "x", x, core::dim(st.batch()), core::dim(1), core::dim(E));
    core::check_shape(api, "y", y, core::dim(st.batch()), core::dim(1), core::dim(E));
    advance(ws, st, x, y, kernels::DssAlgorithm::scan);
  }

  /// An independent copy of a state (deep copy), e.g. to branch a sequence.
  State snapshot(const State& st) const {
    State out = make_state(st.batch());
    restore(out, st);
    return out;
  }

  /// Overwrites `st` with the contents of `from` (same batch).
  void restore(State& st, const State& from) const {
    if (st.batch() != from.batch())
      fail<shape_error>("hybridseq::layers::Gss::restore", "state has batch ", st.batch(), " but the snapshot has ",
                        from.batch());
    Kokkos::deep_copy(st.s_re, from.s_re);
    Kokkos::deep_copy(st.s_im, from.s_im);
    Kokkos::deep_copy(st.modes.lambda, from.modes.lambda);
    Kokkos::deep_copy(st.modes.a, from.modes.a);
    Kokkos::deep_copy(st.modes.c, from.modes.c);
    st.position = from.position;
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("to_u", to_u_);
    visit("to_v", to_v_);
    visit("norm", norm_);
    visit("lambda_re", lambda_re_);
    visit("lambda_im", lambda_im_);
    visit("c_re", c_re_);
    visit("c_im", c_im_);
    visit("d", d_);
    visit("to_gate", to_gate_);
    visit("to_out", to_out_);
  }

  const Options& options() const { return options_; }

 private:
  template <class X, class Y>
  static void check(const X& x, const Y& y, const char* op, const char* yname) {
    core::check_sequence_io(std::string("hybridseq::layers::Gss::") + op, x, E, yname, y, E);
  }

  void discretize(const Space& exec, const kernels::DssModes<T, Space>& modes) const {
    kernels::dss_discretize<T>(exec, lambda_re_.value(), lambda_im_.value(), c_re_.template shaped<T**>(),
                               c_im_.template shaped<T**>(), modes);
  }

  static void gate(const Space& exec, const Tensor<T***, Space>& g, const Tensor<T***, Space>& hu,
                   const Tensor<T***, Space>& out) {
    kernels::elementwise<T>("hybridseq::layers::Gss::gate", exec, out.size(), detail::gelu_work,
                            detail::GssGate<T, Space>{core::flat(g), core::flat(hu), core::flat(out)});
  }

  // The branch over x's T tokens from the state, leaving the state after them; everything
  // but the state is scratch. `scan` runs the recurrence (O(H·N) per token: the step);
  // `fft` convolves with K, adds the carried state's readout and advances the state by GEMMs.
  void advance(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x, Tensor<T***, Space> y,
               kernels::DssAlgorithm mixing) const {
    const Space exec{};
    const std::size_t b = x.extent(0), t = x.extent(1);
    if (t == 0) return;
    core::WorkspaceScope scope(ws);
    auto hu = ws.template allocate<T***>("gss.hu", b, t, F);
    auto hv = ws.template allocate<T***>("gss.hv", b, t, H);
    auto v = ws.template allocate<T***>("gss.v", b, t, H);
    typename ToU::Saved su;
    typename ToV::Saved sv;
    typename Norm::Saved sn;
    typename ToGate::Saved sg;
    typename ToOut::Saved so;
    to_u_.forward(ws, x, hu, su);
    to_v_.forward(ws, x, hv, sv);
    kernels::activation_forward<kernels::Activation::gelu, T>(exec, core::flat(hv), core::flat(v));
    auto& ut = hv;  // hv is dead once v exists
    norm_.forward(ws, v, ut, sn);
    auto& ys = v;  // v is dead once ũ exists
    if (mixing == kernels::DssAlgorithm::fft) {
      core::WorkspaceScope mixing_scope(ws);
      auto k = ws.template allocate<T**>("gss.k", t, H);
      kernels::dss_kernel_forward<T>(exec, ws, st.modes, k, options_.kernel_chunk);
      kernels::dss_conv_fft_forward<T>(exec, ws, k, ut, d_.value(), ys);
      if (st.position > 0)  // a fresh state is zero: nothing to read out
        kernels::dss_state_readout<T>(exec, ws, st.modes, st.s_re, st.s_im, ys, options_.kernel_chunk);
      kernels::dss_state_advance<T>(exec, ws, st.modes, ut, st.s_re, st.s_im, options_.kernel_chunk);
    } else {
      kernels::dss_scan_forward<T>(exec, st.modes, d_.value(), ut, ys, st.s_re, st.s_im);
    }
    auto g = ws.template allocate<T***>("gss.g", b, t, F);
    to_gate_.forward(ws, ys, g, sg);
    gate(exec, g, hu, g);  // elementwise, so in place is safe
    to_out_.forward(ws, g, y, so);
    st.position += static_cast<std::int64_t>(t);
  }

  Options options_;
  ToU to_u_;
  ToV to_v_;
  Norm norm_;
  core::Parameter<T, Space> lambda_re_;  // (N)
  core::Parameter<T, Space> lambda_im_;  // (N)
  core::Parameter<T, Space> c_re_;       // (H, N)
  core::Parameter<T, Space> c_im_;       // (H, N)
  core::Parameter<T, Space> d_;          // (H)
  ToGate to_gate_;
  ToOut to_out_;
};

}  // namespace hybridseq::layers
