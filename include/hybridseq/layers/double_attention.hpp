#pragma once
/// \file
/// Double Attention (papers.md §2; reference code MetaMain/ECPTransformer,
/// `DoubleAttentionTransformer.py`, `sSplitAttentionTransformer.py`): one Q/K/V projection,
/// two attention passes over it — history queries t < h under `HistoryScheme` over the history
/// keys, latent queries t ≥ h under `PerceiverCross<M>` over all n keys — and one output
/// projection of their outputs concatenated along time. Both passes run the attention core.

#include <cmath>
#include <cstdint>
#include <string_view>

#include "../core/check.hpp"
#include "../core/error.hpp"
#include "../core/parameter.hpp"
#include "../core/workspace.hpp"
#include "attention_core.hpp"
#include "linear.hpp"

namespace hybridseq::layers {

/// The two-attention branch: history queries under `HistoryScheme` over the history keys,
/// latent queries under `PerceiverCross<M>` over all keys, one fused QKV projection and one
/// output projection. Dot-product scores, concatenated heads (GQA allowed).
///
/// Shapes: x (B, n, D) → y (B, n, D), n ≥ M; the history length n − M must suit HistoryScheme.
template <AttentionShape A, class HistoryScheme, int M, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class DoubleAttention {
  static_assert(M >= 1, "hybridseq::layers::DoubleAttention: at least one latent");
  static_assert(A.score == Score::dot && A.merge == HeadMerge::concat,
                "hybridseq::layers::DoubleAttention: dot-product scores and concatenated heads only");
  static constexpr int H = A.heads, Hkv = A.kv_heads, Dh = A.head_dim;
  static constexpr int R = (H + 2 * Hkv) * Dh;  // fused QKV row
  using Core = AttentionCore<A, T, Space>;
  using Qkv = Linear<LinearShape{A.d_model, R, A.qkv_bias}, T, Space>;
  using Out = Linear<LinearShape{H * Dh, A.d_model, A.out_bias}, T, Space>;
  using LatentScheme = schemes::PerceiverCross<M>;
  using Heads4 = typename Core::Heads4;

 public:
  using scalar_type = T;
  using execution_space = Space;
  using history_scheme = HistoryScheme;
  static constexpr int d_in = A.d_model;
  static constexpr int d_out = A.d_model;
  static constexpr int latents = M;

  using Options = AttentionOptions;  // max_cache unused: Double Attention does not decode
  struct Saved {
    typename Qkv::Saved qkv_in;
    Tensor<T***, Space> qkv;  // (B, n, R) after RoPE
    typename Core::Positions positions;
    Tensor<T***, Space> o;                      // (B, n, H·Dh): history rows then latent rows
    Tensor<T*, Space> lse_history, lse_latent;  // (B·H·h), (B·H·M)
    typename Out::Saved out_in;
    core::DropoutMask dropout_history{}, dropout_latent{};  // on each pass's probabilities
  };

  explicit DoubleAttention(const Options& o = {})
      : core_(o, "hybridseq::layers::DoubleAttention"), wqkv_({o.init_std}), wo_({o.out_init_std}) {}

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& s) const {
    constexpr const char* api = "hybridseq::layers::DoubleAttention::forward";
    core::check_same_shape(api, "y", y, "x", x);
    attend(ws, x, s);
    wo_.forward(ws, s.o, y, s.out_in);
  }

