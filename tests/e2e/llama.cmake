# The llama model across layouts (llama_layout_checks.py): tp + sp, pp (1f1b, zero-bubble), ZeRO-3,
# offload against one rank; resharding a (tp 2 + sp, ZeRO-3) checkpoint; recompute bit for bit.
set(llama_config ${CMAKE_CURRENT_SOURCE_DIR}/llama_bytes.json)
foreach(check parity reshard recompute)
  add_test(NAME e2e.llama.${check}
    COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/llama_layout_checks.py ${check} --keel ${keel}
            --config ${llama_config})
  set_tests_properties(e2e.llama.${check} PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE TIMEOUT 1500)
endforeach()
# examples/llama.json: prepare-data with the shipped stdlib tokenizer, then 40 steps whose loss falls.
add_test(NAME e2e.llama.example
  COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/llama_layout_checks.py example --keel ${keel}
          --config ${PROJECT_SOURCE_DIR}/examples/llama.json)
set_tests_properties(e2e.llama.example PROPERTIES TIMEOUT 600)
