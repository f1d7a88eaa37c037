# Compile-fail tests: snippets that must NOT compile, each with the diagnostic it must give
# (Eigen's failtest pattern).
#
#   hybridseq_fail_test(<snippet.cpp>)        ctest `compile_fail.<name>`: the build must fail
#                                             and its output must match the snippet's regex
#   hybridseq_compile_ok_test(<snippet.cpp>)  ctest `compile_ok.<name>`: the build must succeed
#                                             (control: include paths and flags are sound)
#
# A fail snippet carries its expected message, a CMake regular expression, on a line
#   // expect: <regex>
# Each snippet becomes an OBJECT library excluded from the default build, linked to
# hybridseq::hybridseq; the test builds just that target with `cmake --build` and checks the
# outcome with this same file run in script mode (`cmake -P`). Tests are labelled
# `compile_fail` and share a RESOURCE_LOCK, since they all drive the one build tree.

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  # ---- script mode: -DBUILD_DIR= -DTARGET= -DCONFIG= -DSNIPPET= -DMODE=fail|ok -------------
  foreach(var BUILD_DIR TARGET SNIPPET MODE)
    if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
      message(FATAL_ERROR "hybridseqFailTest: -D${var}=... is required")
    endif()
  endforeach()
  set(expect "")
  if(MODE STREQUAL "fail")
    # Read the regex at test time, so editing it needs no reconfigure.
    file(STRINGS "${SNIPPET}" expect_lines REGEX "^// expect: ")
    list(LENGTH expect_lines n)
    if(NOT n EQUAL 1)
      message(FATAL_ERROR "${SNIPPET}: needs exactly one '// expect: <regex>' line, found ${n}")
    endif()
    string(REGEX REPLACE "^// expect: *" "" expect "${expect_lines}")
    string(STRIP "${expect}" expect)
    if(expect STREQUAL "")
      message(FATAL_ERROR "${SNIPPET}: the '// expect:' regex is empty")
    endif()
  endif()
  set(build_args --build "${BUILD_DIR}" --target "${TARGET}")
  if(NOT "${CONFIG}" STREQUAL "")
    list(APPEND build_args --config "${CONFIG}")
  endif()
  set(ENV{LC_ALL} C)  # English diagnostics
  set(ENV{LANG} C)
  execute_process(COMMAND "${CMAKE_COMMAND}" ${build_args}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  string(ASCII 27 esc)
  string(REGEX REPLACE "${esc}\\[[0-9;]*[mK]" "" out "${out}")  # drop colour codes
  if(MODE STREQUAL "ok")
    if(NOT rc EQUAL 0)
      message("compiler said:\n${out}")  # NOTICE: printed verbatim (FATAL_ERROR re-wraps lines)
      message(FATAL_ERROR "compile_ok: snippet must compile but did not (exit ${rc}): ${SNIPPET}")
    endif()
    message(STATUS "compile_ok: ${SNIPPET} compiled")
    return()
  endif()
  if(rc EQUAL 0)
    message(FATAL_ERROR "compile_fail: snippet compiled but must not: ${SNIPPET}")
  endif()
  if(NOT out MATCHES "${expect}")
    message("compiler said:\n${out}")
    message(FATAL_ERROR "compile_fail: expected message not found (snippet failed for another reason?)\n"
                        "  snippet: ${SNIPPET}\n  expected (regex): ${expect}")
  endif()
  message(STATUS "compile_fail: ${SNIPPET} failed to compile with the expected message: ${expect}")
  return()
endif()

# ---- configure mode ---------------------------------------------------------------------

function(_hybridseq_snippet_test snippet mode)
  get_filename_component(src "${snippet}" ABSOLUTE)
  get_filename_component(name "${snippet}" NAME_WE)
  if(NOT EXISTS "${src}")
    message(FATAL_ERROR "hybridseq snippet test: ${src} does not exist")
  endif()
  if(mode STREQUAL "fail")
    file(STRINGS "${src}" expect_lines REGEX "^// expect: ")
    list(LENGTH expect_lines n)
    string(REGEX REPLACE "^// expect: *" "" expect "${expect_lines}")
    string(STRIP "${expect}" expect)
    if(NOT n EQUAL 1 OR expect STREQUAL "")
      message(FATAL_ERROR "${src}: a fail snippet needs exactly one non-empty '// expect: <regex>' line")
    endif()
    string(REGEX MATCH "${expect}" _ "")  # a malformed regex errors here, at configure time
    set(test_name compile_fail.${name})
  else()
    set(test_name compile_ok.${name})
  endif()
  set(tgt hybridseq_compile_${mode}_${name})
  add_library(${tgt} OBJECT EXCLUDE_FROM_ALL "${src}")
  set_target_properties(${tgt} PROPERTIES EXCLUDE_FROM_DEFAULT_BUILD ON)
  target_link_libraries(${tgt} PRIVATE hybridseq::hybridseq)
  # Diagnostics only, no echoed source lines: the regex must match what the compiler says,
  # not a quoted line of code.
  target_compile_options(${tgt} PRIVATE
    $<$<CXX_COMPILER_ID:GNU>:-fno-diagnostics-show-caret -fdiagnostics-color=never>
    $<$<CXX_COMPILER_ID:Clang,AppleClang>:-fno-caret-diagnostics -fno-color-diagnostics>)
  add_test(NAME ${test_name}
           COMMAND "${CMAKE_COMMAND}" "-DBUILD_DIR=${PROJECT_BINARY_DIR}" "-DTARGET=${tgt}"
                   "-DCONFIG=$<CONFIG>" "-DSNIPPET=${src}" "-DMODE=${mode}"
                   -P "${CMAKE_CURRENT_FUNCTION_LIST_FILE}")
  set_tests_properties(${test_name} PROPERTIES LABELS "compile_fail" TIMEOUT 600
                       RESOURCE_LOCK hybridseq_build_tree)
endfunction()

function(hybridseq_fail_test snippet)
  _hybridseq_snippet_test("${snippet}" fail)
endfunction()

function(hybridseq_compile_ok_test snippet)
  _hybridseq_snippet_test("${snippet}" ok)
endfunction()
