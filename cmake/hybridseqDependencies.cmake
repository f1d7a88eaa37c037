# Finds hybridseq's dependencies. Shared by the build and by the installed package config,
# so a downstream project resolves them exactly as the build did.
include(CMakeFindDependencyMacro)

# Kokkos: any Kokkos 3.4–4.x through Kokkos_ROOT / CMAKE_PREFIX_PATH, else Debian's
# libtrilinos-kokkos-dev, whose exported target is repaired by FindKokkosDebian.
if(HYBRIDSEQ_CUDA)
  # Our CUDA sources go to nvcc as CMake's CUDA language (hybridseqCuda.cmake); without this
  # component a Cuda Kokkos would also reroute every C++ compile through its nvcc_wrapper.
  find_package(Kokkos 3.4 CONFIG QUIET COMPONENTS separable_compilation)
else()
  find_package(Kokkos 3.4 CONFIG QUIET)
endif()
# Debian's TriBITS-generated config sets Kokkos_INCLUDE_DIRS to <prefix>/include/trilinos,
# where the headers are, while its target points elsewhere: that is the one to repair.
if(NOT Kokkos_FOUND OR Kokkos_INCLUDE_DIRS MATCHES "trilinos")
  find_package(KokkosDebian REQUIRED)
endif()

# Eigen 3.4: Eigen::bfloat16 (io/safetensors.hpp) first appeared there.
find_dependency(Eigen3 3.4 NO_MODULE)
find_dependency(Boost 1.74)
# nlohmann-json (Debian nlohmann-json3-dev): the safetensors header in io/. 3.9 brought
# ordered_json, which the writer needs for the reference field order.
find_dependency(nlohmann_json 3.9)
# The host GEMM backend, as target hybridseq::blas.
# When Kokkos runs on OpenMP, OpenBLAS must share OpenMP's thread pool: the pthread build's
# threads compete with Kokkos' OpenMP threads, which spin after each parallel region, and
# on 2 cores that cost Linear 14% against raw sgemm. Debian's OpenMP flavour of OpenBLAS
# (libopenblas0-openmp) is therefore preferred whenever Kokkos has OpenMP.
if(HYBRIDSEQ_WITH_BLAS AND NOT TARGET hybridseq::blas)
  set(_hybridseq_blas_lib "")
  if(Kokkos_DEVICES MATCHES "OPENMP")
    find_library(HYBRIDSEQ_OPENBLAS_OPENMP NAMES libopenblas.so.0 openblas
                 PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp NO_DEFAULT_PATH)
    set(_hybridseq_blas_lib "${HYBRIDSEQ_OPENBLAS_OPENMP}")
  endif()
  if(_hybridseq_blas_lib)
    add_library(hybridseq::blas SHARED IMPORTED)
    set_target_properties(hybridseq::blas PROPERTIES IMPORTED_LOCATION "${_hybridseq_blas_lib}")
  else()
    set(BLA_VENDOR OpenBLAS)
    find_dependency(BLAS)
    add_library(hybridseq::blas INTERFACE IMPORTED)
    set_target_properties(hybridseq::blas PROPERTIES INTERFACE_LINK_LIBRARIES BLAS::BLAS)
  endif()
endif()
# The device GEMM backend on a Cuda Kokkos (kernels/gemm.hpp), as target hybridseq::cublas:
# cuBLAS from the CUDA toolkit the Kokkos was built with.
if(Kokkos_DEVICES MATCHES "CUDA" AND NOT TARGET hybridseq::cublas)
  find_dependency(CUDAToolkit)
  add_library(hybridseq::cublas INTERFACE IMPORTED)
  set_target_properties(hybridseq::cublas PROPERTIES INTERFACE_LINK_LIBRARIES CUDA::cublas
                                                     INTERFACE_COMPILE_DEFINITIONS HYBRIDSEQ_WITH_CUBLAS)
endif()
# DSS's convolution on a Cuda Kokkos (kernels/dss_cufft.hpp), as target hybridseq::cufft.
if(Kokkos_DEVICES MATCHES "CUDA" AND NOT TARGET hybridseq::cufft)
  find_dependency(CUDAToolkit)
  add_library(hybridseq::cufft INTERFACE IMPORTED)
  set_target_properties(hybridseq::cufft PROPERTIES INTERFACE_LINK_LIBRARIES CUDA::cufft
                                                    INTERFACE_COMPILE_DEFINITIONS HYBRIDSEQ_WITH_CUFFT)
endif()
