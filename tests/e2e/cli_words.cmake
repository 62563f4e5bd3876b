# What the keel command says about itself (included by tests/e2e/CMakeLists.txt, whose ${keel},
# ${quickstart}, ${KEEL_TEST_PYTHON} and keel_error_test() it uses): every command's --help, the
# overview's claims, export's --plugin-path, counts of one in the singular, config messages as sentences.
set(cli_words_checks ${KEEL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli_words_checks.py)
foreach(command run launch inspect validate plugins prepare-data export plot schedule-check)
  add_test(NAME e2e.cli.help.${command} COMMAND ${cli_words_checks} help --keel ${keel} --command ${command})
  set_tests_properties(e2e.cli.help.${command} PROPERTIES LABELS fast)
endforeach()
add_test(NAME e2e.cli.overview COMMAND ${cli_words_checks} overview --keel ${keel})
set_tests_properties(e2e.cli.overview PROPERTIES LABELS fast)
foreach(check export_plugin_path singular config_merge_words)
  add_test(NAME e2e.cli.${check}
    COMMAND ${cli_words_checks} ${check} --keel ${keel} --config ${quickstart} --fixtures ${CMAKE_BINARY_DIR}/fixtures)
endforeach()
keel_error_test(set_inside_a_number
  "--set model\\.n_layer\\.x: model\\.n_layer is an integer, not an object, so it cannot hold \"x\"" "model.n_layer.x=3")
