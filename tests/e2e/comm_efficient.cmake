# The communication-efficient strategies (topk, powersgd, diloco, edit, A-EDiT) under mpirun against
# their bases: limiting cases equal to ddp, fewer bytes a step, bit-exact resume; the gradient noise scale
# and data.batch_schedule; adamw8bit and adafactor: state bytes, resume, reshard, refusals
# (comm_efficient_checks.py).
# Skipped (77) where mpirun is missing.
set(comm_efficient_checks)
if(TARGET keel-ddp AND TARGET keel-diloco AND TARGET keel-sgd AND TARGET keel-zero)
  list(APPEND comm_efficient_checks limits savings resume noise_scale batch_schedule async)
  if(TARGET keel-compact_optimizers AND TARGET keel-offload)
    list(APPEND comm_efficient_checks optimizers)
  endif()
endif()
foreach(check IN LISTS comm_efficient_checks)
  add_test(NAME e2e.comm_efficient.${check}
    COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/comm_efficient_checks.py ${check} --keel ${keel}
            --config ${quickstart})
  set_tests_properties(e2e.comm_efficient.${check} PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE TIMEOUT 900)
endforeach()
