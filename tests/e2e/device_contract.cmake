# The device-true contract without a GPU (device_contract_checks.py): every layout trained on the
# poison and deferred test backends (tests/fixtures/test_backends) to the cpu backend's losses.
if(TARGET fixture_test_backends AND TARGET keel-zero)
  foreach(case single ddp_dp2 zero1_dp2 zero2_dp2 zero3_dp2 tp2_sp pp2_gpipe pp2_1f1b pp2_interleaved pp2_zero-bubble
               offload_cpu offload_nvme resume export)
    add_test(NAME e2e.poison_deferred.${case}
      COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/device_contract_checks.py ${case} --keel ${keel}
              --config ${quickstart} --plugins ${fixtures}/test_backends)
    set_tests_properties(e2e.poison_deferred.${case} PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE TIMEOUT 900)
  endforeach()
endif()
