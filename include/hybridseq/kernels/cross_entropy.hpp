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
#include "elementwise.hpp"
#include "exp.hpp"
#include "gemm.hpp"

namespace hybridseq::kernels {

namespace detail {
/// Work tag of the team-per-row launch.
struct TeamPerRow {};

/// Each row's log-sum-exp, lse(begin + r) = log Σⱼ exp(logits(r, j)), and its loss,
/// nll(begin + r) = lse − logit of the target (both 0 for an ignored row; the loss 0 for a
/// target outside [0, V), which the final pass counts). Host spaces run a row per index
/// (`operator()`, the exps inlined polynomials); devices run a team per row
/// (`operator()(TeamPerRow, member)`): a row of a large vocabulary (V = 32 768 in the device
/// bench) is too long a loop for one GPU thread. Both take the maximum first and sum
/// exp(logit − max) after, the team in its own order.
template <class T, class Space>
struct CrossEntropyLse {
  Tensor<const T**, Space> logits;             // (C, V) for rows [begin, begin + C)
  Tensor<const std::int32_t*, Space> targets;  // (N)
  Tensor<T*, Space> lse;                       // (N)
  Tensor<T*, Space> nll;                       // (N)
  std::int64_t begin;
  std::int32_t ignore_index;

  KOKKOS_FORCEINLINE_FUNCTION void operator()(const std::int64_t r) const {
    const std::int32_t target = targets(begin + r);
    if (target == ignore_index) {
      lse(begin + r) = nll(begin + r) = 0;
      return;
    }
    const std::int64_t v = logits.extent(1);
    const T* row = &logits(r, 0);
    const T m = lane_max<T>(v, [&](std::int64_t j) { return row[j]; });
    const T s = lane_sum<T>(v, [&](std::int64_t j) { return exp_in_loop(row[j] - m); });
    finish(r, target, m + math::log(s));
  }

  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(TeamPerRow, const Member& team) const {
    const std::int64_t r = team.league_rank();
    const std::int32_t target = targets(begin + r);
    if (target == ignore_index) {
      Kokkos::single(Kokkos::PerTeam(team), [&] { lse(begin + r) = nll(begin + r) = 0; });
      return;
    }
    const std::int64_t v = logits.extent(1);
    T m;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, v),
        [&](const std::int64_t j, T& mx) { mx = logits(r, j) > mx ? logits(r, j) : mx; }, Kokkos::Max<T>(m));
    T s;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, v), [&](const std::int64_t j, T& acc) { acc += math::exp(logits(r, j) - m); }, s);
    Kokkos::single(Kokkos::PerTeam(team), [&] { finish(r, target, m + math::log(s)); });
  }

  KOKKOS_FORCEINLINE_FUNCTION void finish(const std::int64_t r, const std::int32_t target, const T l) const {
    lse(begin + r) = l;
    nll(begin + r) = target >= 0 && target < std::int64_t(logits.extent(1)) ? l - logits(r, target) : T(0);
  }
};

/// Over every row: Σ nll and the count of scored targets, with the count of targets outside
/// [0, V) that are not ignored and of rows of x holding a NaN or Inf (the checks, in the same
/// pass: a forward waits for the host once, not once per chunk and per check).
template <class T, class Space>
struct CrossEntropyTotal {
  Tensor<const T**, Space> x;  // (N, D)
  Tensor<const std::int32_t*, Space> targets;
  Tensor<const T*, Space> nll;
  std::int64_t vocab;
  std::int32_t ignore_index;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t r, double& loss, std::int64_t& count,
                                         std::int64_t& invalid_targets, std::int64_t& non_finite_rows) const {
    bool finite = true;
    for (std::int64_t j = 0; j < std::int64_t(x.extent(1)); ++j) finite = finite && math::isfinite(x(r, j));
    non_finite_rows += finite ? 0 : 1;
    const std::int32_t target = targets(r);
    if (target == ignore_index) return;
    if (target < 0 || target >= vocab) {
      invalid_targets += 1;
      return;
    }
    loss += double(nll(r));
    count += 1;
  }
};

/// dlogits = scale · (softmax − onehot), in place over a chunk's logits; 0 on ignored rows.
/// Host spaces run a row per index (a vectorised map over the row); devices a logit per thread.
template <class T, class Space>
struct CrossEntropyGrad {
  Tensor<T**, Space> logits;  // (C, V): overwritten with dlogits
  Tensor<const std::int32_t*, Space> targets;
  Tensor<const T*, Space> lse;
  std::int64_t begin;
  std::int32_t ignore_index;
  T scale;

  KOKKOS_FORCEINLINE_FUNCTION void operator()(const std::int64_t r) const {
    const std::int32_t target = targets(begin + r);
    const std::int64_t v = logits.extent(1);
    T* row = &logits(r, 0);
    if (target == ignore_index) {
      for (std::int64_t j = 0; j < v; ++j) row[j] = 0;
      return;
    }
    const T l = lse(begin + r);
    for (std::int64_t j = 0; j < v; ++j) row[j] = scale * exp_in_loop(row[j] - l);
    row[target] -= scale;
  }

