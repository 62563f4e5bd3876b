# The device-true contract without a GPU (device_contract_checks.py): every layout trained on the
# poison and deferred test backends (tests/fixtures/test_backends) to the cpu backend's losses.
if(TARGET fixture_test_backends AND TARGET keel-zero)
  foreach(case single ddp_dp2 zero1_dp2 zero2_dp2 zero3_dp2 tp2_sp pp2_gpipe pp2_1f1b pp2_interleaved pp2_zero-bubble
               offload_cpu offload_nvme resume export bf16_single bf16_zero2_dp2 bf16_zero3_dp2 bf16_tp2_sp
               bf16_pp2_1f1b bf16_offload_cpu bf16_resume)
    add_test(NAME e2e.poison_deferred.${case}
      COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/device_contract_checks.py ${case} --keel ${keel}
              --config ${quickstart} --plugins ${fixtures}/test_backends)
    set_tests_properties(e2e.poison_deferred.${case} PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE TIMEOUT 900)
  endforeach()
endif()
# bf16 where it is not implemented yet is refused at start-up with the reason, never trained in
# fp32 behind the config's back: a model that computes in fp32.
add_test(NAME e2e.run_refuses.bf16_with_mlp
  COMMAND ${checks} run_error --keel ${keel} --config ${quickstart}
          --set "backend={\"plugin\": \"cpu\", \"precision\": \"bf16\"}" --set "model={\"plugin\": \"mlp\"}"
          --pattern "the mlp model computes in fp32 only so far; the backend is configured for bf16")
