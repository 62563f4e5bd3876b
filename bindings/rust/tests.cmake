# ctest registrations of the Rust binding (included by bindings/CMakeLists.txt when the core
# and the tests are built). Cargo builds into the build tree and links the core just built;
# without cargo, or without bindgen for the freshness checks, the tests report skipped (77).
set(KEEL_RUST_DIR ${CMAKE_CURRENT_LIST_DIR})
set(KEEL_RUST_ENV
  KEEL_LIB_DIR=${CMAKE_BINARY_DIR}/lib
  CARGO_TARGET_DIR=${CMAKE_BINARY_DIR}/bindings/rust/target)

add_test(NAME rust_binding_cargo_test
         COMMAND ${KEEL_RUST_DIR}/cargo-or-skip.sh test --offline
         WORKING_DIRECTORY ${KEEL_RUST_DIR})
add_test(NAME rust_binding_example_builds
         COMMAND ${KEEL_RUST_DIR}/cargo-or-skip.sh build --offline --example train
         WORKING_DIRECTORY ${KEEL_RUST_DIR})
add_test(NAME rust_bindings_match_abi
         COMMAND ${KEEL_RUST_DIR}/keel-sys/check-fresh.sh)
add_test(NAME rust_bindings_freshness_check_detects_drift
         COMMAND ${KEEL_RUST_DIR}/keel-sys/check-fresh-detects-drift.sh)

set_tests_properties(rust_binding_cargo_test rust_binding_example_builds PROPERTIES
  ENVIRONMENT "${KEEL_RUST_ENV}"
  RESOURCE_LOCK keel_rust_cargo_target  # one cargo at a time in the shared target folder
  TIMEOUT 900)
set_tests_properties(rust_binding_cargo_test rust_binding_example_builds
                     rust_bindings_match_abi rust_bindings_freshness_check_detects_drift PROPERTIES
  SKIP_RETURN_CODE 77
  LABELS "bindings;rust")
