#pragma once
/// \file
/// The attention kernels' entry points: the tiled host kernels (tiled_attention.hpp) on
/// execution spaces whose memory the host reads, the portable team kernels
/// (team_attention.hpp) elsewhere (Kokkos::Cuda). Same arguments, same results. Asked for in
/// bf16, they run the tensor-core kernels (mma_attention.hpp) instead. The keys each query sees
/// come as a value, a scheme's `band` (segment_schemes.hpp).

#include <type_traits>

#include "mma_attention.hpp"
#include "team_attention.hpp"
#include "tiled_attention.hpp"

namespace hybridseq::kernels::attention {

/// What the products take as inputs: the scalar type itself, or their operands (Q, K, V, dO,
/// the probabilities, dS) rounded to bfloat16 with fp32 accumulation (float only; tensor cores
/// on a GPU, an emulation of them on host spaces that is there to test against, not to be fast).
enum class Precision { native, bf16 };

/// O and LSE for every query row (see AttentionArgs).
template <class T, class Space>
void forward(const Space& exec, const AttentionArgs<T>& a, const Band& band, Precision precision = Precision::native) {
  if (precision == Precision::bf16) {
    if constexpr (std::is_same_v<T, float>)
      return mma::forward(exec, a, band);
    else
      fail<value_error>("hybridseq::kernels::attention::forward", "bf16 products take float inputs, got ", sizeof(T),
                        "-byte scalars");
  }
  if constexpr (tiled::runs_on<Space>)
    tiled::forward(exec, a, band);
  else
    team::forward(exec, a, band);
}

/// dQ, dK, dV (overwritten) from dO, and, when g.dalpha is set, the per-(b, h, query tile)
/// partial sums of ∂L/∂α (sum them over b and tiles for each head). In bf16, from a bf16
/// forward's O and LSE.
template <class T, class Space>
void backward(const Space& exec, const AttentionArgs<T>& a, const AttentionGrads<T>& g, const Band& band,
              Precision precision = Precision::native) {
  if (precision == Precision::bf16) {
    if constexpr (std::is_same_v<T, float>)
      return mma::backward(exec, a, g, band);
    else
      fail<value_error>("hybridseq::kernels::attention::backward", "bf16 products take float inputs, got ", sizeof(T),
                        "-byte scalars");
  }
  if constexpr (tiled::runs_on<Space>)
    tiled::backward(exec, a, g, band);
  else
    team::backward(exec, a, g, band);
}

}  // namespace hybridseq::kernels::attention
