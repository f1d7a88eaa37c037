#pragma once
/// \file
/// Exact per-layer costs of the ECP-paper family (ECP, PerceiverAR, Double / s-Split / Compressed
/// Double Attention) as functions of (batch, T, shape), constexpr:
///
///   visible_entries   (query, key) score pairs the scheme allows, per batch row and head —
///                     the work of an ideal kernel
///   visited_entries   pairs the tiled kernel computes (64 × 64 tiles; a partly visible tile
///                     counts whole)
///   flops             forward matrix-product FLOPs, 2 per multiply-add, over the batch:
///                     projections, scores and P·V on the visible entries, the FFN
///                     (norms, softmax and element-wise work are O(B·T·D) and not counted)
///   activation_bytes  workspace bytes the layer's forward keeps for backward, each tensor
///                     padded to the workspace's 64-byte alignment — equal to
///                     `Workspace::bytes_in_use()` after the block's forward (tested)
///
/// The paper's count for ECP is tiles of m × m: `ecp_paper_entries(n, m)` = 2nm − m²
/// = `visited_entries<EcpPairs<m>>(n, m)`, 12.1 % of n² at n = 4096, m = 256.

#include <algorithm>
#include <cstdint>

#include "../layers/attention_core.hpp"
#include "compressed_double_attention.hpp"
#include "double_attention.hpp"
#include "ecp.hpp"
#include "perceiver_ar.hpp"

