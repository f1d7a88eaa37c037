#pragma once
/// \file
/// The attention branch: grouped-query attention with RoPE, dot-product or scaled-cosine
/// scores, any banded segment scheme, concatenated or summed heads; forward, backward and
/// KV-cache decoding.
///
///   qkv = x W_qkvᵀ (+ b)         q (B,T,H,Dh), k, v (B,T,Hkv,Dh); head h reads kv head ⌊h·Hkv/H⌋
///   q, k ← RoPE(q, k)            rotate-half on the first rotary_dim dims of each head
///   dot:    s = q·k / √Dh
///   cosine: s = cos(q, k) · exp(min(s_h, log 100))     (Swin-V2; s_h learnable, init log 10)
///   o_h = softmax_{scheme mask}(s) v;   y = concat_h(o_h) W_oᵀ  or  (Σ_h o_h) W_oᵀ  (+ b)
///
/// The summed-heads form with head_dim = d_model is the GPT-NeoX layer of Cooper et al.

#include <cmath>
#include <cstdint>
#include <string>

#include "../core/check.hpp"
#include "../core/parameter.hpp"
#include "../core/workspace.hpp"
#include "../kernels/attention/tiled_attention.hpp"
#include "../kernels/rope.hpp"
#include "linear.hpp"

namespace hybridseq::layers {

namespace schemes = kernels::attention;

enum class Score { dot, cosine };
enum class HeadMerge { concat, sum };

/// Runtime options of every attention layer (one type, so that one call reaches each
/// attention of a model: core::for_each_option<layers::AttentionOptions>(model_options, f)).
struct AttentionOptions {
  double init_std = 0.02;
  double out_init_std = 0.02;
  double rope_base = 10000.0;
  std::int64_t max_cache = 4096;  // decoding: KV-cache capacity per sequence
};

/// The hint every "KV cache full" error gives: how to raise the capacity from any model.
inline constexpr const char* raise_max_cache_hint =
    "raise AttentionOptions::max_cache, e.g. for every attention of a model: "
    "hybridseq::core::for_each_option<hybridseq::layers::AttentionOptions>(options, [](auto& a) { a.max_cache = n; })";

/// Compile-time shape of an attention branch.
struct AttentionShape {
  int d_model;
  int heads;
  int kv_heads;
  int head_dim;
  int rotary_dim = 0;             // 0: no RoPE; head_dim: full; see rotary_dim_for()
  Score score = Score::dot;
  bool per_layer_scale = false;   // cosine: one temperature for all heads instead of one per head
  bool qkv_bias = false;
  bool out_bias = false;
  HeadMerge merge = HeadMerge::concat;
};

namespace detail {

// x̂ = x / max(‖x‖, ε) per head row, saving 1/max(‖x‖, ε).
template <class T, class Space>
struct NormalizeHeads {
  Kokkos::View<T****, Kokkos::LayoutRight, typename Space::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>> x;
  Tensor<T***, Space> inv_norm;  // (B, T, heads)
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t b, std::int64_t t, std::int64_t h) const {
    T ss = 0;
    for (std::int64_t d = 0; d < std::int64_t(x.extent(3)); ++d) ss += x(b, t, h, d) * x(b, t, h, d);
    const T norm = math::sqrt(ss);
    const T inv = T(1) / (norm > T(1e-12) ? norm : T(1e-12));
    inv_norm(b, t, h) = inv;
    for (std::int64_t d = 0; d < std::int64_t(x.extent(3)); ++d) x(b, t, h, d) *= inv;
  }
};

// dx = (dx̂ − x̂ (x̂·dx̂)) / ‖x‖, in place on dx̂.
template <class T, class Space>
struct NormalizeHeadsBackward {
  Kokkos::View<const T****, Kokkos::LayoutRight, typename Space::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>> xhat;
  Kokkos::View<T****, Kokkos::LayoutRight, typename Space::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>> dx;
  Tensor<const T***, Space> inv_norm;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t b, std::int64_t t, std::int64_t h) const {
    T dot = 0;
    for (std::int64_t d = 0; d < std::int64_t(dx.extent(3)); ++d) dot += xhat(b, t, h, d) * dx(b, t, h, d);
    const T inv = inv_norm(b, t, h);
    for (std::int64_t d = 0; d < std::int64_t(dx.extent(3)); ++d) dx(b, t, h, d) = (dx(b, t, h, d) - xhat(b, t, h, d) * dot) * inv;
  }
};

}  // namespace detail

