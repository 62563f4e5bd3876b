# LoRA fine-tuning (issue 43): the llama model's adapters against PEFT's on the same base
# (tests/python/lora_vs_peft.py, in a venv of transformers 4.38.2 with PEFT 0.10.0), the adapters
# under ZeRO-3, tensor parallelism and pipeline stages against one rank and resuming exactly
# (lora_checks.py), and the refusals of bad lora sections, each naming the key.
add_test(NAME python.lora_vs_peft
  COMMAND ${KEEL_TEST_PYTHON} ${PROJECT_SOURCE_DIR}/tests/python/lora_vs_peft.py
          --probe $<TARGET_FILE:keel-probe> --venv ${CMAKE_BINARY_DIR}/hf-venv-peft)
set_tests_properties(python.lora_vs_peft PROPERTIES SKIP_RETURN_CODE 77 RESOURCE_LOCK hf_venv)
