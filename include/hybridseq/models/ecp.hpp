#pragma once
/// \file
/// ECP: Efficient Context Propagation (papers.md §2; reference code MetaMain/ECPTransformer,
/// `ECPAttentionTransformer`). The sequence n = s·m is split into s segments of length m;
/// a query at t in segment j = ⌊t/m⌋ attends
///
///   j = 0:  {τ ≤ t}                 j ≥ 1:  {τ : (j−1)·m ≤ τ ≤ t}
///
/// i.e. queries come from the current segment, keys/values from the previous + current pair.
/// Score entries per layer: 2nm − m² (12.1 % of n² at n = 4096, m = 256). The loss is on all
/// n positions. Blocks are the reference's pre-norm ones,
///
///   x ← x + Attn(LN(x));   x ← x + FF(LN(x)),   FF = Linear(d, f) – GELU – Linear(f, d)
///
/// and the head is a final LayerNorm + untied linear head (LanguageModel). The attention runs
/// on the shared tiled kernel through the `EcpPairs<m>` segment scheme.
///
/// Two forms, chosen by `EcpShape::faithful`:
///  * clean (default): `layers::Attention` (separate Q, K, V projections, RoPE over the whole
///    head in every layer when `rope`, one output projection with bias);
///  * faithful: the reference code's quirks — K and V are one projection (`to_kv`, so V is
///    rotated together with K), RoPE only in layer 0 (on q and kv), and the first segment
///    has its own output projection (`to_out_0`). The reference's K/V LayerNorm (`self.norm`)
///    is computed and never used; it is omitted here (its parameters have no gradient there).
///    The reference head's bias is also omitted (LanguageModel's head has none), and RoPE
///    pairs dims rotate-half (NeoX) where lucidrains' RotaryEmbedding interleaves them: the
///    same function up to a fixed permutation of each head's dims in W_q / W_kv.
///
/// Decoding keeps a ring of 2m keys per layer: positions [(j−1)·m, t] are all a query in
/// segment j ever sees. When a query reaches segment j + 1 the older half is dropped and
/// the newer moved to the front. A prefill chunk is split at segment boundaries so that the
/// ring never holds more than 2m positions.
///  * clean: `layers::Attention` rotates by the position in its cache, so the moved keys are
///    re-rotated by −m (RoPE scores depend only on τ − t; the move keeps that difference);
///  * faithful: RoPE also rotates the values, which depends on absolute positions, so the
///    faithful branch rotates at absolute positions and only the mask uses ring positions.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "../compose/repeat.hpp"
#include "../core/check.hpp"
#include "../core/parameter.hpp"
#include "../core/time_slice.hpp"
#include "../core/workspace.hpp"
#include "../kernels/attention/tiled_attention.hpp"
#include "../kernels/rope.hpp"
#include "../layers/attention.hpp"
#include "../layers/ffn.hpp"
#include "../layers/layer_norm.hpp"
#include "../layers/linear.hpp"
#include "language_model.hpp"
#include "../compose/pre_norm_block.hpp"

