# The tools start with the runtime settings they need (tools::restart_with_runtime_settings),
# shown by hybridseq-bench:
#  1. started without OPENBLAS_CORETYPE, GOMP_SPINCOUNT and OMP_WAIT_POLICY, the bench reports
#     (its JSON context, from kernels::blas_kernels) no OpenBLAS kernels better for this CPU
#     than those it runs — where OpenBLAS did not know the CPU, because the bench restarted
#     itself with OPENBLAS_CORETYPE set — and libgomp itself (OMP_DISPLAY_ENV, printed by the
#     last process to start) runs with the tools' spin count;
#  2. started with the user's own GOMP_SPINCOUNT, libgomp runs with it;
#  3. started with OMP_WAIT_POLICY, the spin count is left to libgomp.
# cmake -DBENCH=<hybridseq-bench> -DWORK_DIR=<dir> -P runtime_settings.cmake
file(MAKE_DIRECTORY "${WORK_DIR}")

# Runs the bench on one tiny benchmark with the environment given; sets `json` (its output) and
# `spin` (libgomp's GOMP_SPINCOUNT as the last process to start displayed it).
function(run_bench)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=OPENBLAS_CORETYPE --unset=GOMP_SPINCOUNT
                          --unset=OMP_WAIT_POLICY OMP_DISPLAY_ENV=VERBOSE OMP_NUM_THREADS=1 ${ARGN} "${BENCH}"
                          "--benchmark_filter=^sgemm/space:Serial/threads:1/M:4096/K:256/N:768/"
                          --benchmark_min_time=0.01 "--benchmark_out=${WORK_DIR}/context.json"
                          --benchmark_out_format=json
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "hybridseq-bench exited with ${rc}:\n${err}")
  endif()
  string(REGEX MATCHALL "GOMP_SPINCOUNT = '[0-9]+'" shown "${err}")
  set(last "")  # no display: libgomp is not in this build
  if(shown)
    list(GET shown -1 last)
    string(REGEX REPLACE ".*'([0-9]+)'" "\\1" last "${last}")
  endif()
  file(READ "${WORK_DIR}/context.json" json)
  set(json "${json}" PARENT_SCOPE)
  set(spin "${last}" PARENT_SCOPE)
endfunction()

run_bench()
string(JSON kernels GET "${json}" context openblas_kernels)
string(JSON better GET "${json}" context openblas_better_kernels)
if(NOT better STREQUAL "")
  message(FATAL_ERROR "OpenBLAS runs its '${kernels}' kernels, which leave this CPU's vectors unused ('${better}' would not)")
endif()
message("OpenBLAS runs its '${kernels}' kernels (none better for this CPU)")
if(spin STREQUAL "")
  message("libgomp is not in this build: its spin count is not the tools' to set")
  return()
endif()
if(NOT spin STREQUAL "1000")
  message(FATAL_ERROR "started without GOMP_SPINCOUNT, libgomp ran with GOMP_SPINCOUNT=${spin}, not the tools' 1000")
endif()

run_bench(GOMP_SPINCOUNT=5000)
if(NOT spin STREQUAL "5000")
  message(FATAL_ERROR "started with GOMP_SPINCOUNT=5000, libgomp ran with ${spin}")
endif()

run_bench(OMP_WAIT_POLICY=active)
if(spin STREQUAL "1000")
  message(FATAL_ERROR "started with OMP_WAIT_POLICY=active, the bench still set GOMP_SPINCOUNT=1000")
endif()
message("libgomp's spin count: the tools' 1000 by default, the user's own when set (${spin} under OMP_WAIT_POLICY=active)")
