# LoRA, QLoRA and QAT fine-tuning (issue 43): the llama and gpt models' adapters against PEFT's on the same base
# (tests/python/lora_vs_peft.py and lora_gpt_vs_peft.py, in the venv of hf_oracle.FINETUNE_PINS: transformers 4.38.2 with PEFT 0.10.0), the adapters
# under ZeRO-3, tensor parallelism and pipeline stages against one rank and resuming exactly
# (lora_checks.py), and the refusals of bad lora sections, each naming the key.
add_test(NAME python.lora_vs_peft
  COMMAND ${KEEL_TEST_PYTHON} ${PROJECT_SOURCE_DIR}/tests/python/lora_vs_peft.py
          --keel $<TARGET_FILE:keel> --probe $<TARGET_FILE:keel-probe> --venv ${CMAKE_BINARY_DIR}/hf-venv-finetune)
set_tests_properties(python.lora_vs_peft PROPERTIES SKIP_RETURN_CODE 77 RESOURCE_LOCK hf_venv)
foreach(check layouts moe_layouts qwen2_moe_merge frozen resume qlora qlora_resume device_true dropout
              moe_dropout)
  add_test(NAME e2e.lora.${check}
    COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/lora_checks.py ${check} --keel ${keel}
            --config ${CMAKE_CURRENT_SOURCE_DIR}/llama_bytes.json --plugins ${fixtures}/test_backends)
  set_tests_properties(e2e.lora.${check} PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE)
endforeach()
add_test(NAME python.lora_gpt_vs_peft
  COMMAND ${KEEL_TEST_PYTHON} ${PROJECT_SOURCE_DIR}/tests/python/lora_gpt_vs_peft.py
          --keel $<TARGET_FILE:keel> --probe $<TARGET_FILE:keel-probe> --venv ${CMAKE_BINARY_DIR}/hf-venv-finetune)
set_tests_properties(python.lora_gpt_vs_peft PROPERTIES SKIP_RETURN_CODE 77 RESOURCE_LOCK hf_venv)
add_test(NAME python.lora_moe_vs_peft
  COMMAND ${KEEL_TEST_PYTHON} ${PROJECT_SOURCE_DIR}/tests/python/lora_moe_vs_peft.py
          --probe $<TARGET_FILE:keel-probe> --venv ${CMAKE_BINARY_DIR}/hf-venv-finetune)
set_tests_properties(python.lora_moe_vs_peft PROPERTIES SKIP_RETURN_CODE 77 RESOURCE_LOCK hf_venv)
add_test(NAME e2e.lora.gpt_layouts
  COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/lora_checks.py gpt_layouts --keel ${keel} --config ${quickstart})
set_tests_properties(e2e.lora.gpt_layouts PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE)
add_test(NAME e2e.lora.gpt_dropout
  COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/lora_checks.py gpt_dropout --keel ${keel} --config ${quickstart})
set_tests_properties(e2e.lora.gpt_dropout PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE)
add_test(NAME e2e.qat.paths
  COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/lora_checks.py qat_paths --keel ${keel} --config ${quickstart})
set_tests_properties(e2e.qat.paths PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE)
set(lora_small "\"plugin\":\"llama\",\"n_layer\":2,\"d_model\":48,\"n_head\":6,\"vocab_size\":256,\"seq_len\":128,\"ffn_hidden\":40")
keel_error_test(lora_unknown_target
  "model\\.lora\\.target_modules: the model has no linear module \"qkv\" \\(it has: q_proj, k_proj"
  "model={${lora_small},\"lora\":{\"r\":4,\"target_modules\":[\"q_proj\",\"qkv\"]}}")
keel_error_test(lora_rank_not_positive
  "model\\.lora\\.r: the adapters' rank must be an integer from 1 to 4096, found 0"
  "model={${lora_small},\"lora\":{\"r\":0}}")
keel_error_test(lora_dropout_bound
  "model\\.lora\\.dropout: expected a value in \\[0\\.0, 0\\.95\\], found 1"
  "model={${lora_small},\"lora\":{\"r\":4,\"dropout\":1}}")
add_test(NAME python.lora_dropout_vs_peft
  COMMAND ${KEEL_TEST_PYTHON} ${PROJECT_SOURCE_DIR}/tests/python/lora_dropout_vs_peft.py
          --probe $<TARGET_FILE:keel-probe> --venv ${CMAKE_BINARY_DIR}/hf-venv-finetune)
set_tests_properties(python.lora_dropout_vs_peft PROPERTIES SKIP_RETURN_CODE 77 RESOURCE_LOCK hf_venv)
# Qwen2-MoE's adapters (routed and shared experts, both routers) dropped, against PEFT 0.13.2 on
# transformers 4.46.3 (the first PEFT of a transformers with Qwen2-MoE that runs on this torch).
add_test(NAME python.lora_dropout_qwen2_moe_vs_peft
  COMMAND ${KEEL_TEST_PYTHON} ${PROJECT_SOURCE_DIR}/tests/python/lora_dropout_vs_peft.py --qwen2-moe
          --probe $<TARGET_FILE:keel-probe> --venv ${CMAKE_BINARY_DIR}/hf-venv-moe-finetune)
