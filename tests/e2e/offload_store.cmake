# The keel executable with arrays in the offload tier (zero 3 + nvme for everything, zero 2 +
# cpu for state and gradients, ddp + nvme for state) against the resident runs: same losses,
# same checkpoint tensors, resume from a resident checkpoint (included from
# tests/e2e/CMakeLists.txt). The nvme tier's folder is under the build folder (O_DIRECT needs a
# real disk, which /tmp may not be).
if(TARGET keel-offload)
  add_test(NAME e2e.offload_store_parity
    COMMAND ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/offload_store_checks.py --keel $<TARGET_FILE:keel>
            --config ${PROJECT_SOURCE_DIR}/examples/quickstart.json --work ${CMAKE_BINARY_DIR}/offload-store-e2e)
  set_tests_properties(e2e.offload_store_parity PROPERTIES TIMEOUT 900)
endif()
