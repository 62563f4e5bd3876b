# keel_add_plugin(<folder-name> SOURCES ... [LIBS ...]): one plugin library, named
# libkeel-<name>.so, built into the shared plugin folder and installed next to the others.
function(keel_add_plugin name)
  cmake_parse_arguments(PLUGIN "" "" "SOURCES;LIBS" ${ARGN})
  set(target keel-${name})
  add_library(${target} MODULE ${PLUGIN_SOURCES})
  target_link_libraries(${target} PRIVATE keel_abi keel_support ${PLUGIN_LIBS})
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    LIBRARY_OUTPUT_DIRECTORY ${KEEL_PLUGIN_BUILD_DIR}
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  install(TARGETS ${target} LIBRARY DESTINATION ${KEEL_PLUGIN_INSTALL_DIR})
  set_property(GLOBAL APPEND PROPERTY KEEL_PLUGIN_TARGETS ${target})
endfunction()
