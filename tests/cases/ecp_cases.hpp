#pragma once
// Case descriptions of the ECP-paper family (models/ecp.hpp, models/perceiver_ar.hpp), same
// contract as model_cases.hpp: each feeds the double-precision gradient check, the save/load
// round trip and, where `golden` is set, the comparison with the independent PyTorch
// references in tests/reference/ecp_models.py (loss, logits, every parameter gradient).

#include <hybridseq/models/compressed_double_attention.hpp>
#include <hybridseq/models/double_attention.hpp>
#include <hybridseq/models/ecp.hpp>
#include <hybridseq/models/perceiver_ar.hpp>

#include "primitive_cases.hpp"

namespace hybridseq::cases {

inline constexpr int ecp_vocab = 11;

/// d 8, 2 heads of 4, segment m 4, FFN 4d; n 12 = 3 segments.
inline constexpr models::EcpShape ecp_tiny{8, 2, 4, 4, 32};
inline constexpr models::EcpShape ecp_tiny_faithful{8, 2, 4, 4, 32, true, true};
/// d 8, 2 heads of 4, M 4 latents, FFN 4d; n 12 = 8 history + 4 latents.
inline constexpr models::PerceiverArShape perceiver_tiny{8, 2, 4, 4, 32};

/// The same with Double Attention (history 8 unmasked) and s-Split (history 2 × 4).
inline constexpr models::DoubleAttentionShape double_tiny{8, 2, 4, 4, 32};
inline constexpr models::DoubleAttentionShape ssplit_tiny{8, 2, 4, 4, 32, 4};
/// Compressed Double Attention: history 8 compressed to 2 in layer 1.
inline constexpr models::CompressedDoubleShape compressed_tiny{8, 2, 4, 4, 32, 8};

template <class T, class S>
using EcpTiny = models::Ecp<ecp_vocab, ecp_tiny, T, S>;
template <class T, class S>
using EcpTinyFaithful = models::Ecp<ecp_vocab, ecp_tiny_faithful, T, S>;
template <class T, class S>
using PerceiverArTiny = models::PerceiverAr<ecp_vocab, perceiver_tiny, T, S>;

template <class T, class S>
using DoubleAttentionTiny = models::DoubleAttentionAr<ecp_vocab, double_tiny, T, S>;
template <class T, class S>
using SSplitAttentionTiny = models::DoubleAttentionAr<ecp_vocab, ssplit_tiny, T, S>;

template <class T, class S>
using CompressedDoubleTiny = models::CompressedDoubleAttentionAr<ecp_vocab, compressed_tiny, T, S>;

template <template <class, class> class Model, int Layers, int Time, const char* Name, const char* Golden>
struct EcpFamilyCase {
  template <class T, class S>
  using Layer = Model<T, S>;
  static constexpr const char* name = Name;
  static constexpr const char* golden = Golden;
  static constexpr int batch = 2, time = Time;
  template <class L>
  static typename L::Options options() {
    typename L::Options o;
    o.body.count = Layers;  // every model names its depth `count`
    return o;
  }
};

inline constexpr char ecp_name[] = "ecp", ecp_faithful_name[] = "ecp_faithful", perceiver_ar_name[] = "perceiver_ar",
                      ecp_long_name[] = "ecp_long", ecp_faithful_long_name[] = "ecp_faithful_long",
                      perceiver_ar_3_name[] = "perceiver_ar_3layers", double_attention_name[] = "double_attention",
                      ssplit_attention_name[] = "ssplit_attention", compressed_double_name[] = "compressed_double",
                      compressed_double_1_name[] = "compressed_double_1layer";
inline constexpr char ecp_no_golden[] = "";
inline constexpr char ecp_golden[] = "model_ecp", ecp_faithful_golden[] = "model_ecp_faithful",
                      perceiver_ar_golden[] = "model_perceiver_ar",
                      double_attention_golden[] = "model_double_attention",
                      ssplit_attention_golden[] = "model_ssplit_attention",
                      compressed_double_golden[] = "model_compressed_double";

using EcpCase = EcpFamilyCase<EcpTiny, 2, 12, ecp_name, ecp_golden>;
using EcpFaithfulCase = EcpFamilyCase<EcpTinyFaithful, 2, 12, ecp_faithful_name, ecp_faithful_golden>;
using PerceiverArCase = EcpFamilyCase<PerceiverArTiny, 2, 12, perceiver_ar_name, perceiver_ar_golden>;
using DoubleAttentionCase = EcpFamilyCase<DoubleAttentionTiny, 2, 12, double_attention_name, double_attention_golden>;
using SSplitAttentionCase = EcpFamilyCase<SSplitAttentionTiny, 2, 12, ssplit_attention_name, ssplit_attention_golden>;
using CompressedDoubleCase =
    EcpFamilyCase<CompressedDoubleTiny, 2, 12, compressed_double_name, compressed_double_golden>;
using CompressedDouble1Case = EcpFamilyCase<CompressedDoubleTiny, 1, 12, compressed_double_1_name, ecp_no_golden>;
using PerceiverAr3Case = EcpFamilyCase<PerceiverArTiny, 3, 10, perceiver_ar_3_name, ecp_no_golden>;
/// Decoding over 5 segments (3 ring shifts per layer).
using EcpLongCase = EcpFamilyCase<EcpTiny, 2, 20, ecp_long_name, ecp_no_golden>;
using EcpFaithfulLongCase = EcpFamilyCase<EcpTinyFaithful, 2, 20, ecp_faithful_long_name, ecp_no_golden>;

using EcpFamilyCases = CaseList<EcpCase, EcpFaithfulCase, PerceiverArCase, PerceiverAr3Case, DoubleAttentionCase,
                                SSplitAttentionCase, CompressedDoubleCase, CompressedDouble1Case>;
/// Decoding: ECP through its 2m-key rings, PerceiverAR through history + one latent window.
using EcpDecodeCases =
    CaseList<EcpCase, EcpFaithfulCase, EcpLongCase, EcpFaithfulLongCase, PerceiverArCase, PerceiverAr3Case>;

}  // namespace hybridseq::cases
