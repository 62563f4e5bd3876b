# ctest registration of the Python binding (included by bindings/CMakeLists.txt): run_tests.sh
# pip-installs the package (this build's core, plugins and CLI with the extension, the one part
# compiled) into the build tree's python-venv and runs pytest; 77 means PyPI could not be
# reached for the build tools.
add_test(NAME python_binding COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run_tests.sh ${CMAKE_BINARY_DIR})
set_tests_properties(python_binding PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 900 LABELS "bindings;python")
