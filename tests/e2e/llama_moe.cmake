# The llama model with experts (issue 42): against transformers' MixtralForCausalLM and
# Qwen2MoeForCausalLM (tests/python/moe_vs_transformers.py, in a venv of transformers 4.46.3:
# Qwen2-MoE is newer than the other oracle tests' 4.38.2), examples/moe.json's loss falling on
# the embedded corpus, recompute and ZeRO-3 (moe_checks.py), and the refusals of what experts
# cannot do yet, each naming the key and the numbers.
add_test(NAME python.moe_vs_transformers
  COMMAND ${KEEL_TEST_PYTHON} ${PROJECT_SOURCE_DIR}/tests/python/moe_vs_transformers.py
          --keel $<TARGET_FILE:keel> --probe $<TARGET_FILE:keel-probe> --venv ${CMAKE_BINARY_DIR}/hf-venv-moe)
set_tests_properties(python.moe_vs_transformers PROPERTIES SKIP_RETURN_CODE 77 RESOURCE_LOCK hf_venv)
add_test(NAME e2e.moe_example_loss_decreases
  COMMAND ${checks} loss_decreases --keel ${keel} --config ${PROJECT_SOURCE_DIR}/examples/moe.json)

set(moe_small "\"plugin\":\"llama\",\"n_layer\":2,\"d_model\":48,\"n_head\":6,\"vocab_size\":256,\"seq_len\":128,\"ffn_hidden\":40")
keel_error_test(moe_topk_above_experts
  "model\\.n_experts_per_token \\(5\\) must be at most model\\.n_experts \\(4\\)"
  "model={${moe_small},\"n_experts\":4,\"n_experts_per_token\":5}")
keel_error_test(moe_capacity_below_zero
  "model\\.capacity_factor: .*-0\\.5"
  "model={${moe_small},\"n_experts\":4,\"capacity_factor\":-0.5}")
keel_error_test(moe_key_without_experts
  "model\\.router_aux_loss_coef is given, but model\\.n_experts is 0 \\(a dense model\\)"
  "model={${moe_small},\"router_aux_loss_coef\":0.01}")
keel_error_test(moe_mixtral_shared_expert
  "model\\.shared_expert_ffn_hidden is 16, but Mixtral has no shared expert"
  "model={${moe_small},\"n_experts\":4,\"shared_expert_ffn_hidden\":16}")
keel_error_test(moe_qwen2_without_shared_expert
  "model\\.shared_expert_ffn_hidden is 0, but with attention_bias the model is exported as transformers' Qwen2MoeForCausalLM"
  "model={${moe_small},\"n_experts\":4,\"attention_bias\":true}")
keel_error_test(moe_layer_index_outside
  "model\\.mlp_only_layers\\[0\\]: expected a layer index in \\[0, 1\\] \\(model\\.n_layer is 2\\), found 2"
  "model={${moe_small},\"n_experts\":4,\"attention_bias\":true,\"shared_expert_ffn_hidden\":16,\"mlp_only_layers\":[2]}")
keel_layout_test(moe_tp 2
  "model\\.n_experts \\(4\\) with parallel\\.tp = 2 is refused: the experts' matrices are not split"
  "model={${moe_small},\"n_experts\":4,\"n_kv_head\":2}" "parallel.tp=2")
keel_layout_test(moe_pp 2
  "model\\.router_aux_loss_coef \\(0\\.010000\\) with parallel\\.pp = 2 is refused: transformers' balancing loss pairs every layer's routing"
  "model={${moe_small},\"n_experts\":4,\"router_aux_loss_coef\":0.01}" "parallel.pp=2")

# Recompute bit for bit with both balancing losses; ZeRO-3 over two ranks within 1e-5 of one.
add_test(NAME e2e.llama_moe.recompute
  COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/moe_checks.py recompute --keel ${keel}
          --config ${CMAKE_CURRENT_SOURCE_DIR}/llama_bytes.json)
set_tests_properties(e2e.llama_moe.recompute PROPERTIES LABELS mpi RUN_SERIAL TRUE)  # its ep 2 part
add_test(NAME e2e.llama_moe.data_parallel
  COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/moe_checks.py data_parallel --keel ${keel}
          --config ${CMAKE_CURRENT_SOURCE_DIR}/llama_bytes.json)
set_tests_properties(e2e.llama_moe.data_parallel PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE)

# The device-true contract with experts (host reads of backend memory, missing ordering): the
# poison and deferred test backends train a Mixtral-layout llama with both balancing losses to the
# cpu backend's losses bit for bit, on one rank, under ZeRO-3 over two data-parallel ranks and with
# the experts split over them (ep 2), in fp32 and bf16 (bf16 also within the bf16 bound of fp32).
if(TARGET fixture_test_backends AND TARGET keel-zero)
  foreach(case single zero3_dp2 bf16_single bf16_zero3_dp2 ep2_zero3 bf16_ep2_zero3)
    add_test(NAME e2e.llama_moe.poison_deferred.${case}
      COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/device_contract_checks.py ${case} --keel ${keel}
              --config ${CMAKE_CURRENT_SOURCE_DIR}/llama_bytes.json --plugins ${fixtures}/test_backends
              --set model.n_head=4 --set model.n_kv_head=2 --set model.n_experts=4
              --set model.router_aux_loss_coef=0.01 --set model.router_z_loss_coef=0.001)
    set_tests_properties(e2e.llama_moe.poison_deferred.${case} PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi
                         RUN_SERIAL TRUE TIMEOUT 900)
  endforeach()
endif()

# Expert parallelism (parallel.ep): the layout's refusals, then ep 2 and 4 against one rank
# (moe_checks.py: losses and every tensor, each expert's gradient, experts that get no token under
# ZeRO-3, a checkpoint resharded ep 4 -> 2 -> 1). Four ranks at most, a tiny model, ~1 minute.
keel_layout_test(ep_not_dividing_dp 4
  "parallel\\.ep: 3 does not divide the data-parallel size 4 \\(4 ranks / \\(tp 1 × pp 1\\)\\)" "parallel.ep=3")
keel_layout_test(ep_without_experts 2
  "parallel\\.ep 2: the model declares no expert tensor" "parallel.ep=2")
keel_layout_test(ep_not_dividing_experts 2
  "parallel\\.ep 2 does not divide model\\.n_experts \\(3\\): each rank of an expert-parallel group holds the same number"
  "model={${moe_small},\"n_experts\":3}" "parallel.ep=2")
foreach(check expert_parallel expert_gradients idle_experts expert_reshard loss_free pipeline expert_offload capacity)
  add_test(NAME e2e.llama_moe.${check}
    COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/moe_checks.py ${check} --keel ${keel}
            --config ${CMAKE_CURRENT_SOURCE_DIR}/llama_bytes.json)
  set_tests_properties(e2e.llama_moe.${check} PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE)
endforeach()
