#pragma once
/// \file
/// The attention branch: grouped-query attention with RoPE, dot-product or scaled-cosine
/// scores, any banded segment scheme, concatenated or summed heads; forward, backward and
/// KV-cache decoding. A fused QKV projection and an output projection around the attention
/// core (attention_core.hpp).
///
///   qkv = x W_qkvᵀ (+ b)         q (B,T,H,Dh), k, v (B,T,Hkv,Dh); head h reads kv head ⌊h·Hkv/H⌋
///   q, k ← RoPE(q, k)            rotate-half on the first rotary_dim dims of each head
///   dot:    s = q·k / √Dh
///   cosine: s = cos(q, k) · exp(min(s_h, log 100))     (Swin-V2; s_h learnable, init log 10)
///   o_h = softmax_{scheme mask}(s) v;   y = concat_h(o_h) W_oᵀ  or  (Σ_h o_h) W_oᵀ  (+ b)
///
/// The summed-heads form with head_dim = d_model is the GPT-NeoX layer of Cooper et al.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "../core/check.hpp"
#include "../core/parallel.hpp"
#include "../core/parameter.hpp"
#include "../core/workspace.hpp"
#include "attention_core.hpp"
#include "linear.hpp"

namespace hybridseq::layers {

// The attention branch's data-movement kernels. Free functions, not members: nvcc accepts
// an extended (device) lambda only inside a function that is public to the whole program.
namespace detail {

/// Summed heads: merged(b, t, :) = Σ_h o(b, t, h, :).
template <class T, class Space>
void sum_heads(Tensor<const T****, Space> o, Tensor<T***, Space> merged) {
  const std::int64_t heads = o.extent(2), dh = o.extent(3);
  Kokkos::parallel_for(
      "hybridseq::layers::Attention::merge",
      Kokkos::MDRangePolicy<Space, Kokkos::Rank<2>>({0, 0}, {std::int64_t(o.extent(0)), std::int64_t(o.extent(1))}),
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t t) {
        for (std::int64_t d = 0; d < dh; ++d) {
          T acc = 0;
          for (std::int64_t h = 0; h < heads; ++h) acc += o(i, t, h, d);
          merged(i, t, d) = acc;
        }
      });
}

/// The backward of sum_heads: d_o(b, t, h, :) = d_merged(b, t, :) for every head.
template <class T, class Space>
void broadcast_heads(Tensor<const T***, Space> d_merged, Tensor<T****, Space> d_o) {
  const std::int64_t dh = d_o.extent(3);
  Kokkos::parallel_for(
      "hybridseq::layers::Attention::unmerge",
      Kokkos::MDRangePolicy<Space, Kokkos::Rank<3>>(
          {0, 0, 0}, {std::int64_t(d_o.extent(0)), std::int64_t(d_o.extent(1)), std::int64_t(d_o.extent(2))}),
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t t, std::int64_t h) {
        for (std::int64_t d = 0; d < dh; ++d) d_o(i, t, h, d) = d_merged(i, t, d);
      });
}

/// Appends t new positions to a KV cache at position p: k(b, p + j, h, :) and v(b, p + j, h, :)
/// from the key and value columns of qkv (B, t, (H + 2·Hkv)·Dh), which follow H query heads.
template <class T, class Space>
void append_kv(Tensor<const T***, Space> qkv, std::int64_t query_heads, Tensor<T****, Space> k, Tensor<T****, Space> v,
               std::int64_t p) {
  const std::int64_t kv_heads = k.extent(2), dh = k.extent(3), t = qkv.extent(1);
  core::parallel_for(
      "hybridseq::layers::Attention::append_cache", Space{}, std::int64_t(qkv.extent(0)) * t * kv_heads, 2 * dh,
      KOKKOS_LAMBDA(std::int64_t index) {
        const std::int64_t h = index % kv_heads, j = index / kv_heads % t, i = index / kv_heads / t;
        for (std::int64_t d = 0; d < dh; ++d) {
          k(i, p + j, h, d) = qkv(i, j, (query_heads + h) * dh + d);
          v(i, p + j, h, d) = qkv(i, j, (query_heads + kv_heads + h) * dh + d);
        }
      });
}

}  // namespace detail

