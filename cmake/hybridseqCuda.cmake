# The CUDA configuration (-DHYBRIDSEQ_CUDA=ON, with a Kokkos built for Cuda: scripts/build-kokkos.sh
# --cuda). The project's own translation units (tests, bench, examples) are compiled by nvcc as
# CUDA sources, so the same binaries run every test family on Kokkos::Cuda beside Serial.
#
# Kokkos' exported flags target nvcc_wrapper as the C++ compiler; CMake 3.25's CUDA language
# instead runs nvcc itself, so the flags Kokkos would add (extended lambdas, relaxed constexpr)
# are given here, and C++20 by hand (CMake 3.25 has no CUDA 20 dialect).
if(NOT Kokkos_DEVICES MATCHES "CUDA")
  message(FATAL_ERROR "HYBRIDSEQ_CUDA=ON needs a Kokkos built with Cuda (this one has ${Kokkos_DEVICES}); "
                      "`bash scripts/build-kokkos.sh --cuda` builds one, then pass its prefix as Kokkos_ROOT")
endif()
set(HYBRIDSEQ_CUDA_ARCHITECTURES "90" CACHE STRING "GPU architectures to compile for (CMake CUDA_ARCHITECTURES; 90: H100/H200)")
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES ${HYBRIDSEQ_CUDA_ARCHITECTURES})
endif()
enable_language(CUDA)

# Host calls from device code fail the build (#20011/20013/20015 are warnings by default).
set(hybridseq_cuda_flags -std=c++20 --extended-lambda --expt-relaxed-constexpr -diag-error=20011,20013,20015)
if(Kokkos_VERSION VERSION_LESS 4 AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 13)
  # Kokkos 3.4 against CUDA 13: the runtime-API shim and the software half_t, exactly as the
  # Kokkos build itself (scripts/build-kokkos.sh --cuda).
  list(APPEND hybridseq_cuda_flags -DKOKKOS_ARCH_MAXWELL50 "SHELL:-include ${PROJECT_SOURCE_DIR}/cmake/kokkos3-cuda13-shim.h")
endif()
target_compile_options(hybridseq INTERFACE "$<$<COMPILE_LANGUAGE:CUDA>:${hybridseq_cuda_flags}>")

# hybridseq_cuda_target(<target>): compiles the target's C++ sources as CUDA and links with nvcc.
function(hybridseq_cuda_target target)
  get_target_property(sources ${target} SOURCES)
  list(FILTER sources INCLUDE REGEX "\\.cpp$")
  set_source_files_properties(${sources} TARGET_DIRECTORY ${target} PROPERTIES LANGUAGE CUDA)
  set_target_properties(${target} PROPERTIES LINKER_LANGUAGE CUDA)
endfunction()

# hybridseq_cuda_resources(<target>): ptxas' figures (registers, stack, spills) of every kernel
# the target compiles are kept beside its objects, for `scripts/cuda-resources.sh check`
# (run by scripts/test.sh on the attention and scan kernels).
function(hybridseq_cuda_resources target)
  set_target_properties(${target} PROPERTIES CUDA_COMPILER_LAUNCHER
                        "bash;${PROJECT_SOURCE_DIR}/scripts/cuda-resources.sh;compile")
endfunction()
