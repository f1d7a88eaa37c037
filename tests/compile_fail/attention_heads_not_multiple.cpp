// expect: Attention: n_heads must be a multiple of n_kv_heads
// Grouped-query attention with 6 query heads over 4 KV heads (6 % 4 != 0).
#include <hybridseq/layers/attention.hpp>

using namespace hybridseq;

using Attn = layers::Attention<layers::AttentionShape{.d_model = 48, .heads = 6, .kv_heads = 4, .head_dim = 8},
                               layers::schemes::Causal, float, DefaultSpace>;
static_assert(sizeof(Attn) > 0);
