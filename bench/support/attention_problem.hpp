#pragma once
// One (B, T, H, Dh) attention problem for the kernel benchmarks: Q, K, V packed like the
// fused projection's rows, O, LSE and the gradients, filled with N(0, 1). The host benchmarks
// use B = 1, H = 8, Dh = 64; the device benchmarks GPU-sized batches, heads and head dims.
// The buffers are on huge pages where the host has them, as a model's are (they come from its
// Workspace).
#include <cmath>
#include <cstdint>
#include <string>

#include <hybridseq/core.hpp>
#include <hybridseq/kernels/attention/attention.hpp>

namespace hybridseq::bench {

template <class Space>
struct AttentionProblem {
  static constexpr int default_heads = 8, default_head_dim = 64;
  std::int64_t batch, n;
  int heads, head_dim;
  Tensor<float*, Space> qkv, o, lse, d_o, dqkv, delta, alpha;

  explicit AttentionProblem(std::int64_t t, std::int64_t b = 1, int h = default_heads, int dh = default_head_dim)
      : batch(b),
        n(t),
        heads(h),
        head_dim(dh),
        qkv(buffer("qkv", b * t * row())),
        o(buffer("o", b * t * h * head_dim)),
        lse("lse", b * h * t),
        d_o(buffer("do", b * t * h * head_dim)),
        dqkv(buffer("dqkv", b * t * row())),
        delta("delta", b * h * t),
        alpha("alpha", h) {
    core::fill(Space{}, qkv, core::Init::normal(1.0), 1, 1);
    core::fill(Space{}, d_o, core::Init::normal(1.0), 1, 2);
    Kokkos::deep_copy(alpha, float(1 / std::sqrt(double(dh))));  // the usual 1/√Dh
  }
  std::int64_t row() const { return 3 * std::int64_t(heads) * head_dim; }

  /// A zeroed buffer, advised onto huge pages before its first touch.
  static Tensor<float*, Space> buffer(const char* label, std::int64_t count) {
    const Tensor<float*, Space> t(Kokkos::view_alloc(std::string(label), Kokkos::WithoutInitializing), count);
    core::advise_huge_pages(t);
    Kokkos::deep_copy(t, 0.0f);
    return t;
  }

  /// Kernel arguments for `keys` ≤ n keys and the last `queries` of them as queries (a
  /// scheme's query_count: all for self-attention, M for PerceiverAR's cross-attention).
  kernels::attention::AttentionArgs<float> args(std::int64_t keys, std::int64_t queries) const {
    const std::int64_t q0 = keys - queries, w = std::int64_t(heads) * head_dim;
    return {{qkv.data() + q0 * row(), n * row(), row(), head_dim},
            {qkv.data() + w, n * row(), row(), head_dim},
            {qkv.data() + 2 * w, n * row(), row(), head_dim},
            {o.data(), n * w, w, head_dim},
            lse.data(),
            alpha.data(),
            batch,
            queries,
            keys,
            q0,
            heads,
            heads,
            head_dim};
  }
  kernels::attention::AttentionArgs<float> args() const { return args(n, n); }

  kernels::attention::AttentionGrads<float> grads() const {
    const std::int64_t w = std::int64_t(heads) * head_dim;
    return {{d_o.data(), n * w, w, head_dim},
            {dqkv.data(), n * row(), row(), head_dim},
            {dqkv.data() + w, n * row(), row(), head_dim},
            {dqkv.data() + 2 * w, n * row(), row(), head_dim},
            delta.data(),
            nullptr};
  }
};

}  // namespace hybridseq::bench
