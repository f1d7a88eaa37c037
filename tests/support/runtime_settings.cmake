# The tools start with the runtime settings they need (tools::restart_with_runtime_settings),
# shown by hybridseq-bench's JSON context:
#  1. started without OPENBLAS_CORETYPE, GOMP_SPINCOUNT and OMP_WAIT_POLICY, the bench reports
#     no OpenBLAS kernels better for this CPU than those it runs (where OpenBLAS did not know
#     the CPU, because the bench restarted itself with OPENBLAS_CORETYPE set), and libgomp's
#     spin count set to the tools' value;
#  2. started with the user's own GOMP_SPINCOUNT, the bench keeps it.
# cmake -DBENCH=<hybridseq-bench> -DWORK_DIR=<dir> -P runtime_settings.cmake
file(MAKE_DIRECTORY "${WORK_DIR}")

# Runs the bench on one tiny benchmark with the environment changes given; sets `json`.
function(bench_context)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=OPENBLAS_CORETYPE --unset=GOMP_SPINCOUNT
                          --unset=OMP_WAIT_POLICY ${ARGN} OMP_NUM_THREADS=1 "${BENCH}"
                          "--benchmark_filter=^sgemm/space:Serial/threads:1/M:4096/K:256/N:768/"
                          --benchmark_min_time=0.01 "--benchmark_out=${WORK_DIR}/context.json"
                          --benchmark_out_format=json
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  message("${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "hybridseq-bench exited with ${rc}")
  endif()
  file(READ "${WORK_DIR}/context.json" json)
  set(json "${json}" PARENT_SCOPE)
endfunction()

bench_context()
string(JSON kernels GET "${json}" context openblas_kernels)
string(JSON better GET "${json}" context openblas_better_kernels)
if(NOT better STREQUAL "")
  message(FATAL_ERROR "OpenBLAS runs its '${kernels}' kernels, which leave this CPU's vectors unused ('${better}' would not)")
endif()
message("OpenBLAS runs its '${kernels}' kernels (none better for this CPU)")
string(JSON spin GET "${json}" context gomp_spincount)
if(NOT spin STREQUAL "1000")
  message(FATAL_ERROR "started without GOMP_SPINCOUNT, the bench ran with GOMP_SPINCOUNT='${spin}', not the tools' 1000")
endif()

bench_context(GOMP_SPINCOUNT=5000)
string(JSON spin GET "${json}" context gomp_spincount)
if(NOT spin STREQUAL "5000")
  message(FATAL_ERROR "started with GOMP_SPINCOUNT=5000, the bench ran with GOMP_SPINCOUNT='${spin}'")
endif()
message("libgomp's spin count: the tools' 1000 by default, the user's own when set")
