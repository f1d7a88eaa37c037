#pragma once
/// \file
/// Umbrella for hybridseq::compose: parallel and sequential blocks, mixers.

#include "compose/mixers.hpp"
#include "compose/parallel_block.hpp"
#include "compose/sequential_block.hpp"
