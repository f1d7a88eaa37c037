# hybridseq-ablate under mpirun: the variants of a preset list and of a grid with seeds, spread
# over 2 ranks, give the one table of a single-process run, row for row (losses, curves,
# accuracies, specs; not the timings); and one variant trained data-parallel on both ranks
# reports a result.
# cmake -DTOOL=<hybridseq-ablate> -DMPIEXEC=<mpiexec> -DWORK_DIR=<dir> -P ablate_ranks.cmake
file(MAKE_DIRECTORY "${WORK_DIR}")
set(args --steps 30 --warmup 3 --arch ssm-tf,pha,tf --eval-lengths 60 --quiet)

function(run name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${name}:\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} exited with ${rc}")
  endif()
endfunction()

# Runs the tool in one process and under mpirun -np 2 (variants spread over the ranks) with the
# same arguments, and checks that both tables hold `count` rows, equal row for row.
function(compare_spread name count)
  run("${name}, one process" "${TOOL}" ${ARGN} --json "${WORK_DIR}/${name}_one.json")
  run("${name}, mpirun -np 2 (spread)" "${MPIEXEC}" -n 2 "${TOOL}" ${ARGN} --json "${WORK_DIR}/${name}_two.json")
  file(READ "${WORK_DIR}/${name}_one.json" one)
  file(READ "${WORK_DIR}/${name}_two.json" two)
  string(JSON n LENGTH "${one}" results)
  string(JSON m LENGTH "${two}" results)
  if(NOT n EQUAL ${count} OR NOT m EQUAL ${count})
    message(FATAL_ERROR "${name}: expected ${count} rows in each table, got ${n} (one process) and ${m} (2 ranks)")
  endif()
  math(EXPR last "${n} - 1")
  foreach(i RANGE ${last})
    foreach(field arch spec seed parameters final_loss loss_curve accuracy length_generalisation mixing_weights)
      string(JSON a GET "${one}" results ${i} ${field})
      string(JSON b GET "${two}" results ${i} ${field})
      if(NOT a STREQUAL b)
        message(FATAL_ERROR "${name}, row ${i}: '${field}' differs between one process and 2 ranks:\n${a}\nvs\n${b}")
      endif()
    endforeach()
  endforeach()
  message("${name}: the 2-rank table equals the single-process one, row for row")
endfunction()

compare_spread(presets 3 ${args})
# A grid with seeds: tf at d = 8 and 16 (both compiled in: tf's and tf-big's types), seeds 1 and 2.
compare_spread(grid 4 --steps 30 --warmup 3 --arch tf --grid d=8,16 --seeds 1,2 --eval-lengths 60 --quiet)

run("mpirun -np 2 (data-parallel)" "${MPIEXEC}" -n 2 "${TOOL}" --steps 30 --warmup 3 --arch pha --quiet --ranks
    data-parallel --json "${WORK_DIR}/data_parallel.json")
file(READ "${WORK_DIR}/data_parallel.json" dp)
string(JSON arch GET "${dp}" results 0 arch)
string(JSON loss GET "${dp}" results 0 final_loss)
if(NOT arch STREQUAL "pha" OR NOT loss GREATER 0)
  message(FATAL_ERROR "data-parallel run: result ${arch} with loss ${loss}")
endif()
