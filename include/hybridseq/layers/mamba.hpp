#pragma once
/// \file
/// Mamba-1 mixer (Gu & Dao 2023, "Mamba: Linear-Time Sequence Modeling with Selective State
/// Spaces", §3 and Fig. 3; papers.md §4), a sequence branch (B, T, D) → (B, T, D):
///
///   (x, z) = in_proj(u)                          in_proj.weight (2·Di, D)
///   x = SiLU(causal_depthwise_conv1d(x))         conv1d.weight (Di, 1, K), conv1d.bias (Di)
///   (δ, B, C) = x_proj(x)                        x_proj.weight (R + 2N, Di), split R | N | N
///   Δ = softplus(dt_proj(δ))                     dt_proj.weight (Di, R), dt_proj.bias (Di)
///   h_t = exp(Δ_t A) ⊙ h_{t−1} + Δ_t B_t x_t,  y_t = C_t · h_t + D ⊙ x_t,  A = −exp(A_log)
///   out = out_proj(y ⊙ SiLU(z))                  out_proj.weight (D, Di)
///
/// Parameter names and shapes are those of Hugging Face's MambaMixer (and of the reference
/// `mamba_ssm.Mamba`), so their state dicts load by name. dt_proj's bias is added inside the
/// selective scan, fused with the softplus (as `delta_bias` in the reference CUDA kernel).
///
/// Decoding keeps, per sequence, the conv window (the last K − 1 conv inputs) and the SSM
/// state h (Di, N): `step` costs O(D·Di + Di·N) whatever the position.

#include <cmath>
#include <cstdint>
#include <string>

#include "../core/check.hpp"
#include "../core/parameter.hpp"
#include "../core/workspace.hpp"
#include "../kernels/conv1d.hpp"
#include "../kernels/gemm.hpp"
#include "../kernels/selective_scan.hpp"
#include "linear.hpp"

namespace hybridseq::layers {

/// Compile-time shape of a Mamba mixer. Defaults are the reference's (d_state 16, expand 2,
/// d_conv 4, conv bias on, projection biases off); dt_rank 0 means ⌈d_model / 16⌉.
struct MambaShape {
  int d_model;
  int d_state = 16;
  int expand = 2;
  int d_conv = 4;
  int dt_rank = 0;
  bool conv_bias = true;
  bool bias = false;
};

/// The dt rank R of a shape, with the default resolved.
constexpr int mamba_dt_rank(const MambaShape& s) {
  return s.dt_rank > 0 ? s.dt_rank : (s.d_model + 15) / 16;
}

namespace detail {

/// SiLU: the branch-free polynomial sigmoid for float (the gates and the conv activation touch
/// B·T·Di values, as many as the scan has channels·steps), libm for double.
using MambaSilu = kernels::ActivationFn<kernels::Activation::silu>;

// g = y ⊙ SiLU(z), one row (b, t) per work item.
template <class T, class Space>
struct MambaGateForward {
  Tensor<const T***, Space> y;         // (B, T, Di)
  StridedTensor<const T***, Space> z;  // (B, T, Di), unit channel stride
  Tensor<T***, Space> g;               // (B, T, Di)
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t row) const {
    const std::int64_t steps = y.extent(1), di = y.extent(2), b = row / steps, t = row % steps;
    const T* const yp = &y(b, t, 0);
    const T* const zp = &z(b, t, 0);
    T* const gp = &g(b, t, 0);
    for (std::int64_t d = 0; d < di; ++d) gp[d] = yp[d] * MambaSilu::value(zp[d]);
  }
};

// dy = dg ⊙ SiLU(z) (written; dy may be dg itself), dz += dg ⊙ y ⊙ SiLU'(z).
template <class T, class Space>
struct MambaGateBackward {
  Tensor<const T***, Space> dg, y;     // (B, T, Di)
  StridedTensor<const T***, Space> z;  // (B, T, Di)
  Tensor<T***, Space> dy;              // (B, T, Di)
  StridedTensor<T***, Space> dz;       // (B, T, Di)
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t row) const {
    const std::int64_t steps = y.extent(1), di = y.extent(2), b = row / steps, t = row % steps;
    const T* const gp = &dg(b, t, 0);
    const T* const yp = &y(b, t, 0);
    const T* const zp = &z(b, t, 0);
    T* const dyp = &dy(b, t, 0);
    T* const dzp = &dz(b, t, 0);
    for (std::int64_t d = 0; d < di; ++d) {
      const T s = MambaSilu::sigmoid(zp[d]), g = gp[d];
      dzp[d] += g * yp[d] * s * (T(1) + zp[d] * (T(1) - s));
      dyp[d] = g * zp[d] * s;
    }
  }
};

