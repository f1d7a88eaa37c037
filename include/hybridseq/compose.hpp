#pragma once
/// \file
/// Umbrella for hybridseq::compose: parallel and sequential blocks, mixers, residuals
/// (pre-norm, DeepNorm) and Repeat.

#include "compose/mixers.hpp"
#include "compose/parallel_block.hpp"
#include "compose/repeat.hpp"
#include "compose/residual.hpp"
#include "compose/sequential_block.hpp"
