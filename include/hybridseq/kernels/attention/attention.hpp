#pragma once
/// \file
/// The attention kernels' entry points: the tiled host kernels (tiled_attention.hpp) on
/// execution spaces whose memory the host reads, the portable team kernels
/// (team_attention.hpp) elsewhere (Kokkos::Cuda). Same arguments, same results.

#include "team_attention.hpp"
#include "tiled_attention.hpp"

namespace hybridseq::kernels::attention {

/// O and LSE for every query row (see AttentionArgs).
template <class Scheme, class T, class Space>
void forward(const Space& exec, const AttentionArgs<T>& a) {
  if constexpr (tiled::runs_on<Space>)
    tiled::forward<Scheme, T>(exec, a);
  else
    team::forward<Scheme, T>(exec, a);
}

/// dQ, dK, dV (overwritten) from dO, and, when g.dalpha is set, the per-(b, h, query tile)
/// partial sums of ∂L/∂α (sum them over b and tiles for each head).
template <class Scheme, class T, class Space>
void backward(const Space& exec, const AttentionArgs<T>& a, const AttentionGrads<T>& g) {
  if constexpr (tiled::runs_on<Space>)
    tiled::backward<Scheme, T>(exec, a, g);
  else
    team::backward<Scheme, T>(exec, a, g);
}

}  // namespace hybridseq::kernels::attention
