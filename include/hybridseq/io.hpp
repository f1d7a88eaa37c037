#pragma once
/// \file
/// Umbrella for hybridseq::io: safetensors read/write and parameter save/load.

#include "io/parameters.hpp"
#include "io/safetensors.hpp"
