// Control for the compile_fail harness: a well-formed composition that MUST compile, so a
// passing fail-test cannot be explained by broken include paths or flags.
#include <hybridseq/compose/mixers.hpp>
#include <hybridseq/compose/parallel_block.hpp>
#include <hybridseq/compose/residual.hpp>
#include <hybridseq/compose/sequential_block.hpp>
#include <hybridseq/layers/attention.hpp>
#include <hybridseq/layers/linear.hpp>
#include <hybridseq/layers/rms_norm.hpp>

using namespace hybridseq;
using Space = DefaultSpace;
using L = layers::Linear<layers::LinearShape{16, 16, false}, float, Space>;
using Attn = layers::Attention<layers::AttentionShape{.d_model = 48, .heads = 6, .kv_heads = 3, .head_dim = 8},
                               layers::schemes::Causal, float, Space>;

using Parallel = compose::ParallelBlock<compose::SoftplusMixer<3, true, float, Space>, L, L, L>;
using Sequential = compose::SequentialBlock<layers::Linear<layers::LinearShape{16, 32}, float, Space>,
                                            layers::Linear<layers::LinearShape{32, 16}, float, Space>>;
using Residual = compose::PreNormResidual<Parallel, layers::RmsNorm<16, float, Space>>;

static_assert(Parallel::d_in == 16 && Parallel::d_out == 16 && Parallel::arity == 3);
static_assert(Sequential::d_in == 16 && Sequential::d_out == 16);
static_assert(Residual::d_in == 16 && sizeof(Residual) > 0);
static_assert(Attn::d_in == 48 && sizeof(Attn) > 0);

// Instantiate a member too, so the snippet exercises more than the class bodies.
void hybridseq_compile_ok_valid_parallel_block() {
  Parallel block;
  (void)block.mixing_weights();
}
