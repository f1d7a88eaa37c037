#pragma once
/// \file
/// PHA — the Parallel Hybrid Architecture (papers.md §1): GSS ‖ GQA ‖ Dual-FFN read the same
/// input; each branch output is RMSNorm-ed, the three are fused by learnable softplus weights,
/// and the block sits in a DeepNorm residual:
///
///   n_b = RMSNorm_b(Branch_b(x));  w_b = softplus(p_b) / Σ softplus(p_b');  x' = LN(α·x + Σ w_b n_b)
///
/// The paper leaves several points open; each reading is a field of `PhaLayout`, a compile-time
/// value, so every variant is its own type and the ablation grid is a type list
/// (`pha_ablations`, built with Boost.Hana host-side only):
///   * branches: any non-empty subset of {GSS, attention, FFN};
///   * arrangement: parallel (one residual around the mixed branches) or sequential (each
///     branch in its own residual, one after the other — the paper's "sequential" ablation);
///   * per-branch RMSNorm before mixing, or none;
///   * mixing: sum-normalised softplus (default) or raw softplus;
///   * residual: DeepNorm post-norm `LN(α·x + f(x))` (torchscale), or pre-norm with an α-scaled
///     skip `α·x + f(RMSNorm(x))`.
/// β-init (torchscale: value and output projections and FFN weights ×(8N)^{-1/4}) is a runtime
/// option, `Options::beta_init`. Note that with per-branch RMSNorm the branch output is
/// scale-invariant, so β-init then changes only the gradients' scale, not the function.

#include <cstdint>
#include <string>
#include <vector>

#include <boost/hana/at.hpp>
#include <boost/hana/cartesian_product.hpp>
#include <boost/hana/filter.hpp>
#include <boost/hana/integral_constant.hpp>
#include <boost/hana/pair.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/transform.hpp>
#include <boost/hana/type.hpp>
#include <boost/hana/unpack.hpp>

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
  int gss_gate;       // F
  int gss_ssm;        // H
  int gss_state;      // N
  int ffn_primary;    // r₁·E
  int ffn_auxiliary;  // the narrower FFN
  bool per_layer_scale = false;  // cosine temperature per layer instead of per head
};

/// The paper's defaults for model width d: head_dim d/heads, GSS F = 4d, H = 256, N = 512,
/// Dual-FFN 4d + 1d.
constexpr PhaShape pha_shape(int d_model, int heads, int kv_heads) {
  return PhaShape{d_model, heads, kv_heads, d_model / heads, 4 * d_model, 256, 512, 4 * d_model, d_model};
}

enum class Arrangement { parallel, sequential };
enum class PhaResidual { deepnorm, prenorm_scaled };

/// Which reading of each open point a PHA variant takes.
struct PhaLayout {
  bool gss = true;
  bool attention = true;
  bool ffn = true;
  Arrangement arrangement = Arrangement::parallel;
  bool branch_norm = true;
  bool normalised = true;  // sum-normalised softplus; false: raw softplus
  PhaResidual residual = PhaResidual::deepnorm;

  constexpr int branches() const { return int(gss) + int(attention) + int(ffn); }

  /// A short label, e.g. "pha" for the paper's model, "pha[gss+ffn]", "pha[seq]".
  std::string name() const {
    std::string s = "pha";
    std::vector<std::string> tags;
    if (branches() < 3) {
      std::string b;
      for (auto [on, n] : {std::pair{gss, "gss"}, std::pair{attention, "attn"}, std::pair{ffn, "ffn"}})
        if (on) b += (b.empty() ? "" : "+") + std::string(n);
      tags.push_back(b);
    }
    if (arrangement == Arrangement::sequential) tags.push_back("seq");
    if (!branch_norm) tags.push_back("no-norm");
    if (!normalised) tags.push_back("raw-softplus");
    if (residual == PhaResidual::prenorm_scaled) tags.push_back("prenorm");
    if (tags.empty()) return s;
    s += '[';
    for (std::size_t i = 0; i < tags.size(); ++i) s += (i ? "," : "") + tags[i];
    return s + ']';
  }
};

/// The three branch types of a PHA block.
template <PhaShape S, Scalar T, ExecutionSpace Space>
struct PhaBranches {
  using Gss = layers::Gss<layers::GssShape{S.d_model, S.gss_gate, S.gss_ssm, S.gss_state}, T, Space>;
  using Attention = layers::Attention<layers::AttentionShape{S.d_model, S.heads, S.kv_heads, S.head_dim, S.head_dim,
                                                             layers::Score::cosine, S.per_layer_scale},
                                      kernels::attention::Causal, T, Space>;
  using Ffn = layers::DualFfn<layers::dual_ffn(S.d_model, S.ffn_primary, S.ffn_auxiliary), T, Space>;
};

namespace detail {
namespace hana = boost::hana;

template <PhaShape S, PhaLayout L, class T, class Space>
struct pha_block {
  static_assert(L.branches() >= 1, "hybridseq::models::Pha: a PHA layout needs at least one branch");
  static_assert(L.arrangement == Arrangement::parallel || (L.branch_norm && L.normalised),
                "hybridseq::models::Pha: the sequential arrangement has no mixer and no per-branch norm; leave "
                "branch_norm and normalised at their defaults");
  using P = PhaBranches<S, T, Space>;
  static constexpr int D = S.d_model;

