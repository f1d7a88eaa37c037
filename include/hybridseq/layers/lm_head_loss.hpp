#pragma once
/// \file
/// The language-model head fused with softmax cross-entropy (mean over non-ignored targets).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "../core/check.hpp"
#include "../core/options.hpp"
#include "../core/parameter.hpp"
#include "../core/workspace.hpp"
#include "../kernels/cross_entropy.hpp"

namespace hybridseq::layers {

struct LmHeadShape {
  int d;
  int vocab;
};

/// Where an LmHeadLoss's weight W (V, D) lives.
enum class LmHeadWeight {
  owned,   // the head's own parameter, listed as "weight"
  shared,  // another module's (V, D) parameter, passed to every call: tied input/output
           // embeddings (models::LanguageModel::Options::tie_embeddings). The head then has no
           // parameter, so counts, checkpoints, zero_grad and the optimizer see W once, under
           // its owner's name, and backward accumulates into the owner's gradient.
};

namespace detail {
/// The first index of `targets` outside [0, vocab) and not `ignore`, or targets.extent(0).
/// A free function: nvcc accepts device lambdas only in functions public to the program.
template <class Space>
std::int64_t first_invalid_target(Tensor<const std::int32_t*, Space> targets, std::int64_t vocab, std::int32_t ignore) {
  const std::int64_t n = targets.extent(0);
  std::int64_t first = n;
  Kokkos::parallel_reduce(
      "hybridseq::layers::LmHeadLoss::check_targets", Kokkos::RangePolicy<Space>(0, n),
      KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& m) {
        const std::int32_t t = targets(i);
        if (t != ignore && (t < 0 || t >= vocab) && i < m) m = i;
      },
      Kokkos::Min<std::int64_t>(first));
  return first;
}
}  // namespace detail

