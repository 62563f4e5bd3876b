# ctest registrations of the Julia binding (included by bindings/CMakeLists.txt). The generator's
# checks use Debian's /usr/bin/python3, the one python3-clang installs into; each reports
# "skipped" (exit 77) when what it needs is missing instead of failing the suite.
set(keel_julia_dir ${CMAKE_CURRENT_SOURCE_DIR}/julia)
set(keel_julia_needs_clang
  "/usr/bin/python3 -c 'import clang.cindex' 2>/dev/null || { echo 'skipped: /usr/bin/python3 has no clang module (apt-get install python3-clang-14)'; exit 77; }")

add_test(NAME julia.libkeel_is_fresh
  COMMAND sh -c "${keel_julia_needs_clang}; exec /usr/bin/python3 ${keel_julia_dir}/generator/generate_libkeel.py --check")
add_test(NAME julia.generator_tests
  COMMAND sh -c "${keel_julia_needs_clang}; exec /usr/bin/python3 -m pytest -q -p no:cacheprovider ${keel_julia_dir}/generator")
add_test(NAME julia.package_tests
  COMMAND ${keel_julia_dir}/run_package_tests.sh $<TARGET_FILE:keel_core>)
set_tests_properties(julia.libkeel_is_fresh julia.generator_tests julia.package_tests PROPERTIES SKIP_RETURN_CODE 77)
set_tests_properties(julia.generator_tests PROPERTIES ENVIRONMENT KEEL_LIB=$<TARGET_FILE:keel_core>)
set_tests_properties(julia.package_tests PROPERTIES TIMEOUT 900)
