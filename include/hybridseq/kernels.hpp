#pragma once
/// \file
/// Umbrella for hybridseq::kernels: GEMM facade and the Kokkos kernels of the layers.

#include "kernels/activations.hpp"
#include "kernels/bias.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/gemm.hpp"
#include "kernels/norms.hpp"
#include "kernels/rope.hpp"
