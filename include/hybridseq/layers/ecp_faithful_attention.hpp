#pragma once
/// \file
/// The ECP reference code's attention (MetaMain/ECPTransformer, `ECPAttention`): one shared K/V
/// projection, RoPE in the first layer only, and a separate output projection for the first
/// segment, under the `EcpPairs<m>` segment scheme; decoding keeps a ring of the last 2m
/// keys/values. Built on the attention core; models/ecp.hpp uses it for its faithful form.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../core/check.hpp"
#include "../core/parameter.hpp"
#include "../core/time_slice.hpp"
#include "../core/workspace.hpp"
#include "attention_core.hpp"
#include "linear.hpp"

namespace hybridseq::layers {

namespace detail {
/// ring(b, p + j, h, :) = kv(b, j, h·Dh : (h+1)·Dh) for the t positions of kv (B, t, H·Dh).
/// A free function: nvcc accepts device lambdas only in functions public to the program.
template <class T, class Space>
void append_to_ring(Tensor<const T***, Space> kv, Tensor<T****, Space> ring, std::int64_t p) {
  const std::int64_t heads = ring.extent(2), dh = ring.extent(3);
  Kokkos::parallel_for(
      "hybridseq::layers::EcpFaithfulAttention::append",
      Kokkos::MDRangePolicy<Space, Kokkos::Rank<3>>({0, 0, 0},
                                                    {std::int64_t(kv.extent(0)), std::int64_t(kv.extent(1)), heads}),
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t j, std::int64_t h) {
        for (std::int64_t d = 0; d < dh; ++d) ring(i, p + j, h, d) = kv(i, j, h * dh + d);
      });
}
}  // namespace detail

