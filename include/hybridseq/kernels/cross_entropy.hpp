#pragma once
/// \file
/// Softmax cross-entropy fused with the LM-head projection, chunked over rows.
///
/// The (N × V) logits are never stored: forward computes them a chunk of rows at a time
/// and keeps one log-sum-exp per row; backward recomputes each chunk's logits from x and W
/// and turns them into dlogits = softmax − onehot in place. Peak scratch is chunk × V
/// instead of N × V (the Liger-kernel / llm.c trade: one extra GEMM for V/D× less memory).

#include <algorithm>
#include <cstdint>
#include <limits>

#include "../core/parallel.hpp"
#include "../core/spaces.hpp"
#include "../core/workspace.hpp"
#include "gemm.hpp"

namespace hybridseq::kernels {

namespace detail {
template <class T, class Space>
struct CrossEntropyRows {
  Tensor<const T**, Space> logits;             // (C, V) for rows [begin, begin + C)
  Tensor<const std::int32_t*, Space> targets;  // (N)
  Tensor<T*, Space> lse;                       // (N)
  std::int64_t begin;
  std::int32_t ignore_index;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t r, double& loss, std::int64_t& count) const {
    const std::int32_t target = targets(begin + r);
    if (target == ignore_index) {
      lse(begin + r) = 0;
      return;
    }
    const std::int64_t v = logits.extent(1);
    T m = logits(r, 0);
    for (std::int64_t j = 1; j < v; ++j) m = logits(r, j) > m ? logits(r, j) : m;
    T s = 0;
    for (std::int64_t j = 0; j < v; ++j) s += math::exp(logits(r, j) - m);
    const T l = m + math::log(s);
    lse(begin + r) = l;
    loss += double(l - logits(r, target));
    count += 1;
  }
};

template <class T, class Space>
struct CrossEntropyGrad {
  Tensor<T**, Space> logits;  // (C, V): overwritten with dlogits
  Tensor<const std::int32_t*, Space> targets;
  Tensor<const T*, Space> lse;
  std::int64_t begin;
  std::int32_t ignore_index;
  T scale;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t r) const {
    const std::int32_t target = targets(begin + r);
    const std::int64_t v = logits.extent(1);
    if (target == ignore_index) {
      for (std::int64_t j = 0; j < v; ++j) logits(r, j) = 0;
      return;
    }
    const T l = lse(begin + r);
    for (std::int64_t j = 0; j < v; ++j) logits(r, j) = scale * math::exp(logits(r, j) - l);
    logits(r, target) -= scale;
  }
};
}  // namespace detail

/// Summed loss over non-ignored rows and their count.
struct CrossEntropySum {
  double loss = 0;
  std::int64_t count = 0;
};

/// Forward: lse (N) is filled; returns Σ loss and the number of non-ignored targets.
/// x (N, D), W (V, D), targets (N) with values in [0, V) or `ignore_index` (validated by
/// the caller).
/// Scratch of lm_head_cross_entropy_forward and _backward for n rows and v classes: one
/// block of min(chunk, n) rows of logits.
template <class T>
std::size_t lm_head_cross_entropy_scratch(std::int64_t n, std::int64_t v, std::int64_t chunk) {
  return core::padded_bytes<T>(std::min(chunk, n) * v);
}

template <class T, class Space>
CrossEntropySum lm_head_cross_entropy_forward(const Space& exec, core::Workspace<Space>& ws,
                                              TensorArg<const T**, Space> x, TensorArg<const T**, Space> w,
                                              TensorArg<const std::int32_t*, Space> targets, std::int32_t ignore_index,
                                              std::int64_t chunk, TensorArg<T*, Space> lse) {
  const std::int64_t n = x.extent(0), v = w.extent(0);
  core::WorkspaceScope scope(ws);
  auto logits = ws.template allocate<T**>("lm_head.logits", std::min(chunk, n), v);
  CrossEntropySum total;
  for (std::int64_t begin = 0; begin < n; begin += chunk) {
    const std::int64_t rows = std::min(chunk, n - begin);
    auto xc = Kokkos::subview(x, Kokkos::make_pair(begin, begin + rows), Kokkos::ALL);
    auto lc = Kokkos::subview(logits, Kokkos::make_pair(std::int64_t(0), rows), Kokkos::ALL);
    gemm(exec, Op::none, Op::transpose, T(1), xc, w, T(0), lc);
    double loss = 0;
    std::int64_t count = 0;
    Kokkos::parallel_reduce("hybridseq::kernels::cross_entropy::forward", Kokkos::RangePolicy<Space>(exec, 0, rows),
                            detail::CrossEntropyRows<T, Space>{lc, targets, lse, begin, ignore_index}, loss, count);
    total.loss += loss;
    total.count += count;
  }
  return total;
}

/// Backward: dx += scale · (softmax − onehot) W and dW += scale · (softmax − onehot)ᵀ x,
/// where scale = dloss / count for a mean loss.
template <class T, class Space>
void lm_head_cross_entropy_backward(const Space& exec, core::Workspace<Space>& ws, TensorArg<const T**, Space> x,
                                    TensorArg<const T**, Space> w, TensorArg<const std::int32_t*, Space> targets,
                                    std::int32_t ignore_index, std::int64_t chunk, TensorArg<const T*, Space> lse,
                                    T scale, TensorArg<T**, Space> dx, TensorArg<T**, Space> dw) {
  const std::int64_t n = x.extent(0), v = w.extent(0);
  core::WorkspaceScope scope(ws);
  auto logits = ws.template allocate<T**>("lm_head.dlogits", std::min(chunk, n), v);
  for (std::int64_t begin = 0; begin < n; begin += chunk) {
    const std::int64_t rows = std::min(chunk, n - begin);
    const auto span = Kokkos::make_pair(begin, begin + rows);
    auto xc = Kokkos::subview(x, span, Kokkos::ALL);
    auto lc = Kokkos::subview(logits, Kokkos::make_pair(std::int64_t(0), rows), Kokkos::ALL);
    gemm(exec, Op::none, Op::transpose, T(1), xc, w, T(0), lc);
    core::parallel_for("hybridseq::kernels::cross_entropy::backward", exec, rows, 4 * v,
                       detail::CrossEntropyGrad<T, Space>{lc, targets, lse, begin, ignore_index, scale});
    gemm(exec, Op::none, Op::none, T(1), lc, w, T(1), Kokkos::subview(dx, span, Kokkos::ALL));
    gemm(exec, Op::transpose, Op::none, T(1), lc, xc, T(1), dw);
  }
}

}  // namespace hybridseq::kernels
