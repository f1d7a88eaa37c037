#pragma once
// Every space-dependent test runs once per enabled execution space: Serial, and OpenMP or,
// in the CUDA configuration (HYBRIDSEQ_CUDA=ON), Cuda. CTest selects one space per entry by
// the Catch2 name suffix ("... - Kokkos::Serial").
#include <catch2/catch.hpp>

#include <hybridseq/core/spaces.hpp>

#if defined(KOKKOS_ENABLE_CUDA)
#define HYBRIDSEQ_SPACE_TEST_CASE(name, tags) TEMPLATE_TEST_CASE(name, tags, Kokkos::Serial, Kokkos::Cuda)
#elif HYBRIDSEQ_HAS_OPENMP
#define HYBRIDSEQ_SPACE_TEST_CASE(name, tags) TEMPLATE_TEST_CASE(name, tags, Kokkos::Serial, Kokkos::OpenMP)
#else
#define HYBRIDSEQ_SPACE_TEST_CASE(name, tags) TEMPLATE_TEST_CASE(name, tags, Kokkos::Serial)
#endif
