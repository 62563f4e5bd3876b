# Packed batches (issue 43): several documents per sample, attention and rotary positions
# restarting at each. packed_checks.py writes its own packed shards; layouts against one rank
# (ZeRO-3, tp 2 + sp, pp 2) and the poison and deferred backends bit for bit; isolation: packed
# equals the same documents unpacked, and erasing the document starts changes the loss.
if(TARGET fixture_test_backends AND TARGET keel-zero)
  foreach(check layouts isolation)
    add_test(NAME e2e.packed.${check}
      COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/packed_checks.py ${check} --keel ${keel}
              --config ${CMAKE_CURRENT_SOURCE_DIR}/llama_bytes.json --plugins ${fixtures}/test_backends)
    set_tests_properties(e2e.packed.${check} PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE TIMEOUT 900)
  endforeach()
endif()
# A model that cannot keep documents apart refuses a packed batch at its first forward.
add_test(NAME e2e.run_refuses.packed_on_gpt
  COMMAND ${checks} run_error --keel ${keel} --config ${quickstart}
          --pattern "model gpt does not take packed batches"
          --set "data={\"source\":\"shards\",\"train\":\"${PROJECT_SOURCE_DIR}/tests/fixtures/packed_shard.bin\",\"micro_batch\":1,\"global_batch\":1,\"seq_len\":8}"
          --set "model.seq_len=8")