namespace hybridseq::models::cost {

namespace attn = layers::schemes;

struct LayerCost {
  std::int64_t visible_entries = 0;
  std::int64_t visited_entries = 0;
  std::int64_t flops = 0;
  std::int64_t activation_bytes = 0;
};

/// Bytes the workspace hands out for `count` elements of type T (64-byte padding).
template <class T>
constexpr std::int64_t padded(std::int64_t count) {
  constexpr std::int64_t a = 64;  // core::Workspace<…>::alignment
  const std::int64_t bytes = count * std::int64_t(sizeof(T));
  return (bytes + a - 1) / a * a;
}

/// The ECP paper's score-entry count per head: 2nm − m² (m × m blocks, n = s·m).
constexpr std::int64_t ecp_paper_entries(std::int64_t n, std::int64_t m) {
  return 2 * n * m - m * m;
}

/// Fraction of the n² entries of full attention that ECP's blocks cover.
constexpr double ecp_score_fraction(std::int64_t n, std::int64_t m) {
  return double(ecp_paper_entries(n, m)) / (double(n) * double(n));
}

namespace detail {

/// Matrix-product FLOPs of an attention with fused QKV (rows R), H heads of Dh, n keys/rows
/// projected, tq query rows, `entries` visible pairs per (batch row, head), output to D.
constexpr std::int64_t attention_flops(std::int64_t b, std::int64_t n, std::int64_t tq, std::int64_t d,
                                       std::int64_t qkv_rows, std::int64_t heads, std::int64_t dh,
                                       std::int64_t entries) {
  return 2 * b * n * d * qkv_rows + 4 * b * heads * dh * entries + 2 * b * tq * heads * dh * d;
}
constexpr std::int64_t ffn_flops(std::int64_t b, std::int64_t t, std::int64_t d, std::int64_t f) {
  return 4 * b * t * d * f;
}

/// Saved by PreNormResidual<_, LayerNorm> (normed, mean, rstd) around a (b, t, d) input.
template <class T>
constexpr std::int64_t prenorm_bytes(std::int64_t b, std::int64_t t, std::int64_t d) {
  return padded<T>(b * t * d) + 2 * padded<T>(b * t);
}
/// The FFN residual: prenorm + the FFN's pre- and post-activation (b, t, f).
template <class T>
constexpr std::int64_t ffn_residual_bytes(std::int64_t b, std::int64_t t, std::int64_t d, std::int64_t f) {
  return prenorm_bytes<T>(b, t, d) + 2 * padded<T>(b * t * f);
}
/// layers::Attention (dot scores, concat heads): qkv, RoPE tables, o, lse.
template <class T>
constexpr std::int64_t attention_bytes(std::int64_t b, std::int64_t n, std::int64_t tq, std::int64_t qkv_rows,
                                       std::int64_t heads, std::int64_t dh, std::int64_t rotary) {
  return padded<T>(b * n * qkv_rows) + (rotary > 0 ? 2 * padded<T>(n * (rotary / 2)) : 0) +
         padded<T>(b * tq * heads * dh) + padded<T>(b * heads * tq);
}

}  // namespace detail

/// One ECP block (clean, or faithful with `layer` deciding RoPE) at batch b, length n.
template <EcpShape S, class T = float>
constexpr LayerCost ecp_layer(std::int64_t b, std::int64_t n, int layer = 0) {
  using Scheme = attn::EcpPairs<S.segment>;
  const std::int64_t d = S.d_model, h = S.heads, dh = S.head_dim, w = h * dh, m = S.segment;
  LayerCost c;
  c.visible_entries = attn::visible_entries<Scheme>(n);
  c.visited_entries = layers::visited_score_entries<Scheme>(n);
  const std::int64_t rows = S.faithful ? 2 * w : 3 * w;
  c.flops = detail::attention_flops(b, n, n, d, rows, h, dh, c.visible_entries) + detail::ffn_flops(b, n, d, S.ffn);
  std::int64_t bytes = padded<T>(b * n * d) /* block h */ + detail::prenorm_bytes<T>(b, n, d) +
                       detail::ffn_residual_bytes<T>(b, n, d, S.ffn);
  if constexpr (!S.faithful) {
    bytes += detail::attention_bytes<T>(b, n, n, rows, h, dh, S.rope ? dh : 0);
  } else {
    const std::int64_t m0 = std::min(n, m);
    const bool rotary = S.rope && layer == 0;
    bytes += 2 * padded<T>(b * n * w) + (rotary ? 2 * padded<T>(n * (dh / 2)) : 0) + padded<T>(b * n * w) +
             padded<T>(b * h * n) + padded<T>(b * m0 * w) + padded<T>(b * (n - m0) * w);
    if (n > m0) bytes += padded<T>(b * m0 * d) + padded<T>(b * (n - m0) * d);  // the two projections' outputs
  }
  c.activation_bytes = bytes;
  return c;
}

/// PerceiverAR layer `layer` (0: the cross-attention layer over n inputs; ≥ 1: a latent layer).
template <PerceiverArShape S, class T = float>
constexpr LayerCost perceiver_ar_layer(std::int64_t b, std::int64_t n, int layer) {
  const std::int64_t d = S.d_model, h = S.heads, dh = S.head_dim, m = S.latents, r = 3 * h * dh;
  const std::int64_t rotary = S.rope ? dh : 0;
  LayerCost c;
  if (layer == 0) {
    using Scheme = attn::PerceiverCross<S.latents>;
    c.visible_entries = attn::visible_entries<Scheme>(n);
    c.visited_entries = layers::visited_score_entries<Scheme>(n);
    c.flops = detail::attention_flops(b, n, m, d, r, h, dh, c.visible_entries) + detail::ffn_flops(b, m, d, S.ffn);
    c.activation_bytes = detail::prenorm_bytes<T>(b, n, d) + detail::attention_bytes<T>(b, n, m, r, h, dh, rotary) +
                         padded<T>(b * m * d) /* h */ + detail::ffn_residual_bytes<T>(b, m, d, S.ffn);
  } else {
    using Scheme = attn::Causal;
    c.visible_entries = attn::visible_entries<Scheme>(m);
    c.visited_entries = layers::visited_score_entries<Scheme>(m);
    c.flops = detail::attention_flops(b, m, m, d, r, h, dh, c.visible_entries) + detail::ffn_flops(b, m, d, S.ffn);
    c.activation_bytes = padded<T>(b * m * d) + detail::prenorm_bytes<T>(b, m, d) +
                         detail::attention_bytes<T>(b, m, m, r, h, dh, rotary) +
                         detail::ffn_residual_bytes<T>(b, m, d, S.ffn);
  }
  return c;
}

/// One Double Attention (split = 0) or s-Split (split = S) layer over n = history + M.
template <DoubleAttentionShape S, class T = float>
constexpr LayerCost double_attention_layer(std::int64_t b, std::int64_t n) {
  using History = models::detail::double_history_scheme<S>;
  using Latent = attn::PerceiverCross<S.latents>;
  const std::int64_t d = S.d_model, h = S.heads, dh = S.head_dim, m = S.latents, r = 3 * h * dh, hist = n - m;
  LayerCost c;
  c.visible_entries = (hist > 0 ? attn::visible_entries<History>(hist) : 0) + attn::visible_entries<Latent>(n);
  c.visited_entries =
      (hist > 0 ? layers::visited_score_entries<History>(hist) : 0) + layers::visited_score_entries<Latent>(n);
  c.flops = detail::attention_flops(b, n, n, d, r, h, dh, c.visible_entries) + detail::ffn_flops(b, n, d, S.ffn);
  c.activation_bytes = padded<T>(b * n * d) + detail::prenorm_bytes<T>(b, n, d) + padded<T>(b * n * r) +
                       (S.rope ? 2 * padded<T>(n * (dh / 2)) : 0) + padded<T>(b * n * h * dh) +
                       padded<T>(b * h * hist) + padded<T>(b * h * m) + detail::ffn_residual_bytes<T>(b, n, d, S.ffn);
  return c;
}

/// Compressed Double Attention layer `layer` at batch b (n = h + M is fixed by the shape).
/// Layer 0: Double Attention over h + M, then the learned Linear(h → c) along time on the
/// history rows of the heads' output and of the residual stream (2·b·c·h·(H·Dh + D) FLOPs),
/// W_o and the FFN on the c + M rows. Later layers: Double Attention over c + M rows.
template <CompressedDoubleShape S, class T = float>
constexpr LayerCost compressed_double_layer(std::int64_t b, int layer) {
  constexpr int c = models::detail::compressed_rows<S>;
  if (layer > 0)
    return double_attention_layer<DoubleAttentionShape{S.d_model, S.heads, S.head_dim, S.latents, S.ffn, 0, S.rope}, T>(
        b, c + S.latents);
  using Latent = attn::PerceiverCross<S.latents>;
  const std::int64_t d = S.d_model, h = S.heads, dh = S.head_dim, w = h * dh, m = S.latents, r = 3 * w,
                     hist = S.history, n = hist + m, out = c + m;
  LayerCost k;
  k.visible_entries = attn::visible_entries<attn::Bidirectional>(hist) + attn::visible_entries<Latent>(n);
  k.visited_entries =
      layers::visited_score_entries<attn::Bidirectional>(hist) + layers::visited_score_entries<Latent>(n);
  k.flops = detail::attention_flops(b, n, out, d, r, h, dh, k.visible_entries) + 2 * b * c * hist * (w + d) +
            detail::ffn_flops(b, out, d, S.ffn);
  k.activation_bytes = detail::prenorm_bytes<T>(b, n, d) + padded<T>(b * n * r) +
                       (S.rope ? 2 * padded<T>(n * (dh / 2)) : 0) + padded<T>(b * n * w) + padded<T>(b * h * hist) +
                       padded<T>(b * h * m) /* o, lse */ + padded<T>(b * out * w) /* [o_c ; o_l] */ +
                       padded<T>(b * out * d) /* z */ + detail::ffn_residual_bytes<T>(b, out, d, S.ffn);
  return k;
}

}  // namespace hybridseq::models::cost
