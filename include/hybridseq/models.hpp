#pragma once
/// \file
/// Named architectures: LanguageModel, PHA (+ ablations), GPT-NeoX Transformer, Mamba LM,
/// layer-pattern stacks (SSM→attention hybrids).
#include "models/language_model.hpp"
#include "models/mamba_lm.hpp"
#include "models/pha.hpp"
#include "models/stack.hpp"
#include "models/transformer.hpp"
