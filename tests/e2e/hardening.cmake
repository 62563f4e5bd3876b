# Bad input at the edges of a run (included by tests/e2e/CMakeLists.txt, whose ${keel},
# ${quickstart}, ${KEEL_TEST_PYTHON} and keel_error_test() it uses): deep JSON, wrong types,
# numbers past their range, full disks, an unwritable checkpoint folder, broken plugin files and
# entry tables.
set(hardening_checks ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/hardening_checks.py)
foreach(check deep_json wrong_types metrics_full_disk tensorboard_full_disk checkpoint_full_disk checkpoint_dir_unwritable
              plugin_load_reason plugin_symlink_loop unset_seq_len_hint
              init_from_dangling_link prepare_data_file_reached_twice export_out_is_a_folder
              config_not_a_regular_file)
  add_test(NAME e2e.hardening.${check} COMMAND ${hardening_checks} ${check} --keel ${keel} --config ${quickstart})
  set_tests_properties(e2e.hardening.${check} PROPERTIES TIMEOUT 600)
endforeach()
# Libraries whose entry list is NULL, absurdly long, or lacks a name, version or table.
add_test(NAME e2e.hardening.plugin_entry_table
  COMMAND ${hardening_checks} plugin_entry_table --keel ${keel} --config ${quickstart} --fixtures ${CMAKE_BINARY_DIR}/fixtures)
# A third-party plugin named like a built-in one shadows that name alone.
add_test(NAME e2e.hardening.plugin_name_shadowed
  COMMAND ${hardening_checks} plugin_name_shadowed --keel ${keel} --config ${quickstart} --fixtures ${CMAKE_BINARY_DIR}/fixtures)

keel_error_test(int32_past_range_reports_value "model\\.n_layer: expected a value in \\[1, 4096\\], found 2147483648"
  "model.n_layer=2147483648")
keel_error_test(seed_past_uint64 "train\\.seed: expected a value in \\[0, 18446744073709551615\\], found -1" "train.seed=-1")
keel_error_test(seed_fraction "train\\.seed: expected an integer, found a number 0\\.5" "train.seed=0.5")
keel_error_test(backend_threads_bounded "backend\\.threads: expected a value in \\[0, 1024\\], found 65536"
  "backend.threads=65536")
# keel validate checks the comm section as a run does (it used to pass a misspelt comm key).
keel_error_test(comm_unknown_key "comm mpi: comm\\.timeout: unknown key \\(did you mean \"timeout_s\"\\?\\)"
  "comm={\"plugin\":\"mpi\",\"timeout\":5}")
# Under mpirun, a failure every rank agrees on (an init_from header check) is said once, by rank 0.
add_test(NAME e2e.hardening.agreed_failure_said_once
  COMMAND ${hardening_checks} agreed_failure_said_once --keel ${keel} --config ${quickstart})
set_tests_properties(e2e.hardening.agreed_failure_said_once PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi TIMEOUT 300)
