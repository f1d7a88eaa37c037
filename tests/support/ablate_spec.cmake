# hybridseq-ablate with architecture specs (docs/specs.md).
#   -DMODE=refuse  -DTOOL=… -DCACHE=<dir> -DSPEC=<json> -DREGEX=<expected message>
#       the spec is refused with the message, before anything compiles: CACHE stays absent.
#   -DMODE=cache   -DTOOL=… -DCACHE=<dir> -DWORK_DIR=<dir>
#       a d=4, one-head [SSM, TF] spec (tied, embedding dropout 0.1) compiles and trains; an
#       identical second run compiles nothing (a cache hit) and reproduces the first run's
#       results exactly; a spec that passes validation but violates a layer's static_assert
#       fails with that static_assert's message.
#   -DMODE=data-parallel  -DTOOL=… -DMPIEXEC=… -DCACHE=<dir> -DWORK_DIR=<dir>   (after MODE=cache)
#       the same spec trained data-parallel on 2 ranks, every rank running the variant's
#       executable from the cache: the model of the single-process run, a first-step loss of
#       about ln 34 and a result; without dropout (a runtime option: the same executable) the
#       2-rank run's first-step loss is the single-process one's to 5 digits (the step is the
#       mean over the whole batch's targets, however it is split); a run mixing the variant
#       with a compiled-in preset is refused before anything is built.
# Fails unless results.0.<field> is the same in both JSON texts, for every field named.
function(expect_same_fields one two)
  foreach(field ${ARGN})
    string(JSON a GET "${one}" results 0 ${field})
    string(JSON b GET "${two}" results 0 ${field})
    if(NOT a STREQUAL b)
      message(FATAL_ERROR "results.0.${field} differs between the runs:\n${a}\n${b}")
    endif()
  endforeach()
endfunction()

set(common --steps 20 --warmup 2 --eval-lengths 30 --quiet --variant-cache "${CACHE}" --jobs 1)
set(spec [=[{"model": "stack", "name": "ssm-tf-d4", "tied": true, "embed_dropout": 0.1,
  "pattern": [{"layer": "mamba", "d": 4}, {"layer": "neox", "d": 4, "heads": 1, "window": 20}]}]=])

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

if(MODE STREQUAL "data-parallel")
  execute_process(COMMAND "${MPIEXEC}" -n 2 "${TOOL}" --arch "${spec}" ${common} --ranks data-parallel
                          --json "${WORK_DIR}/data_parallel.json" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("mpirun -n 2, data-parallel:\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the data-parallel run exited with ${rc}")
  endif()
  if(NOT out MATCHES "ssm-tf-d4 is a generated variant; every rank runs its executable"
     OR NOT out MATCHES "0 compiled \\(0.0 s of compile time\\), 1 cache hit")
    message(FATAL_ERROR "the ranks did not run the cached variant's executable")
  endif()
  file(READ "${WORK_DIR}/first.json" one)
  file(READ "${WORK_DIR}/data_parallel.json" two)
  expect_same_fields("${one}" "${two}" arch parameters spec)
  string(JSON source GET "${two}" results 0 compile source)
  string(JSON loss GET "${two}" results 0 final_loss)
  string(JSON start_one GET "${one}" results 0 loss_curve 0)
  string(JSON start_two GET "${two}" results 0 loss_curve 0)
  if(NOT source STREQUAL "cache" OR NOT loss GREATER 0)
    message(FATAL_ERROR "data-parallel result: compile source '${source}', final loss ${loss}")
  endif()
  # Both start from a uniform guess over the task's 34 tokens, ln 34 = 3.526 (their dropout
  # masks differ: one mask for the batch against one per rank's micro-batch).
  message("first-step loss: one process ${start_one}, data-parallel ${start_two}")
  foreach(start ${start_one} ${start_two})
    if(NOT start GREATER 3.47 OR NOT start LESS 3.58)
      message(FATAL_ERROR "a first-step loss of ${start} is not about ln 34 = 3.526")
    endif()
  endforeach()

  # Dropout masks are keyed by the micro-batch, so only a run without dropout can match.
  string(REPLACE [=["embed_dropout": 0.1]=] [=["embed_dropout": 0]=] plain "${spec}")
  execute_process(COMMAND "${TOOL}" --arch "${plain}" ${common} --json "${WORK_DIR}/plain_one.json"
                  RESULT_VARIABLE rc_one OUTPUT_VARIABLE out_one ERROR_VARIABLE err_one)
  execute_process(COMMAND "${MPIEXEC}" -n 2 "${TOOL}" --arch "${plain}" ${common} --ranks data-parallel
                          --json "${WORK_DIR}/plain_two.json" RESULT_VARIABLE rc_two OUTPUT_VARIABLE out_two
                          ERROR_VARIABLE err_two)
  if(NOT rc_one EQUAL 0 OR NOT rc_two EQUAL 0)
    message(FATAL_ERROR "without dropout: exit ${rc_one} (one process), ${rc_two} (2 ranks)\n${err_one}${err_two}")
  endif()
  file(READ "${WORK_DIR}/plain_one.json" one)
  file(READ "${WORK_DIR}/plain_two.json" two)
  string(JSON start_one GET "${one}" results 0 loss_curve 0)
  string(JSON start_two GET "${two}" results 0 loss_curve 0)
  message("first-step loss without dropout: one process ${start_one}, 2 ranks ${start_two}")
  string(SUBSTRING "${start_one}" 0 6 digits_one)
  string(SUBSTRING "${start_two}" 0 6 digits_two)
  if(NOT digits_one STREQUAL digits_two)
    message(FATAL_ERROR "the 2-rank step is not the single-process one: ${start_one} vs ${start_two}")
  endif()

  set(mixed --arch ssm --arch "${spec}" ${common} --ranks data-parallel)
  execute_process(COMMAND "${MPIEXEC}" -n 2 "${TOOL}" ${mixed} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("mixed run:\n${out}${err}")
  if(rc EQUAL 0 OR NOT err MATCHES "--ranks data-parallel trains one generated variant per run, and every row must share its type; this run has 2 types")
    message(FATAL_ERROR "the mixed run was not refused with its message (exit ${rc})")
  endif()
  return()
endif()

file(REMOVE_RECURSE "${CACHE}" "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
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
expect_same_fields("${first}" "${second}" arch parameters final_loss loss_curve accuracy spec)
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
# The verdict is kept: the same spec again is refused from the cache, without a compiler.
execute_process(COMMAND "${TOOL}" --arch "${bad}" ${common} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("static_assert run again:\n${out}${err}")
if(rc EQUAL 0 OR NOT err MATCHES "did not compile: static assertion: hybridseq::models::Pha: the sequential arrangement.*an earlier build's result")
  message(FATAL_ERROR "expected the kept static_assert verdict, exit status ${rc}")
endif()
