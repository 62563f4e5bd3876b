# The Java binding built through SWIG, and its ctest test (included by bindings/CMakeLists.txt
# when the core and the tests are built). Without SWIG 4 or a JDK the test still exists and
# reports why it was skipped (exit 77), so a machine without them shows it instead of hiding it.
find_package(SWIG 4 COMPONENTS java QUIET)
find_package(Java 11 COMPONENTS Development Runtime QUIET)
# FindJNI looks in JAVA_HOME and a few fixed folders; Debian without default-jdk has none of
# them, so point it at the JDK whose javac was found.
if(Java_JAVAC_EXECUTABLE AND NOT JAVA_HOME AND NOT DEFINED ENV{JAVA_HOME})
  get_filename_component(keel_javac_real ${Java_JAVAC_EXECUTABLE} REALPATH)
  get_filename_component(JAVA_HOME ${keel_javac_real}/../.. ABSOLUTE)
endif()
find_package(JNI QUIET)
set(keel_swig_missing "")
if(NOT SWIG_FOUND)
  set(keel_swig_missing "SWIG 4 with Java support (apt-get install swig)")
elseif(NOT Java_FOUND OR NOT JNI_FOUND)
  set(keel_swig_missing "a JDK with JNI headers (apt-get install openjdk-17-jdk-headless)")
endif()
if(keel_swig_missing)
  add_test(NAME swig.java_train COMMAND sh -c "echo 'skipped: no ${keel_swig_missing}'; exit 77")
  set_tests_properties(swig.java_train PROPERTIES SKIP_RETURN_CODE 77)
  return()
endif()

cmake_policy(SET CMP0078 NEW)  # swig_add_library names the target as given
cmake_policy(SET CMP0086 NEW)  # SWIG_MODULE_NAME reaches swig as -module
include(UseSWIG)

set(keel_swig_source ${CMAKE_CURRENT_SOURCE_DIR}/swig/keel.i)
set(keel_swig_java_out ${CMAKE_CURRENT_BINARY_DIR}/swig/java)
set_source_files_properties(${keel_swig_source} PROPERTIES
  CPLUSPLUS ON
  USE_TARGET_INCLUDE_DIRECTORIES ON
  SWIG_MODULE_NAME Keel)
swig_add_library(keeljni TYPE SHARED LANGUAGE java
  OUTPUT_DIR ${keel_swig_java_out}/keel
  OUTFILE_DIR ${CMAKE_CURRENT_BINARY_DIR}/swig
  SOURCES ${keel_swig_source})
set_property(TARGET keeljni PROPERTY SWIG_COMPILE_OPTIONS -package keel)
target_include_directories(keeljni PRIVATE ${JNI_INCLUDE_DIRS})
target_link_libraries(keeljni PRIVATE keel_core)
set_target_properties(keeljni PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)

# javac follows TrainTest's references into the generated and the hand-written sources, so no
# list of SWIG's output files is needed.
set(keel_swig_classes ${CMAKE_CURRENT_BINARY_DIR}/swig/classes)
set(keel_swig_java_src ${CMAKE_CURRENT_SOURCE_DIR}/swig/java)
add_custom_command(OUTPUT ${keel_swig_classes}/TrainTest.class
  COMMAND ${CMAKE_COMMAND} -E make_directory ${keel_swig_classes}
  COMMAND ${Java_JAVAC_EXECUTABLE} -nowarn -d ${keel_swig_classes}
          -sourcepath ${keel_swig_java_out}:${keel_swig_java_src} ${keel_swig_java_src}/TrainTest.java
  DEPENDS keeljni ${keel_swig_java_src}/TrainTest.java ${keel_swig_java_src}/keel/KeelException.java
  COMMENT "javac: the Keel Java binding and TrainTest")
add_custom_target(keel_java_classes ALL DEPENDS ${keel_swig_classes}/TrainTest.class)

add_test(NAME swig.java_train
  COMMAND ${Java_JAVA_EXECUTABLE} -Dkeel.jni.library=$<TARGET_FILE:keeljni> -cp ${keel_swig_classes}
          TrainTest ${CMAKE_CURRENT_BINARY_DIR}/swig/train-test)
set_tests_properties(swig.java_train PROPERTIES TIMEOUT 600)
