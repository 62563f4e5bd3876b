# Context parallelism (issue 44): gpt's and llama's sequences split over cp ranks against one rank
# (cp 2, 4, cp 2 × dp 2 under ZeRO-3, gpt with recompute), the ring's traffic against its formula,
# checkpoints across cp, and the refusals (context_parallel_checks.py).
foreach(check layouts traffic reshard refusals)
  add_test(NAME e2e.context_parallel.${check}
    COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/context_parallel_checks.py ${check} --keel ${keel}
            --config ${quickstart})
  set_tests_properties(e2e.context_parallel.${check} PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE)
endforeach()
if(TARGET fixture_test_backends)
  add_test(NAME e2e.context_parallel.device_true
    COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/context_parallel_checks.py device_true --keel ${keel}
            --config ${quickstart} --plugins ${fixtures}/test_backends)
  set_tests_properties(e2e.context_parallel.device_true PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE)
endif()
add_test(NAME e2e.context_parallel.llama_layouts
  COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/context_parallel_checks.py llama_layouts --keel ${keel}
          --config ${CMAKE_CURRENT_SOURCE_DIR}/llama_bytes.json)
set_tests_properties(e2e.context_parallel.llama_layouts PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE)
