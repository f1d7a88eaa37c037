#pragma once
/// \file
/// Next-token sampling where the logits live: one token per row of a (B × V) block, greedy or
/// at a temperature over the top k, so decoding copies B token ids to the host instead of
/// B × V logits.
///
/// The definition (the oracle in test_layers "sampling" is the same in plain loops):
///   * greedy (temperature 0): the first index of the row's maximum;
///   * otherwise the candidates are the k largest logits (all V when k is 0 or ≥ V; among
///     equal logits the lower index first), p_v = exp((l_v − max) / temperature) in double,
///     u = CounterRng(seed, row).uniform(position) · Σ p, and the token is the first candidate
///     in index order, of a p above 0, whose running sum of p reaches u (the last candidate
///     when no sum does: every p is 0, or rounding left u above the total). Logits rank by
///     value with −0 below +0 and a NaN below everything; a NaN weighs 0 (never drawn), and
///     when the maximum is +inf the +inf logits weigh 1 each and the others 0.
/// Devices run a team per row, which finds the k-th largest logit by a search over the bits of
/// its key (one team count per bit). Host spaces run a row per index (`row`, which selects the
/// k largest with a heap instead), then the sums run in index order, the walk stopping at the
/// token;
/// both paths give the same pick where the sums run in the same order (a team of one thread).
/// A GPU's team sums in its own order, so its pick can differ from the host's where u falls
/// within rounding of a boundary between two candidates.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "../core/error.hpp"
#include "../core/parallel.hpp"
#include "../core/rng.hpp"
#include "../core/spaces.hpp"

namespace hybridseq::kernels {

struct SampleParams {
  double temperature = 0;  // 0: greedy
  std::int64_t top_k = 0;  // 0: every logit is a candidate
  std::uint64_t seed = 0;
  std::uint64_t position = 0;  // the counter of the draw: the same (seed, row, position) draws the same u
};

namespace detail {

/// An unsigned key whose order is the order of the floating-point values (−0 < +0; a NaN is 0,
/// below every number).
template <class T>
KOKKOS_INLINE_FUNCTION auto sortable_key(const T v) {
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  if (v != v) return Bits(0);
  Bits bits;
  memcpy(&bits, &v, sizeof bits);
  constexpr Bits sign = Bits(1) << (8 * sizeof(Bits) - 1);
  return (bits & sign) != 0 ? Bits(~bits) : Bits(bits | sign);
}

/// p of a logit l when the row's maximum is `top` (the definition above).
template <class T>
KOKKOS_INLINE_FUNCTION double sample_weight(const T l, const T top, const double temperature) {
  if (top > 0 && !math::isfinite(top)) return l == top ? 1.0 : 0.0;
  const double w = math::exp((double(l) - double(top)) / temperature);
  return w == w ? w : 0.0;
}

template <class T, class Space>
struct SampleRows {
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  Tensor<const T**, Space> logits;   // (B, V)
  Tensor<std::int32_t*, Space> out;  // (B)
  SampleParams p;

  KOKKOS_INLINE_FUNCTION bool candidate(const std::int64_t b, const std::int64_t j, const Bits threshold,
                                        const std::int64_t cut) const {
    const Bits key = sortable_key(logits(b, j));
    return key > threshold || (key == threshold && j <= cut);
  }
  KOKKOS_INLINE_FUNCTION double weight(const std::int64_t b, const std::int64_t j, const Bits threshold,
                                       const std::int64_t cut, const T top) const {
    return candidate(b, j, threshold, cut) ? sample_weight(logits(b, j), top, p.temperature) : 0.0;
  }

