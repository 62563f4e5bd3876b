# What a run shows about itself (included by tests/e2e/CMakeLists.txt, whose ${keel},
# ${quickstart} and ${KEEL_TEST_PYTHON} it uses): the progress bar under a terminal, `keel plot`
# (SVG), keel.plot_metrics (PNG, with matplotlib) and TensorBoard reading our event files.
# TensorBoard and matplotlib come from PyPI into a venv made by scripts/test-venv.sh; offline,
# the tests that need them are skipped (exit 77), not failed.
set(observability_checks ${CMAKE_CURRENT_SOURCE_DIR}/observability_checks.py)
set(KEEL_TEST_VENV ${PROJECT_SOURCE_DIR}/build/test-venv CACHE PATH "venv with PyPI packages for test oracles (tensorboard, matplotlib)")

add_test(NAME e2e.observability.progress_bar
  COMMAND ${KEEL_TEST_PYTHON} ${observability_checks} progress_bar --keel ${keel} --config ${quickstart})
# An error while the bar is drawn, from two ranks under mpirun: each message on a line of its own.
add_test(NAME e2e.observability.progress_bar_errors
  COMMAND ${KEEL_TEST_PYTHON} ${observability_checks} progress_bar_errors --keel ${keel} --config ${quickstart})
set_tests_properties(e2e.observability.progress_bar_errors PROPERTIES SKIP_RETURN_CODE 77 LABELS mpi TIMEOUT 300)
add_test(NAME e2e.observability.plot COMMAND ${KEEL_TEST_PYTHON} ${observability_checks} plot --keel ${keel})
# FIFOs, devices, oversized files and axes that are not finite.
add_test(NAME e2e.observability.plot_untrusted
  COMMAND ${KEEL_TEST_PYTHON} ${observability_checks} plot_untrusted --keel ${keel})

# sh -c 'SCRIPT VENV && VENV/bin/python CHECKS ...': the venv's exit 77 (no PyPI) ends the test as skipped.
add_test(NAME e2e.observability.tensorboard_reads_events
  COMMAND sh -c "\"$1\" \"$2\" && exec \"$2/bin/python\" \"$3\" tensorboard --keel \"$4\" --config \"$5\""
          sh ${PROJECT_SOURCE_DIR}/scripts/test-venv.sh ${KEEL_TEST_VENV} ${observability_checks} ${keel} ${quickstart})
set_tests_properties(e2e.observability.tensorboard_reads_events PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)

# keel.plot_metrics (bindings/python/keel/plot.py) from its source file: reading metrics, and the
# ImportError naming `pip install matplotlib`; the PNG check is skipped, with the reason printed,
# where matplotlib is missing (Debian's python3 has none). The venv run has it and must draw.
set(python_plot_test ${PROJECT_SOURCE_DIR}/bindings/python/tests/test_plot.py)
add_test(NAME e2e.observability.python_plot COMMAND ${KEEL_TEST_PYTHON} ${python_plot_test})
set_tests_properties(e2e.observability.python_plot PROPERTIES LABELS fast)
add_test(NAME e2e.observability.python_plot_matplotlib
  COMMAND sh -c "\"$1\" \"$2\" && exec \"$2/bin/python\" \"$3\" --require-matplotlib"
          sh ${PROJECT_SOURCE_DIR}/scripts/test-venv.sh ${KEEL_TEST_VENV} ${python_plot_test})
set_tests_properties(e2e.observability.python_plot_matplotlib PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
