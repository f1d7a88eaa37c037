#pragma once
/// \file
/// hybridseq: header-only C++20 hybrid SSM/attention sequence models on Kokkos.
/// Including this umbrella brings every module; each module also has its own umbrella.

#include "compose.hpp"
#include "core.hpp"
#include "decode.hpp"
#include "io.hpp"
#include "kernels.hpp"
#include "layers.hpp"
#include "models.hpp"
#include "tasks.hpp"
#include "train.hpp"
