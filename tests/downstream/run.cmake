# Installs the build tree into a scratch prefix, then configures, builds and runs
# tests/downstream against that prefix only. Invoked by CTest (test `install.downstream`).
#   -DBUILD_DIR=<hybridseq build dir> -DSOURCE_DIR=<tests/downstream> -DWORK_DIR=<scratch>
#   -DKOKKOS_DIR=<Kokkos_DIR or empty> -DCXX=<compiler>
file(REMOVE_RECURSE "${WORK_DIR}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix"
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${WORK_DIR}/build"
                        "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" "-DKokkos_DIR=${KOKKOS_DIR}"
                        "-DCMAKE_CXX_COMPILER=${CXX}" -DCMAKE_BUILD_TYPE=Release
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the downstream project failed (${rc})")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${WORK_DIR}/build" RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the downstream project failed (${rc})")
endif()
execute_process(COMMAND "${WORK_DIR}/build/downstream" RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the downstream program failed (${rc})")
endif()
