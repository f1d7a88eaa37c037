#pragma once
// Every space-dependent test runs once per enabled execution space: Serial, and OpenMP where
// Kokkos has it. The CUDA configuration (HYBRIDSEQ_CUDA=ON) instantiates them for Kokkos::Cuda
// alone: their host halves are the CPU build's, and under nvcc every instantiation costs
// minutes (Serial beside Cuda doubled each family's compile). CTest selects one space per entry
// by the Catch2 name suffix ("... - Kokkos::Serial").
#include <catch2/catch.hpp>

#include <hybridseq/core/spaces.hpp>

#if defined(KOKKOS_ENABLE_CUDA)
#define HYBRIDSEQ_SPACE_TEST_CASE(name, tags) TEMPLATE_TEST_CASE(name, tags, Kokkos::Cuda)
#elif HYBRIDSEQ_HAS_OPENMP
#define HYBRIDSEQ_SPACE_TEST_CASE(name, tags) TEMPLATE_TEST_CASE(name, tags, Kokkos::Serial, Kokkos::OpenMP)
#else
#define HYBRIDSEQ_SPACE_TEST_CASE(name, tags) TEMPLATE_TEST_CASE(name, tags, Kokkos::Serial)
#endif