/// Attention branch. `Scheme` is a segment scheme from kernels/attention/segment_schemes.hpp.
///
/// Shapes: x (B, T, D) → y (B, Scheme::query_count(T), D) (= T except PerceiverCross).
/// Requires: heads % kv_heads == 0; T acceptable to the scheme (config_error otherwise).
template <AttentionShape S, class Scheme = schemes::Causal, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class Attention {
  using Core = AttentionCore<S, T, Space>;
  static constexpr int rows_qkv = (S.heads + 2 * S.kv_heads) * S.head_dim;
  static constexpr int width_o = S.merge == HeadMerge::concat ? S.heads * S.head_dim : S.head_dim;
  static constexpr int rotated_heads = S.heads + S.kv_heads;  // q and k heads
  using Qkv = Linear<LinearShape{S.d_model, rows_qkv, S.qkv_bias}, T, Space>;
  using Out = Linear<LinearShape{width_o, S.d_model, S.out_bias}, T, Space>;
  using Heads4 = typename Core::Heads4;

 public:
  using scalar_type = T;
  using execution_space = Space;
  using scheme = Scheme;
  static constexpr int d_in = S.d_model;
  static constexpr int d_out = S.d_model;
  static constexpr AttentionShape shape = S;

  using Options = AttentionOptions;

  struct Saved {
    typename Qkv::Saved qkv_in;
    Tensor<T***, Space> qkv;  // (B, T, (H + 2Hkv)·Dh) after RoPE (and normalisation)
    typename Core::Positions positions;
    Tensor<T****, Space> o;      // (B, Tq, H, Dh)
    Tensor<T*, Space> lse;       // (B·H·Tq)
    Tensor<T***, Space> merged;  // (B, Tq, Dh) summed heads only
    typename Out::Saved out_in;
    std::int64_t q0 = 0;
    core::DropoutMask dropout{};  // on the probabilities (training passes)
  };

  /// Decoding state: the KV cache, post-RoPE (normalised for cosine).
  struct State {
    Tensor<T****, Space> k, v;  // (B, capacity, Hkv, Dh)
    std::int64_t length = 0;
  };

  explicit Attention(const Options& options = {})
      : options_(options),
        core_(options, "hybridseq::layers::Attention"),
        wqkv_({options.init_std}),
        wo_({options.out_init_std}) {}

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& s) const {
    constexpr const char* api = "hybridseq::layers::Attention::forward";
    core::check_shape(api, "x", x, core::B, core::T, core::dim(S.d_model));
    const std::int64_t b = x.extent(0), n = x.extent(1);
    Scheme::check(api, n);
    const std::int64_t tq = Scheme::query_count(n);
    core::check_shape(api, "y", y, core::dim(b), core::dim(tq), core::dim(S.d_model));
    s.q0 = n - tq;
    s.qkv = ws.template allocate<T***>("attention.qkv", b, n, rows_qkv);
    wqkv_.forward(ws, x, s.qkv, s.qkv_in);
    core_.position(ws, heads_of(s.qkv), rotated_heads, 0, s.positions);
    s.o = ws.template allocate<T****>("attention.o", b, tq, S.heads, S.head_dim);
    s.lse = ws.template allocate<T*>("attention.lse", b * S.heads * tq);
    s.dropout = core_.draw_dropout(ws);
    core_.template attend<Scheme>(self_rows(s));
    merge_and_project(ws, s, y);
  }

  void backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    constexpr const char* api = "hybridseq::layers::Attention::backward";
    const std::int64_t b = s.qkv.extent(0), n = s.qkv.extent(1), tq = s.o.extent(1);
    core::check_shape(api, "dy", dy, core::dim(b), core::dim(tq), core::dim(S.d_model));
    core::check_shape(api, "dx", dx, core::dim(b), core::dim(n), core::dim(S.d_model));
    core::WorkspaceScope scope(ws);
    auto d_o = ws.template allocate<T****>("attention.do", b, tq, S.heads, S.head_dim);
    if constexpr (S.merge == HeadMerge::concat) {
      wo_.backward(ws, s.out_in, dy, heads_as_rows(d_o), Write::assign);
    } else {
      auto d_merged = ws.template allocate<T***>("attention.dmerged", b, tq, S.head_dim);
      wo_.backward(ws, s.out_in, dy, d_merged, Write::assign);
      detail::broadcast_heads<T, Space>(d_merged, d_o);
    }
    // The kernels overwrite dK and dV of every row and dQ of the rows that query (q0 onward);
    // only the dQ columns of the rows before q0 need zeros.
    auto dqkv = ws.template allocate<T***>("attention.dqkv", b, n, rows_qkv);
    if (const std::int64_t q0 = s.q0; q0 > 0)
      core::parallel_for(
          "hybridseq::layers::Attention::dq_before_q0", Space{}, b * q0, S.heads * S.head_dim,
          KOKKOS_LAMBDA(const std::int64_t row) {
            for (int d = 0; d < S.heads * S.head_dim; ++d) dqkv(row / q0, row % q0, d) = 0;
          });
    core_.template attend_backward<Scheme>(
        ws, self_rows(s),
        {rows_of<const T>(d_o.data(), tq, S.heads * S.head_dim), rows_of<T>(dqkv.data() + s.q0 * rows_qkv, n, rows_qkv),
         rows_of<T>(dqkv.data() + S.heads * S.head_dim, n, rows_qkv),
         rows_of<T>(dqkv.data() + (S.heads + S.kv_heads) * S.head_dim, n, rows_qkv)});
    core_.position_backward(heads_of(dqkv), heads_of(s.qkv), rotated_heads, s.positions);
    wqkv_.backward(ws, s.qkv_in, dqkv, dx);
  }

  /// Arena use for x (B, T, D): forward keeps qkv, the positions, o, lse (and the merged
  /// heads when summed); backward holds d_o (d_merged), dqkv and the core's scratch.
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    const std::int64_t b = q.batch, n = q.time, tq = Scheme::query_count(n);
    const std::size_t qkv = core::padded_bytes<T>(b * n * rows_qkv),
                      o = core::padded_bytes<T>(b * tq * S.heads * S.head_dim),
                      merged = S.merge == HeadMerge::sum ? core::padded_bytes<T>(b * tq * S.head_dim) : 0;
    return core::Footprint::kept(
        qkv + core_.position_bytes(b, n, rotated_heads) + o + core::padded_bytes<T>(b * S.heads * tq) + merged,
        o + merged + qkv + Core::attend_backward_bytes(b, tq));
  }

  // ---- decoding ----

  State make_state(std::int64_t batch) const { return make_state(batch, options_.max_cache); }
  State make_state(std::int64_t batch, std::int64_t capacity) const {
    return State{Tensor<T****, Space>("attention.cache.k", batch, capacity, S.kv_heads, S.head_dim),
                 Tensor<T****, Space>("attention.cache.v", batch, capacity, S.kv_heads, S.head_dim), 0};
  }

  /// Appends x (B, T, D) to the sequence in `state` and writes its outputs y (B, T, D):
  /// positions state.length .. state.length + T − 1, attending to the cache and themselves.
  void prefill(core::Workspace<Space>& ws, State& state, Tensor<const T***, Space> x, Tensor<T***, Space> y) const {
    constexpr const char* api = "hybridseq::layers::Attention::prefill";
    core::check_same_shape(api, "y", y, "x", x);
    core::WorkspaceScope scope(ws);
    Saved s;
    const std::int64_t b = x.extent(0), t = x.extent(1), p = state.length;
    extend_cache(ws, state, x, s, api);
    s.o = ws.template allocate<T****>("attention.o", b, t, S.heads, S.head_dim);
    s.lse = ws.template allocate<T*>("attention.lse", b * S.heads * t);
    const std::int64_t cache_row = S.kv_heads * S.head_dim, capacity = state.k.extent(1);
    core_.template attend<Scheme>({rows_of<const T>(s.qkv.data(), t, rows_qkv),
                                   rows_of<const T>(state.k.data(), capacity, cache_row),
                                   rows_of<const T>(state.v.data(), capacity, cache_row),
                                   rows_of<T>(s.o.data(), t, S.heads * S.head_dim), s.lse.data(), b, t, p + t, p});
    merge_and_project(ws, s, y);
    state.length = p + t;
  }

  /// Refuses, before anything changes, `time` more positions of `batch` sequences that the
  /// cache cannot take.
  void check_fits(const State& state, std::int64_t batch, std::int64_t time) const {
    check_room("hybridseq::layers::Attention::prefill", state, batch, time);
  }

  /// Appends x (B, T, D) to the KV cache without computing outputs: positions whose keys and
  /// values later queries read but whose own queries nobody needs (PerceiverAR's history).
  void append(core::Workspace<Space>& ws, State& state, Tensor<const T***, Space> x) const {
    core::WorkspaceScope scope(ws);
    Saved s;
    extend_cache(ws, state, x, s, "hybridseq::layers::Attention::append");
    state.length += std::int64_t(x.extent(1));
  }

  /// Rolls the sequence back to its first `length` positions.
  void truncate(State& state, std::int64_t length) const {
    if (length < 0 || length > state.length)
      fail<value_error>("hybridseq::layers::Attention::truncate", "length ", length, " is outside [0, ", state.length,
                        "]");
    state.length = length;
  }

  /// Drops the first `count` cached positions and moves the rest to the front, re-rotated so
  /// that their RoPE angles match their new positions (scores depend only on position
  /// differences, so later queries see the same keys): a cache that slides, e.g. ECP's ring.
  void shift_cache(core::Workspace<Space>& ws, State& state, std::int64_t count) const {
    if (count < 0 || count > state.length)
      fail<value_error>("hybridseq::layers::Attention::shift_cache", "count ", count, " is outside [0, ", state.length,
                        "]");
    const std::int64_t kept = state.length - count;
    const auto k = state.k;
    drop_oldest_rows<T, Space>(k, kept, count);
    drop_oldest_rows<T, Space>(state.v, kept, count);
    Space().fence();
    core_.reposition(ws, Heads4(k.data(), k.extent(0), k.extent(1), S.kv_heads, S.head_dim), kept, count, 0);
    state.length = kept;
  }

  /// A deep copy of the state, to restore later.
  State snapshot(const State& state) const {
    State copy = make_state(state.k.extent(0), state.k.extent(1));
    Kokkos::deep_copy(copy.k, state.k);
    Kokkos::deep_copy(copy.v, state.v);
    copy.length = state.length;
    return copy;
  }
  void restore(State& state, const State& snap) const {
    Kokkos::deep_copy(state.k, snap.k);
    Kokkos::deep_copy(state.v, snap.v);
    state.length = snap.length;
  }

  /// DeepNorm's β-init (torchscale): the value rows of W_qkv and W_o scaled by β.
  void rescale_for_deepnorm(double beta) {
    wqkv_.scale_weights(beta, (S.heads + S.kv_heads) * S.head_dim, rows_qkv);
    wo_.scale_weights(beta);
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("wqkv", wqkv_);
    visit("wo", wo_);
    core_.visit_parameters(visit);
  }

 private:
  template <class U>
  static HeadRows<U> rows_of(U* data, std::int64_t time, std::int64_t row) {
    return head_rows(data, time, row, S.head_dim);
  }
  static Heads4 heads_of(const Tensor<T***, Space>& qkv) {
    return Heads4(qkv.data(), qkv.extent(0), qkv.extent(1), S.heads + 2 * S.kv_heads, S.head_dim);
  }

  /// Self-attention over the n positions of `qkv` (forward/backward).
  AttendRows<T> self_rows(const Saved& s) const {
    const std::int64_t b = s.qkv.extent(0), n = s.qkv.extent(1), tq = s.o.extent(1);
    return {rows_of<const T>(s.qkv.data() + s.q0 * rows_qkv, n, rows_qkv),
            rows_of<const T>(s.qkv.data() + S.heads * S.head_dim, n, rows_qkv),
            rows_of<const T>(s.qkv.data() + (S.heads + S.kv_heads) * S.head_dim, n, rows_qkv),
            rows_of<T>(s.o.data(), tq, S.heads * S.head_dim),
            s.lse.data(),
            b,
            tq,
            n,
            s.q0,
            s.dropout};
  }

  static void check_room(const char* api, const State& state, std::int64_t batch, std::int64_t time) {
    if (batch != std::int64_t(state.k.extent(0)))
      fail<shape_error>(api, "x holds ", batch, " sequences; the decoding state holds ", state.k.extent(0));
    if (state.length + time > std::int64_t(state.k.extent(1)))
      fail<config_error>(api, "KV cache holds ", state.k.extent(1), " positions; ", state.length, " used + ", time,
                         " new exceeds it (", raise_max_cache_hint, ")");
  }

  /// Decoding: projects x (B, T, D) at positions state.length.. into s.qkv (RoPE, normalised)
  /// and writes its keys and values into the cache after them; the caller advances
  /// state.length once nothing else can fail.
  void extend_cache(core::Workspace<Space>& ws, State& state, Tensor<const T***, Space> x, Saved& s,
                    const char* api) const {
    static_assert(Scheme::decodable,
                  "hybridseq::layers::Attention: this segment scheme cannot be decoded token by "
                  "token (its queries see future positions)");
    core::check_shape(api, "x", x, core::dim(state.k.extent(0)), core::T, core::dim(S.d_model));
    const std::int64_t b = x.extent(0), t = x.extent(1), p = state.length;
    check_room(api, state, b, t);
    s.qkv = ws.template allocate<T***>("attention.qkv", b, t, rows_qkv);
    wqkv_.forward(ws, x, s.qkv, s.qkv_in);
    core_.position(ws, heads_of(s.qkv), rotated_heads, p, s.positions);
    detail::append_kv<T, Space>(s.qkv, S.heads, state.k, state.v, p);
  }

  void merge_and_project(core::Workspace<Space>& ws, Saved& s, Tensor<T***, Space> y) const {
    if constexpr (S.merge == HeadMerge::concat) {
      wo_.forward(ws, heads_as_rows(s.o), y, s.out_in);
    } else {
      const std::int64_t b = s.o.extent(0), tq = s.o.extent(1);
      s.merged = ws.template allocate<T***>("attention.merged", b, tq, S.head_dim);
      detail::sum_heads<T, Space>(s.o, s.merged);
      wo_.forward(ws, s.merged, y, s.out_in);
    }
  }

  static Tensor<T***, Space> heads_as_rows(const Tensor<T****, Space>& o) {
    return Tensor<T***, Space>(o.data(), o.extent(0), o.extent(1), o.extent(2) * o.extent(3));
  }

  Options options_;
  Core core_;
  Qkv wqkv_;
  Out wo_;
};

}  // namespace hybridseq::layers
