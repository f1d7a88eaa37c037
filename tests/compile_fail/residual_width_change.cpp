// expect: a residual block must keep its width \(d_in == d_out\)
// y = x + f(norm(x)) needs f to keep the width; Linear 16 -> 32 does not.
#include <hybridseq/compose/residual.hpp>
#include <hybridseq/layers/linear.hpp>
#include <hybridseq/layers/rms_norm.hpp>

using namespace hybridseq;
using Space = DefaultSpace;

using Block = compose::PreNormResidual<layers::Linear<layers::LinearShape{16, 32}, float, Space>,
                                       layers::RmsNorm<16, float, Space>>;
static_assert(sizeof(Block) > 0);
