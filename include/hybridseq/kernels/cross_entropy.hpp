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

/// Each row's log-sum-exp, lse(begin + r) = log Σⱼ exp(logits(r, j)) (0 for an ignored row).
/// Host spaces run a row per index (`operator()`, the exps inlined polynomials); devices run
/// a team per row (`operator()(TeamPerRow, member)`): a row of a large vocabulary (V = 32 768
/// in the device bench) is too long a loop for one GPU thread. Both take the maximum first and
/// sum exp(logit − max) after, the team in its own order.
template <class T, class Space>
struct CrossEntropyLse {
  Tensor<const T**, Space> logits;             // (C, V) for rows [begin, begin + C)
  Tensor<const std::int32_t*, Space> targets;  // (N)
  Tensor<T*, Space> lse;                       // (N)
  std::int64_t begin;
  std::int32_t ignore_index;

  KOKKOS_FORCEINLINE_FUNCTION void operator()(const std::int64_t r) const {
    if (targets(begin + r) == ignore_index) {
      lse(begin + r) = 0;
      return;
    }
    const std::int64_t v = logits.extent(1);
    const T* row = &logits(r, 0);
    T m = row[0];
    for (std::int64_t j = 1; j < v; ++j) m = row[j] > m ? row[j] : m;
    T s = 0;
    for (std::int64_t j = 0; j < v; ++j) s += exp_in_loop(row[j] - m);
    lse(begin + r) = m + math::log(s);
  }

  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(TeamPerRow, const Member& team) const {
    const std::int64_t r = team.league_rank();
    if (targets(begin + r) == ignore_index) {
      Kokkos::single(Kokkos::PerTeam(team), [&] { lse(begin + r) = 0; });
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
    Kokkos::single(Kokkos::PerTeam(team), [&] { lse(begin + r) = m + math::log(s); });
  }
};

/// Σ (lse − logit of the target) and the count over the non-ignored rows of a chunk.
template <class T, class Space>
struct CrossEntropyLoss {
  Tensor<const T**, Space> logits;
  Tensor<const std::int32_t*, Space> targets;
  Tensor<const T*, Space> lse;
  std::int64_t begin;
  std::int32_t ignore_index;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t r, double& loss, std::int64_t& count) const {
    const std::int32_t target = targets(begin + r);
    if (target == ignore_index) return;
    loss += double(lse(begin + r) - logits(r, target));
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
    detail::cross_entropy_lse<T>(exec, rows, v,
                                 detail::CrossEntropyLse<T, Space>{lc, targets, lse, begin, ignore_index});
    double loss = 0;
    std::int64_t count = 0;
    core::parallel_sum("hybridseq::kernels::cross_entropy::loss", exec, rows, 2,
                       detail::CrossEntropyLoss<T, Space>{lc, targets, lse, begin, ignore_index}, loss, count);
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
    elementwise<T>("hybridseq::kernels::cross_entropy::backward", exec, rows, 4 * v,
                   detail::CrossEntropyGrad<T, Space>{lc, targets, lse, begin, ignore_index, scale});
    gemm(exec, Op::none, Op::none, T(1), lc, w, T(1), Kokkos::subview(dx, span, Kokkos::ALL));
    gemm(exec, Op::transpose, Op::none, T(1), lc, xc, T(1), dw);
  }
}

}  // namespace hybridseq::kernels
