#pragma once
/// \file
/// Umbrella for hybridseq::layers: the primitive layers, and the attention layers built on
/// one attention core (attention_core.hpp).

#include "layers/activation.hpp"
#include "layers/attention.hpp"
#include "layers/attention_core.hpp"
#include "layers/double_attention.hpp"
#include "layers/ecp_faithful_attention.hpp"
#include "layers/embedding.hpp"
#include "layers/ffn.hpp"
#include "layers/gss.hpp"
#include "layers/identity.hpp"
#include "layers/layer_norm.hpp"
#include "layers/linear.hpp"
#include "layers/lm_head_loss.hpp"
#include "layers/mamba.hpp"
#include "layers/rms_norm.hpp"
#include "layers/rope.hpp"
#include "layers/time_linear.hpp"
