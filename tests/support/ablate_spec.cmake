# hybridseq-ablate with architecture specs (docs/specs.md).
#   -DMODE=refuse  -DTOOL=… -DCACHE=<dir> -DSPEC=<json> -DREGEX=<expected message>
#       the spec is refused with the message, before anything compiles: CACHE stays absent.
#   -DMODE=cache   -DTOOL=… -DCACHE=<dir> -DWORK_DIR=<dir>
#       a d=4, one-head [SSM, TF] spec (tied, embedding dropout 0.1) compiles and trains; an
#       identical second run compiles nothing (a cache hit) and reproduces the first run's
#       results exactly; a spec that passes validation but violates a layer's static_assert
#       fails with that static_assert's message.
set(common --steps 20 --warmup 2 --eval-lengths 30 --quiet --variant-cache "${CACHE}" --jobs 1)

if(MODE STREQUAL "refuse")
  file(REMOVE_RECURSE "${CACHE}")
  execute_process(COMMAND "${TOOL}" --arch "${SPEC}" ${common} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  message("${out}${err}")
  if(rc EQUAL 0)
    message(FATAL_ERROR "the spec was accepted (exit 0)")
  endif()
  if(NOT "${out}${err}" MATCHES "${REGEX}")
    message(FATAL_ERROR "the message does not match: ${REGEX}")
  endif()
  if(EXISTS "${CACHE}")
    message(FATAL_ERROR "the refusal came after the cache was touched: ${CACHE} exists")
  endif()
  return()
endif()

file(REMOVE_RECURSE "${CACHE}" "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(spec [=[{"model": "stack", "name": "ssm-tf-d4", "tied": true, "embed_dropout": 0.1,
  "pattern": [{"layer": "mamba", "d": 4}, {"layer": "neox", "d": 4, "heads": 1, "window": 20}]}]=])
foreach(run first second)
  execute_process(COMMAND "${TOOL}" --arch "${spec}" ${common} --json "${WORK_DIR}/${run}.json"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${run} run:\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the ${run} run exited with ${rc}")
  endif()
  set(${run}_out "${out}")
endforeach()
if(NOT first_out MATCHES "1 compiled \\([0-9.]+ s of compile time\\), 0 cache hit")
  message(FATAL_ERROR "the first run did not compile the variant")
endif()
if(NOT second_out MATCHES "0 compiled \\(0.0 s of compile time\\), 1 cache hit")
  message(FATAL_ERROR "the second run was not a cache hit")
endif()
file(READ "${WORK_DIR}/first.json" first)
file(READ "${WORK_DIR}/second.json" second)
foreach(field arch parameters final_loss loss_curve accuracy spec)
  string(JSON a GET "${first}" results 0 ${field})
  string(JSON b GET "${second}" results 0 ${field})
  if(NOT a STREQUAL b)
    message(FATAL_ERROR "results.0.${field} differs between the runs:\n${a}\n${b}")
  endif()
endforeach()
string(JSON source GET "${second}" results 0 compile source)
string(JSON tied GET "${first}" results 0 spec tied)
string(JSON params GET "${first}" results 0 parameters)
if(NOT source STREQUAL "cache" OR NOT tied)
  message(FATAL_ERROR "expected compile.source 'cache' and a tied spec, got '${source}', tied ${tied}")
endif()

set(bad [=[{"model": "pha", "block": {"d": 8, "arrangement": "sequential", "branch_norm": false}}]=])
execute_process(COMMAND "${TOOL}" --arch "${bad}" ${common} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("static_assert run:\n${out}${err}")
if(rc EQUAL 0 OR NOT err MATCHES "did not compile: static assertion: hybridseq::models::Pha: the sequential arrangement")
  message(FATAL_ERROR "expected the Pha static_assert's message, exit status ${rc}")
endif()