// dpre = du ⊙ SiLU'(pre), flat.
template <class T, class Space>
struct MambaSiluBackward {
  Tensor<const T*, Space> pre, du;
  Tensor<T*, Space> dpre;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    dpre(i) = du(i) * MambaSilu::derivative(pre(i));
  }
};

/// conv1d: weight (Di, 1, K) and bias (Di), named as PyTorch's nn.Conv1d.
template <class T, class Space>
struct MambaConv1dParameters {
  core::Parameter<T, Space> weight, bias;
  bool has_bias;
  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("weight", weight);
    if (has_bias) visit("bias", bias);
  }
};

/// dt_proj: weight (Di, R) and bias (Di). Not a Linear: the bias is applied inside the scan.
template <class T, class Space>
struct MambaDtProjParameters {
  core::Parameter<T, Space> weight, bias;
  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("weight", weight);
    visit("bias", bias);
  }
};

}  // namespace detail

/// The Mamba-1 mixer branch. See the file comment for the definition.
///
/// Requires: x (B, T, d_model), y (B, T, d_model). Backward accumulates dx and every
/// parameter gradient (the caller zeroes). Training starts from a zero state; `prefill` and
/// `step` continue a `State`.
template <MambaShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class Mamba {
  static_assert(S.d_model > 0 && S.d_state > 0 && S.expand > 0 && S.d_conv > 0 && S.dt_rank >= 0,
                "hybridseq::layers::Mamba: d_model, d_state, expand and d_conv must be positive, dt_rank >= 0");

 public:
  static constexpr int d_model = S.d_model;
  static constexpr int d_inner = S.expand * S.d_model;  // Di
  static constexpr int d_state = S.d_state;             // N
  static constexpr int d_conv = S.d_conv;               // K
  static constexpr int dt_rank = mamba_dt_rank(S);      // R

 private:
  static constexpr int D = d_model, Di = d_inner, N = d_state, K = d_conv, R = dt_rank;
  using InProj = Linear<LinearShape{D, 2 * Di, S.bias}, T, Space>;
  using XProj = Linear<LinearShape{Di, R + 2 * N, false}, T, Space>;
  using OutProj = Linear<LinearShape{Di, D, S.bias}, T, Space>;

 public:
  using scalar_type = T;
  using execution_space = Space;
  static constexpr int d_in = D;
  static constexpr int d_out = D;
  static constexpr MambaShape shape = S;

  /// Runtime options. Projections default to nn.Linear's initialisation scale (U(±1/√fan_in)
  /// has std 1/√(3·fan_in); Linear draws normal weights with that std). Δ's initial range and
  /// floor are the reference's dt_min, dt_max, dt_init_floor.
  struct Options {
    double in_proj_init_std = 1.0 / std::sqrt(3.0 * S.d_model);
    double x_proj_init_std = 1.0 / std::sqrt(3.0 * S.expand * S.d_model);
    double out_proj_init_std = 1.0 / std::sqrt(3.0 * S.expand * S.d_model);
    double dt_min = 1e-3;
    double dt_max = 0.1;
    double dt_init_floor = 1e-4;
    /// Steps between the scan's stored states: backward memory B·⌈T/L⌉·Di·N + per-thread
    /// 2·L·(N+1)·lanes, recomputation one extra forward of the scan.
    int scan_chunk = kernels::scan_default_chunk;
  };

  /// What backward needs. The gated scan output (out_proj's input) is not kept: backward
  /// recomputes it from y and z, saving B·T·Di values.
  struct Saved {
    typename InProj::Saved in_proj;
    typename XProj::Saved x_proj;
    Tensor<T***, Space> xz;         // (B, T, 2·Di) in_proj output: x | z
    Tensor<T***, Space> conv;       // (B, T, Di) conv1d output before SiLU
    Tensor<T***, Space> u;          // (B, T, Di) SiLU(conv): x_proj's and the scan's input
    Tensor<T***, Space> dbc;        // (B, T, R + 2N) x_proj output: δ | B | C
    Tensor<T***, Space> dt;         // (B, T, Di) dt_proj(δ) before bias and softplus
    Tensor<T***, Space> y;          // (B, T, Di) scan output, before the gate
    Tensor<T****, Space> h_chunks;  // (B, ⌈T/L⌉, Di, N) scan state at chunk starts
    int chunk = kernels::scan_default_chunk;
  };

  /// Per-sequence decoding state.
  struct State {
    Tensor<T***, Space> conv;   // (B, Di, K − 1) the last K − 1 conv inputs, oldest first
    Tensor<T***, Space> h;      // (B, Di, N) SSM state
    std::int64_t position = 0;  // tokens consumed
    int batch() const { return static_cast<int>(h.extent(0)); }
  };

  explicit Mamba(const Options& options = {})
      : options_(options),
        in_proj_({options.in_proj_init_std}),
        conv1d_{core::Parameter<T, Space>({Di, 1, K}, core::Role::weight, conv_init()),
                core::Parameter<T, Space>({S.conv_bias ? Di : 0}, core::Role::bias, conv_init()), S.conv_bias},
        x_proj_({options.x_proj_init_std}),
        dt_proj_{
            core::Parameter<T, Space>({Di, R}, core::Role::weight,
                                      core::Init::uniform(-1.0 / std::sqrt(double(R)), 1.0 / std::sqrt(double(R)))),
            core::Parameter<T, Space>(
                {Di}, core::Role::bias,
                core::Init::inverse_softplus_log_uniform(options.dt_min, options.dt_max, options.dt_init_floor))},
        // A_log and D are not weight-decayed (Role::scalar), as in the reference (_no_weight_decay).
        a_log_({Di, N}, core::Role::scalar, core::Init::log_index(N)),
        d_({Di}, core::Role::scalar, core::Init::ones()),
        out_proj_({options.out_proj_init_std}) {
    const char* api = "hybridseq::layers::Mamba::Mamba";
    if (options.scan_chunk < 1) fail<value_error>(api, "scan_chunk is ", options.scan_chunk, ", must be >= 1");
    if (!(options.dt_min > 0 && options.dt_min <= options.dt_max))
      fail<value_error>(api, "dt_min is ", options.dt_min, " and dt_max ", options.dt_max,
                        "; need 0 < dt_min <= dt_max");
    if (!(options.dt_init_floor >= 0))
      fail<value_error>(api, "dt_init_floor is ", options.dt_init_floor, ", must be >= 0");
  }

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& s) const {
    check(x, y, "forward");
    const Space exec{};
    const std::size_t b = x.extent(0), t = x.extent(1);
    s.chunk = options_.scan_chunk;
    s.xz = ws.template allocate<T***>("mamba.xz", b, t, 2 * Di);
    s.conv = ws.template allocate<T***>("mamba.conv", b, t, Di);
    s.u = ws.template allocate<T***>("mamba.u", b, t, Di);
    s.dbc = ws.template allocate<T***>("mamba.dbc", b, t, R + 2 * N);
    s.dt = ws.template allocate<T***>("mamba.dt", b, t, Di);
    s.y = ws.template allocate<T***>("mamba.y", b, t, Di);
    s.h_chunks = ws.template allocate<T****>("mamba.h_chunks", b, kernels::scan_chunks(t, s.chunk), Di, N);

    in_proj_.forward(ws, x, s.xz, s.in_proj);
    kernels::conv1d_forward<K, detail::MambaSilu, T>(exec, x_part(s.xz), conv_weight(), conv_bias(), {}, s.conv, s.u);
    x_proj_.forward(ws, s.u, s.dbc, s.x_proj);
    dt_projection(exec, s.dbc, s.dt);
    kernels::selective_scan_forward<N, T>(exec, s.u, s.dt, dt_proj_.bias.value(), a_log_.template shaped<const T**>(),
                                          b_part(s.dbc), c_part(s.dbc), d_.value(), {}, s.y, s.h_chunks, {}, s.chunk);
    // The gated output is only out_proj's input: released at once, recomputed by backward.
    core::WorkspaceScope scope(ws);
    auto g = ws.template allocate<T***>("mamba.g", b, t, Di);
    gate(exec, s.y, z_part(s.xz), g);
    typename OutProj::Saved out_saved;
    out_proj_.forward(ws, g, y, out_saved);
  }

  /// Arena use for x (B, T, D) on q.concurrency threads: forward keeps xz, conv, u, dbc, dt,
  /// y and the chunk states, the gate output above them is released; backward holds dxz and
  /// dg, then the recomputed gate output, later du, ddt, ddbc and the scan's scratch.
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    const std::int64_t b = q.batch, t = q.time, rows = b * t;
    const std::size_t inner = core::padded_bytes<T>(rows * Di), dbc = core::padded_bytes<T>(rows * (R + 2 * N));
    const std::size_t saved = core::padded_bytes<T>(rows * 2 * Di) + 4 * inner + dbc +
                              core::padded_bytes<T>(b * kernels::scan_chunks(t, options_.scan_chunk) * Di * N);
    const std::size_t scan =
        2 * inner + dbc +
        kernels::selective_scan_backward_scratch<N, T, Space>(b, t, Di, options_.scan_chunk, q.concurrency);
    return {saved, saved + inner, core::padded_bytes<T>(rows * 2 * Di) + inner + std::max(inner, scan)};
  }

  /// Accumulates dx += ∂L/∂x and every parameter gradient from dy = ∂L/∂y.
  void backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    const char* api = "hybridseq::layers::Mamba::backward";
    const auto b = static_cast<std::int64_t>(s.xz.extent(0)), t = static_cast<std::int64_t>(s.xz.extent(1));
    core::check_shape(api, "dy", dy, core::dim(b), core::dim(t), core::dim(D));
    core::check_shape(api, "dx", dx, core::dim(b), core::dim(t), core::dim(D));
    const Space exec{};
    core::WorkspaceScope scope(ws);
    auto dxz = ws.template allocate_zeroed<T***>("mamba.dxz", b, t, 2 * Di);

    auto dg = ws.template allocate_zeroed<T***>("mamba.dg", b, t, Di);
    {
      core::WorkspaceScope gate_scope(ws);  // the recomputed gate output is needed only here
      auto g = ws.template allocate<T***>("mamba.g", b, t, Di);
      gate(exec, s.y, z_part(s.xz), g);
      out_proj_.backward(ws, typename OutProj::Saved{g}, dy, dg);
    }
    auto dys = dg;  // dL/dy of the scan replaces dg element by element
    Kokkos::parallel_for("hybridseq::layers::Mamba::gate_backward", Kokkos::RangePolicy<Space>(exec, 0, b * t),
                         detail::MambaGateBackward<T, Space>{dg, s.y, z_part(s.xz), dys, z_part(dxz)});

    auto du = ws.template allocate_zeroed<T***>("mamba.du", b, t, Di);
    auto ddt = ws.template allocate_zeroed<T***>("mamba.ddt", b, t, Di);
    auto ddbc = ws.template allocate_zeroed<T***>("mamba.ddbc", b, t, R + 2 * N);
    kernels::selective_scan_backward<N, T>(exec, ws, s.u, s.dt, dt_proj_.bias.value(),
                                           a_log_.template shaped<const T**>(), b_part(s.dbc), c_part(s.dbc),
                                           d_.value(), s.h_chunks, dys, du, ddt, a_log_.template shaped_grad<T**>(),
                                           b_part(ddbc), c_part(ddbc), d_.grad(), dt_proj_.bias.grad(), s.chunk);
    // dt_proj: dδ += ddt · W_dt, dW_dt += ddtᵀ · δ.
    const auto ddt_m = core::as_matrix(ddt);
    kernels::gemm(exec, kernels::Op::none, kernels::Op::none, T(1), ddt_m, dt_proj_.weight.template shaped<T**>(), T(1),
                  low_rank(ddbc));
    kernels::gemm(exec, kernels::Op::transpose, kernels::Op::none, T(1), ddt_m, low_rank(s.dbc), T(1),
                  dt_proj_.weight.template shaped_grad<T**>());
    x_proj_.backward(ws, s.x_proj, ddbc, du);

    auto dpre = ddt;  // ddt is dead after dt_proj's backward: the conv gradient reuses it
    Kokkos::parallel_for("hybridseq::layers::Mamba::silu_backward", Kokkos::RangePolicy<Space>(exec, 0, dpre.size()),
                         detail::MambaSiluBackward<T, Space>{core::flat(s.conv), core::flat(du), core::flat(dpre)});
    kernels::conv1d_backward<K, T>(exec, x_part(s.xz), conv_weight(), dpre, x_part(dxz),
                                   Tensor<T**, Space>(conv1d_.weight.grad().data(), Di, K),
                                   S.conv_bias ? conv1d_.bias.grad() : Tensor<T*, Space>{});
    in_proj_.backward(ws, s.in_proj, dxz, dx);
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("in_proj", in_proj_);
    visit("conv1d", conv1d_);
    visit("x_proj", x_proj_);
    visit("dt_proj", dt_proj_);
    visit("A_log", a_log_);
    visit("D", d_);
    visit("out_proj", out_proj_);
  }

  // ---- decoding ---------------------------------------------------------------------------

  /// A zero state (empty conv window, h = 0) for `batch` sequences.
  State make_state(int batch) const {
    if (batch < 0) fail<value_error>("hybridseq::layers::Mamba::make_state", "batch is ", batch, ", must be >= 0");
    State st;
    st.conv = Tensor<T***, Space>("hybridseq::mamba::conv_window", batch, Di, K - 1);
    st.h = Tensor<T***, Space>("hybridseq::mamba::ssm_state", batch, Di, N);
    return st;
  }

  /// Consumes x (B, T, D) from the state and writes y (B, T, D): equal, up to rounding, to
  /// `forward` on everything the state has consumed followed by x. Leaves the last K − 1 conv
  /// inputs and the final h in the state.
  /// Refuses, before anything changes, a continuation of another batch than the state's.
  void check_fits(const State& st, std::int64_t batch, std::int64_t) const {
    if (batch != st.batch())
      fail<shape_error>("hybridseq::layers::Mamba::prefill", "x holds ", batch, " sequences; the decoding state holds ",
                        st.batch());
  }

  void prefill(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x, Tensor<T***, Space> y) const {
    const char* api = "hybridseq::layers::Mamba::prefill";
    core::check_shape(api, "x", x, core::dim(st.batch()), core::T, core::dim(D));
    core::check_shape(api, "y", y, core::dim(x.extent(0)), core::dim(x.extent(1)), core::dim(D));
    advance(ws, st, x, y);
  }

  /// One token per sequence: x (B, 1, D) → y (B, 1, D).
  void step(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x, Tensor<T***, Space> y) const {
    const char* api = "hybridseq::layers::Mamba::step";
    core::check_shape(api, "x", x, core::dim(st.batch()), core::dim(1), core::dim(D));
    core::check_shape(api, "y", y, core::dim(st.batch()), core::dim(1), core::dim(D));
    advance(ws, st, x, y);
  }

  /// An independent (deep) copy of a state.
  State snapshot(const State& st) const {
    State out = make_state(st.batch());
    restore(out, st);
    return out;
  }

  /// Overwrites `dst` with `snap` (same batch).
  void restore(State& dst, const State& snap) const {
    if (dst.batch() != snap.batch())
      fail<shape_error>("hybridseq::layers::Mamba::restore", "state has batch ", dst.batch(), " but the snapshot has ",
                        snap.batch());
    Kokkos::deep_copy(dst.conv, snap.conv);
    Kokkos::deep_copy(dst.h, snap.h);
    dst.position = snap.position;
  }

  const Options& options() const { return options_; }

 private:
  static core::Init conv_init() {
    // nn.Conv1d's default: U(±1/√fan_in), fan_in = (in_channels / groups) · K = K.
    const double bound = 1.0 / std::sqrt(double(K));
    return core::Init::uniform(-bound, bound);
  }

  static void check(const Tensor<const T***, Space>& x, const Tensor<T***, Space>& y, const char* op) {
    const std::string api = std::string("hybridseq::layers::Mamba::") + op;
    core::check_shape(api, "x", x, core::B, core::T, core::dim(D));
    core::check_shape(api, "y", y, core::dim(x.extent(0)), core::dim(x.extent(1)), core::dim(D));
  }

  // Column slices of the projections' outputs (no copies).
  template <class V>
  static auto x_part(const V& xz) {
    return Kokkos::subview(xz, Kokkos::ALL, Kokkos::ALL, Kokkos::make_pair(0, Di));
  }
  template <class V>
  static auto z_part(const V& xz) {
    return Kokkos::subview(xz, Kokkos::ALL, Kokkos::ALL, Kokkos::make_pair(Di, 2 * Di));
  }
  template <class V>
  static auto b_part(const V& dbc) {
    return Kokkos::subview(dbc, Kokkos::ALL, Kokkos::ALL, Kokkos::make_pair(R, R + N));
  }
  template <class V>
  static auto c_part(const V& dbc) {
    return Kokkos::subview(dbc, Kokkos::ALL, Kokkos::ALL, Kokkos::make_pair(R + N, R + 2 * N));
  }
  /// δ = dbc[..., :R] as a (B·T, R) matrix with padded rows, for the GEMM facade.
  template <class V>
  static auto low_rank(const V& dbc) {
    return Kokkos::subview(core::as_matrix(dbc), Kokkos::ALL, Kokkos::make_pair(0, R));
  }

  Tensor<const T**, Space> conv_weight() const {
    return Tensor<const T**, Space>(conv1d_.weight.value().data(), Di, K);
  }
  /// The conv bias, or an empty tensor (the kernels' "no bias") when the shape has none.
  Tensor<const T*, Space> conv_bias() const { return S.conv_bias ? conv1d_.bias.value() : Tensor<const T*, Space>{}; }

  /// dt (B, T, Di) = δ W_dtᵀ (bias and softplus are applied by the scan).
  void dt_projection(const Space& exec, const Tensor<T***, Space>& dbc, const Tensor<T***, Space>& dt) const {
    kernels::gemm(exec, kernels::Op::none, kernels::Op::transpose, T(1), low_rank(dbc),
                  dt_proj_.weight.template shaped<T**>(), T(0), core::as_matrix(dt));
  }

  static void gate(const Space& exec, const Tensor<T***, Space>& y, StridedTensor<const T***, Space> z,
                   const Tensor<T***, Space>& g) {
    Kokkos::parallel_for("hybridseq::layers::Mamba::gate",
                         Kokkos::RangePolicy<Space>(exec, 0, y.extent(0) * y.extent(1)),
                         detail::MambaGateForward<T, Space>{y, z, g});
  }

  /// prefill/step: the forward pass from the state, keeping nothing for backward.
  void advance(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x, Tensor<T***, Space> y) const {
    const Space exec{};
    const std::size_t b = x.extent(0), t = x.extent(1);
    core::WorkspaceScope scope(ws);
    auto xz = ws.template allocate<T***>("mamba.xz", b, t, 2 * Di);
    auto u = ws.template allocate<T***>("mamba.u", b, t, Di);
    auto dbc = ws.template allocate<T***>("mamba.dbc", b, t, R + 2 * N);
    auto dt = ws.template allocate<T***>("mamba.dt", b, t, Di);
    auto ys = ws.template allocate<T***>("mamba.y", b, t, Di);
    typename InProj::Saved in_saved;
    typename XProj::Saved x_saved;
    typename OutProj::Saved out_saved;
    in_proj_.forward(ws, x, xz, in_saved);
    kernels::conv1d_forward<K, detail::MambaSilu, T>(exec, x_part(xz), conv_weight(), conv_bias(), st.conv, {}, u);
    kernels::conv1d_update_window<K, T>(exec, x_part(xz), st.conv, st.conv);
    x_proj_.forward(ws, u, dbc, x_saved);
    dt_projection(exec, dbc, dt);
    kernels::selective_scan_forward<N, T>(exec, u, dt, dt_proj_.bias.value(), a_log_.template shaped<const T**>(),
                                          b_part(dbc), c_part(dbc), d_.value(), st.h, ys, {}, st.h);
    auto g = u;  // u is dead after the scan: the gated output reuses its storage
    gate(exec, ys, z_part(xz), g);
    out_proj_.forward(ws, g, y, out_saved);
    st.position += static_cast<std::int64_t>(t);
  }

  Options options_;
  InProj in_proj_;
  detail::MambaConv1dParameters<T, Space> conv1d_;
  XProj x_proj_;
  detail::MambaDtProjParameters<T, Space> dt_proj_;
  core::Parameter<T, Space> a_log_;  // (Di, N)
  core::Parameter<T, Space> d_;      // (Di)
  OutProj out_proj_;
};

}  // namespace hybridseq::layers
