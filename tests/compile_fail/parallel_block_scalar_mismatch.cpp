// expect: ParallelBlock: all branches must use the same scalar type
// A parallel block whose branches disagree on the scalar type (float vs double).
#include <hybridseq/compose/mixers.hpp>
#include <hybridseq/compose/parallel_block.hpp>
#include <hybridseq/layers/linear.hpp>

using namespace hybridseq;
using Space = DefaultSpace;

using Block = compose::ParallelBlock<compose::SoftplusMixer<2, true, float, Space>,
                                     layers::Linear<layers::LinearShape{16, 16, false}, float, Space>,
                                     layers::Linear<layers::LinearShape{16, 16, false}, double, Space>>;
static_assert(sizeof(Block) > 0);