set_tests_properties(python.lora_dropout_qwen2_moe_vs_peft PROPERTIES SKIP_RETURN_CODE 77 RESOURCE_LOCK hf_venv)
keel_error_test(lora_experts_names
  "model\\.lora\\.target_modules: the model has no linear module \"gate_proj\" \\(it has: q_proj, k_proj, v_proj, o_proj, w1, w3, w2, gate\\)"
  "model={${lora_small},\"n_experts\":4,\"lora\":{\"r\":4,\"target_modules\":[\"gate_proj\"]}}")
keel_error_test(lora_quantize_base
  "model\\.lora\\.quantize_base: expected \"nf4\" \\(QLoRA: the frozen linear weights kept in 4-bit NormalFloat\\) or \"none\", found \"int4\""
  "model={${lora_small},\"lora\":{\"r\":4,\"quantize_base\":\"int4\"}}")

# Quantization-aware training (model.qat): Keel's fake-quantized forward against weights
# quantized by a numpy reference of torchao's rule, and QAT against post-training quantization.
foreach(check reference export measured)
  add_test(NAME e2e.qat.${check}
    COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/qat_checks.py ${check} --keel ${keel}
            --config ${CMAKE_CURRENT_SOURCE_DIR}/llama_bytes.json)
endforeach()
# Quantized activations (8da4w): gpt against the PyTorch reference is tests/python/test_qat_vs_torch.py
# (in python.gpt_vs_torch); llama against transformers with every projection fake-quantized here.
add_test(NAME python.qat_llama_vs_transformers
  COMMAND ${KEEL_TEST_PYTHON} ${PROJECT_SOURCE_DIR}/tests/python/qat_llama_vs_transformers.py
          --probe $<TARGET_FILE:keel-probe> --venv ${CMAKE_BINARY_DIR}/hf-venv)
set_tests_properties(python.qat_llama_vs_transformers PROPERTIES SKIP_RETURN_CODE 77 RESOURCE_LOCK hf_venv)
# Mixtral's experts and routers under int4 QAT against transformers 4.46.3 (the MoE oracle's venv).
add_test(NAME python.qat_moe_vs_transformers
  COMMAND ${KEEL_TEST_PYTHON} ${PROJECT_SOURCE_DIR}/tests/python/qat_moe_vs_transformers.py
          --probe $<TARGET_FILE:keel-probe> --venv ${CMAKE_BINARY_DIR}/hf-venv-moe)
set_tests_properties(python.qat_moe_vs_transformers PROPERTIES SKIP_RETURN_CODE 77 RESOURCE_LOCK hf_venv)
keel_error_test(qat_bad_activations
  "model\\.qat\\.activations: expected \"int8\" \\(each linear's input fake-quantized per token, asymmetric\\) or \"none\", found \"int4\""
  "model={${lora_small},\"qat\":{\"weights\":\"int4\",\"group_size\":8,\"activations\":\"int4\"}}")
keel_error_test(qat_activations_split_stack
  "model\\.qat\\.target_modules: with activations quantized, q_proj, k_proj, v_proj read one input, quantized once"
  "model={${lora_small},\"qat\":{\"weights\":\"int4\",\"group_size\":8,\"activations\":\"int8\",\"target_modules\":[\"q_proj\"]}}")
keel_error_test(qat_activations_with_lora
  "model\\.qat\\.activations: with LoRA the adapters are folded into the weight"
  "model={${lora_small},\"qat\":{\"weights\":\"int4\",\"group_size\":8,\"activations\":\"int8\"},\"lora\":{\"r\":4}}")
add_test(NAME e2e.qat.gpt
  COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/qat_checks.py gpt --keel ${keel} --config ${quickstart})
keel_error_test(lora_gpt_unknown_target
  "model\\.lora\\.target_modules: the model has no linear module \"q_proj\" \\(it has: c_attn, c_proj, c_fc\\)"
  "model={\"plugin\":\"gpt\",\"n_layer\":2,\"d_model\":64,\"n_head\":4,\"lora\":{\"r\":4,\"target_modules\":[\"q_proj\"]}}")
keel_error_test(qat_bad_weights
  "model\\.qat\\.weights: expected \"int8\" \\(one scale per output channel\\) or \"int4\""
  "model={${lora_small},\"qat\":{\"weights\":\"fp8\"}}")
keel_error_test(qat_activations_with_experts
  "model\\.qat\\.activations: quantized activations beside experts are not supported yet"
  "model={${lora_small},\"qat\":{\"weights\":\"int4\",\"group_size\":8,\"activations\":\"int8\"},\"n_experts\":4}")
