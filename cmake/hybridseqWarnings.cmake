# Warning, sanitizer and target-CPU flags for the project's own translation units (tests, bench,
# examples). Kokkos/Eigen/Boost come in as system includes, so -Werror judges only our code.
add_library(hybridseq_warnings INTERFACE)
target_compile_options(hybridseq_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Werror>)
# Under nvcc the host compiler sees the generated code, whose warnings are not ours: the
# diagnostics that matter there are nvcc's own (hybridseqCuda.cmake makes the device ones errors).
if(HYBRIDSEQ_SANITIZE)
  # -Wmaybe-uninitialized: GCC 12 reports false positives inside libstdc++'s std::function
  # and <regex> once ASan instruments them; the warning stays on in the normal build.
  target_compile_options(hybridseq_warnings INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer
                                                      -fno-sanitize-recover=undefined -Wno-maybe-uninitialized)
  target_link_options(hybridseq_warnings INTERFACE -fsanitize=address,undefined)
endif()
if(HYBRIDSEQ_NATIVE)
  # Binaries built this way run only on CPUs with this one's instruction sets.
  target_compile_options(hybridseq_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
endif()
