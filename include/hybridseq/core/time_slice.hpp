#pragma once
/// \file
/// Copying a slice of the time axis of a (B, T, C) tensor, which is not contiguous for B > 1:
/// models that split a sequence (ECP's first segment, PerceiverAR's latent windows, the
/// latent rows of Double Attention) move rows with this one kernel.

#include <cstdint>

#include "spaces.hpp"

namespace hybridseq::core {

/// to(:, to_t0 + j, :) = from(:, from_t0 + j, :) for j < len.
template <class T, class Space>
void copy_time(Tensor<const T***, Space> from, std::int64_t from_t0, Tensor<T***, Space> to, std::int64_t to_t0,
               std::int64_t len) {
  const std::int64_t b = from.extent(0), c = from.extent(2);
  if (b * len * c == 0) return;
  Kokkos::parallel_for(
      "hybridseq::core::copy_time", Kokkos::MDRangePolicy<Space, Kokkos::Rank<3>>({0, 0, 0}, {b, len, c}),
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t j, std::int64_t k) { to(i, to_t0 + j, k) = from(i, from_t0 + j, k); });
}

}  // namespace hybridseq::core
