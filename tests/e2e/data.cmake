# End-to-end tests of the data pipeline (included from tests/e2e/CMakeLists.txt): keel
# prepare-data's shards hold exactly the input files split by file, keel trains from them,
# shards from examples/data/write_llmc_shards.py are read, bad input is refused, and a rerun that
# fails or is stopped leaves the earlier shards as they were.
set(data_checks ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/data_checks.py)
foreach(check prepare_shards trains_from_prepared python_writer prepare_refuses_bad_input prepare_all_or_nothing)
  add_test(NAME e2e.data.${check}
    COMMAND ${data_checks} ${check} --keel $<TARGET_FILE:keel> --config ${PROJECT_SOURCE_DIR}/examples/quickstart.json
            --examples ${PROJECT_SOURCE_DIR}/examples/data)
endforeach()
