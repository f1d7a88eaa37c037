#pragma once
// Every space-dependent test runs once per enabled host execution space; CTest selects one
// space per entry by the Catch2 name suffix ("... - Kokkos::Serial").
#include <catch2/catch.hpp>

#include <hybridseq/core/spaces.hpp>

#if HYBRIDSEQ_HAS_OPENMP
#define HYBRIDSEQ_SPACE_TEST_CASE(name, tags) TEMPLATE_TEST_CASE(name, tags, Kokkos::Serial, Kokkos::OpenMP)
#else
#define HYBRIDSEQ_SPACE_TEST_CASE(name, tags) TEMPLATE_TEST_CASE(name, tags, Kokkos::Serial)
#endif
