#pragma once
/// \file
/// PHA — the Parallel Hybrid Architecture (papers.md §1): GSS ‖ GQA ‖ Dual-FFN read the same
/// input; each branch output is RMSNorm-ed, the three are fused by learnable softplus weights,
/// and the block sits in a DeepNorm residual:
///
///   n_b = RMSNorm_b(Branch_b(x));  w_b = softplus(p_b) / Σ softplus(p_b');  x' = LN(α·x + Σ w_b n_b)
///
/// The branches are a type list (`PhaBranchList<pha_branch::Gss, pha_branch::Attention,
/// pha_branch::DualFfn>` is the paper's), so any branch kind joins a block — and the ablation
/// grid, which is the power set of whatever list it is given. The paper leaves several points
/// open; each reading is a field of `PhaLayout`, a compile-time value, so every variant is its
/// own type:
///   * arrangement: parallel (one residual around the mixed branches) or sequential (each
///     branch in its own residual, one after the other — the paper's "sequential" ablation);
///   * per-branch RMSNorm before mixing, or none;
///   * mixing: sum-normalised softplus (default) or raw softplus;
///   * residual: DeepNorm post-norm `LN(α·x + f(x))` (torchscale), or pre-norm with an α-scaled
///     skip `α·x + f(RMSNorm(x))`.
/// β-init (torchscale: value and output projections and FFN weights ×(8N)^{-1/4}) is a runtime
/// option, `Options::beta_init`. Note that with per-branch RMSNorm the branch output is
/// scale-invariant, so β-init then changes only the gradients' scale, not the function.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>

#include "../compose/mixers.hpp"
#include "../compose/parallel_block.hpp"
#include "../compose/repeat.hpp"
#include "../compose/residual.hpp"
#include "../compose/sequential_block.hpp"
#include "../layers/attention.hpp"
#include "../layers/ffn.hpp"
#include "../layers/gss.hpp"
#include "../layers/layer_norm.hpp"
#include "../layers/rms_norm.hpp"
#include "language_model.hpp"

namespace hybridseq::models {

/// Compile-time widths of a PHA block.
struct PhaShape {
  int d_model;
  int heads;
  int kv_heads;
  int head_dim;
  int gss_gate;                  // F
  int gss_ssm;                   // H
  int gss_state;                 // N
  int ffn_primary;               // r₁·E
  int ffn_auxiliary;             // the narrower FFN
  bool per_layer_scale = false;  // cosine temperature per layer instead of per head
};

/// The paper's defaults for model width d: head_dim d/heads, GSS F = 4d, H = 256, N = 512,
/// Dual-FFN 4d + 1d.
constexpr PhaShape pha_shape(int d_model, int heads, int kv_heads) {
  return PhaShape{d_model, heads, kv_heads, d_model / heads, 4 * d_model, 256, 512, 4 * d_model, d_model};
}

enum class Arrangement { parallel, sequential };
enum class PhaResidual { deepnorm, prenorm_scaled };

/// Which reading of each open point a PHA variant takes (its branches are a type list).
struct PhaLayout {
  Arrangement arrangement = Arrangement::parallel;
  bool branch_norm = true;
  bool normalised = true;  // sum-normalised softplus; false: raw softplus
  PhaResidual residual = PhaResidual::deepnorm;
};

/// Branch kinds of a PHA block: each names itself (for variant names) and builds its layer
/// for a PhaShape. A new kind is a struct with `name` and `layer`.
namespace pha_branch {
struct Gss {
  static constexpr std::string_view name = "gss";
  template <PhaShape S, Scalar T, ExecutionSpace Space>
  using layer = layers::Gss<layers::GssShape{S.d_model, S.gss_gate, S.gss_ssm, S.gss_state}, T, Space>;
};

/// Grouped-query attention with RoPE and scaled-cosine scores under a causal mask, or a
/// sliding window of `Window` keys.
template <int Window = 0>
struct CosineAttention {
  static constexpr std::string_view name = Window == 0 ? "attn" : "swa";
  template <PhaShape S, Scalar T, ExecutionSpace Space>
  using layer = layers::Attention<layers::AttentionShape{S.d_model, S.heads, S.kv_heads, S.head_dim, S.head_dim,
                                                         layers::Score::cosine, S.per_layer_scale},
                                  std::conditional_t<Window == 0, layers::schemes::Causal,
                                                     layers::schemes::SlidingWindow<(Window > 0 ? Window : 1)>>,
                                  T, Space>;
};
using Attention = CosineAttention<0>;
template <int Window>
using SlidingWindowAttention = CosineAttention<Window>;

struct DualFfn {
  static constexpr std::string_view name = "ffn";
  template <PhaShape S, Scalar T, ExecutionSpace Space>
  using layer = layers::DualFfn<layers::dual_ffn(S.d_model, S.ffn_primary, S.ffn_auxiliary), T, Space>;
};
}  // namespace pha_branch

/// The branch kinds of a PHA block, in order (parameters are named by position: `0.*`, `1.*`).
template <class... Kinds>
struct PhaBranchList {
  static constexpr int size = int(sizeof...(Kinds));
};

/// The paper's GSS ‖ GQA ‖ Dual-FFN.
using PhaPaperBranches = PhaBranchList<pha_branch::Gss, pha_branch::Attention, pha_branch::DualFfn>;

namespace detail {

template <PhaShape S, PhaLayout L, class Branches, class T, class Space>
struct pha_block;

template <PhaShape S, PhaLayout L, class... Kinds, class T, class Space>
struct pha_block<S, L, PhaBranchList<Kinds...>, T, Space> {
  static_assert(sizeof...(Kinds) >= 1, "hybridseq::models::Pha: a PHA block needs at least one branch");
  static_assert(L.arrangement == Arrangement::parallel || (L.branch_norm && L.normalised),
                "hybridseq::models::Pha: the sequential arrangement has no mixer and no per-branch norm; leave "
                "branch_norm and normalised at their defaults");

