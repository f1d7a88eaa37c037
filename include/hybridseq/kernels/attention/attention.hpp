#pragma once
/// \file
/// The attention kernels' entry points: the tiled host kernels (tiled_attention.hpp) on
/// execution spaces whose memory the host reads, the portable team kernels
/// (team_attention.hpp) elsewhere (Kokkos::Cuda). Same arguments, same results. Asked for in
/// bf16, they run the tensor-core kernels (mma_attention.hpp) instead.

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
template <class Scheme, class T, class Space>
void forward(const Space& exec, const AttentionArgs<T>& a, Precision precision = Precision::native) {
  if (precision == Precision::bf16) {
    if constexpr (std::is_same_v<T, float>)
      return mma::forward<Scheme>(exec, a);
    else
      fail<value_error>("hybridseq::kernels::attention::forward", "bf16 products take float inputs, got ", sizeof(T),
                        "-byte scalars");
  }
  if constexpr (tiled::runs_on<Space>)
    tiled::forward<Scheme, T>(exec, a);
  else
    team::forward<Scheme, T>(exec, a);
}

/// dQ, dK, dV (overwritten) from dO, and, when g.dalpha is set, the per-(b, h, query tile)
/// partial sums of ∂L/∂α (sum them over b and tiles for each head). In bf16, from a bf16
/// forward's O and LSE.
template <class Scheme, class T, class Space>
void backward(const Space& exec, const AttentionArgs<T>& a, const AttentionGrads<T>& g,
              Precision precision = Precision::native) {
  if (precision == Precision::bf16) {
    if constexpr (std::is_same_v<T, float>)
      return mma::backward<Scheme>(exec, a, g);
    else
      fail<value_error>("hybridseq::kernels::attention::backward", "bf16 products take float inputs, got ", sizeof(T),
                        "-byte scalars");
  }
  if constexpr (tiled::runs_on<Space>)
    tiled::backward<Scheme, T>(exec, a, g);
  else
    team::backward<Scheme, T>(exec, a, g);
}

}  // namespace hybridseq::kernels::attention
