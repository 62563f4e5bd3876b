# The offload tier end to end (offload_checks.py; included by tests/e2e/CMakeLists.txt, whose
# ${keel}, ${quickstart} and ${KEEL_TEST_PYTHON} it uses): config refusals, bad folders and full
# disks refused at start-up, parity with resident runs bit for bit (1 and 2 ranks), bit-exact
# resume, the JSONL fields and progress line, and SIGKILL. Their scratch folders live in this build folder: /tmp may be a tmpfs,
# which the nvme tier refuses.
if(TARGET keel-offload AND TARGET keel-zero)
  foreach(check refusals bad_paths full_disk parity resume metrics sigkill)
    add_test(NAME e2e.offload.${check}
      COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/offload_checks.py ${check} --keel ${keel}
              --config ${quickstart})
    set_tests_properties(e2e.offload.${check} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 900
      ENVIRONMENT "KEEL_OFFLOAD_TEST_FOLDER=${CMAKE_CURRENT_BINARY_DIR}")
  endforeach()
  set_tests_properties(e2e.offload.parity PROPERTIES LABELS mpi RUN_SERIAL TRUE)
endif()