  // The norms' width is written `S.d_model`, not as a static member of this class: nvcc would
  // re-emit that as `pha_block<__T…>::D` (core/literal.hpp).
  template <class B>
  using Normed =
      std::conditional_t<L.branch_norm, compose::SequentialBlock<B, layers::RmsNorm<S.d_model, T, Space>>, B>;
  template <class Block>
  using Residual = std::conditional_t<L.residual == PhaResidual::deepnorm,
                                      compose::DeepNorm<Block, layers::LayerNorm<S.d_model, T, Space>>,
                                      compose::PreNormResidual<Block, layers::RmsNorm<S.d_model, T, Space>>>;
  template <class Kind>
  using Layer = typename Kind::template layer<S, T, Space>;

  using type = std::conditional_t<
      L.arrangement == Arrangement::parallel,
      Residual<compose::ParallelBlock<compose::SoftplusMixer<int(sizeof...(Kinds)), L.normalised, T, Space>,
                                      Normed<Layer<Kinds>>...>>,
      compose::SequentialBlock<Residual<Layer<Kinds>>...>>;
};

template <class... Kinds>
std::string branch_names(PhaBranchList<Kinds...>) {
  std::string s;
  ((s += (s.empty() ? "" : "+") + std::string(Kinds::name)), ...);
  return s;
}

}  // namespace detail

/// A short label of a variant: "pha" for the paper's model, else e.g. "pha[gss+ffn]",
/// "pha[attn,seq]", "pha[gss+attn+ffn+swa,no-norm]".
template <PhaLayout L, class Branches = PhaPaperBranches>
std::string pha_name() {
  std::vector<std::string> tags;
  if (!std::is_same_v<Branches, PhaPaperBranches>) tags.push_back(detail::branch_names(Branches{}));
  if (L.arrangement == Arrangement::sequential) tags.push_back("seq");
  if (!L.branch_norm) tags.push_back("no-norm");
  if (!L.normalised) tags.push_back("raw-softplus");
  if (L.residual == PhaResidual::prenorm_scaled) tags.push_back("prenorm");
  std::string s = "pha";
  if (tags.empty()) return s;
  s += '[';
  for (std::size_t i = 0; i < tags.size(); ++i) s += (i ? "," : "") + tags[i];
  return s + ']';
}

/// One PHA block (a residual sub-stack for the sequential arrangement).
template <PhaShape S, PhaLayout L = PhaLayout{}, Scalar T = float, ExecutionSpace Space = DefaultSpace,
          class Branches = PhaPaperBranches>
using PhaBlock = typename detail::pha_block<S, L, Branches, T, Space>::type;

/// The PHA language model: `Options::body.count` blocks, final RMSNorm, LM head (tied or not).
/// α = (2N)^{1/4} and β = (8N)^{-1/4} with N the number of residual sub-layers (blocks, or
/// blocks × branches when sequential) are set from the depth unless given.
template <int Vocab, PhaShape S, PhaLayout L = PhaLayout{}, Scalar T = float, ExecutionSpace Space = DefaultSpace,
          class Branches = PhaPaperBranches>
class Pha : public LanguageModel<Vocab, compose::Repeat<PhaBlock<S, L, T, Space, Branches>>,
                                 layers::RmsNorm<S.d_model, T, Space>> {
  using Base =
      LanguageModel<Vocab, compose::Repeat<PhaBlock<S, L, T, Space, Branches>>, layers::RmsNorm<S.d_model, T, Space>>;

 public:
  static constexpr PhaLayout layout = L;
  static constexpr PhaShape shape = S;
  using branches = Branches;

  /// The variant's label (pha_name).
  static std::string name() { return pha_name<L, Branches>(); }

  struct Options : Base::Options {
    double alpha = 0;        // 0: DeepNorm's (2N)^{1/4}
    bool beta_init = false;  // scale V, W_o and FFN weights by (8N)^{-1/4} at initialisation
  };

  explicit Pha(const Options& o = {}) : Base(o), beta_init_(o.beta_init) {
    const double alpha = o.alpha > 0 ? o.alpha : compose::deepnorm_alpha(sublayers());
    core::for_each_module(*this, [&](std::string_view, auto& m) {
      if constexpr (requires { m.set_alpha(alpha); }) m.set_alpha(alpha);
    });
  }

  /// Residual sub-layers N of the DeepNorm formulas.
  int sublayers() const {
    return this->body().size() * (L.arrangement == Arrangement::sequential ? Branches::size : 1);
  }

  /// core::initialize's hook, run once every parameter is drawn: β-init, when enabled.
  void after_initialize() {
    if (!beta_init_) return;
    const double beta = compose::deepnorm_beta(sublayers());
    core::for_each_module(*this, [&](std::string_view, auto& m) {
      if constexpr (requires { m.rescale_for_deepnorm(beta); }) m.rescale_for_deepnorm(beta);
    });
  }

 private:
  bool beta_init_;
};

namespace detail {
// The kinds of `Branches` whose bit is set in Mask, in order.
template <bool Keep, class Kind>
using kept_kind = std::conditional_t<Keep, PhaBranchList<Kind>, PhaBranchList<>>;
template <class... A, class... B>
PhaBranchList<A..., B...> operator+(PhaBranchList<A...>, PhaBranchList<B...>);  // unevaluated: concatenation
template <std::size_t Mask, class... Kinds, std::size_t... I>
auto branch_subset(PhaBranchList<Kinds...>, std::index_sequence<I...>)
    -> decltype((PhaBranchList<>{} + ... + kept_kind<((Mask >> I) & 1) != 0, Kinds>{}));
template <std::size_t Mask, class Branches>
using branch_subset_t =
    decltype(branch_subset<Mask>(Branches{}, std::make_index_sequence<std::size_t(Branches::size)>{}));

// The five readings of each branch subset: four parallel (per-branch norm × normalised
// softplus) and the sequential one.
inline constexpr std::array<PhaLayout, 5> pha_readings{
    PhaLayout{}, PhaLayout{.branch_norm = false}, PhaLayout{.normalised = false},
    PhaLayout{.branch_norm = false, .normalised = false}, PhaLayout{.arrangement = Arrangement::sequential}};
}  // namespace detail

/// The ablation grid as a Hana tuple of `hana::type_c<Pha<…>>`: every non-empty subset of
/// `Branches` (the full set first) × the five readings of detail::pha_readings — 35 variants
/// for the paper's three branches, 75 for four. Iterate with
///   hana::for_each(models::pha_ablations<V, S>, [](auto t) { using M = typename decltype(t)::type; … });
template <int Vocab, PhaShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace,
          class Branches = PhaPaperBranches>
constexpr auto pha_ablations = []<std::size_t... K>(std::index_sequence<K...>) {
  constexpr std::size_t readings = detail::pha_readings.size(), full = (std::size_t(1) << Branches::size) - 1;
  return boost::hana::make_tuple(boost::hana::type_c<Pha<Vocab, S, detail::pha_readings[K % readings], T, Space,
                                                         detail::branch_subset_t<full - K / readings, Branches>>>...);
}
(std::make_index_sequence<((std::size_t(1) << Branches::size) - 1) * detail::pha_readings.size()>{});

}  // namespace hybridseq::models