  /// Row b on the calling host thread: the k best (key, index) pairs by a heap whose top is the
  /// worst kept (most logits fail one comparison with it: ~V compares for the usual small k;
  /// std::nth_element instead when k > V/16), then the sums over those alone, in index order.
  void row(const std::int64_t b) const {
    const std::int64_t v = logits.extent(1);
    const T* l = &logits(b, 0);
    // Kokkos::Max's identity, as the team starts from; 8 independent maxima (a max is the same
    // in any order but for ±0, whose differences to a logit are the same).
    T lane[8];
    for (T& m : lane) m = std::numeric_limits<T>::lowest();
    std::int64_t j = 0;
    for (; j + 8 <= v; j += 8)
      for (int i = 0; i < 8; ++i) lane[i] = l[j + i] > lane[i] ? l[j + i] : lane[i];
    for (; j < v; ++j) lane[0] = l[j] > lane[0] ? l[j] : lane[0];
    T top = lane[0];
    for (const T m : lane) top = m > top ? m : top;
    if (p.temperature == 0) {
      std::int64_t first = 0;
      while (first < v && !(l[first] == top)) ++first;
      out(b) = std::int32_t(first < v ? first : 0);
      return;
    }
    // The draw over candidate indices in index order: every index, or the k best sorted.
    const auto draw = [&](const auto& index, const std::int64_t count) {
      double total = 0;
      for (std::int64_t c = 0; c < count; ++c) total += sample_weight(l[index(c)], top, p.temperature);
      const double u = core::CounterRng(p.seed, std::uint64_t(b)).uniform(p.position) * total;
      double before = 0;
      for (std::int64_t c = 0; c < count; ++c) {
        const double w = sample_weight(l[index(c)], top, p.temperature);
        if (w > 0 && before + w >= u) {
          out(b) = std::int32_t(index(c));
          return;
        }
        before += w;
      }
      out(b) = std::int32_t(index(count - 1));
    };
    if (p.top_k == 0 || p.top_k >= v) return draw([](const std::int64_t c) { return c; }, v);
    struct Ranked {
      Bits key;
      std::int64_t index;
    };
    // a ranks above b: the larger logit, or of equal ones the lower index.
    const auto above = [](const Ranked& a, const Ranked& c) {
      return a.key > c.key || (a.key == c.key && a.index < c.index);
    };
    // Per host thread and kept between calls: a decoding step allocates nothing here.
    thread_local std::vector<Ranked> best;
    best.clear();
    if (p.top_k <= v / 16) {
      for (std::int64_t i = 0; i < p.top_k; ++i) best.push_back({sortable_key(l[i]), i});
      std::make_heap(best.begin(), best.end(), above);  // the front ranks below the others
      for (std::int64_t i = p.top_k; i < v; ++i) {
        const Bits key = sortable_key(l[i]);
        if (key <= best.front().key) continue;  // of equal keys the kept one has the lower index
        std::pop_heap(best.begin(), best.end(), above);
        best.back() = {key, i};
        std::push_heap(best.begin(), best.end(), above);
      }
    } else {
      for (std::int64_t i = 0; i < v; ++i) best.push_back({sortable_key(l[i]), i});
      std::nth_element(best.begin(), best.begin() + (p.top_k - 1), best.end(), above);
      best.resize(p.top_k);
    }
    std::sort(best.begin(), best.end(), [](const Ranked& a, const Ranked& c) { return a.index < c.index; });
    draw([](const std::int64_t c) { return best[c].index; }, p.top_k);
  }