namespace hybridseq::models {

/// Compile-time shape of an ECP model: width, heads × head_dim, segment length m, FFN width
/// (4·d in the reference), RoPE on/off, and the reference code's quirks (see the file comment).
struct EcpShape {
  int d_model;
  int heads;
  int head_dim;
  int segment;
  int ffn;
  bool rope = true;
  bool faithful = false;
};

namespace detail {

/// Moves ring rows [m, 2m) to [0, m) of a (B, 2m, H, Dh) cache.
template <class T, class Space>
void drop_older_half(const Tensor<T****, Space>& cache, std::int64_t m) {
  const std::int64_t b = cache.extent(0), h = cache.extent(2), dh = cache.extent(3);
  Kokkos::parallel_for(
      "hybridseq::models::ecp_ring_shift", Kokkos::MDRangePolicy<Space, Kokkos::Rank<3>>({0, 0, 0}, {b, m, h}),
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t t, std::int64_t k) {
        for (std::int64_t d = 0; d < dh; ++d) cache(i, t, k, d) = cache(i, t + m, k, d);
      });
}

/// Runs `chunk(x_c, y_c)` on the pieces of x (B, T, D) that lie in one segment of length m,
/// starting at absolute position `length`; before a piece that starts a new segment, calls
/// `boundary()`. Outputs land in y (B, T, D).
template <class T, class Space, class Boundary, class Chunk>
void by_segment(core::Workspace<Space>& ws, std::int64_t length, std::int64_t m, Tensor<const T***, Space> x,
                Tensor<T***, Space> y, Boundary&& boundary, Chunk&& chunk) {
  const std::int64_t b = x.extent(0), t = x.extent(1), d = x.extent(2), dy = y.extent(2);
  for (std::int64_t done = 0; done < t;) {
    const std::int64_t p = length + done;
    if (p % m == 0) boundary();
    const std::int64_t len = std::min(t - done, (p / m + 1) * m - p);
    if (len == t) {
      chunk(x, y);
    } else {
      core::WorkspaceScope scope(ws);
      auto xc = ws.template allocate<T***>("ecp.chunk.x", b, len, d);
      auto yc = ws.template allocate<T***>("ecp.chunk.y", b, len, dy);
      core::copy_time<T, Space>(x, done, xc, 0, len);
      chunk(Tensor<const T***, Space>(xc), yc);
      core::copy_time<T, Space>(yc, 0, y, done, len);
    }
    done += len;
  }
}

inline std::int64_t ecp_ring_first(std::int64_t length, std::int64_t kept) { return length - kept; }

}  // namespace detail

/// The clean ECP attention branch: `layers::Attention` over `EcpPairs<M>`, whose decoding
/// keeps a ring of 2M keys instead of the whole sequence. Training (forward / backward /
/// parameters) is Attention's own.
template <layers::AttentionShape A, int M, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class EcpAttention : public layers::Attention<A, kernels::attention::EcpPairs<M>, T, Space> {
  using Base = layers::Attention<A, kernels::attention::EcpPairs<M>, T, Space>;

 public:
  using Options = typename Base::Options;
  static constexpr int segment = M;

  explicit EcpAttention(const Options& o = {}) : Base(o), rope_base_(o.rope_base) {}

  /// The ring: Attention's cache of capacity 2M (positions relative to its first row, which
  /// is always a segment start) and the number of positions consumed.
  struct State {
    typename Base::State ring;
    std::int64_t length = 0;
  };

  State make_state(std::int64_t batch) const { return State{Base::make_state(batch, 2 * M), 0}; }

  /// Appends x (B, T, D) after `state.length` positions and writes y (B, T, D), equal to the
  /// full forward's rows for those positions. Any T (not only whole segments).
  void prefill(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x, Tensor<T***, Space> y) const {
    constexpr const char* api = "hybridseq::models::EcpAttention::prefill";
    core::check_shape(api, "x", x, core::dim(st.ring.k.extent(0)), core::T, core::dim(A.d_model));
    core::check_same_shape(api, "y", y, "x", x);
    detail::by_segment<T, Space>(
        ws, st.length, M, x, y, [&] { shift(ws, st); },
        [&](Tensor<const T***, Space> xc, Tensor<T***, Space> yc) {
          Base::prefill(ws, st.ring, xc, yc);
          st.length += std::int64_t(xc.extent(1));
        });
  }
  /// Rolls back to `length` positions; the ring must still hold what a query there sees.
  void truncate(State& st, std::int64_t length) const {
    const std::int64_t first = detail::ecp_ring_first(st.length, st.ring.length);
    const std::int64_t lowest = first == 0 ? 0 : first + M;
    if (length < lowest || length > st.length)
      fail<value_error>("hybridseq::models::EcpAttention::truncate", "length ", length, " is outside [", lowest, ", ",
                        st.length, "]: the ring of 2m = ", 2 * M, " keys holds positions [", first, ", ", st.length,
                        ")");
    Base::truncate(st.ring, st.ring.length - (st.length - length));
    st.length = length;
  }

  State snapshot(const State& st) const { return State{Base::snapshot(st.ring), st.length}; }
  void restore(State& st, const State& snap) const {
    Base::restore(st.ring, snap.ring);
    st.length = snap.length;
  }

 private:
  /// At a segment start with a full ring: keep the newer segment, re-rotated by −M so that
  /// its RoPE angles match its new ring positions.
  void shift(core::Workspace<Space>& ws, State& st) const {
    if (st.ring.length < 2 * M) return;
    detail::drop_older_half<T, Space>(st.ring.k, M);
    detail::drop_older_half<T, Space>(st.ring.v, M);
    if constexpr (A.rotary_dim > 0) {
      core::WorkspaceScope scope(ws);
      const Space exec{};
      const double base = rope_base_;
      auto cos = ws.template allocate<T**>("ecp.ring.cos", M, A.rotary_dim / 2);
      auto sin = ws.template allocate<T**>("ecp.ring.sin", M, A.rotary_dim / 2);
      const auto b = st.ring.k.extent(0);
      const std::int64_t row = std::int64_t(st.ring.k.extent(1)) * A.kv_heads * A.head_dim;
      for (std::size_t i = 0; i < b; ++i) {
        Tensor<T****, Space> keys(st.ring.k.data() + i * row, 1, M, A.kv_heads, A.head_dim);
        kernels::rope_table<T>(exec, base, M, A.rotary_dim, cos, sin);  // undo angles of rows M..2M−1
        kernels::rope_apply<T, false>(exec, keys, keys, cos, sin, A.rotary_dim, /*inverse=*/true);
        kernels::rope_table<T>(exec, base, 0, A.rotary_dim, cos, sin);  // rotate to rows 0..M−1
        kernels::rope_apply<T, false>(exec, keys, keys, cos, sin, A.rotary_dim, /*inverse=*/false);
      }
      exec.fence();
    }
    st.ring.length = M;
  }

  double rope_base_;
};

