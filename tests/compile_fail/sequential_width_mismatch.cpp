// expect: SequentialBlock: each layer's d_in must equal the previous d_out
// 16 -> 32 followed by a layer that reads 16: the widths do not chain.
#include <hybridseq/compose/sequential_block.hpp>
#include <hybridseq/layers/linear.hpp>

using namespace hybridseq;
using Space = DefaultSpace;

using Block = compose::SequentialBlock<layers::Linear<layers::LinearShape{16, 32}, float, Space>,
                                       layers::Linear<layers::LinearShape{16, 16}, float, Space>>;
static_assert(sizeof(Block) > 0);
