# The communication-efficient strategies (topk, powersgd, diloco) under mpirun against their
# bases: limiting cases equal to ddp, fewer bytes a step, bit-exact resume (comm_efficient_checks.py).
# Skipped (77) where mpirun is missing.
if(TARGET keel-ddp AND TARGET keel-diloco AND TARGET keel-sgd)
  foreach(check limits savings resume)
    add_test(NAME e2e.comm_efficient.${check}
      COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/comm_efficient_checks.py ${check} --keel ${keel}
              --config ${quickstart})
    set_tests_properties(e2e.comm_efficient.${check} PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE TIMEOUT 900)
  endforeach()
endif()
