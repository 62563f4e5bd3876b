# The llama model across layouts (llama_layout_checks.py): tp + sp, pp (1f1b, zero-bubble), ZeRO-3,
# offload against one rank; the biases (attention_bias, mlp_bias) under tp + sp, ZeRO-3 and
# zero-bubble; resharding a (tp 2 + sp, ZeRO-3) checkpoint; recompute bit for bit.
set(llama_config ${CMAKE_CURRENT_SOURCE_DIR}/llama_bytes.json)
foreach(check parity bias_parity reshard recompute)
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

# Refusals: the llama config's relations, named with both values, and tensor-parallel layouts it
# cannot split (key/value heads are split, not replicated).
set(llama_small "\"plugin\":\"llama\",\"n_layer\":2,\"d_model\":48,\"vocab_size\":256,\"seq_len\":128")
keel_error_test(llama_kv_heads_not_dividing "model\\.n_kv_head: must divide model\\.n_head \\(6\\), found 4"
  "model={${llama_small},\"n_head\":6,\"n_kv_head\":4}")
keel_error_test(llama_odd_head_dim "the head dimension model\\.d_model / model\\.n_head \\(48 / 16 = 3\\) must be even"
  "model={${llama_small},\"n_head\":16}")
keel_error_test(llama_rope_scaling_kind "model\\.rope_scaling\\.rope_type: only \"llama3\" frequency scaling is supported, found \"yarn\""
  "model={${llama_small},\"n_head\":6,\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4}}")
keel_error_test(llama_both_biases "model\\.attention_bias and model\\.mlp_bias together are refused: no transformers model"
  "model={${llama_small},\"n_head\":6,\"attention_bias\":true,\"mlp_bias\":true}")
keel_layout_test(llama_tp_above_kv_heads 4
  "model\\.n_kv_head \\(2\\) must be a multiple of the tensor-parallel size at parallel\\.tp = 4.*does not replicate"
  "model={${llama_small},\"n_head\":8,\"n_kv_head\":2}" "parallel.tp=4")
keel_valid_layout_test(llama_tp_at_kv_heads 2 "tp 2"
  "model={${llama_small},\"n_head\":8,\"n_kv_head\":2}" "parallel.tp=2" "parallel.sequence_parallel=true")

# The device-true contract for llama: the poison and deferred test backends (host reads of
# backend memory, missing ordering) train it to the cpu backend's losses bit for bit, in fp32
# and bf16 (within the bf16 bound of fp32), with grouped-query attention (4 query, 2 kv heads).
if(TARGET fixture_test_backends AND TARGET keel-zero)
  foreach(case single zero3_dp2 tp2_sp pp2_zero-bubble offload_cpu bf16_single bf16_zero3_dp2 bf16_tp2_sp bf16_pp2_1f1b)
    add_test(NAME e2e.llama.poison_deferred.${case}
      COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/device_contract_checks.py ${case} --keel ${keel}
              --config ${llama_config} --plugins ${fixtures}/test_backends --set model.n_head=4 --set model.n_kv_head=2
              --set model.d_model=48)
    set_tests_properties(e2e.llama.poison_deferred.${case} PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE
                         TIMEOUT 900)
  endforeach()
endif()
