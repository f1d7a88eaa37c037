#pragma once
/// \file
/// The attention core: what every attention layer does between its projections.
///
///   heads ← RoPE(heads) at positions offset..       (the q and k heads; RotaryEmbedding)
///   cosine scores: q, k ← q/‖q‖, k/‖k‖;  α_h = exp(min(s_h, log 100))   (s_h learnable)
///   dot scores:    α_h = 1/√Dh
///   o = dropout(softmax_{Scheme mask}(α q kᵀ)) v      (the tiled kernel, any segment scheme;
///                                                      bf16 products if the options ask)
///
/// with the matching backward. Layers differ only in how they project (fused QKV, a shared K/V
/// projection), which rows attend under which scheme (one self-attention, Double Attention's
/// history and latent passes, a KV cache or ECP's ring) and how they merge heads and project
/// out; all of them run this one core, so porting or speeding up attention is done here once.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../core/parallel.hpp"
#include "../core/parameter.hpp"
#include "../core/workspace.hpp"
#include "../kernels/attention/attention.hpp"
#include "rope.hpp"

namespace hybridseq::layers {

/// The segment schemes an attention layer takes (causal, sliding window, ECP pairs, …).
namespace schemes = kernels::attention;

enum class Score { dot, cosine };
enum class HeadMerge { concat, sum };

/// Compile-time shape of an attention layer.
struct AttentionShape {
  int d_model;
  int heads;
  int kv_heads;
  int head_dim;
  int rotary_dim = 0;  // 0: no RoPE; head_dim: full; see rotary_dim_for()
  Score score = Score::dot;
  bool per_layer_scale = false;  // cosine: one temperature for all heads instead of one per head
  bool qkv_bias = false;
  bool out_bias = false;
  HeadMerge merge = HeadMerge::concat;
};

/// Runtime options of every attention layer (one type, so that one call reaches each
/// attention of a model: core::for_each_option<layers::AttentionOptions>(model_options, f)).
struct AttentionOptions {
  double init_std = 0.02;
  double out_init_std = 0.02;
  double rope_base = 10000.0;
  std::int64_t max_cache = 4096;  // decoding: KV-cache capacity per sequence
  double dropout = 0;             // on the attention probabilities, in training passes
  /// The attention products: native (in the layer's scalar type) or bf16 (operands rounded to
  /// bf16, fp32 accumulation: tensor cores on a GPU, forward and backward, head dims up to 128;
  /// float layers only). On
  /// host spaces bf16 runs an emulation of the tensor cores that is far slower than native: it
  /// is there to compare against.
  kernels::attention::Precision precision = kernels::attention::Precision::native;
};

/// The hint every "KV cache full" error gives: how to raise the capacity from any model.
inline constexpr const char* raise_max_cache_hint =
    "raise AttentionOptions::max_cache, e.g. for every attention of a model: "
    "hybridseq::core::for_each_option<hybridseq::layers::AttentionOptions>(options, [](auto& a) { a.max_cache = n; })";

/// Score entries the tiled kernel computes for n positions under Scheme: whole tiles it
/// cannot skip (≥ schemes::visible_entries<Scheme>(n), the entries the mask lets through).
template <class Scheme>
constexpr std::int64_t visited_score_entries(std::int64_t n) {
  return schemes::visited_entries<Scheme>(n, kernels::attention::tile_q);
}

/// Rows of a (B, T, heads, Dh) buffer with any strides.
template <class U>
using HeadRows = kernels::attention::HeadRows<U>;

/// The heads of a buffer whose `time` rows are `row` values wide, from `data` on.
template <class U>
HeadRows<U> head_rows(U* data, std::int64_t time, std::int64_t row, int head_dim) {
  return {data, time * row, row, head_dim};
}

/// One attention pass: queries q (B, tq, H, Dh) at positions q0 .. q0 + tq − 1 of a sequence
/// whose keys and values k, v (B, tk, Hkv, Dh) are positions 0 .. tk − 1; o (B, tq, H, Dh)
/// and the log-sum-exp of each query row, lse (B·H·tq), are written.
template <class T>
struct AttendRows {
  HeadRows<const T> q, k, v;
  HeadRows<T> o;
  T* lse = nullptr;
  std::int64_t batch = 0, tq = 0, tk = 0, q0 = 0;
  core::DropoutMask dropout{};  // on the probabilities (AttentionCore::draw_dropout); backward needs the same
};

/// Gradients of one pass: dq, dk, dv are overwritten from d_o (B, tq, H, Dh).
template <class T>
struct AttendGrads {
  HeadRows<const T> d_o;
  HeadRows<T> dq, dk, dv;
};

namespace detail {
// x̂ = x / max(‖x‖, ε) per head row, saving 1/max(‖x‖, ε).
template <class T, class Space>
struct NormalizeHeads {
  typename RotaryEmbedding<T, Space>::Heads4 x;
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
  typename RotaryEmbedding<T, Space>::ConstHeads4 xhat;
  typename RotaryEmbedding<T, Space>::Heads4 dx;
  Tensor<const T***, Space> inv_norm;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t b, std::int64_t t, std::int64_t h) const {
    T dot = 0;
    for (std::int64_t d = 0; d < std::int64_t(dx.extent(3)); ++d) dot += xhat(b, t, h, d) * dx(b, t, h, d);
    const T inv = inv_norm(b, t, h);
    for (std::int64_t d = 0; d < std::int64_t(dx.extent(3)); ++d)
      dx(b, t, h, d) = (dx(b, t, h, d) - xhat(b, t, h, d) * dot) * inv;
  }
};

inline constexpr double log_100 = 4.605170185988091;  // the cosine temperature's clamp

// Rows t + count → t of a (B, capacity, heads, Dh) cache.
template <class T, class Space>
struct ShiftRows {
  Tensor<T****, Space> cache;
  std::int64_t count;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t b, std::int64_t t, std::int64_t h) const {
    for (std::int64_t d = 0; d < std::int64_t(cache.extent(3)); ++d) cache(b, t, h, d) = cache(b, t + count, h, d);
  }
};

