# Packed batches (issue 43), llama and gpt: several documents per sample, attention and positions
# (rotary or learned) restarting at each. packed_checks.py writes its own packed shards; layouts against one rank
# (ZeRO-3, tp 2 + sp, pp 2) and the poison and deferred backends bit for bit; isolation: packed
# equals the same documents unpacked, and erasing the document starts changes the loss.
if(TARGET fixture_test_backends AND TARGET keel-zero)
  foreach(check layouts isolation)
    add_test(NAME e2e.packed.${check}
      COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/packed_checks.py ${check} --keel ${keel}
              --config ${CMAKE_CURRENT_SOURCE_DIR}/llama_bytes.json --plugins ${fixtures}/test_backends)
    add_test(NAME e2e.packed.gpt_${check}
      COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/packed_checks.py ${check} --keel ${keel}
              --config ${quickstart} --plugins ${fixtures}/test_backends --model gpt)
    set_tests_properties(e2e.packed.${check} e2e.packed.gpt_${check} PROPERTIES
                         SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE TIMEOUT 900)
  endforeach()
endif()
