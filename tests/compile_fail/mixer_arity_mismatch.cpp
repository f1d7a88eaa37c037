// expect: ParallelBlock: the mixer's arity does not match the number of branches
// A two-way mixer over three branches.
#include <hybridseq/compose/mixers.hpp>
#include <hybridseq/compose/parallel_block.hpp>
#include <hybridseq/layers/linear.hpp>

using namespace hybridseq;
using Space = DefaultSpace;
using L = layers::Linear<layers::LinearShape{16, 16, false}, float, Space>;

using Block = compose::ParallelBlock<compose::SoftplusMixer<2, true, float, Space>, L, L, L>;
static_assert(sizeof(Block) > 0);