  KOKKOS_INLINE_FUNCTION std::int64_t parts() const { return std::int64_t(logits.extent(1)); }
  KOKKOS_INLINE_FUNCTION void part(const std::int64_t r, const std::int64_t j) const {
    const std::int32_t target = targets(begin + r);
    if (target == ignore_index) {
      logits(r, j) = 0;
      return;
    }
    const T p = scale * math::exp(logits(r, j) - lse(begin + r));
    logits(r, j) = j == target ? p - scale : p;
  }
};

static_assert(SplitsOnDevices<CrossEntropyGrad<float, DefaultSpace>>);

/// Runs the lse kernel over `rows` rows: a row per index on the host, a team per row on devices.
template <class T, class Space>
void cross_entropy_lse(const Space& exec, std::int64_t rows, std::int64_t v, const CrossEntropyLse<T, Space>& f) {
  if constexpr (core::host_space<Space>)
    elementwise<T>("hybridseq::kernels::cross_entropy::lse", exec, rows, 4 * v, f);
  else
    Kokkos::parallel_for("hybridseq::kernels::cross_entropy::lse[team]",
                         Kokkos::TeamPolicy<Space, TeamPerRow>(exec, rows, Kokkos::AUTO), f);
}
}  // namespace detail

/// Summed loss over non-ignored rows and their count, and what the caller must refuse: targets
/// outside [0, V) that are not ignore_index, and rows of x that are not finite (loss and count
/// are meaningless unless both are 0).
struct CrossEntropySum {
  double loss = 0;
  std::int64_t count = 0;
  std::int64_t invalid_targets = 0;
  std::int64_t non_finite_rows = 0;
};

/// Scratch of lm_head_cross_entropy_backward for n rows and v classes: one block of
/// min(chunk, n) rows of logits.
template <class T>
std::size_t lm_head_cross_entropy_scratch(std::int64_t n, std::int64_t v, std::int64_t chunk) {
  return core::padded_bytes<T>(std::min(chunk, n) * v);
}

/// Scratch of lm_head_cross_entropy_forward: the block of logits and a loss per row.
template <class T>
std::size_t lm_head_cross_entropy_forward_scratch(std::int64_t n, std::int64_t v, std::int64_t chunk) {
  return lm_head_cross_entropy_scratch<T>(n, v, chunk) + core::padded_bytes<T>(n);
}

/// Forward: lse (N) is filled; returns Σ loss over the non-ignored targets, their number, and
/// the counts of invalid targets and non-finite rows of x, all from one reduction after the
/// last chunk (the host waits once). x (N, D), W (V, D), targets (N) in [0, V) or
/// `ignore_index`; a target outside both adds nothing and is counted, so the caller refuses
/// the call after it without anything having read outside the logits.
template <class T, class Space>
CrossEntropySum lm_head_cross_entropy_forward(const Space& exec, core::Workspace<Space>& ws,
                                              TensorArg<const T**, Space> x, TensorArg<const T**, Space> w,
                                              TensorArg<const std::int32_t*, Space> targets, std::int32_t ignore_index,
                                              std::int64_t chunk, TensorArg<T*, Space> lse) {
  const std::int64_t n = x.extent(0), v = w.extent(0);
  core::WorkspaceScope scope(ws);
  auto logits = ws.template allocate<T**>("lm_head.logits", std::min(chunk, n), v);
  auto nll = ws.template allocate<T*>("lm_head.nll", n);
  for (std::int64_t begin = 0; begin < n; begin += chunk) {
    const std::int64_t rows = std::min(chunk, n - begin);
    auto xc = Kokkos::subview(x, Kokkos::make_pair(begin, begin + rows), Kokkos::ALL);
    auto lc = Kokkos::subview(logits, Kokkos::make_pair(std::int64_t(0), rows), Kokkos::ALL);
    gemm(exec, Op::none, Op::transpose, T(1), xc, w, T(0), lc);
    detail::cross_entropy_lse<T>(exec, rows, v,
                                 detail::CrossEntropyLse<T, Space>{lc, targets, lse, nll, begin, ignore_index});
  }
  CrossEntropySum total;
  core::parallel_sum("hybridseq::kernels::cross_entropy::total", exec, n, 2 + x.extent(1),
                     detail::CrossEntropyTotal<T, Space>{x, targets, nll, v, ignore_index}, total.loss, total.count,
                     total.invalid_targets, total.non_finite_rows);
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
    elementwise<T>("hybridseq::kernels::cross_entropy::backward", exec, rows, 4 * v,
                   detail::CrossEntropyGrad<T, Space>{lc, targets, lse, begin, ignore_index, scale});
    gemm(exec, Op::none, Op::none, T(1), lc, w, T(1), Kokkos::subview(dx, span, Kokkos::ALL));
    gemm(exec, Op::transpose, Op::none, T(1), lc, xc, T(1), dw);
  }
}

}  // namespace hybridseq::kernels
