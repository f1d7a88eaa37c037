#pragma once
/// \file
/// Row broadcast of a bias and its reduction: y(r, :) = b, db += Σ_r dy(r, :); and the
/// row-block column reduction that every parameter gradient summed over rows uses (biases,
/// RMSNorm and LayerNorm weights).
///
/// A column sum over rows read column by column strides through memory and leaves each
/// thread a sliver of every row. Instead the rows are cut into blocks of column_block_rows (more
/// above 4096 rows, rows_per_column_block):
/// each block is summed, row after row with unit-stride inner loops, into its own row of
/// partial sums, and the partials are then added up per column in block order. The grouping
/// depends on the shape alone, so the gradients are the same, bit for bit, at any thread
/// count. On a device one thread per (block, column) sums that column's rows of the block in
/// the same order (the kernels SplitsOnDevices, a part per column): a block per thread there
/// gave a GPU only R/64 threads, each reading its own rows (17 % of a training step on an H200).

#include <cstdint>
#include <string>

#include "../core/error.hpp"
#include "../core/spaces.hpp"
#include "elementwise.hpp"

namespace hybridseq::kernels {

/// Rows per block of the column reductions: enough for the blocks' partials to be a small
/// fraction of the rows they sum, few enough that every thread gets blocks; more rows per block
/// once that would make over max_column_blocks blocks, so that the partials have a fixed size
/// and the layers own them (a backward allocates nothing: on a GPU an allocation synchronises).
inline constexpr std::int64_t column_block_rows = 64, max_column_blocks = 64;

/// Rows per block of a reduction over `rows` rows (column_block_rows up to 4096 rows).
KOKKOS_INLINE_FUNCTION constexpr std::int64_t rows_per_column_block(std::int64_t rows) {
  const std::int64_t spread = (rows + max_column_blocks - 1) / max_column_blocks;
  return spread > column_block_rows ? spread : column_block_rows;
}

/// Blocks of a reduction over `rows` rows: at most max_column_blocks.
KOKKOS_INLINE_FUNCTION constexpr std::int64_t column_blocks(std::int64_t rows) {
  const std::int64_t per = rows_per_column_block(rows);
  return (rows + per - 1) / per;
}

/// Partials for the column reductions of a (rows, cols) gradient at any number of rows,
/// uninitialised: (max_column_blocks, cols). The layer whose parameter gradient is reduced holds
/// them, as it holds the gradient.
template <class T, class Space>
Tensor<T**, Space> column_partials(const char* label, std::int64_t cols) {
  return Tensor<T**, Space>(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), max_column_blocks,
                            cols);
}

namespace detail {
template <class T, class Space>
struct BroadcastRows {
  Tensor<const T*, Space> b;
  Tensor<T**, Space> y;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t r) const {
    for (std::int64_t j = 0; j < std::int64_t(y.extent(1)); ++j) y(r, j) = b(j);
  }
};

/// The rows [begin, end) of row block `block` of a matrix with `rows` rows.
struct RowBlock {
  std::int64_t begin, end;
  KOKKOS_INLINE_FUNCTION RowBlock(std::int64_t block, std::int64_t rows)
      : begin(block * rows_per_column_block(rows)),
        end(begin + rows_per_column_block(rows) < rows ? begin + rows_per_column_block(rows) : rows) {}
};

template <class T, class Space>
struct BlockColumnSums {
  Tensor<const T**, Space> dy;  // (R, N)
  Tensor<T**, Space> partial;   // (blocks, N)
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t block) const {
    const std::int64_t n = dy.extent(1);
    const RowBlock rows(block, dy.extent(0));
    for (std::int64_t j = 0; j < n; ++j) partial(block, j) = dy(rows.begin, j);
    for (std::int64_t r = rows.begin + 1; r < rows.end; ++r)
      for (std::int64_t j = 0; j < n; ++j) partial(block, j) += dy(r, j);
  }
  KOKKOS_INLINE_FUNCTION std::int64_t parts() const { return std::int64_t(dy.extent(1)); }
  KOKKOS_INLINE_FUNCTION void part(const std::int64_t block, const std::int64_t j) const {
    const RowBlock rows(block, dy.extent(0));
    T acc = dy(rows.begin, j);
    for (std::int64_t r = rows.begin + 1; r < rows.end; ++r) acc += dy(r, j);
    partial(block, j) = acc;
  }
};