  /// Row league_rank() by a team.
  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const std::int64_t b = team.league_rank(), v = logits.extent(1);
    T top;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, v), [&](const std::int64_t j, T& m) { m = logits(b, j) > m ? logits(b, j) : m; },
        Kokkos::Max<T>(top));
    if (p.temperature == 0) {
      std::int64_t first;
      Kokkos::parallel_reduce(
          Kokkos::TeamThreadRange(team, v),
          [&](const std::int64_t j, std::int64_t& m) { m = logits(b, j) == top && j < m ? j : m; },
          Kokkos::Min<std::int64_t>(first));
      Kokkos::single(Kokkos::PerTeam(team), [&] { out(b) = std::int32_t(first < v ? first : 0); });
      return;
    }
    // The k-th largest key, bit by bit from the top: the largest t with #{key ≥ t} ≥ k; then
    // the ties at t that are candidates, the lowest indices first: those at or below `cut`.
    Bits threshold = 0;
    std::int64_t cut = v - 1;
    if (p.top_k > 0 && p.top_k < v) {
      for (int bit = 8 * int(sizeof(Bits)) - 1; bit >= 0; --bit) {
        const Bits trial = threshold | (Bits(1) << bit);
        std::int64_t at_least;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, v),
            [&](const std::int64_t j, std::int64_t& n) { n += sortable_key(logits(b, j)) >= trial ? 1 : 0; }, at_least);
        if (at_least >= p.top_k) threshold = trial;
      }
      std::int64_t above;
      Kokkos::parallel_reduce(
          Kokkos::TeamThreadRange(team, v),
          [&](const std::int64_t j, std::int64_t& n) { n += sortable_key(logits(b, j)) > threshold ? 1 : 0; }, above);
      const std::int64_t ties = p.top_k - above;  // ≥ 1: the k-th largest is a tie at the threshold
      std::int64_t lo = 0, hi = v - 1;            // the smallest cut with `ties` ties at or below it
      while (lo < hi) {
        const std::int64_t mid = lo + (hi - lo) / 2;
        std::int64_t n;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, mid + 1),
            [&](const std::int64_t j, std::int64_t& c) { c += sortable_key(logits(b, j)) == threshold ? 1 : 0; }, n);
        if (n >= ties)
          hi = mid;
        else
          lo = mid + 1;
      }
      cut = lo;
    }
    double total;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, v),
        [&](const std::int64_t j, double& s) { s += weight(b, j, threshold, cut, top); }, total);
    std::int64_t last;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, v),
        [&](const std::int64_t j, std::int64_t& m) { m = candidate(b, j, threshold, cut) && j > m ? j : m; },
        Kokkos::Max<std::int64_t>(last));
    const double u = core::CounterRng(p.seed, std::uint64_t(b)).uniform(p.position) * total;
    Kokkos::single(Kokkos::PerTeam(team), [&] { out(b) = std::int32_t(last); });
    team.team_barrier();
    // The first candidate whose running sum reaches u. A team scan adds in a tree, so the sums
    // need not grow from one index to the next in the last bit: the minimum of the indices
    // that reach u is the pick, whichever thread gets there first.
    Kokkos::parallel_scan(Kokkos::TeamThreadRange(team, v),
                          [&](const std::int64_t j, double& before, const bool final) {
                            const double w = weight(b, j, threshold, cut, top);
                            if (final && w > 0 && before + w >= u) Kokkos::atomic_fetch_min(&out(b), std::int32_t(j));
                            before += w;
                          });
  }
};

}  // namespace detail

/// out(b) = the token drawn from row b of `logits` (B × V) by `p` (the definition above).
template <class T, class Space>
void sample_tokens(const Space& exec, TensorArg<const T**, Space> logits, const SampleParams& p,
                   TensorArg<std::int32_t*, Space> out) {
  constexpr const char* api = "hybridseq::kernels::sample_tokens";
  if (out.extent(0) != logits.extent(0) || logits.extent(1) < 1)
    fail<shape_error>(api, "logits (", logits.extent(0), ", ", logits.extent(1), ") and out (", out.extent(0),
                      ") must be (B, V ≥ 1) and (B)");
  if (!(p.temperature >= 0) || !std::isfinite(p.temperature) || p.top_k < 0)
    fail<value_error>(api, "temperature must be finite and >= 0 and top_k >= 0, got ", p.temperature, ", ", p.top_k);
  const detail::SampleRows<T, Space> rows{logits, out, p};
  if constexpr (core::host_space<Space>)
    core::parallel_for("hybridseq::kernels::sample_tokens", exec, logits.extent(0), 4 * logits.extent(1),
                       [=](const std::int64_t b) { rows.row(b); });
  else
    Kokkos::parallel_for("hybridseq::kernels::sample_tokens[team]",
                         Kokkos::TeamPolicy<Space>(exec, std::int64_t(logits.extent(0)), Kokkos::AUTO), rows);
}

}  // namespace hybridseq::kernels
