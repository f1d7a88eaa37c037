#pragma once
// One (B = 1, T, H, Dh) attention problem for the kernel benchmarks: Q, K, V packed like the
// fused projection's rows, O, LSE and the gradients, filled with N(0, 1).
#include <cstdint>

#include <hybridseq/core.hpp>
#include <hybridseq/kernels/attention/attention.hpp>

namespace hybridseq::bench {

template <class Space>
struct AttentionProblem {
  static constexpr int heads = 8, head_dim = 64;
  std::int64_t n;
  Tensor<float*, Space> qkv, o, lse, d_o, dqkv, delta, alpha;

  explicit AttentionProblem(std::int64_t t)
      : n(t),
        qkv("qkv", t * row()),
        o("o", t * heads * head_dim),
        lse("lse", heads * t),
        d_o("do", t * heads * head_dim),
        dqkv("dqkv", t * row()),
        delta("delta", heads * t),
        alpha("alpha", heads) {
    core::fill(Space{}, qkv, core::Init::normal(1.0), 1, 1);
    core::fill(Space{}, d_o, core::Init::normal(1.0), 1, 2);
    Kokkos::deep_copy(alpha, 0.125f);
  }
  static constexpr std::int64_t row() { return 3 * heads * head_dim; }

  /// Kernel arguments for `keys` ≤ n keys and the last `queries` of them as queries (a
  /// scheme's query_count: all for self-attention, M for PerceiverAR's cross-attention).
  kernels::attention::AttentionArgs<float> args(std::int64_t keys, std::int64_t queries) const {
    const std::int64_t q0 = keys - queries, w = heads * head_dim;
    return {{qkv.data() + q0 * row(), keys * row(), row(), head_dim},
            {qkv.data() + w, keys * row(), row(), head_dim},
            {qkv.data() + 2 * w, keys * row(), row(), head_dim},
            {o.data(), queries * w, w, head_dim},
            lse.data(),
            alpha.data(),
            1,
            queries,
            keys,
            q0,
            heads,
            heads,
            head_dim};
  }
  kernels::attention::AttentionArgs<float> args() const { return args(n, n); }

  kernels::attention::AttentionGrads<float> grads() const {
    const std::int64_t w = heads * head_dim;
    return {{d_o.data(), n * w, w, head_dim},
            {dqkv.data(), n * row(), row(), head_dim},
            {dqkv.data() + w, n * row(), row(), head_dim},
            {dqkv.data() + 2 * w, n * row(), row(), head_dim},
            delta.data(),
            nullptr};
  }
};

}  // namespace hybridseq::bench