/// The faithful ECP attention branch (the reference's `ECPAttention`, less its unused K/V
/// LayerNorm): q = x W_qᵀ, kv = x W_kvᵀ (no biases) used as both keys and values, RoPE on q
/// and kv when `rotary()` (the model turns it on in layer 0 only), scores q·kv/√Dh under
/// `EcpPairs<m>`, and y = o W_o0ᵀ + b_o0 on the first segment, o W_oᵀ + b_o after it.
///
/// Shapes: x (B, T, D) → y (B, T, D), T a multiple of m (config_error otherwise).
template <EcpShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class EcpFaithfulAttention {
  static constexpr int M = S.segment, H = S.heads, Dh = S.head_dim, W = S.heads * S.head_dim;
  static_assert(Dh % 2 == 0 || !S.rope, "hybridseq::models::EcpFaithfulAttention: RoPE needs an even head_dim");
  using Scheme = kernels::attention::EcpPairs<M>;
  using Proj = layers::Linear<layers::LinearShape{S.d_model, W, false}, T, Space>;
  using Out = layers::Linear<layers::LinearShape{W, S.d_model, true}, T, Space>;
  using Heads4 = Kokkos::View<T****, Kokkos::LayoutRight, typename Space::memory_space,
                              Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

 public:
  using scalar_type = T;
  using execution_space = Space;
  using scheme = Scheme;
  static constexpr int d_in = S.d_model;
  static constexpr int d_out = S.d_model;
  static constexpr int segment = M;

  using Options = layers::AttentionOptions;  // max_cache unused: the ring holds 2m
  struct Saved {
    typename Proj::Saved q_in, kv_in;
    Tensor<T***, Space> q, kv;   // (B, T, H·Dh) after RoPE
    Tensor<T**, Space> cos, sin; // (T, Dh/2) when rotary
    Tensor<T***, Space> o;       // (B, T, H·Dh)
    Tensor<T*, Space> lse;       // (B·H·T)
    Tensor<T***, Space> o_first, o_rest;  // (B, min(T, m), H·Dh), (B, T − m, H·Dh)
    typename Out::Saved first_in, rest_in;
  };
  /// The ring of 2m shared keys/values (rotated at absolute positions).
  struct State {
    Tensor<T****, Space> kv;  // (B, 2m, H, Dh)
    std::int64_t kept = 0;    // ring rows in use; row 0 is position length − kept
    std::int64_t length = 0;
  };

  explicit EcpFaithfulAttention(const Options& o = {})
      : options_(o),
        to_q_({o.init_std}),
        to_kv_({o.init_std}),
        to_out_({o.out_init_std}),
        to_out_0_({o.out_init_std}),
        alpha_("hybridseq::models::EcpFaithfulAttention::alpha", H) {
    if (!(o.rope_base > 1.0))
      fail<value_error>("hybridseq::models::EcpFaithfulAttention", "rope_base must be > 1, got ", o.rope_base);
    Kokkos::deep_copy(alpha_, T(1) / std::sqrt(T(Dh)));
  }

  /// RoPE in this layer or not (the reference rotates in layer 0 only).
  void set_rotary(bool on) { rotary_ = on && S.rope; }
  bool rotary() const { return rotary_; }

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& s) const {
    constexpr const char* api = "hybridseq::models::EcpFaithfulAttention::forward";
    core::check_shape(api, "x", x, core::B, core::T, core::dim(S.d_model));
    core::check_same_shape(api, "y", y, "x", x);
    const std::int64_t b = x.extent(0), n = x.extent(1);
    Scheme::check(api, n);
    const Space exec{};
    project(ws, x, 0, s);
    s.o = ws.template allocate<T***>("ecp.o", b, n, W);
    s.lse = ws.template allocate<T*>("ecp.lse", b * H * n);
    kernels::attention::forward<Scheme, T>(exec, args(s.q, rows(s.kv), s.o, s.lse, n, 0));
    output(ws, s, 0, y);
  }

  void backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    constexpr const char* api = "hybridseq::models::EcpFaithfulAttention::backward";
    const std::int64_t b = s.q.extent(0), n = s.q.extent(1), m0 = std::min<std::int64_t>(n, M);
    core::check_shape(api, "dy", dy, core::dim(b), core::dim(n), core::dim(S.d_model));
    core::check_same_shape(api, "dx", dx, "dy", dy);
    const Space exec{};
    core::WorkspaceScope scope(ws);
    auto d_o = ws.template allocate<T***>("ecp.do", b, n, W);
    {
      auto dy0 = ws.template allocate<T***>("ecp.dy0", b, m0, S.d_model);
      auto do0 = ws.template allocate_zeroed<T***>("ecp.do0", b, m0, W);
      core::copy_time<T, Space>(dy, 0, dy0, 0, m0);
      to_out_0_.backward(ws, s.first_in, dy0, do0);
      core::copy_time<T, Space>(do0, 0, d_o, 0, m0);
    }
    if (n > m0) {
      auto dy1 = ws.template allocate<T***>("ecp.dy1", b, n - m0, S.d_model);
      auto do1 = ws.template allocate_zeroed<T***>("ecp.do1", b, n - m0, W);
      core::copy_time<T, Space>(dy, m0, dy1, 0, n - m0);
      to_out_.backward(ws, s.rest_in, dy1, do1);
      core::copy_time<T, Space>(do1, 0, d_o, m0, n - m0);
    }
    auto dq = ws.template allocate<T***>("ecp.dq", b, n, W);
    auto dk = ws.template allocate<T***>("ecp.dk", b, n, W);
    auto dv = ws.template allocate<T***>("ecp.dv", b, n, W);
    auto delta = ws.template allocate<T*>("ecp.delta", b * H * n);
    kernels::attention::AttentionGrads<T> grads{rows<const T>(d_o), rows<T>(dq), rows<T>(dk), rows<T>(dv),
                                                delta.data(), nullptr};
    kernels::attention::backward<Scheme, T>(exec, args(s.q, rows(s.kv), s.o, s.lse, n, 0), grads);
    const auto fk = core::flat(dk);
    const auto fv = core::flat(dv);
    Kokkos::parallel_for(
        "hybridseq::models::EcpFaithfulAttention::dkv", Kokkos::RangePolicy<Space>(exec, 0, fk.extent(0)),
        KOKKOS_LAMBDA(std::int64_t i) { fk(i) += fv(i); });
    if (rotary_) {
      kernels::rope_apply<T, false>(exec, heads(dq), heads(dq), s.cos, s.sin, Dh, /*inverse=*/true);
      kernels::rope_apply<T, false>(exec, heads(dk), heads(dk), s.cos, s.sin, Dh, /*inverse=*/true);
    }
    to_q_.backward(ws, s.q_in, dq, dx);
    to_kv_.backward(ws, s.kv_in, dk, dx);
  }

  // ---- decoding: a ring of 2m keys/values ----

  State make_state(std::int64_t batch) const {
    return State{Tensor<T****, Space>("ecp.ring.kv", batch, 2 * M, H, Dh), 0, 0};
  }

  void prefill(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x, Tensor<T***, Space> y) const {
    constexpr const char* api = "hybridseq::models::EcpFaithfulAttention::prefill";
    core::check_shape(api, "x", x, core::dim(st.kv.extent(0)), core::T, core::dim(S.d_model));
    core::check_same_shape(api, "y", y, "x", x);
    detail::by_segment<T, Space>(
        ws, st.length, M, x, y,
        [&] {
          if (st.kept == 2 * M) {
            detail::drop_older_half<T, Space>(st.kv, M);
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
  static kernels::attention::HeadRows<U> rows(const Tensor<std::remove_const_t<U>***, Space>& t) {
    return {t.data(), std::int64_t(t.extent(1)) * W, W, Dh};
  }
  static kernels::attention::HeadRows<const T> rows(const Tensor<T***, Space>& t) { return rows<const T>(t); }
  static Heads4 heads(const Tensor<T***, Space>& t) { return Heads4(t.data(), t.extent(0), t.extent(1), H, Dh); }

  kernels::attention::AttentionArgs<T> args(const Tensor<T***, Space>& q, kernels::attention::HeadRows<const T> kv,
                                            const Tensor<T***, Space>& o, const Tensor<T*, Space>& lse,
                                            std::int64_t tk, std::int64_t q0) const {
    return {rows(q), kv, kv, rows<T>(o), lse.data(), alpha_.data(), std::int64_t(q.extent(0)),
            std::int64_t(q.extent(1)), tk, q0, H, H, Dh};
  }

  /// q, kv of x, rotated at absolute positions offset.. when rotary.
  void project(core::Workspace<Space>& ws, Tensor<const T***, Space> x, std::int64_t offset, Saved& s) const {
    const Space exec{};
    const std::int64_t b = x.extent(0), n = x.extent(1);
    s.q = ws.template allocate<T***>("ecp.q", b, n, W);
    s.kv = ws.template allocate<T***>("ecp.kv", b, n, W);
    to_q_.forward(ws, x, s.q, s.q_in);
    to_kv_.forward(ws, x, s.kv, s.kv_in);
    if (rotary_) {
      s.cos = ws.template allocate<T**>("ecp.cos", n, Dh / 2);
      s.sin = ws.template allocate<T**>("ecp.sin", n, Dh / 2);
      kernels::rope_table<T>(exec, options_.rope_base, offset, Dh, s.cos, s.sin);
      kernels::rope_apply<T, false>(exec, heads(s.q), heads(s.q), s.cos, s.sin, Dh, false);
      kernels::rope_apply<T, false>(exec, heads(s.kv), heads(s.kv), s.cos, s.sin, Dh, false);
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
      auto y0 = m0 == n ? y : ws.template allocate<T***>("ecp.y0", b, m0, S.d_model);
      to_out_0_.forward(ws, s.o_first, y0, s.first_in);
      if (m0 < n) core::copy_time<T, Space>(y0, 0, y, 0, m0);
    }
    if (n > m0) {
      s.o_rest = ws.template allocate<T***>("ecp.o_rest", b, n - m0, W);
      core::copy_time<T, Space>(s.o, m0, s.o_rest, 0, n - m0);
      auto y1 = m0 == 0 ? y : ws.template allocate<T***>("ecp.y1", b, n - m0, S.d_model);
      to_out_.forward(ws, s.o_rest, y1, s.rest_in);
      if (m0 > 0) core::copy_time<T, Space>(y1, 0, y, m0, n - m0);
    }
  }

  /// One piece within a segment: append its kv to the ring and attend from ring positions.
  void chunk(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x, Tensor<T***, Space> y) const {
    const Space exec{};
    core::WorkspaceScope scope(ws);
    const std::int64_t b = x.extent(0), t = x.extent(1), p = st.kept;
    Saved s;
    project(ws, x, st.length, s);
    const auto ring = st.kv;
    const auto kv = s.kv;
    Kokkos::parallel_for(
        "hybridseq::models::EcpFaithfulAttention::append", Kokkos::MDRangePolicy<Space, Kokkos::Rank<3>>({0, 0, 0}, {b, t, H}),
        KOKKOS_LAMBDA(std::int64_t i, std::int64_t j, std::int64_t h) {
          for (int d = 0; d < Dh; ++d) ring(i, p + j, h, d) = kv(i, j, h * Dh + d);
        });
    s.o = ws.template allocate<T***>("ecp.o", b, t, W);
    s.lse = ws.template allocate<T*>("ecp.lse", b * H * t);
    const kernels::attention::HeadRows<const T> ring_rows{st.kv.data(), 2 * M * W, W, Dh};
    kernels::attention::forward<Scheme, T>(exec, args(s.q, ring_rows, s.o, s.lse, p + t, p));
    output(ws, s, st.length, y);
    st.kept = p + t;
    st.length += t;
  }

  Options options_;
  bool rotary_ = S.rope;
  Proj to_q_, to_kv_;
  Out to_out_, to_out_0_;
  Tensor<T*, Space> alpha_;  // (H) 1/√Dh for the kernel
};

/// The attention shape of the clean ECP branch: H heads of Dh (no GQA), RoPE over the whole
/// head, no Q/K/V bias, output bias (the reference's `to_out`).
template <EcpShape S>
inline constexpr layers::AttentionShape ecp_attention_shape{
    S.d_model, S.heads, S.heads, S.head_dim, S.rope ? S.head_dim : 0, layers::Score::dot, false, false, true};

template <EcpShape S, Scalar T, ExecutionSpace Space>
using EcpAttentionOf = std::conditional_t<S.faithful, EcpFaithfulAttention<S, T, Space>,
                                          EcpAttention<ecp_attention_shape<S>, S.segment, T, Space>>;

/// One ECP block: x + Attn(LN(x)), then + FF(LN(·)), FF = Linear(d, f)–GELU–Linear(f, d).
template <EcpShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
using EcpBlock = compose::PreNormBlock<EcpAttentionOf<S, T, Space>,
                              layers::Ffn<layers::FfnShape{S.d_model, S.ffn, layers::FfnKind::mlp, true,
                                                           layers::Activation::gelu},
                                          T, Space>,
                              layers::LayerNorm<S.d_model, T, Space>>;

/// ECP's body: Options::count EcpBlocks, refusing training / evaluation lengths that are not
/// whole segments (decoding takes any length).
template <EcpShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class EcpBody : public compose::Repeat<EcpBlock<S, T, Space>> {
 public:
  using compose::Repeat<EcpBlock<S, T, Space>>::Repeat;
  static constexpr const char* model_name = "hybridseq::models::Ecp";

  static void check_length(std::string_view api, std::int64_t t) {
    if (t % S.segment != 0 || t == 0)
      fail<config_error>(api, "the sequence length T = ", t, " must be a positive multiple of the segment length m = ",
                         S.segment, " (ECP splits n = s·m; pad to ",
                         std::max<std::int64_t>(1, (t + S.segment - 1) / S.segment) * S.segment, ")");
  }
};

/// The ECP language model: Options::body.count blocks, final LayerNorm, untied head.
///
/// Requires: training / evaluation / logits on T a multiple of S.segment (config_error naming
/// the call otherwise; pad the batch). Decoding (make_state / prefill) takes any length.
template <int Vocab, EcpShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class Ecp : public LanguageModel<Vocab, EcpBody<S, T, Space>, layers::LayerNorm<S.d_model, T, Space>> {
  static_assert(S.segment >= 1, "hybridseq::models::Ecp: the segment length must be at least 1");
  using Base = LanguageModel<Vocab, EcpBody<S, T, Space>, layers::LayerNorm<S.d_model, T, Space>>;

 public:
  using Options = typename Base::Options;
  static constexpr EcpShape shape = S;
  static constexpr int segment = S.segment;

  explicit Ecp(const Options& o = {}) : Base(o) {
    if constexpr (S.faithful)
      for (int i = 0; i < this->body().size(); ++i) this->body()[i].attention().set_rotary(i == 0);
  }
};

}  // namespace hybridseq::models
