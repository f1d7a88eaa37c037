#pragma once
/// \file
/// Copying (or adding) a slice of the time axis of a (B, T, C) tensor, which is not contiguous for B > 1:
/// models that split a sequence (ECP's first segment, PerceiverAR's latent windows, the
/// latent rows of Double Attention) move rows with this one kernel; decoding that must not
/// cross segment boundaries (ECP's rings) splits its input with for_each_segment_piece.

#include <algorithm>
#include <cstdint>

#include "spaces.hpp"
#include "workspace.hpp"

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

/// to(:, to_t0 + j, :) += from(:, from_t0 + j, :) for j < len: a residual over a time slice.
template <class T, class Space>
void add_time(Tensor<const T***, Space> from, std::int64_t from_t0, Tensor<T***, Space> to, std::int64_t to_t0,
              std::int64_t len) {
  const std::int64_t b = from.extent(0), c = from.extent(2);
  if (b * len * c == 0) return;
  Kokkos::parallel_for(
      "hybridseq::core::add_time", Kokkos::MDRangePolicy<Space, Kokkos::Rank<3>>({0, 0, 0}, {b, len, c}),
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t j, std::int64_t k) {
        to(i, to_t0 + j, k) += from(i, from_t0 + j, k);
      });
}

/// Runs `chunk(x_c, y_c)` on the pieces of x (B, T, D) that lie in one segment of length m,
/// starting at absolute position `length`; before a piece that starts a new segment, calls
/// `boundary()`. Outputs land in y (B, T, D).
template <class T, class Space, class Boundary, class Chunk>
void for_each_segment_piece(Workspace<Space>& ws, std::int64_t length, std::int64_t m, Tensor<const T***, Space> x,
                            Tensor<T***, Space> y, Boundary&& boundary, Chunk&& chunk) {
  const std::int64_t b = x.extent(0), t = x.extent(1), d = x.extent(2), dy = y.extent(2);
  for (std::int64_t done = 0; done < t;) {
    const std::int64_t p = length + done;
    if (p % m == 0) boundary();
    const std::int64_t len = std::min(t - done, (p / m + 1) * m - p);
    if (len == t) {
      chunk(x, y);
    } else {
      WorkspaceScope scope(ws);
      auto xc = ws.template allocate<T***>("segment_piece.x", b, len, d);
      auto yc = ws.template allocate<T***>("segment_piece.y", b, len, dy);
      copy_time<T, Space>(x, done, xc, 0, len);
      chunk(Tensor<const T***, Space>(xc), yc);
      copy_time<T, Space>(yc, 0, y, done, len);
    }
    done += len;
  }
}

}  // namespace hybridseq::core
