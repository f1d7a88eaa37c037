#pragma once
// Case descriptions of the attention branch (see primitive_cases.hpp for the fields). Each
// golden case matches tests/golden/attn_<name>.safetensors (tests/reference/golden_attention.py).

#include <hybridseq/layers/attention.hpp>

#include "primitive_cases.hpp"

namespace hybridseq::cases {

namespace sch = kernels::attention;

template <AttentionShape Shape, class Scheme, const char* Name, int Batch, int Time, int Base = 10000>
struct AttentionCase {
  template <class T, class S>
  using Layer = Attention<Shape, Scheme, T, S>;
  static constexpr const char* name = Name;
  static constexpr const char* golden = Name;
  static constexpr int batch = Batch, time = Time;
  template <class L>
  static typename L::Options options() {
    typename L::Options o;
    o.init_std = 0.3;
    o.out_init_std = 0.3;
    o.rope_base = Base;
    return o;
  }
};

inline constexpr char attn_causal_gqa[] = "attn_causal_gqa", attn_causal_mqa[] = "attn_causal_mqa",
                      attn_causal_t1[] = "attn_causal_t1", attn_cosine_head[] = "attn_cosine_head",
                      attn_cosine_layer[] = "attn_cosine_layer", attn_sliding[] = "attn_sliding",
                      attn_ecp[] = "attn_ecp", attn_ssplit[] = "attn_ssplit",
                      attn_bidirectional[] = "attn_bidirectional", attn_perceiver[] = "attn_perceiver",
                      attn_neox_sum[] = "attn_neox_sum", attn_long_tiles[] = "attn_long_tiles",
                      attn_long_ecp[] = "attn_long_ecp", attn_long_sliding[] = "attn_long_sliding";

constexpr AttentionShape gqa16{16, 4, 2, 8, 8};
constexpr AttentionShape mqa16{16, 4, 1, 4, 4, Score::dot, false, true, true};
constexpr AttentionShape cosine16{16, 4, 2, 8, 4, Score::cosine};
constexpr AttentionShape cosine16_layer{16, 4, 4, 8, 4, Score::cosine, true};
constexpr AttentionShape two_heads16{16, 2, 2, 8, 8};
constexpr AttentionShape two_heads16_mqa{16, 2, 1, 8, 8};
constexpr AttentionShape two_heads16_norope{16, 2, 2, 8, 0};
constexpr AttentionShape neox8{8, 2, 2, 8, 2, Score::dot, false, true, true, HeadMerge::sum};
constexpr AttentionShape small8_mqa{8, 2, 1, 4, 4};
constexpr AttentionShape small8{8, 2, 2, 4, 4};
constexpr AttentionShape small8_cosine{8, 2, 2, 4, 4, Score::cosine};

using AttentionCases = CaseList<AttentionCase<gqa16, sch::Causal, attn_causal_gqa, 2, 7>,
                                AttentionCase<mqa16, sch::Causal, attn_causal_mqa, 2, 5>,
                                AttentionCase<gqa16, sch::Causal, attn_causal_t1, 2, 1>,
                                AttentionCase<cosine16, sch::Causal, attn_cosine_head, 2, 6, 500>,
                                AttentionCase<cosine16_layer, sch::Causal, attn_cosine_layer, 2, 6, 500>,
                                AttentionCase<two_heads16, sch::SlidingWindow<3>, attn_sliding, 1, 9>,
                                AttentionCase<two_heads16_mqa, sch::EcpPairs<3>, attn_ecp, 2, 9>,
                                AttentionCase<two_heads16_norope, sch::SSplit<3>, attn_ssplit, 1, 9>,
                                AttentionCase<two_heads16_norope, sch::Bidirectional, attn_bidirectional, 1, 5>,
                                AttentionCase<two_heads16, sch::PerceiverCross<3>, attn_perceiver, 2, 8>,
                                AttentionCase<neox8, sch::SlidingWindow<4>, attn_neox_sum, 2, 9>,
                                AttentionCase<small8_mqa, sch::Causal, attn_long_tiles, 1, 70>,
                                AttentionCase<small8, sch::EcpPairs<16>, attn_long_ecp, 1, 80>,
                                AttentionCase<small8_cosine, sch::SlidingWindow<20>, attn_long_sliding, 1, 70>>;

}  // namespace hybridseq::cases