// α_h = exp(min(s_h, log 100)), s shared by all heads when per_layer.
template <class T, class Space>
struct CosineAlpha {
  Tensor<const T*, Space> scale;
  Tensor<T*, Space> alpha;
  bool per_layer;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t h) const {
    const T sh = scale(per_layer ? 0 : h);
    alpha(h) = math::exp(sh < T(log_100) ? sh : T(log_100));
  }
};

// ∂L/∂s_p += Σ_{b, tiles} ∂L/∂α_h · α_h over the heads h of p, while s_p < log 100.
template <class T, class Space>
struct CosineScaleGrad {
  Tensor<const T*, Space> scale, dalpha, alpha;
  Tensor<T*, Space> grad;
  int heads;
  bool per_layer;
  std::int64_t batch, tiles;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t) const {
    for (int h = 0; h < heads; ++h) {
      const int p = per_layer ? 0 : h;
      if (!(scale(p) < T(log_100))) continue;
      T sum = 0;
      for (std::int64_t i = 0; i < batch; ++i)
        for (std::int64_t t = 0; t < tiles; ++t) sum += dalpha((i * heads + h) * tiles + t);
      grad(p) += sum * alpha(h);
    }
  }
};
}  // namespace detail

/// Moves cache rows [count, count + kept) to [0, kept): a cache that drops its oldest
/// `count` positions. Launched on row ranges no longer than `count`, so that no launch reads
/// a row another of its threads writes.
template <class T, class Space>
void drop_oldest_rows(const Tensor<T****, Space>& cache, std::int64_t kept, std::int64_t count) {
  for (std::int64_t t0 = 0; count > 0 && t0 < kept; t0 += count)
    Kokkos::parallel_for(
        "hybridseq::layers::drop_oldest_rows",
        Kokkos::MDRangePolicy<Space, Kokkos::Rank<3>>(
            {0, t0, 0}, {std::int64_t(cache.extent(0)), std::min(kept, t0 + count), std::int64_t(cache.extent(2))}),
        detail::ShiftRows<T, Space>{cache, count});
}