/// The faithful ECP attention branch (the reference's `ECPAttention`, less its unused K/V
/// LayerNorm): q = x W_qᵀ, kv = x W_kvᵀ (no biases) used as both keys and values, RoPE on q
/// and kv when `rotary()` (the model turns it on in layer 0 only), scores q·kv/√Dh under
/// `EcpPairs<m>`, and y = o W_o0ᵀ + b_o0 on the first segment, o W_oᵀ + b_o after it.
///
/// `A`: H heads of Dh (no GQA: kv_heads = heads), dot scores, RoPE over the whole head
/// (rotary_dim = head_dim) or none (0); projections and biases are the reference's.
///
/// Shapes: x (B, T, D) → y (B, T, D), T a multiple of m (config_error otherwise).
template <AttentionShape A, int M, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class EcpFaithfulAttention {
  static constexpr int H = A.heads, Dh = A.head_dim, W = A.heads * A.head_dim;
  static_assert(A.kv_heads == A.heads && A.score == Score::dot && (A.rotary_dim == 0 || A.rotary_dim == A.head_dim),
                "hybridseq::layers::EcpFaithfulAttention: H heads shared by K/V, dot scores, RoPE on the whole head or "
                "none");
  using Scheme = schemes::EcpPairs<M>;
  using Core = AttentionCore<A, T, Space>;
  using Proj = Linear<LinearShape{A.d_model, W, false}, T, Space>;
  using Out = Linear<LinearShape{W, A.d_model, true}, T, Space>;
  using Heads4 = typename Core::Heads4;

 public:
  using scalar_type = T;
  using execution_space = Space;
  using scheme = Scheme;
  static constexpr int d_in = A.d_model;
  static constexpr int d_out = A.d_model;
  static constexpr int segment = M;

  using Options = AttentionOptions;  // max_cache unused: the ring holds 2m
  struct Saved {
    typename Proj::Saved q_in, kv_in;
    Tensor<T***, Space> q, kv;            // (B, T, H·Dh) after RoPE
    typename Core::Positions positions;   // when rotary
    Tensor<T***, Space> o;                // (B, T, H·Dh)
    Tensor<T*, Space> lse;                // (B·H·T)
    Tensor<T***, Space> o_first, o_rest;  // (B, min(T, m), H·Dh), (B, T − m, H·Dh)
    typename Out::Saved first_in, rest_in;
    core::DropoutMask dropout{};  // on the probabilities (training passes)
  };
  /// The ring of 2m shared keys/values (rotated at absolute positions).
  struct State {
    Tensor<T****, Space> kv;  // (B, 2m, H, Dh)
    std::int64_t kept = 0;    // ring rows in use; row 0 is position length − kept
    std::int64_t length = 0;
  };

  explicit EcpFaithfulAttention(const Options& o = {})
      : core_(o, "hybridseq::layers::EcpFaithfulAttention"),
        to_q_({o.init_std}),
        to_kv_({o.init_std}),
        to_out_({o.out_init_std}),
        to_out_0_({o.out_init_std}) {}

  /// RoPE in this layer or not (the reference rotates in layer 0 only).
  void set_rotary(bool on) { rotary_ = on && A.rotary_dim > 0; }
  bool rotary() const { return rotary_; }

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& s) const {
    constexpr const char* api = "hybridseq::layers::EcpFaithfulAttention::forward";
    core::check_shape(api, "x", x, core::B, core::T, core::dim(A.d_model));
    core::check_same_shape(api, "y", y, "x", x);
    const std::int64_t b = x.extent(0), n = x.extent(1);
    Scheme::check(api, n);
    project(ws, x, 0, s);
    s.o = ws.template allocate<T***>("ecp.o", b, n, W);
    s.lse = ws.template allocate<T*>("ecp.lse", b * H * n);
    s.dropout = core_.draw_dropout(ws);
    core_.template attend<Scheme>(pass(s.q, rows(s.kv), s.o, s.lse, n, 0, s.dropout));
    output(ws, s, 0, y);
  }

  void backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    constexpr const char* api = "hybridseq::layers::EcpFaithfulAttention::backward";
    const std::int64_t b = s.q.extent(0), n = s.q.extent(1), m0 = std::min<std::int64_t>(n, M);
    core::check_shape(api, "dy", dy, core::dim(b), core::dim(n), core::dim(A.d_model));
    core::check_same_shape(api, "dx", dx, "dy", dy);
    const Space exec{};
    core::WorkspaceScope scope(ws);
    auto d_o = ws.template allocate<T***>("ecp.do", b, n, W);
    {
      auto dy0 = ws.template allocate<T***>("ecp.dy0", b, m0, A.d_model);
      auto do0 = ws.template allocate_zeroed<T***>("ecp.do0", b, m0, W);
      core::copy_time<T, Space>(dy, 0, dy0, 0, m0);
      to_out_0_.backward(ws, s.first_in, dy0, do0);
      core::copy_time<T, Space>(do0, 0, d_o, 0, m0);
    }
    if (n > m0) {
      auto dy1 = ws.template allocate<T***>("ecp.dy1", b, n - m0, A.d_model);
      auto do1 = ws.template allocate_zeroed<T***>("ecp.do1", b, n - m0, W);
      core::copy_time<T, Space>(dy, m0, dy1, 0, n - m0);
      to_out_.backward(ws, s.rest_in, dy1, do1);
      core::copy_time<T, Space>(do1, 0, d_o, m0, n - m0);
    }
    auto dq = ws.template allocate<T***>("ecp.dq", b, n, W);
    auto dk = ws.template allocate<T***>("ecp.dk", b, n, W);
    auto dv = ws.template allocate<T***>("ecp.dv", b, n, W);
    core_.template attend_backward<Scheme>(ws, pass(s.q, rows(s.kv), s.o, s.lse, n, 0, s.dropout),
                                           {rows<const T>(d_o), rows<T>(dq), rows<T>(dk), rows<T>(dv)});
    const auto fk = core::flat(dk);
    const auto fv = core::flat(dv);
    Kokkos::parallel_for(
        "hybridseq::layers::EcpFaithfulAttention::dkv", Kokkos::RangePolicy<Space>(exec, 0, fk.extent(0)),
        KOKKOS_LAMBDA(std::int64_t i) { fk(i) += fv(i); });
    if (rotary_) {
      core_.position_backward(heads(dq), heads(s.q), H, s.positions);
      core_.position_backward(heads(dk), heads(s.kv), H, s.positions);
    }
    to_q_.backward(ws, s.q_in, dq, dx);
    to_kv_.backward(ws, s.kv_in, dk, dx);
  }

  /// Arena use for x (B, T, D): forward keeps q, kv, the positions (rotary), o, lse and the
  /// output's split rows (o_first, o_rest, and y0 / y1 when T > m); backward holds d_o, the
  /// split gradients, dq, dk, dv and the core's scratch.
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    const std::int64_t b = q.batch, n = q.time, m0 = std::min<std::int64_t>(n, M);
    const auto heads = [&](std::int64_t t) { return core::padded_bytes<T>(b * t * W); };
    const auto model = [&](std::int64_t t) { return core::padded_bytes<T>(b * t * A.d_model); };
    const std::size_t split_out = (m0 < n ? model(m0) : 0) + (m0 > 0 && n > m0 ? model(n - m0) : 0);
    const std::size_t saved = 2 * heads(n) + (rotary_ ? core_.position_bytes(b, n, H) : 0) + heads(n) +
                              core::padded_bytes<T>(b * H * n) + heads(m0) + heads(n - m0) + split_out;
    const std::size_t split_grads = model(m0) + heads(m0) + (n > m0 ? model(n - m0) + heads(n - m0) : 0);
    return core::Footprint::kept(saved, heads(n) + split_grads + 3 * heads(n) + Core::attend_backward_bytes(b, n));
  }

  // ---- decoding: a ring of 2m keys/values ----

  State make_state(std::int64_t batch) const {
    return State{Tensor<T****, Space>("ecp.ring.kv", batch, 2 * M, H, Dh), 0, 0};
  }

  void prefill(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x, Tensor<T***, Space> y) const {
    constexpr const char* api = "hybridseq::layers::EcpFaithfulAttention::prefill";
    core::check_shape(api, "x", x, core::dim(st.kv.extent(0)), core::T, core::dim(A.d_model));
    core::check_same_shape(api, "y", y, "x", x);
    core::for_each_segment_piece<T, Space>(
        ws, st.length, M, x, y,
        [&] {
          if (st.kept == 2 * M) {
            drop_oldest_rows<T, Space>(st.kv, M, M);
            st.kept = M;
          }
        },
        [&](Tensor<const T***, Space> xc, Tensor<T***, Space> yc) { chunk(ws, st, xc, yc); });
  }
  State snapshot(const State& st) const {
    State copy = make_state(st.kv.extent(0));
    Kokkos::deep_copy(copy.kv, st.kv);
    copy.kept = st.kept;
    copy.length = st.length;
    return copy;
  }
  void restore(State& st, const State& snap) const {
    Kokkos::deep_copy(st.kv, snap.kv);
    st.kept = snap.kept;
    st.length = snap.length;
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("to_q", to_q_);
    visit("to_kv", to_kv_);
    visit("to_out", to_out_);
    visit("to_out_0", to_out_0_);
  }

 private:
  template <class U>
  static HeadRows<U> rows(const Tensor<std::remove_const_t<U>***, Space>& t) {
    return head_rows<U>(t.data(), t.extent(1), W, Dh);
  }
  static HeadRows<const T> rows(const Tensor<T***, Space>& t) { return rows<const T>(t); }
  static Heads4 heads(const Tensor<T***, Space>& t) { return Heads4(t.data(), t.extent(0), t.extent(1), H, Dh); }

  static AttendRows<T> pass(const Tensor<T***, Space>& q, HeadRows<const T> kv, const Tensor<T***, Space>& o,
                            const Tensor<T*, Space>& lse, std::int64_t tk, std::int64_t q0,
                            core::DropoutMask dropout = {}) {
    return {rows(q), kv, kv,     rows<T>(o), lse.data(), std::int64_t(q.extent(0)), std::int64_t(q.extent(1)),
            tk,      q0, dropout};
  }

  /// q, kv of x, rotated at absolute positions offset.. when rotary.
  void project(core::Workspace<Space>& ws, Tensor<const T***, Space> x, std::int64_t offset, Saved& s) const {
    const std::int64_t b = x.extent(0), n = x.extent(1);
    s.q = ws.template allocate<T***>("ecp.q", b, n, W);
    s.kv = ws.template allocate<T***>("ecp.kv", b, n, W);
    to_q_.forward(ws, x, s.q, s.q_in);
    to_kv_.forward(ws, x, s.kv, s.kv_in);
    if (rotary_) {  // one table for q and kv: the same positions
      core_.position(ws, heads(s.q), H, offset, s.positions);
      core_.rope().rotate(heads(s.kv), H, s.positions.rope);
    }
  }

  /// y from o: rows at absolute positions < m through to_out_0, the rest through to_out.
  /// `offset` is the absolute position of o's first row.
  void output(core::Workspace<Space>& ws, Saved& s, std::int64_t offset, Tensor<T***, Space> y) const {
    const std::int64_t b = s.o.extent(0), n = s.o.extent(1);
    const std::int64_t m0 = std::clamp<std::int64_t>(M - offset, 0, n);
    if (m0 > 0) {
      s.o_first = ws.template allocate<T***>("ecp.o_first", b, m0, W);
      core::copy_time<T, Space>(s.o, 0, s.o_first, 0, m0);
      auto y0 = m0 == n ? y : ws.template allocate<T***>("ecp.y0", b, m0, A.d_model);
      to_out_0_.forward(ws, s.o_first, y0, s.first_in);
      if (m0 < n) core::copy_time<T, Space>(y0, 0, y, 0, m0);
    }
    if (n > m0) {
      s.o_rest = ws.template allocate<T***>("ecp.o_rest", b, n - m0, W);
      core::copy_time<T, Space>(s.o, m0, s.o_rest, 0, n - m0);
      auto y1 = m0 == 0 ? y : ws.template allocate<T***>("ecp.y1", b, n - m0, A.d_model);
      to_out_.forward(ws, s.o_rest, y1, s.rest_in);
      if (m0 > 0) core::copy_time<T, Space>(y1, 0, y, m0, n - m0);
    }
  }

  /// One piece within a segment: append its kv to the ring and attend from ring positions.
  void chunk(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x, Tensor<T***, Space> y) const {
    core::WorkspaceScope scope(ws);
    const std::int64_t b = x.extent(0), t = x.extent(1), p = st.kept;
    Saved s;
    project(ws, x, st.length, s);
    detail::append_to_ring<T, Space>(s.kv, st.kv, p);
    s.o = ws.template allocate<T***>("ecp.o", b, t, W);
    s.lse = ws.template allocate<T*>("ecp.lse", b * H * t);
    core_.template attend<Scheme>(pass(s.q, head_rows<const T>(st.kv.data(), 2 * M, W, Dh), s.o, s.lse, p + t, p));
    output(ws, s, st.length, y);
    st.kept = p + t;
    st.length += t;
  }

  Core core_;
  bool rotary_ = A.rotary_dim > 0;
  Proj to_q_, to_kv_;
  Out to_out_, to_out_0_;
};

}  // namespace hybridseq::layers