  void backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    constexpr const char* api = "hybridseq::layers::DoubleAttention::backward";
    const std::int64_t b = s.qkv.extent(0), n = s.qkv.extent(1);
    core::check_shape(api, "dy", dy, core::dim(b), core::dim(n), core::dim(A.d_model));
    core::check_same_shape(api, "dx", dx, "dy", dy);
    core::WorkspaceScope scope(ws);
    auto d_o = ws.template allocate_zeroed<T***>("double_attention.do", b, n, H * Dh);
    wo_.backward(ws, s.out_in, dy, d_o);
    attend_backward(ws, s, d_o, dx);
  }

  /// The two attentions without the output projection: fills s.qkv and s.o (B, n, H·Dh),
  /// history rows then latent rows (s.out_in is left to the caller's projection).
  void attend(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Saved& s) const {
    constexpr const char* api = "hybridseq::layers::DoubleAttention::forward";
    core::check_shape(api, "x", x, core::B, core::T, core::dim(A.d_model));
    const std::int64_t b = x.extent(0), n = x.extent(1);
    check_length(api, n);
    const std::int64_t h = n - M;
    s.qkv = ws.template allocate<T***>("double_attention.qkv", b, n, R);
    wqkv_.forward(ws, x, s.qkv, s.qkv_in);
    core_.position(ws, heads_of(s.qkv), H + Hkv, 0, s.positions);
    s.o = ws.template allocate<T***>("double_attention.o", b, n, H * Dh);
    s.lse_history = ws.template allocate<T*>("double_attention.lse_history", b * H * h);
    s.lse_latent = ws.template allocate<T*>("double_attention.lse_latent", b * H * M);
    if (h > 0) {
      s.dropout_history = core_.draw_dropout(ws);
      core_.template attend<HistoryScheme>(history_rows(s));
    }
    s.dropout_latent = core_.draw_dropout(ws);
    core_.template attend<LatentScheme>(latent_rows(s));
  }

  /// Backward of `attend`: d_o (B, n, H·Dh) → dx += …, W_qkv gradients.
  void attend_backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> d_o,
                       Tensor<T***, Space> dx) {
    const std::int64_t b = s.qkv.extent(0), n = s.qkv.extent(1), h = n - M;
    const Space exec{};
    core::WorkspaceScope scope(ws);
    // Latent queries: dQ rows h.., dK and dV of every key (overwritten); dQ rows < h stay 0.
    auto dqkv = ws.template allocate_zeroed<T***>("double_attention.dqkv", b, n, R);
    core_.template attend_backward<LatentScheme>(
        ws, latent_rows(s),
        {rows<const T>(d_o.data() + h * H * Dh, n, H * Dh), rows<T>(dqkv.data() + h * R, n, R),
         rows<T>(dqkv.data() + H * Dh, n, R), rows<T>(dqkv.data() + (H + Hkv) * Dh, n, R)});
    if (h > 0) {
      // History queries into their own buffer, then added: their dK, dV overlap the latents'.
      auto dh = ws.template allocate_zeroed<T***>("double_attention.dqkv_history", b, h, R);
      core_.template attend_backward<HistoryScheme>(
          ws, history_rows(s),
          {rows<const T>(d_o.data(), n, H * Dh), rows<T>(dh.data(), h, R), rows<T>(dh.data() + H * Dh, h, R),
           rows<T>(dh.data() + (H + Hkv) * Dh, h, R)});
      Kokkos::parallel_for(
          "hybridseq::models::DoubleAttention::add_history",
          Kokkos::MDRangePolicy<Space, Kokkos::Rank<3>>(exec, {0, 0, 0}, {b, h, std::int64_t(R)}),
          KOKKOS_LAMBDA(std::int64_t i, std::int64_t t, std::int64_t c) { dqkv(i, t, c) += dh(i, t, c); });
    }
    core_.position_backward(heads_of(dqkv), heads_of(s.qkv), H + Hkv, s.positions);
    wqkv_.backward(ws, s.qkv_in, dqkv, dx);
  }

  /// Arena use of `attend` (kept: qkv, positions, o, both lse) and of `attend_backward`
  /// (dqkv, then the latent pass's scratch or the history's buffer and scratch).
  core::Footprint attend_workspace(const core::WorkspaceQuery& q) const {
    const std::int64_t b = q.batch, n = q.time, h = n - M;
    const std::size_t qkv = core::padded_bytes<T>(b * n * R);
    const std::size_t history =
        h > 0 ? core::padded_bytes<T>(b * h * R) + Core::attend_backward_bytes(b, h) : std::size_t{0};
    return core::Footprint::kept(qkv + core_.position_bytes(b, n, H + Hkv) + core::padded_bytes<T>(b * n * H * Dh) +
                                     core::padded_bytes<T>(b * H * h) + core::padded_bytes<T>(b * H * M),
                                 qkv + std::max(Core::attend_backward_bytes(b, M), history));
  }
  /// Arena use: `attend`'s; backward holds d_o above attend_backward's.
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    const core::Footprint a = attend_workspace(q);
    return core::Footprint::kept(a.saved, core::padded_bytes<T>(q.batch * q.time * H * Dh) + a.backward);
  }

  /// The output projection alone: y (B, t, D) = o (B, t, H·Dh) W_oᵀ (+ b), any t, and its
  /// backward (d_o += …, W_o gradients).
  void project(core::Workspace<Space>& ws, Tensor<const T***, Space> o, Tensor<T***, Space> y,
               typename Out::Saved& saved) const {
    wo_.forward(ws, o, y, saved);
  }
  void project_backward(core::Workspace<Space>& ws, const typename Out::Saved& saved, Tensor<const T***, Space> dy,
                        Tensor<T***, Space> d_o) {
    wo_.backward(ws, saved, dy, d_o);
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("wqkv", wqkv_);
    visit("wo", wo_);
  }

  /// n ≥ M, and the history n − M acceptable to the history scheme.
  static void check_length(std::string_view api, std::int64_t n) {
    if (n < M) fail<config_error>(api, "the sequence length T = ", n, " is shorter than the latents M = ", M);
    if constexpr (requires { HistoryScheme::segment; }) {
      if ((n - M) % HistoryScheme::segment != 0)
        fail<config_error>(api, "the history T − M = ", n - M, " (T = ", n, ", M = ", M,
                           ") must be a multiple of the s-Split segment length ", HistoryScheme::segment);
    }
  }

 private:
  template <class U>
  static HeadRows<U> rows(U* data, std::int64_t time, std::int64_t row) {
    return head_rows(data, time, row, Dh);
  }
  static Heads4 heads_of(const Tensor<T***, Space>& qkv) {
    return Heads4(qkv.data(), qkv.extent(0), qkv.extent(1), H + 2 * Hkv, Dh);
  }

  /// History queries t < h over the history keys.
  AttendRows<T> history_rows(const Saved& s) const {
    const std::int64_t b = s.qkv.extent(0), n = s.qkv.extent(1), h = n - M;
    return {rows<const T>(s.qkv.data(), n, R),
            rows<const T>(s.qkv.data() + H * Dh, n, R),
            rows<const T>(s.qkv.data() + (H + Hkv) * Dh, n, R),
            rows<T>(s.o.data(), n, H * Dh),
            s.lse_history.data(),
            b,
            h,
            h,
            0,
            s.dropout_history};
  }
  /// Latent queries t ≥ h over every key.
  AttendRows<T> latent_rows(const Saved& s) const {
    const std::int64_t b = s.qkv.extent(0), n = s.qkv.extent(1), h = n - M;
    return {rows<const T>(s.qkv.data() + h * R, n, R),
            rows<const T>(s.qkv.data() + H * Dh, n, R),
            rows<const T>(s.qkv.data() + (H + Hkv) * Dh, n, R),
            rows<T>(s.o.data() + h * H * Dh, n, H * Dh),
            s.lse_latent.data(),
            b,
            M,
            n,
            h,
            s.dropout_latent};
  }

  Core core_;
  Qkv wqkv_;
  Out wo_;
};

}  // namespace hybridseq::layers
