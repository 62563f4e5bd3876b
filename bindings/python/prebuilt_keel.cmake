# The package from a Keel build tree (KEEL_PREBUILT, included by CMakeLists.txt): keel_core as an
# imported library for the extension to link, and the install rules that pack the tree's core,
# plugins and CLI as they were built. Only the CLI's RPATH changes (to $ORIGIN/.., where the core
# lies in the package); the core and plugins need none of the build tree's.
foreach(needed lib/libkeel-core.so bin/keel lib/keel/plugins)
  if(NOT EXISTS ${KEEL_PREBUILT}/${needed})
    message(FATAL_ERROR "KEEL_PREBUILT=${KEEL_PREBUILT} is not a built Keel tree: it has no ${needed} "
                        "(build it first: bash scripts/build.sh)")
  endif()
endforeach()

add_library(keel_core SHARED IMPORTED)
set_target_properties(keel_core PROPERTIES IMPORTED_LOCATION ${KEEL_PREBUILT}/lib/libkeel-core.so
                                           IMPORTED_SONAME libkeel-core.so
                                           INTERFACE_INCLUDE_DIRECTORIES ${keel_root}/abi)

install(FILES ${KEEL_PREBUILT}/lib/libkeel-core.so DESTINATION keel COMPONENT python)
file(GLOB prebuilt_plugins ${KEEL_PREBUILT}/lib/keel/plugins/libkeel-*.so)
install(FILES ${prebuilt_plugins} DESTINATION keel/keel/plugins COMPONENT python)
install(PROGRAMS ${KEEL_PREBUILT}/bin/keel DESTINATION keel/bin COMPONENT python)
install(CODE "file(RPATH_SET FILE \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/keel/bin/keel\" NEW_RPATH \"\$ORIGIN/..\")"
        COMPONENT python)