/// loss = mean_{(b,t): target ≠ ignore} −log softmax(x(b,t) Wᵀ)[target(b,t)], W (V, D).
///
/// W is the head's own parameter (LmHeadWeight::owned, the default) or, with
/// LmHeadWeight::shared, one the caller passes to forward / backward / logits (the overloads
/// taking `weight`): any (V, D) parameter, e.g. the embedding table, whose gradient then
/// receives the head's contribution on top of whatever else its owner accumulates.
///
/// S.vocab may be core::dynamic: V is then Options::vocab.
///
/// Requires: targets in [0, V) or equal to `ignore_index`; x finite (checked).
/// Ensures: when every target is ignored, the loss is 0 and backward adds nothing (PyTorch
/// returns NaN there; a batch of padding should not poison training).
template <LmHeadShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class LmHeadLoss {
  static_assert(S.d > 0 && (S.vocab > 0 || S.vocab == core::dynamic),
                "hybridseq::layers::LmHeadLoss: d and vocab (or core::dynamic) must be positive");

 public:
  using scalar_type = T;
  using execution_space = Space;
  static constexpr int d_in = S.d;
  static constexpr int vocab = S.vocab;  // core::dynamic: see vocab_size()

  struct Options {
    double init_std = 0.02;
    std::int64_t vocab = 0;            // V when S.vocab is core::dynamic (0: the type's)
    std::int32_t ignore_index = -100;  // PyTorch's default
    std::int64_t chunk_rows = 256;     // rows of logits alive at once
  };
  struct Saved {
    Tensor<const T***, Space> x;                  // (B, T, D)
    Tensor<const std::int32_t**, Space> targets;  // (B, T)
    Tensor<T*, Space> lse;                        // (B·T) log-sum-exp per row
    std::int64_t count = 0;                       // non-ignored targets
  };

  using Weight = core::Parameter<T, Space>;

  /// `weight`: owned (init_std applies) or shared (no parameter; init_std is unused).
  explicit LmHeadLoss(const Options& options = {}, LmHeadWeight weight = LmHeadWeight::owned)
      : options_(options),
        vocab_(core::resolve_extent("hybridseq::layers::LmHeadLoss", "Options::vocab", S.vocab, options.vocab)) {
    if (options.chunk_rows <= 0)
      fail<value_error>("hybridseq::layers::LmHeadLoss", "chunk_rows must be positive, got ", options.chunk_rows);
    if (weight == LmHeadWeight::owned)
      weight_.emplace(std::initializer_list<std::int64_t>{vocab_, S.d}, core::Role::weight,
                      core::Init::normal(options.init_std));
  }

  /// V: S.vocab, or Options::vocab when that is core::dynamic.
  std::int64_t vocab_size() const { return vocab_; }

  /// Whether W is the head's own parameter (false: shared, passed to each call).
  bool owns_weight() const { return weight_.has_value(); }

  /// The head's own W (V, D); value_error when the weight is shared.
  const Weight& weight() const {
    if (!weight_)
      fail<value_error>("hybridseq::layers::LmHeadLoss::weight",
                        "the head's weight is shared (LmHeadWeight::shared): pass it to forward, backward and logits");
    return *weight_;
  }

  /// Returns the mean loss and fills `saved` for backward.
  T forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<const std::int32_t**, Space> targets,
            Saved& saved) const {
    return forward(ws, x, targets, saved, weight());
  }
  /// The same with W = `weight` (V, D).
  T forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<const std::int32_t**, Space> targets,
            Saved& saved, const Weight& weight) const {
    const char* api = "hybridseq::layers::LmHeadLoss::forward";
    check_weight(api, weight);
    core::check_shape(api, "x", x, core::B, core::T, core::dim(S.d));
    core::check_shape(api, "targets", targets, core::dim(x.extent(0)), core::dim(x.extent(1)));
    // The checks of x and the targets come back with the loss (one wait for the host); a
    // refused call leaves `saved` and the arena as they were.
    const auto mark = ws.mark();
    const auto lse = ws.template allocate<T*>("lm_head.lse", x.extent(0) * x.extent(1));
    kernels::CrossEntropySum sum;
    try {
      sum = kernels::lm_head_cross_entropy_forward<T>(Space{}, ws, core::as_matrix(x), weight.template shaped<T**>(),
                                                      core::flat(targets), options_.ignore_index, options_.chunk_rows,
                                                      lse);
    } catch (...) {
      ws.release(mark);
      throw;
    }
    if (sum.non_finite_rows > 0 || sum.invalid_targets > 0) {
      ws.release(mark);
      if (sum.non_finite_rows > 0) core::check_finite(api, "x", x);  // names the first
      check_targets(api, targets);
      fail<value_error>(api, "the loss pass counted ", sum.non_finite_rows, " non-finite rows of x and ",
                        sum.invalid_targets, " invalid targets that the checks then did not find");
    }
    saved.x = x;
    saved.targets = targets;
    saved.lse = lse;
    saved.count = sum.count;
    return sum.count == 0 ? T(0) : static_cast<T>(sum.loss / double(sum.count));
  }

  /// dx += ∂(dloss · loss)/∂x, dW likewise.
  void backward(core::Workspace<Space>& ws, const Saved& saved, Tensor<T***, Space> dx, T dloss = T(1)) {
    backward(ws, saved, dx, dloss, weight());
  }
  /// The same with W = `weight` (the one forward used): its gradient accumulates dW.
  void backward(core::Workspace<Space>& ws, const Saved& saved, Tensor<T***, Space> dx, T dloss, const Weight& weight) {
    const char* api = "hybridseq::layers::LmHeadLoss::backward";
    check_weight(api, weight);
    core::check_same_shape(api, "dx", dx, "x", saved.x);
    if (saved.count == 0) return;
    kernels::lm_head_cross_entropy_backward<T>(Space{}, ws, core::as_matrix(saved.x), weight.template shaped<T**>(),
                                               core::flat(saved.targets), options_.ignore_index, options_.chunk_rows,
                                               saved.lse, dloss / T(saved.count), core::as_matrix(dx),
                                               weight.template shaped_grad<T**>());
  }

  /// logits (B, T, V) = x Wᵀ, for decoding and evaluation.
  void logits(Tensor<const T***, Space> x, Tensor<T***, Space> out) const { logits(x, out, weight()); }
  /// The same with W = `weight`.
  void logits(Tensor<const T***, Space> x, Tensor<T***, Space> out, const Weight& weight) const {
    const char* api = "hybridseq::layers::LmHeadLoss::logits";
    check_weight(api, weight);
    core::check_shape(api, "x", x, core::B, core::T, core::dim(S.d));
    core::check_shape(api, "out", out, core::dim(x.extent(0)), core::dim(x.extent(1)), core::dim(vocab_));
    kernels::gemm(Space{}, kernels::Op::none, kernels::Op::transpose, T(1), core::as_matrix(x),
                  weight.template shaped<T**>(), T(0), core::as_matrix(out));
  }

  /// Lists "weight" when owned, nothing when shared (its owner lists it).
  /// Arena use for x (B, T, D): the saved log-sum-exp per row above one chunk of logits
  /// (forward and backward's scratch). Backward of a batch without a scored target
  /// allocates nothing; the query assumes one.
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    const std::int64_t rows = q.batch * q.time;
    const std::size_t forward = kernels::lm_head_cross_entropy_forward_scratch<T>(rows, vocab_, options_.chunk_rows);
    const std::size_t backward = kernels::lm_head_cross_entropy_scratch<T>(rows, vocab_, options_.chunk_rows);
    const std::size_t lse = core::padded_bytes<T>(rows);
    return {lse, lse + forward, backward};
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    if (weight_) visit("weight", *weight_);
  }

  /// core::describe's kind: marks a head without a weight of its own.
  std::string_view describe_name() const { return weight_ ? "LmHeadLoss" : "LmHeadLoss(shared weight)"; }

 private:
  void check_weight(const char* api, const Weight& w) const {
    if (w.rank() != 2 || w.extent(0) != vocab_ || w.extent(1) != S.d)
      fail<shape_error>(api, "weight must be (", vocab_, ", ", S.d, ") (vocab, d), got rank ", w.rank(),
                        w.rank() == 2 ? " (" + std::to_string(w.extent(0)) + ", " + std::to_string(w.extent(1)) + ")"
                                      : std::string());
  }

  void check_targets(const char* api, Tensor<const std::int32_t**, Space> targets) const {
    const auto flat = core::flat(targets);
    const std::int64_t n = flat.extent(0), v = vocab_;
    const std::int32_t ignore = options_.ignore_index;
    const std::int64_t first = detail::first_invalid_target<Space>(flat, v, ignore);
    if (first < n) {
      auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, flat);
      const std::int64_t cols = targets.extent(1);
      fail<value_error>(api, "target ", host(first), " at (b=", first / cols, ", t=", first % cols, ") is outside [0, ",
                        v, ") and is not ignore_index ", ignore);
    }
  }

  Options options_;
  std::int64_t vocab_;
  std::optional<Weight> weight_;  // (V, D) when owned
};

}  // namespace hybridseq::layers
