# Activation recomputation of the gpt model (recompute_checks.py): "selective" and "full" train to
# recompute "none"'s losses, gradient norms and final parameters bit for bit on every layout, and
# keep the activation bytes the formula says. A bad value is refused naming model.recompute; the
# mlp model, which recomputes nothing, refuses the key as unknown.
if(TARGET keel-zero)
  foreach(case single tp2_sp pp2_1f1b pp2_zero-bubble zero3_dp2 bf16_single memory)
    add_test(NAME e2e.recompute.${case}
      COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/recompute_checks.py ${case} --keel ${keel}
              --config ${quickstart})
    set_tests_properties(e2e.recompute.${case} PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE TIMEOUT 900)
  endforeach()
endif()
add_test(NAME e2e.run_refuses.recompute_bad_value
  COMMAND ${checks} run_error --keel ${keel} --config ${quickstart} --set "model.recompute=\"some\""
          --pattern "model.recompute: expected one of \"none\", \"selective\", \"full\", found \"some\"")
add_test(NAME e2e.run_refuses.recompute_with_mlp
  COMMAND ${checks} run_error --keel ${keel} --config ${quickstart}
          --set "model={\"plugin\": \"mlp\", \"recompute\": \"full\"}" --pattern "model.recompute: unknown key")