  template <class B>
  using Normed = std::conditional_t<L.branch_norm, compose::SequentialBlock<B, layers::RmsNorm<D, T, Space>>, B>;
  template <class Block>
  using Residual = std::conditional_t<L.residual == PhaResidual::deepnorm,
                                      compose::DeepNorm<Block, layers::LayerNorm<D, T, Space>>,
                                      compose::PreNormResidual<Block, layers::RmsNorm<D, T, Space>>>;
  template <class... Bs>
  struct assemble {
    using type = std::conditional_t<
        L.arrangement == Arrangement::parallel,
        Residual<compose::ParallelBlock<compose::SoftplusMixer<int(sizeof...(Bs)), L.normalised, T, Space>, Normed<Bs>...>>,
        compose::SequentialBlock<Residual<Bs>...>>;
  };

  // The chosen branches, in the paper's order, as a Hana tuple of types.
  static constexpr auto chosen = hana::filter(
      hana::make_tuple(hana::make_pair(hana::bool_c<L.gss>, hana::type_c<typename P::Gss>),
                       hana::make_pair(hana::bool_c<L.attention>, hana::type_c<typename P::Attention>),
                       hana::make_pair(hana::bool_c<L.ffn>, hana::type_c<typename P::Ffn>)),
      [](auto p) { return hana::first(p); });
  using type = typename decltype(hana::unpack(chosen, [](auto... p) {
    return hana::type_c<typename assemble<typename decltype(+hana::second(p))::type...>::type>;
  }))::type;
};
}  // namespace detail

/// One PHA block (a residual sub-stack for the sequential arrangement).
template <PhaShape S, PhaLayout L = PhaLayout{}, Scalar T = float, ExecutionSpace Space = DefaultSpace>
using PhaBlock = typename detail::pha_block<S, L, T, Space>::type;

/// The PHA language model: `Options::body.count` blocks, final RMSNorm, untied head.
/// α = (2N)^{1/4} and β = (8N)^{-1/4} with N the number of residual sub-layers (blocks, or
/// blocks × branches when sequential) are set from the depth unless given.
template <int Vocab, PhaShape S, PhaLayout L = PhaLayout{}, Scalar T = float, ExecutionSpace Space = DefaultSpace>
class Pha : public LanguageModel<Vocab, compose::Repeat<PhaBlock<S, L, T, Space>>, layers::RmsNorm<S.d_model, T, Space>> {
  using Base = LanguageModel<Vocab, compose::Repeat<PhaBlock<S, L, T, Space>>, layers::RmsNorm<S.d_model, T, Space>>;

 public:
  static constexpr PhaLayout layout = L;
  static constexpr PhaShape shape = S;

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
    return this->body().size() * (L.arrangement == Arrangement::sequential ? L.branches() : 1);
  }

  /// Initialises every parameter from `seed`, then applies β-init if enabled.
  void initialize(std::uint64_t seed) {
    core::initialize(*this, seed);
    if (!beta_init_) return;
    const double beta = compose::deepnorm_beta(sublayers());
    core::for_each_module(*this, [&](std::string_view, auto& m) {
      if constexpr (requires { m.rescale_for_deepnorm(beta); }) m.rescale_for_deepnorm(beta);
    });
  }

 private:
  bool beta_init_;
};

/// The ablation grid as a Hana tuple of `hana::type_c<Pha<…>>`: every non-empty subset of the
/// branches × {parallel with/without per-branch norm × normalised/raw softplus, sequential},
/// 35 variants. Iterate with
///   hana::for_each(models::pha_ablations<V, S>, [](auto t) { using M = typename decltype(t)::type; … });
template <int Vocab, PhaShape S, Scalar T = float, ExecutionSpace Space = DefaultSpace>
constexpr auto pha_ablations = [] {
  namespace hana = boost::hana;
  // A Hana integral constant's value, from an object of its type.
  constexpr auto v = [](auto c) { return std::remove_cvref_t<decltype(c)>::value; };
  constexpr auto bit = hana::make_tuple(hana::true_c, hana::false_c);
  // The power set of {GSS, attention, FFN} as bit triples, without the empty set.
  constexpr auto subsets = hana::filter(hana::cartesian_product(hana::make_tuple(bit, bit, bit)), [](auto s) {
    return hana::bool_c<std::remove_cvref_t<decltype(hana::at_c<0>(s))>::value ||
                        std::remove_cvref_t<decltype(hana::at_c<1>(s))>::value ||
                        std::remove_cvref_t<decltype(hana::at_c<2>(s))>::value>;
  });
  // (sequential?, branch_norm, normalised): four parallel readings and the sequential one.
  constexpr auto arrangements = hana::make_tuple(hana::make_tuple(hana::false_c, hana::true_c, hana::true_c),
                                                 hana::make_tuple(hana::false_c, hana::false_c, hana::true_c),
                                                 hana::make_tuple(hana::false_c, hana::true_c, hana::false_c),
                                                 hana::make_tuple(hana::false_c, hana::false_c, hana::false_c),
                                                 hana::make_tuple(hana::true_c, hana::true_c, hana::true_c));
  return hana::transform(hana::cartesian_product(hana::make_tuple(subsets, arrangements)), [v](auto pair) {
    using Sub = std::remove_cvref_t<decltype(hana::at_c<0>(pair))>;
    using Arr = std::remove_cvref_t<decltype(hana::at_c<1>(pair))>;
    constexpr PhaLayout layout{v(hana::at_c<0>(Sub{})), v(hana::at_c<1>(Sub{})), v(hana::at_c<2>(Sub{})),
                               v(hana::at_c<0>(Arr{})) ? Arrangement::sequential : Arrangement::parallel,
                               v(hana::at_c<1>(Arr{})), v(hana::at_c<2>(Arr{}))};
    return hana::type_c<Pha<Vocab, S, layout, T, Space>>;
  });
}();

}  // namespace hybridseq::models
