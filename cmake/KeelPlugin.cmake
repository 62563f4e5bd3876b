# keel_add_plugin(<folder-name> SOURCES ... [LIBS ...]): one plugin library, named
# libkeel-<name>.so, built into the shared plugin folder and installed next to the others.
# Works in Keel's own tree and, installed, in an out-of-tree project after find_package(Keel).
if(NOT DEFINED KEEL_PLUGIN_BUILD_DIR)
  set(KEEL_PLUGIN_BUILD_DIR ${CMAKE_BINARY_DIR}/lib/keel/plugins)
endif()
function(keel_add_plugin name)
  cmake_parse_arguments(PLUGIN "" "" "SOURCES;LIBS" ${ARGN})
  set(target keel-${name})
  add_library(${target} MODULE ${PLUGIN_SOURCES})
  target_link_libraries(${target} PRIVATE Keel::abi Keel::support ${PLUGIN_LIBS})
  # keel_support's headers are C++17; a project that names no build type still gets optimised code.
  target_compile_features(${target} PRIVATE cxx_std_17)
  target_compile_options(${target} PRIVATE $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:>>:-O2>)
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    LIBRARY_OUTPUT_DIRECTORY ${KEEL_PLUGIN_BUILD_DIR}
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(KEEL_PLUGIN_INSTALL_DIR)
    install(TARGETS ${target} LIBRARY DESTINATION ${KEEL_PLUGIN_INSTALL_DIR})
  endif()
  set_property(GLOBAL APPEND PROPERTY KEEL_PLUGIN_TARGETS ${target})
endfunction()
