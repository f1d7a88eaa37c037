#pragma once
/// \file
/// Dropout masks from the counter RNG: deterministic, space-independent, never stored.
///
/// A training pass is keyed by (seed, pass); the trainer uses (data seed, step · accumulation
/// + micro-batch), so a resumed run draws the masks the uninterrupted one would have. Every
/// dropout site of the pass (the embedding, each residual branch, each attention pass) takes
/// the next site number in forward order and draws its mask from
///
///   CounterRng(seed, stream = pass · 2¹⁶ + site);  element i is kept iff bits(i) >> 32 ≥ ⌊p · 2³²⌋
///
/// and scaled by 1/(1 − p) (inverted dropout, as torch.nn.Dropout). Element i is the flat
/// row-major index of the tensor dropped ((b·H + h)·Tq + i)·Tk + j for attention probabilities,
/// so a mask is a pure function of (seed, pass, site, i): identical on Serial, OpenMP and a GPU,
/// whatever the tiling, and backward regenerates it instead of saving it
/// (tests/reference/dropout.py writes the same masks for the PyTorch goldens).
///
/// Outside a `TrainingPass` (evaluation, logits, decoding) every dropout is the identity.

#include <cstdint>

#include "error.hpp"
#include "rng.hpp"
#include "spaces.hpp"

namespace hybridseq::core {

/// One site's mask; default-constructed: keep everything (dropout off).
struct DropoutMask {
  CounterRng rng{0, 0};
  std::uint32_t threshold = 0;  // ⌊p · 2³²⌋; 0: nothing dropped
  double scale = 1;             // 1 / (1 − p)

  KOKKOS_INLINE_FUNCTION bool active() const { return threshold != 0; }
  KOKKOS_INLINE_FUNCTION bool keep(std::uint64_t i) const { return std::uint32_t(rng.bits(i) >> 32) >= threshold; }
  /// 1/(1 − p) where element i is kept, 0 where it is dropped.
  template <class T>
  KOKKOS_INLINE_FUNCTION T factor(std::uint64_t i) const {
    return keep(i) ? T(scale) : T(0);
  }
};

/// Dropout on a block's output where it joins the residual stream: Options::dropout of the
/// residuals and of ParallelBlock. One type, so that one call reaches every one of a model:
///   core::for_each_option<core::OutputDropout>(options, [](auto& d) { d.p = 0.1; });
struct OutputDropout {
  double p = 0;
};

/// Checks a dropout probability option: p ∈ [0, 1).
inline void check_dropout(const char* api, const char* option, double p) {
  if (!(p >= 0 && p < 1)) fail<value_error>(api, option, " must be in [0, 1), got ", p);
}

/// The dropout sites of one forward pass; held by the Workspace (core::TrainingPass opens it).
class DropoutSites {
 public:
  static constexpr std::uint32_t max_sites = 1u << 16;

  bool training() const { return training_; }

  /// Starts a training pass keyed by (seed, pass) at site 0; `stop` ends it.
  void start(std::uint64_t seed, std::uint64_t pass) {
    if (pass >= (std::uint64_t(1) << 48))
      fail<value_error>("hybridseq::core::DropoutSites::start", "pass ", pass, " is not below 2^48");
    training_ = true, seed_ = seed, pass_ = pass, site_ = 0;
  }
  void stop() { training_ = false; }

  /// The next site's mask for probability p (the identity outside training or for p = 0).
  DropoutMask next(double p) {
    if (!training_ || p == 0) return {};
    if (site_ >= max_sites)
      fail<config_error>("hybridseq::core::DropoutSites::next", "a training pass has more than ", max_sites,
                         " dropout sites");
    DropoutMask m;
    m.rng = CounterRng(seed_, (pass_ << 16) + site_++);
    m.threshold = std::uint32_t(p * 4294967296.0);
    m.scale = 1.0 / (1.0 - p);
    return m;
  }

 private:
  bool training_ = false;
  std::uint64_t seed_ = 0, pass_ = 0;
  std::uint32_t site_ = 0;
};

/// y(i) *= mask.factor(i) over a flat view, in place (forward, and backward on the gradient).
template <ExecutionSpace Space, class View>
void apply_dropout(const Space& exec, const DropoutMask& mask, const View& flat) {
  static_assert(View::rank == 1, "hybridseq::core::apply_dropout: takes a flat view (core::flat(tensor))");
  if (!mask.active()) return;
  using T = typename View::non_const_value_type;
  Kokkos::parallel_for(
      "hybridseq::core::dropout", Kokkos::RangePolicy<Space>(exec, 0, flat.extent(0)),
      KOKKOS_LAMBDA(std::int64_t i) { flat(i) *= mask.template factor<T>(std::uint64_t(i)); });
}

}  // namespace hybridseq::core