/// A row-block reduction of a (rows, cols) matrix into (blocks, cols) partials, by a kernel f
/// that SplitsOnDevices a part per column: on host spaces f(block) for every block, its rows in
/// order, about `work_per_element` light updates per matrix element.
template <class T, class Space, class F>
void reduce_column_blocks(const char* label, const Space& exec, std::int64_t rows, std::int64_t cols,
                          std::int64_t work_per_element, const F& f) {
  static_assert(SplitsOnDevices<F>, "hybridseq::kernels::reduce_column_blocks: a kernel with a part per column");
  elementwise<T>(label, exec, column_blocks(rows), rows_per_column_block(rows) * cols * work_per_element, f);
}

/// The first column_blocks(rows) rows of a layer's partials (column_partials), after checking
/// that they are the partials of `cols` columns.
template <class T, class Space>
Tensor<T**, Space> blocks_of(const char* api, TensorArg<T**, Space> partial, std::int64_t rows, std::int64_t cols) {
  if (std::int64_t(partial.extent(0)) < column_blocks(rows) || std::int64_t(partial.extent(1)) != cols)
    fail<shape_error>(api, "the column partials are (", partial.extent(0), ", ", partial.extent(1), "), not (",
                      max_column_blocks, ", ", cols, ") (kernels::column_partials)");
  return Kokkos::subview(partial, Kokkos::make_pair(std::int64_t(0), column_blocks(rows)), Kokkos::ALL);
}

/// out(j) += Σ_block partial(block, j), blocks in order.
template <class T, class Space>
struct CombineBlocks {
  Tensor<const T**, Space> partial;  // (blocks, N)
  Tensor<T*, Space> out;             // (N)
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t j) const {
    T acc = partial(0, j);
    for (std::int64_t block = 1; block < std::int64_t(partial.extent(0)); ++block) acc += partial(block, j);
    out(j) += acc;
  }
};

template <class T, class Space>
void combine_blocks(const Space& exec, Tensor<const T**, Space> partial, TensorArg<T*, Space> out) {
  elementwise<T>("hybridseq::kernels::combine_blocks", exec, partial.extent(1), partial.extent(0),
                 CombineBlocks<T, Space>{partial, out});
}
}  // namespace detail

/// y(r, :) = b for every row r of y (R, N).
template <class T, class Space>
void broadcast_rows(const Space& exec, TensorArg<const T*, Space> b, TensorArg<T**, Space> y) {
  elementwise<T>("hybridseq::kernels::bias::broadcast", exec, y.extent(0), y.extent(1),
                 detail::BroadcastRows<T, Space>{b, y});
}

/// db += Σ_r dy(r, :) for dy (R, N), through `partial` (column_partials of N columns).
template <class T, class Space>
void accumulate_column_sums(const Space& exec, TensorArg<const T**, Space> dy, TensorArg<T*, Space> db,
                            TensorArg<T**, Space> partials) {
  const std::int64_t rows = dy.extent(0), cols = dy.extent(1);
  if (rows == 0) return;
  const auto partial = detail::blocks_of<T, Space>("hybridseq::kernels::accumulate_column_sums", partials, rows, cols);
  detail::reduce_column_blocks<T>("hybridseq::kernels::bias::column_sums", exec, rows, cols, 1,
                                  detail::BlockColumnSums<T, Space>{dy, partial});
  detail::combine_blocks<T>(exec, partial, db);
}

}  // namespace hybridseq::kernels
