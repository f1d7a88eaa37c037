#pragma once
/// \file
/// Umbrella for hybridseq::compose: parallel and sequential blocks, mixers, residuals
/// (pre-norm, DeepNorm), the pre-norm block, Repeat, and names for children.

#include "compose/mixers.hpp"
#include "compose/named.hpp"
#include "compose/parallel_block.hpp"
#include "compose/pre_norm_block.hpp"
#include "compose/repeat.hpp"
#include "compose/residual.hpp"
#include "compose/sequential_block.hpp"
