# The tools run OpenBLAS on kernels that use the CPU's vectors: started without
# OPENBLAS_CORETYPE, hybridseq-bench reports (its JSON context, from kernels::blas_kernels) no
# kernels better for this CPU than those OpenBLAS runs — where OpenBLAS did not know the CPU,
# because the bench restarted itself with OPENBLAS_CORETYPE set.
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
string(JSON better GET "${json}" context openblas_better_kernels)
if(NOT better STREQUAL "")
  message(FATAL_ERROR "OpenBLAS runs its '${kernels}' kernels, which leave this CPU's vectors unused ('${better}' would not)")
endif()
message("OpenBLAS runs its '${kernels}' kernels (none better for this CPU)")
