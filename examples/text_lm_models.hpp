#pragma once
// The architectures text_lm trains, at about 0.9 M parameters each (embedding and head
// included), vocabulary 256 (bytes), width 128. Shared with hybridseq-bench, whose
// text_lm_train benchmarks time these exact models' training step (bench/vs_pytorch.py
// compares them with PyTorch).
#include <hybridseq/hybridseq.hpp>

namespace hybridseq::text_lm {

using Space = DefaultSpace;
constexpr int V = 256, D = 128;

using Transformer = models::Transformer<V, models::NeoxShape{D, 4, 32, 32, 4 * D}, float, Space>;
constexpr int transformer_layers = 4;

constexpr models::PhaShape pha_shape{D, 4, 2, 32, 4 * D, 128, 64, 4 * D, D};
using Pha = models::Pha<V, pha_shape, models::PhaLayout{}, float, Space>;
using PhaSequential =
    models::Pha<V, pha_shape, models::PhaLayout{.arrangement = models::Arrangement::sequential}, float, Space>;
constexpr int pha_blocks = 2;

// ECP, 4 layers: clean or faithful (papers.md §2), at the segment lengths text_lm's --segment
// offers. (A class rather than an alias template: nvcc mis-emits alias templates of class
// constants.)
template <int Segment, bool Faithful>
struct Ecp : models::Ecp<V, models::EcpShape{D, 4, 32, Segment, 4 * D, true, Faithful}, float, Space> {
  using Base = models::Ecp<V, models::EcpShape{D, 4, 32, Segment, 4 * D, true, Faithful}, float, Space>;
  using Base::Base;
};
constexpr int ecp_layers = 4, default_segment = 32;

// Cross-attention layer + 3 latent layers over the last M = 64 of the 128 positions.
using PerceiverAr = models::PerceiverAr<V, models::PerceiverArShape{D, 4, 32, /*latents=*/64, 4 * D}, float, Space>;
constexpr int perceiver_ar_layers = 4;

}  // namespace hybridseq::text_lm
