#pragma once
/// \file
/// Named architectures: LanguageModel, PHA (+ ablations), GPT-NeoX Transformer, Mamba LM,
/// layer-pattern stacks (SSM→attention hybrids), ECP and the PerceiverAR family, and their
/// exact cost model.
#include "models/compressed_double_attention.hpp"
#include "models/cost_model.hpp"
#include "models/double_attention.hpp"
#include "models/ecp.hpp"
#include "models/language_model.hpp"
#include "models/mamba_lm.hpp"
#include "models/perceiver_ar.hpp"
#include "models/pha.hpp"
#include "models/stack.hpp"
#include "models/transformer.hpp"
