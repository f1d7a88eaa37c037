#pragma once
/// \file
/// hybridseq: header-only C++20 hybrid SSM/attention sequence models on Kokkos.
/// Including this umbrella brings every module; each module also has its own umbrella.

#include "compose.hpp"
#include "core.hpp"
#include "io.hpp"
#include "kernels.hpp"
#include "layers.hpp"
#include "train.hpp"
