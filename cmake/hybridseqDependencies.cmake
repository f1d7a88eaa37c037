# Finds hybridseq's dependencies. Shared by the build and by the installed package config,
# so a downstream project resolves them exactly as the build did.
include(CMakeFindDependencyMacro)

# Kokkos: any Kokkos 3.4–4.x through Kokkos_ROOT / CMAKE_PREFIX_PATH, else Debian's
# libtrilinos-kokkos-dev, whose exported target is repaired by FindKokkosDebian.
find_package(Kokkos 3.4 CONFIG QUIET)
if(NOT Kokkos_FOUND)
  find_package(KokkosDebian REQUIRED)
endif()

find_dependency(Eigen3 3.3 NO_MODULE)
find_dependency(Boost 1.74)
if(HYBRIDSEQ_WITH_BLAS)
  set(BLA_VENDOR OpenBLAS)
  find_dependency(BLAS)
endif()
