#pragma once
// Case descriptions of whole language models (same contract as primitive_cases.hpp): each
// feeds the double-precision gradient check, the decode-equals-forward check, the save/load
// round trip and, where `golden` is set, the comparison with the PyTorch reference models in
// tests/reference/models.py (logits, loss and every parameter gradient).

#include <hybridseq/core/literal.hpp>
#include <hybridseq/models.hpp>

#include "primitive_cases.hpp"

namespace hybridseq::cases {

inline constexpr int model_vocab = 11;

/// A tiny PHA: E=8, 2 query heads / 1 KV head of 4, GSS F=16 H=6 N=4, Dual-FFN 16 + 8.
inline constexpr models::PhaShape pha_tiny{8, 2, 1, 4, 16, 6, 4, 16, 8};

/// The paper's branches plus a sliding-window attention branch (window 4).
using pha_four_branches =
    models::PhaBranchList<models::pha_branch::Gss, models::pha_branch::Attention, models::pha_branch::DualFfn,
                          models::pha_branch::SlidingWindowAttention<4>>;

/// What every whole-model case shares: B = 2, T = 9, `Layers` blocks, tied embeddings or not.
template <const char* Name, const char* Golden, int Layers, bool Tied>
struct ModelCase {
  static constexpr const char* name = Name;
  static constexpr const char* golden = Golden;
  static constexpr int batch = 2, time = 9;
  template <class L>
  static typename L::Options options() {
    typename L::Options o;
    o.body.count = Layers;
    o.tie_embeddings = Tied;
    return o;
  }
};

template <models::PhaLayout Layout, int Layers, const char* Name, const char* Golden,
          class Branches = models::PhaPaperBranches, bool Tied = false>
struct PhaCase : ModelCase<Name, Golden, Layers, Tied> {
  template <class T, class S>
  using Layer = models::Pha<model_vocab, pha_tiny, core::literal(Layout), T, S, Branches>;
};

/// Cooper et al.'s tiny layers at width 8: TF with 2 summed heads of 8, RoPE on 2 dims,
/// window 4 (shorter than the test sequences); SSM with d_state 2.
inline constexpr models::NeoxShape tf_tiny = models::cooper_tf(8, 2, 4);
inline constexpr layers::MambaShape ssm_tiny = models::cooper_ssm(8, 2);

template <template <class, class> class M, int Layers, const char* Name, const char* Golden, bool Tied = false>
struct StackCase : ModelCase<Name, Golden, Layers, Tied> {
  template <class T, class S>
  using Layer = M<T, S>;
};

template <class T, class S>
using TransformerTiny = models::Transformer<model_vocab, tf_tiny, T, S>;
template <class T, class S>
using MambaLmTiny = models::MambaLm<model_vocab, ssm_tiny, T, S>;
template <class T, class S>
using HybridTiny = models::Stack<model_vocab, models::MambaLayer<ssm_tiny, T, S>, models::NeoxLayer<tf_tiny, T, S>,
                                 models::NeoxLayer<tf_tiny, T, S>>;

inline constexpr char pha_name[] = "pha", pha_seq_name[] = "pha_seq_prenorm", pha_raw_name[] = "pha_raw_nonorm",
                      pha_swa_name[] = "pha_four_branches", transformer_name[] = "transformer",
                      mamba_lm_name[] = "mamba_lm", hybrid_name[] = "hybrid_ssm_tf_tf";
inline constexpr char no_golden[] = "";
inline constexpr char pha_golden[] = "model_pha", transformer_golden[] = "model_transformer",
                      mamba_lm_golden[] = "model_mamba_lm", hybrid_golden[] = "model_hybrid";
inline constexpr char pha_tied_name[] = "pha_tied", transformer_tied_name[] = "transformer_tied",
                      pha_tied_golden[] = "model_pha_tied", transformer_tied_golden[] = "model_transformer_tied";

using PhaTiny = PhaCase<models::PhaLayout{}, 2, pha_name, pha_golden>;
using PhaSeqPrenorm = PhaCase<models::PhaLayout{.arrangement = models::Arrangement::sequential,
                                                .residual = models::PhaResidual::prenorm_scaled},
                              2, pha_seq_name, no_golden>;
using PhaRawNoNorm = PhaCase<models::PhaLayout{.branch_norm = false, .normalised = false}, 2, pha_raw_name, no_golden,
                             models::PhaBranchList<models::pha_branch::Gss, models::pha_branch::DualFfn>>;
/// A fourth branch kind joins PHA by being named in the list: sliding-window cosine attention
/// (window 4, shorter than the test sequences).
using PhaFourBranches = PhaCase<models::PhaLayout{}, 1, pha_swa_name, no_golden, pha_four_branches>;
using TransformerCase = StackCase<TransformerTiny, 2, transformer_name, transformer_golden>;
using MambaLmCase = StackCase<MambaLmTiny, 2, mamba_lm_name, mamba_lm_golden>;
using HybridCase = StackCase<HybridTiny, 1, hybrid_name, hybrid_golden>;
/// Tied input/output embeddings (Options::tie_embeddings): the head uses embed.weight.
using PhaTied = PhaCase<models::PhaLayout{}, 2, pha_tied_name, pha_tied_golden, models::PhaPaperBranches, true>;
using TransformerTiedCase = StackCase<TransformerTiny, 2, transformer_tied_name, transformer_tied_golden, true>;

/// The hybrid with its vocabulary left to run time (core::dynamic, Options::vocab = 11): the
/// same model as HybridCase, so it must match the same golden.
template <class T, class S>
using HybridRuntimeVocabTiny = models::Stack<core::dynamic, models::MambaLayer<ssm_tiny, T, S>,
                                             models::NeoxLayer<tf_tiny, T, S>, models::NeoxLayer<tf_tiny, T, S>>;
inline constexpr char hybrid_runtime_vocab_name[] = "hybrid_runtime_vocab";
struct HybridRuntimeVocab : StackCase<HybridRuntimeVocabTiny, 1, hybrid_runtime_vocab_name, hybrid_golden> {
  template <class L>
  static typename L::Options options() {
    auto o = StackCase::template options<L>();
    o.vocab = model_vocab;
    return o;
  }
};

/// Dropout on: embeddings 0.1, every block output joining the residual stream 0.2, attention
/// probabilities 0.25, in the training pass (seed 7, pass 3) of tests/reference/golden_models.py
/// (the harness runs every forward in it, so finite differences see fixed masks).
template <class Base, const char* Name, const char* Golden>
struct DropoutCase : Base {
  static constexpr const char* name = Name;
  static constexpr const char* golden = Golden;
  static constexpr struct { std::uint64_t seed, pass; } dropout_key{7, 3};
  template <class L>
  static typename L::Options options() {
    auto o = Base::template options<L>();
    o.embed_dropout = 0.1;
    core::for_each_option<core::OutputDropout>(o, [](auto& d) { d.p = 0.2; });
    core::for_each_option<layers::AttentionOptions>(o, [](auto& a) { a.dropout = 0.25; });
    return o;
  }
};
inline constexpr char pha_dropout_name[] = "pha_dropout", hybrid_dropout_name[] = "hybrid_dropout",
                      pha_dropout_golden[] = "model_pha_dropout", hybrid_dropout_golden[] = "model_hybrid_dropout";
using PhaDropout = DropoutCase<PhaTiny, pha_dropout_name, pha_dropout_golden>;
using HybridDropout = DropoutCase<HybridCase, hybrid_dropout_name, hybrid_dropout_golden>;

using ModelCases = CaseList<PhaTiny, PhaSeqPrenorm, PhaRawNoNorm, PhaFourBranches, TransformerCase, MambaLmCase,
                            HybridCase, HybridRuntimeVocab, PhaTied, TransformerTiedCase, PhaDropout, HybridDropout>;

}  // namespace hybridseq::cases
