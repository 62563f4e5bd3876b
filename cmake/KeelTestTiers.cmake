# Test tiers. Every test carries one of two labels, and tests that need mpirun also carry `mpi`:
#   fast  unit tests and keel's refusals of bad configs, a second or less each: `bash
#         scripts/test.sh --fast` runs them (ctest -L fast) after each change;
#   slow  end-to-end runs, the PyTorch oracle, bindings, ABI compatibility builds and fuzzing.
# Tests that start a cluster (tests/cluster: network namespaces, tests/slurm: a one-node Slurm) also
# carry `release`: what a release must pass, minutes of the run; `ctest -LE release` leaves them
# out while developing. CI runs every label, each test once. A unit folder passes ${KEEL_FAST_TEST}
# to gtest_discover_tests' PROPERTIES, and every folder that adds tests calls keel_label_tiers() last.
set(KEEL_FAST_TEST LABELS fast)

# Labels the tests this folder added that carry no tier yet: `fast` when their name matches the
# FAST_MATCHING regex, else `slow`. (CMake sets a test's properties only from the folder that
# added it, hence one call per folder.)
function(keel_label_tiers)
  cmake_parse_arguments(ARG "" "FAST_MATCHING" "" ${ARGN})
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(test IN LISTS tests)
    get_test_property(${test} LABELS labels)
    if("fast" IN_LIST labels OR "slow" IN_LIST labels)
      continue()
    endif()
    if(ARG_FAST_MATCHING AND test MATCHES "${ARG_FAST_MATCHING}")
      set_property(TEST ${test} APPEND PROPERTY LABELS fast)
    else()
      set_property(TEST ${test} APPEND PROPERTY LABELS slow)
    endif()
  endforeach()
endfunction()
