# The tools run OpenBLAS on kernels that use the CPU's vectors: started without
# OPENBLAS_CORETYPE on a CPU with AVX2, hybridseq-bench reports (its JSON context
# `openblas_kernels`) a core whose kernels use AVX2 or AVX-512 — where OpenBLAS did not know the
# CPU, because the bench restarted itself with OPENBLAS_CORETYPE set.
# cmake -DBENCH=<hybridseq-bench> -DWORK_DIR=<dir> -P blas_kernels.cmake
file(MAKE_DIRECTORY "${WORK_DIR}")
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=OPENBLAS_CORETYPE OMP_NUM_THREADS=1 "${BENCH}"
                        "--benchmark_filter=^sgemm/space:Serial/threads:1/M:4096/K:256/N:768/"
                        --benchmark_min_time=0.01 "--benchmark_out=${WORK_DIR}/blas_kernels.json"
                        --benchmark_out_format=json
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
message("${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "hybridseq-bench exited with ${rc}")
endif()
file(READ "${WORK_DIR}/blas_kernels.json" json)
string(JSON kernels GET "${json}" context openblas_kernels)
string(TOLOWER "${kernels}" kernels)
file(READ /proc/cpuinfo cpuinfo)
if(kernels STREQUAL "")
  message("the BLAS is not OpenBLAS: nothing to check")
elseif(NOT cpuinfo MATCHES "[ \t]avx2[ \t\n]")
  message("this CPU has no AVX2: OpenBLAS runs '${kernels}'")
elseif(kernels MATCHES "^(haswell|zen|skylakex|cooperlake|sapphirerapids|excavator)$")
  message("OpenBLAS runs its '${kernels}' kernels")
else()
  message(FATAL_ERROR "OpenBLAS runs its '${kernels}' kernels, which leave this CPU's AVX2 unused")
endif()
