#pragma once
/// \file
/// Umbrella for hybridseq::kernels: GEMM facade and the Kokkos kernels of the layers.

#include "kernels/activations.hpp"
#include "kernels/attention/attention.hpp"
#include "kernels/attention/segment_schemes.hpp"
#include "kernels/bias.hpp"
#include "kernels/conv1d.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/dss.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/exp.hpp"
#include "kernels/gemm.hpp"
#include "kernels/norms.hpp"
#include "kernels/rope.hpp"
#include "kernels/sampling.hpp"
#include "kernels/selective_scan.hpp"
