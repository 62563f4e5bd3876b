# The example strategy plugin examples/plugins/localsgd built against an installed Keel and
# trained with it, single rank and on two MPI ranks (included from tests/e2e/CMakeLists.txt).
# Skipped (77) where mpirun or the mpi comm plugin is missing.
add_test(NAME e2e.localsgd_example_plugin
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/localsgd_test.sh ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(e2e.localsgd_example_plugin PROPERTIES
  SKIP_RETURN_CODE 77 TIMEOUT 600 PROCESSORS 2 LABELS mpi)
