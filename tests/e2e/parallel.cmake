# Data parallelism under mpirun: parity with one rank, bit-exact resume, checkpoints that load
# into another layout, and failure of one rank. Skipped (exit 77) where mpirun is missing.
set(parallel_checks ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/parallel_checks.py)
set(parallel_strategies ddp)
if(TARGET keel-zero)
  set(parallel_strategies ddp,zero1,zero2,zero3,zero2-blocking)
endif()
foreach(check parity resume failure end_of_run)
  add_test(NAME e2e.parallel.${check}
    COMMAND ${parallel_checks} ${check} --keel ${keel} --config ${quickstart} --strategies ${parallel_strategies})
  set_tests_properties(e2e.parallel.${check} PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE)
endforeach()
if(TARGET keel-zero)
  add_test(NAME e2e.parallel.reshard COMMAND ${parallel_checks} reshard --keel ${keel} --config ${quickstart})
  set_tests_properties(e2e.parallel.reshard PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE)
endif()
# Tensor and sequence parallelism (tensor_parallel_checks.py): parity with one rank, resharding
# across (tp, dp, ZeRO) layouts with export, checkpoints of the format before boxes, and a
# sequence-parallel seq_len that tp does not divide, refused at start-up.
if(TARGET keel-zero)
  foreach(check parity reshard format1 end_of_run init_from sequence_parallel_seq_len)
    add_test(NAME e2e.tensor_parallel.${check}
      COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/tensor_parallel_checks.py ${check} --keel ${keel}
              --config ${quickstart} --strategies ddp,zero1,zero2,zero3)
    set_tests_properties(e2e.tensor_parallel.${check} PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE TIMEOUT 1500)
  endforeach()
endif()
# Pipeline parallelism (pipeline_checks.py): parity of every schedule and of pp with dp, tp and
# each strategy against one rank, bit-exact resume, resharding across pp, the end of a run on
# every stage, and failures (keel validate's layout checks, a stage that dies mid-run).
if(TARGET keel-zero)
  foreach(check parity resume reshard end_of_run failure)
    add_test(NAME e2e.pipeline.${check}
      COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/pipeline_checks.py ${check} --keel ${keel}
              --config ${quickstart} --strategies ddp,zero1,zero2,zero3)
    set_tests_properties(e2e.pipeline.${check} PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE TIMEOUT 1500)
  endforeach()
  # Schedules with one mistake each, refused by validate and at start-up (not a hang, not wrong gradients).
  add_test(NAME e2e.pipeline.broken_schedules
    COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/pipeline_checks.py broken_schedules --keel ${keel}
            --config ${quickstart} --fixtures ${fixtures})
  set_tests_properties(e2e.pipeline.broken_schedules PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi TIMEOUT 600)
endif()
# The data-parallel group's two levels (dp_levels_checks.py, parallel.dp_groups): ddp's two-level
# all-reduce and hybrid ZeRO against the flat runs, checkpoints between the layouts, refusals.
if(TARGET keel-zero)
  foreach(check parity reshard diloco refusals)
    add_test(NAME e2e.dp_levels.${check}
      COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/dp_levels_checks.py ${check} --keel ${keel}
              --config ${quickstart})
    set_tests_properties(e2e.dp_levels.${check} PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE)
  endforeach()
endif()
