#pragma once
/// \file
/// Row broadcast of a bias and its reduction: y(r, :) = b, db += Σ_r dy(r, :).

#include <cstdint>

#include "../core/spaces.hpp"

namespace hybridseq::kernels {

namespace detail {
template <class T, class Space>
struct BroadcastRows {
  Tensor<const T*, Space> b;
  Tensor<T**, Space> y;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t r) const {
    for (std::int64_t j = 0; j < std::int64_t(y.extent(1)); ++j) y(r, j) = b(j);
  }
};
// One thread per column: race-free and deterministic.
template <class T, class Space>
struct AccumulateColumnSums {
  Tensor<const T**, Space> dy;
  Tensor<T*, Space> db;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t j) const {
    T acc = 0;
    for (std::int64_t r = 0; r < std::int64_t(dy.extent(0)); ++r) acc += dy(r, j);
    db(j) += acc;
  }
};
}  // namespace detail

/// y(r, :) = b for every row r of y (R, N).
template <class T, class Space>
void broadcast_rows(const Space& exec, TensorArg<const T*, Space> b, TensorArg<T**, Space> y) {
  Kokkos::parallel_for("hybridseq::kernels::bias::broadcast", Kokkos::RangePolicy<Space>(exec, 0, y.extent(0)),
                       detail::BroadcastRows<T, Space>{b, y});
}

/// db += Σ_r dy(r, :) for dy (R, N).
template <class T, class Space>
void accumulate_column_sums(const Space& exec, TensorArg<const T**, Space> dy, TensorArg<T*, Space> db) {
  Kokkos::parallel_for("hybridseq::kernels::bias::column_sums", Kokkos::RangePolicy<Space>(exec, 0, dy.extent(1)),
                       detail::AccumulateColumnSums<T, Space>{dy, db});
}

}  // namespace hybridseq::kernels
