# The offload tier end to end (offload_checks.py; included by tests/e2e/CMakeLists.txt, whose
# ${keel}, ${quickstart} and ${KEEL_TEST_PYTHON} it uses): config refusals, bad folders and full
# disks refused at start-up, parity with resident runs bit for bit (1 and 2 ranks), bit-exact
# resume, the JSONL fields and progress line, SIGKILL, SIGINT/SIGTERM, a failing rank's teardown, and
# the removal of tiers whose process died. Their scratch folders live in this build folder: /tmp may be a tmpfs,
# which the nvme tier refuses.
if(TARGET keel-offload AND TARGET keel-zero)
  foreach(check refusals bad_paths full_disk parity resume reshard metrics sigkill signals failure_teardown
                stale_folders)
    add_test(NAME e2e.offload.${check}
      COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/offload_checks.py ${check} --keel ${keel}
              --config ${quickstart})
    set_tests_properties(e2e.offload.${check} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 900
      ENVIRONMENT "KEEL_OFFLOAD_TEST_FOLDER=${CMAKE_CURRENT_BINARY_DIR}")
  endforeach()
  set_tests_properties(e2e.offload.parity e2e.offload.reshard e2e.offload.signals e2e.offload.failure_teardown
    PROPERTIES LABELS mpi RUN_SERIAL TRUE)
endif()

# A strategy built against ABI 0.6 cannot receive a tier: an "offload" section is refused by
# name at validation, before anything is created.
add_library(fixture_strategy_abi06 MODULE ${CMAKE_CURRENT_SOURCE_DIR}/offload_fixtures/strategy_abi06.c)
target_link_libraries(fixture_strategy_abi06 PRIVATE keel_abi)
set_target_properties(fixture_strategy_abi06 PROPERTIES PREFIX "" OUTPUT_NAME "libkeel-strategy-abi06"
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fixtures/strategy_abi06 C_STANDARD 99 C_VISIBILITY_PRESET hidden)
add_test(NAME e2e.offload.strategy_before_0_7_refused
  COMMAND ${checks} error --keel ${keel} --config ${quickstart}
          --pattern "offload: the offload tier came in ABI 0\\.7; parallel\\.strategy\\.plugin 'ddp-abi06' was built against 0\\.6 and cannot keep arrays there"
          --set "plugin_path=\"${CMAKE_BINARY_DIR}/fixtures/strategy_abi06\"" --set "parallel.strategy={\"plugin\": \"ddp-abi06\"}"
          --set "offload={\"plugin\": \"cpu\"}")
# Without the section the same strategy passes validation: the refusal is the tier's alone.
add_test(NAME e2e.offload.strategy_before_0_7_without_offload
  COMMAND ${keel} validate ${quickstart} --set "plugin_path=\"${CMAKE_BINARY_DIR}/fixtures/strategy_abi06\""
          --set "parallel.strategy={\"plugin\": \"ddp-abi06\"}")
set_tests_properties(e2e.offload.strategy_before_0_7_refused e2e.offload.strategy_before_0_7_without_offload
  PROPERTIES TIMEOUT 60)