template <AttentionShape S, Scalar T, ExecutionSpace Space>
class AttentionCore {
  static_assert(S.heads > 0 && S.kv_heads > 0 && S.head_dim > 0 && S.d_model > 0,
                "hybridseq::layers::Attention: widths and head counts must be positive");
  static_assert(S.heads % S.kv_heads == 0,
                "hybridseq::layers::Attention: n_heads must be a multiple of n_kv_heads (grouped-query attention)");
  static_assert(S.rotary_dim % 2 == 0 && S.rotary_dim >= 0 && S.rotary_dim <= S.head_dim,
                "hybridseq::layers::Attention: rotary_dim must be even and within [0, head_dim]");

 public:
  using Rope = RotaryEmbedding<T, Space>;
  using Heads4 = typename Rope::Heads4;

  /// What positioning saves for backward.
  struct Positions {
    typename Rope::Table rope;     // (T, rotary/2)
    Tensor<T***, Space> inv_norm;  // (B, T, rotated heads) cosine only
  };

  /// `api` names the owning layer in option errors.
  AttentionCore(const AttentionOptions& o, const char* api)
      : rope_(S.rotary_dim, o.rope_base, api),
        logit_scale_({S.score == Score::cosine ? (S.per_layer_scale ? 1 : S.heads) : 0}, core::Role::scalar,
                     core::Init::constant(std::log(10.0))),
        alpha_("hybridseq::layers::AttentionCore::alpha", S.heads),
        dropout_(o.dropout),
        precision_(o.precision) {
    core::check_dropout(api, "AttentionOptions::dropout", o.dropout);
    if (o.precision == kernels::attention::Precision::bf16 && !std::is_same_v<T, float>)
      fail<value_error>(api, "AttentionOptions::precision", " bf16 needs a float layer, got ", sizeof(T),
                        "-byte scalars");
  }

  const Rope& rope() const { return rope_; }

  /// RoPE at positions offset.. on the first `rotated` heads of `heads` (B, T, ·, Dh), then,
  /// for cosine scores, their normalisation.
  void position(core::Workspace<Space>& ws, const Heads4& heads, int rotated, std::int64_t offset, Positions& p) const {
    if constexpr (S.rotary_dim > 0) {
      p.rope = rope_.table(ws, heads.extent(1), offset);
      rope_.rotate(heads, rotated, p.rope);
    }
    if constexpr (S.score == Score::cosine) {
      const std::int64_t b = heads.extent(0), n = heads.extent(1);
      p.inv_norm = ws.template allocate<T***>("attention.inv_norm", b, n, rotated);
      Kokkos::parallel_for("hybridseq::layers::AttentionCore::normalize",
                           Kokkos::MDRangePolicy<Space, Kokkos::Rank<3>>({0, 0, 0}, {b, n, std::int64_t(rotated)}),
                           detail::NormalizeHeads<T, Space>{heads, p.inv_norm});
    }
  }

  /// Arena use of `position` on (b, n) rows of `rotated` heads (kept): the RoPE table and,
  /// for cosine scores, the inverse norms.
  std::size_t position_bytes(std::int64_t b, std::int64_t n, int rotated) const {
    std::size_t bytes = 0;
    if constexpr (S.rotary_dim > 0) bytes += rope_.table_bytes(n);
    if constexpr (S.score == Score::cosine) bytes += core::padded_bytes<T>(b * n * rotated);
    return bytes;
  }

  /// Arena use of `attend_backward` for a pass of tq queries (released): delta and, for
  /// cosine scores, the temperature's per-tile partials.
  static std::size_t attend_backward_bytes(std::int64_t b, std::int64_t tq) {
    std::size_t bytes = core::padded_bytes<T>(b * S.heads * tq);
    if constexpr (S.score == Score::cosine)
      bytes += core::padded_bytes<T>(b * S.heads * kernels::attention::query_tiles(tq));
    return bytes;
  }

  /// Backward of `position`, in place on the gradients `dheads` of the positioned `heads`.
  void position_backward(const Heads4& dheads, const Heads4& heads, int rotated, const Positions& p) const {
    if constexpr (S.score == Score::cosine) {
      const std::int64_t b = heads.extent(0), n = heads.extent(1);
      Kokkos::parallel_for("hybridseq::layers::AttentionCore::normalize_backward",
                           Kokkos::MDRangePolicy<Space, Kokkos::Rank<3>>({0, 0, 0}, {b, n, std::int64_t(rotated)}),
                           detail::NormalizeHeadsBackward<T, Space>{heads, dheads, p.inv_norm});
    }
    if constexpr (S.rotary_dim > 0) rope_.unrotate(dheads, rotated, p.rope);
  }