/// Attention branch. `Scheme` is a segment scheme from kernels/attention/segment_schemes.hpp.
///
/// Shapes: x (B, T, D) → y (B, Scheme::query_count(T), D) (= T except PerceiverCross).
/// Requires: heads % kv_heads == 0; T acceptable to the scheme (config_error otherwise).
template <AttentionShape S, class Scheme = schemes::Causal, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class Attention {
  static_assert(S.heads > 0 && S.kv_heads > 0 && S.head_dim > 0 && S.d_model > 0,
                "hybridseq::layers::Attention: widths and head counts must be positive");
  static_assert(S.heads % S.kv_heads == 0,
                "hybridseq::layers::Attention: n_heads must be a multiple of n_kv_heads (grouped-query attention)");
  static_assert(S.rotary_dim % 2 == 0 && S.rotary_dim >= 0 && S.rotary_dim <= S.head_dim,
                "hybridseq::layers::Attention: rotary_dim must be even and within [0, head_dim]");

  static constexpr int rows_qkv = (S.heads + 2 * S.kv_heads) * S.head_dim;
  static constexpr int width_o = S.merge == HeadMerge::concat ? S.heads * S.head_dim : S.head_dim;
  static constexpr int rotated_heads = S.heads + S.kv_heads;  // q and k heads
  using Qkv = Linear<LinearShape{S.d_model, rows_qkv, S.qkv_bias}, T, Space>;
  using Out = Linear<LinearShape{width_o, S.d_model, S.out_bias}, T, Space>;
  using Heads4 = Kokkos::View<T****, Kokkos::LayoutRight, typename Space::memory_space,
                              Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

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
    Tensor<T***, Space> qkv;        // (B, T, (H + 2Hkv)·Dh) after RoPE (and normalisation)
    Tensor<T**, Space> cos, sin;    // (T, rotary/2)
    Tensor<T***, Space> inv_norm;   // (B, T, H + Hkv) cosine only
    Tensor<T****, Space> o;         // (B, Tq, H, Dh)
    Tensor<T*, Space> lse;          // (B·H·Tq)
    Tensor<T***, Space> merged;     // (B, Tq, Dh) summed heads only
    typename Out::Saved out_in;
    std::int64_t q0 = 0;
  };

  /// Decoding state: the KV cache, post-RoPE (normalised for cosine).
  struct State {
    Tensor<T****, Space> k, v;  // (B, capacity, Hkv, Dh)
    std::int64_t length = 0;
  };

  explicit Attention(const Options& options = {})
      : options_(options),
        wqkv_({options.init_std}),
        wo_({options.out_init_std}),
        logit_scale_({S.score == Score::cosine ? (S.per_layer_scale ? 1 : S.heads) : 0}, core::Role::scalar,
                     core::Init::constant(std::log(10.0))),
        alpha_("hybridseq::layers::Attention::alpha", S.heads) {
    if (!(options.rope_base > 1.0))
      fail<value_error>("hybridseq::layers::Attention", "rope_base must be > 1, got ", options.rope_base);
  }

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& s) const {
    constexpr const char* api = "hybridseq::layers::Attention::forward";
    core::check_shape(api, "x", x, core::B, core::T, core::dim(S.d_model));
    const std::int64_t b = x.extent(0), n = x.extent(1);
    Scheme::check(api, n);
    const std::int64_t tq = Scheme::query_count(n);
    core::check_shape(api, "y", y, core::dim(b), core::dim(tq), core::dim(S.d_model));
    const Space exec{};
    s.q0 = n - tq;
    s.qkv = ws.template allocate<T***>("attention.qkv", b, n, rows_qkv);
    wqkv_.forward(ws, x, s.qkv, s.qkv_in);
    position_heads(ws, s.qkv, 0, s);
    update_alpha();
    s.o = ws.template allocate<T****>("attention.o", b, tq, S.heads, S.head_dim);
    s.lse = ws.template allocate<T*>("attention.lse", b * S.heads * tq);
    kernels::attention::forward<Scheme, T>(exec, self_args(s));
    merge_and_project(ws, s, y);
  }

  void backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    constexpr const char* api = "hybridseq::layers::Attention::backward";
    const std::int64_t b = s.qkv.extent(0), n = s.qkv.extent(1), tq = s.o.extent(1);
    core::check_shape(api, "dy", dy, core::dim(b), core::dim(tq), core::dim(S.d_model));
    core::check_shape(api, "dx", dx, core::dim(b), core::dim(n), core::dim(S.d_model));
    const Space exec{};
    core::WorkspaceScope scope(ws);
    auto d_o = ws.template allocate_zeroed<T****>("attention.do", b, tq, S.heads, S.head_dim);
    if constexpr (S.merge == HeadMerge::concat) {
      wo_.backward(ws, s.out_in, dy, heads_as_rows(d_o));
    } else {
      auto d_merged = ws.template allocate_zeroed<T***>("attention.dmerged", b, tq, S.head_dim);
      wo_.backward(ws, s.out_in, dy, d_merged);
      Kokkos::parallel_for(
          "hybridseq::layers::Attention::unmerge",
          Kokkos::MDRangePolicy<Space, Kokkos::Rank<3>>(exec, {0, 0, 0}, {b, tq, std::int64_t(S.heads)}),
          KOKKOS_LAMBDA(std::int64_t i, std::int64_t t, std::int64_t h) {
            for (int d = 0; d < S.head_dim; ++d) d_o(i, t, h, d) = d_merged(i, t, d);
          });
    }
    auto dqkv = ws.template allocate_zeroed<T***>("attention.dqkv", b, n, rows_qkv);
    auto delta = ws.template allocate<T*>("attention.delta", b * S.heads * tq);
    const std::int64_t nq = kernels::attention::query_tiles(tq);
    Tensor<T*, Space> dalpha;
    if constexpr (S.score == Score::cosine) dalpha = ws.template allocate<T*>("attention.dalpha", b * S.heads * nq);
    kernels::attention::AttentionGrads<T> grads{rows_of<const T>(d_o.data(), tq, S.heads * S.head_dim),
                                                rows_of<T>(dqkv.data() + s.q0 * rows_qkv, n, rows_qkv),
                                                rows_of<T>(dqkv.data() + S.heads * S.head_dim, n, rows_qkv),
                                                rows_of<T>(dqkv.data() + (S.heads + S.kv_heads) * S.head_dim, n, rows_qkv),
                                                delta.data(), dalpha.data()};
    kernels::attention::backward<Scheme, T>(exec, self_args(s), grads);
    exec.fence();
    if constexpr (S.score == Score::cosine) accumulate_scale_grad(dalpha, b, nq);
    auto dheads = Heads4(dqkv.data(), b, n, S.heads + 2 * S.kv_heads, S.head_dim);
    if constexpr (S.score == Score::cosine) {
      Kokkos::parallel_for(
          "hybridseq::layers::Attention::normalize_backward",
          Kokkos::MDRangePolicy<Space, Kokkos::Rank<3>>(exec, {0, 0, 0}, {b, n, std::int64_t(rotated_heads)}),
          detail::NormalizeHeadsBackward<T, Space>{Heads4(s.qkv.data(), b, n, S.heads + 2 * S.kv_heads, S.head_dim),
                                                   dheads, s.inv_norm});
    }
    if constexpr (S.rotary_dim > 0)
      kernels::rope_apply<T, false>(exec, dheads, dheads, s.cos, s.sin, S.rotary_dim, /*inverse=*/true, rotated_heads);
    wqkv_.backward(ws, s.qkv_in, dqkv, dx);
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
    const Space exec{};
    update_alpha();
    s.o = ws.template allocate<T****>("attention.o", b, t, S.heads, S.head_dim);
    s.lse = ws.template allocate<T*>("attention.lse", b * S.heads * t);
    kernels::attention::AttentionArgs<T> args{
        rows_of<const T>(s.qkv.data(), t, rows_qkv),
        {state.k.data(), std::int64_t(state.k.extent(1)) * S.kv_heads * S.head_dim, S.kv_heads * S.head_dim, S.head_dim},
        {state.v.data(), std::int64_t(state.v.extent(1)) * S.kv_heads * S.head_dim, S.kv_heads * S.head_dim, S.head_dim},
        rows_of<T>(s.o.data(), t, S.heads * S.head_dim),
        s.lse.data(), alpha_.data(), b, t, p + t, p, S.heads, S.kv_heads, S.head_dim};
    kernels::attention::forward<Scheme, T>(exec, args);
    merge_and_project(ws, s, y);
    state.length = p + t;
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
      fail<value_error>("hybridseq::layers::Attention::truncate", "length ", length, " is outside [0, ", state.length, "]");
    state.length = length;
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
    if constexpr (S.score == Score::cosine) visit("logit_scale", logit_scale_);
  }

 private:
  template <class U>
  static kernels::attention::HeadRows<U> rows_of(U* data, std::int64_t time, std::int64_t row) {
    return {data, time * row, row, S.head_dim};
  }

  /// Kernel arguments for self-attention over the n positions of `qkv` (forward/backward).
  kernels::attention::AttentionArgs<T> self_args(const Saved& s) const {
    const std::int64_t b = s.qkv.extent(0), n = s.qkv.extent(1), tq = s.o.extent(1);
    return {rows_of<const T>(s.qkv.data() + s.q0 * rows_qkv, n, rows_qkv),
            rows_of<const T>(s.qkv.data() + S.heads * S.head_dim, n, rows_qkv),
            rows_of<const T>(s.qkv.data() + (S.heads + S.kv_heads) * S.head_dim, n, rows_qkv),
            rows_of<T>(s.o.data(), tq, S.heads * S.head_dim),
            s.lse.data(), alpha_.data(), b, tq, n, s.q0, S.heads, S.kv_heads, S.head_dim};
  }

  /// Decoding: projects x (B, T, D) at positions state.length.. into s.qkv (RoPE, normalised)
  /// and writes its keys and values into the cache after them; the caller advances
  /// state.length once nothing else can fail.
  void extend_cache(core::Workspace<Space>& ws, State& state, Tensor<const T***, Space> x, Saved& s,
                    const char* api) const {
    static_assert(Scheme::decodable, "hybridseq::layers::Attention: this segment scheme cannot be decoded token by "
                                     "token (its queries see future positions)");
    core::check_shape(api, "x", x, core::dim(state.k.extent(0)), core::T, core::dim(S.d_model));
    const std::int64_t b = x.extent(0), t = x.extent(1), p = state.length;
    if (p + t > std::int64_t(state.k.extent(1)))
      fail<config_error>(api, "KV cache holds ", state.k.extent(1), " positions; ", p, " used + ", t,
                         " new exceeds it (", raise_max_cache_hint, ")");
    s.qkv = ws.template allocate<T***>("attention.qkv", b, t, rows_qkv);
    wqkv_.forward(ws, x, s.qkv, s.qkv_in);
    position_heads(ws, s.qkv, p, s);
    append_to_cache(state, s.qkv, p, t);
  }

  /// RoPE at positions offset.., then cosine normalisation, on the q and k heads of qkv.
  void position_heads(core::Workspace<Space>& ws, const Tensor<T***, Space>& qkv, std::int64_t offset, Saved& s) const {
    const Space exec{};
    const std::int64_t b = qkv.extent(0), n = qkv.extent(1);
    auto heads = Heads4(qkv.data(), b, n, S.heads + 2 * S.kv_heads, S.head_dim);
    if constexpr (S.rotary_dim > 0) {
      s.cos = ws.template allocate<T**>("attention.cos", n, S.rotary_dim / 2);
      s.sin = ws.template allocate<T**>("attention.sin", n, S.rotary_dim / 2);
      kernels::rope_table<T>(exec, options_.rope_base, offset, S.rotary_dim, s.cos, s.sin);
      kernels::rope_apply<T, false>(exec, heads, heads, s.cos, s.sin, S.rotary_dim, false, rotated_heads);
    }
    if constexpr (S.score == Score::cosine) {
      s.inv_norm = ws.template allocate<T***>("attention.inv_norm", b, n, rotated_heads);
      Kokkos::parallel_for("hybridseq::layers::Attention::normalize",
                           Kokkos::MDRangePolicy<Space, Kokkos::Rank<3>>(exec, {0, 0, 0}, {b, n, std::int64_t(rotated_heads)}),
                           detail::NormalizeHeads<T, Space>{heads, s.inv_norm});
    }
  }

  /// α_h: 1/√Dh for dot scores; exp(min(s_h, log 100)) for cosine scores.
  void update_alpha() const {
    const auto alpha = alpha_;
    if constexpr (S.score == Score::dot) {
      Kokkos::deep_copy(alpha, T(1) / std::sqrt(T(S.head_dim)));
    } else {
      const auto scale = logit_scale_.value();
      Kokkos::parallel_for(
          "hybridseq::layers::Attention::alpha", Kokkos::RangePolicy<Space>(0, S.heads), KOKKOS_LAMBDA(std::int64_t h) {
            const T sh = scale(S.per_layer_scale ? 0 : h);
            alpha(h) = math::exp(sh < T(4.605170185988091) ? sh : T(4.605170185988091));
          });
    }
    Space().fence();
  }

  /// ∂L/∂s_h = ∂L/∂α_h · α_h while s_h < log 100 (the clamp has zero slope above).
  void accumulate_scale_grad(const Tensor<T*, Space>& dalpha, std::int64_t b, std::int64_t nq) {
    const auto scale = logit_scale_.value();
    const auto grad = logit_scale_.grad();
    const auto alpha = alpha_;
    Kokkos::parallel_for(
        "hybridseq::layers::Attention::scale_grad", Kokkos::RangePolicy<Space>(0, 1), KOKKOS_LAMBDA(std::int64_t) {
          for (int h = 0; h < S.heads; ++h) {
            const int p = S.per_layer_scale ? 0 : h;
            if (!(scale(p) < T(4.605170185988091))) continue;
            T sum = 0;
            for (std::int64_t i = 0; i < b; ++i)
              for (std::int64_t t = 0; t < nq; ++t) sum += dalpha((i * S.heads + h) * nq + t);
            grad(p) += sum * alpha(h);
          }
        });
  }

  void append_to_cache(State& state, const Tensor<T***, Space>& qkv, std::int64_t p, std::int64_t t) const {
    const auto k = state.k, v = state.v;
    Kokkos::parallel_for(
        "hybridseq::layers::Attention::append_cache",
        Kokkos::MDRangePolicy<Space, Kokkos::Rank<3>>({0, 0, 0}, {std::int64_t(qkv.extent(0)), t, std::int64_t(S.kv_heads)}),
        KOKKOS_LAMBDA(std::int64_t i, std::int64_t j, std::int64_t h) {
          for (int d = 0; d < S.head_dim; ++d) {
            k(i, p + j, h, d) = qkv(i, j, (S.heads + h) * S.head_dim + d);
            v(i, p + j, h, d) = qkv(i, j, (S.heads + S.kv_heads + h) * S.head_dim + d);
          }
        });
  }

  void merge_and_project(core::Workspace<Space>& ws, Saved& s, Tensor<T***, Space> y) const {
    if constexpr (S.merge == HeadMerge::concat) {
      wo_.forward(ws, heads_as_rows(s.o), y, s.out_in);
    } else {
      const std::int64_t b = s.o.extent(0), tq = s.o.extent(1);
      s.merged = ws.template allocate<T***>("attention.merged", b, tq, S.head_dim);
      const auto o = s.o;
      const auto merged = s.merged;
      Kokkos::parallel_for(
          "hybridseq::layers::Attention::merge", Kokkos::MDRangePolicy<Space, Kokkos::Rank<2>>({0, 0}, {b, tq}),
          KOKKOS_LAMBDA(std::int64_t i, std::int64_t t) {
            for (int d = 0; d < S.head_dim; ++d) {
              T acc = 0;
              for (int h = 0; h < S.heads; ++h) acc += o(i, t, h, d);
              merged(i, t, d) = acc;
            }
          });
      wo_.forward(ws, s.merged, y, s.out_in);
    }
  }

  static Tensor<T***, Space> heads_as_rows(const Tensor<T****, Space>& o) {
    return Tensor<T***, Space>(o.data(), o.extent(0), o.extent(1), o.extent(2) * o.extent(3));
  }

  Options options_;
  Qkv wqkv_;
  Out wo_;
  core::Parameter<T, Space> logit_scale_;  // (H) or (1); empty for dot scores
  Tensor<T*, Space> alpha_;                // (H) score multiplier, refreshed from logit_scale_
};

}  // namespace hybridseq::layers