  /// The first `rows` keys of every sequence of a cache (B, capacity, Hkv, Dh), positioned
  /// for positions from.., re-positioned for to.. (a cache whose rows move; normalisation
  /// commutes with the rotation).
  void reposition(core::Workspace<Space>& ws, const Heads4& cache, std::int64_t rows, std::int64_t from,
                  std::int64_t to) const {
    if constexpr (S.rotary_dim > 0) rope_.move(ws, cache, rows, from, to);
  }

  /// The probability mask of one pass: the next dropout site of a training pass (kept in
  /// the layer's Saved for backward), the identity otherwise.
  core::DropoutMask draw_dropout(core::Workspace<Space>& ws) const { return ws.dropout().next(dropout_); }

  /// o and lse of one pass under Scheme.
  template <class Scheme>
  void attend(const AttendRows<T>& r) const {
    refresh_alpha();
    kernels::attention::forward(Space{}, args(r), Scheme::band, precision_);
  }

  /// dq, dk, dv of one pass (overwritten), and the temperature's gradient (cosine).
  template <class Scheme>
  void attend_backward(core::Workspace<Space>& ws, const AttendRows<T>& r, const AttendGrads<T>& g) {
    core::WorkspaceScope scope(ws);
    auto delta = ws.template allocate<T*>("attention.delta", r.batch * S.heads * r.tq);
    const std::int64_t nq = kernels::attention::query_tiles(r.tq);
    Tensor<T*, Space> dalpha;
    if constexpr (S.score == Score::cosine)
      dalpha = ws.template allocate<T*>("attention.dalpha", r.batch * S.heads * nq);
    kernels::attention::backward(Space{}, args(r), {g.d_o, g.dq, g.dk, g.dv, delta.data(), dalpha.data()}, Scheme::band,
                                 precision_);
    Space().fence();
    if constexpr (S.score == Score::cosine) accumulate_scale_grad(dalpha, r.batch, nq);
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    if constexpr (S.score == Score::cosine) visit("logit_scale", logit_scale_);
  }

 private:
  kernels::attention::AttentionArgs<T> args(const AttendRows<T>& r) const {
    return {r.q,  r.k,  r.v,  r.o,     r.lse,      alpha_.data(), r.batch,
            r.tq, r.tk, r.q0, S.heads, S.kv_heads, S.head_dim,    r.dropout};
  }

  /// α_h: 1/√Dh for dot scores; exp(min(s_h, log 100)) for cosine scores.
  void refresh_alpha() const {
    if constexpr (S.score == Score::dot) {
      core::fill(alpha_, T(1) / std::sqrt(T(S.head_dim)));
    } else {
      core::parallel_for("hybridseq::layers::AttentionCore::alpha", Space{}, S.heads, 4,
                         detail::CosineAlpha<T, Space>{logit_scale_.value(), alpha_, S.per_layer_scale});
    }
    Space().fence();
  }

  /// ∂L/∂s_h = ∂L/∂α_h · α_h while s_h < log 100 (the clamp has zero slope above).
  void accumulate_scale_grad(const Tensor<T*, Space>& dalpha, std::int64_t b, std::int64_t nq) {
    Kokkos::parallel_for("hybridseq::layers::AttentionCore::scale_grad", Kokkos::RangePolicy<Space>(0, 1),
                         detail::CosineScaleGrad<T, Space>{logit_scale_.value(), dalpha, alpha_, logit_scale_.grad(),
                                                           S.heads, S.per_layer_scale, b, nq});
  }

  Rope rope_;
  core::Parameter<T, Space> logit_scale_;  // (H) or (1); empty for dot scores
  Tensor<T*, Space> alpha_;                // (H) score multiplier, refreshed from logit_scale_
  double dropout_;                         // probability-dropout rate of training passes
  kernels::attention::Precision precision_;
};

}  // namespace hybridseq::layers
