# What `make install` (cmake --install) puts where, by component:
#   runtime  the shared libraries (package libferry0)
#   dev      headers, the .so links, the static libraries, ferry.pc (ferry-gpu.pc), the CMake
#            package, the documentation (package libferry-dev)
#   cli      the ferry command and its man pages (package ferry)
# Examples, tests, benchmarks (in the CLI) and the bridge's internal libraries are not installed.

# --- libraries and the command ---------------------------------------------------------------
if(FERRY_HAVE_GPU)
  # ferry::gpu (shared) and ferry::gpu_static, as CUDA code names them.
  set_target_properties(ferry_gpu PROPERTIES EXPORT_NAME gpu)
  set_target_properties(ferry_gpu_static PROPERTIES EXPORT_NAME gpu_static)
endif()

install(TARGETS ferry ferry_static EXPORT ferry-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
if(FERRY_HAVE_GPU)
  # An export set of their own: a consumer without a CUDA toolkit still finds ferry::ferry.
  install(TARGETS ferry_gpu ferry_gpu_static EXPORT ferry-gpu-targets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
endif()
install(TARGETS ferry_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT cli)

# --- headers: every public header, C and C++; gpu.h only with the library that implements it --
set(_ferry_header_skip "")
if(NOT FERRY_HAVE_GPU)
  set(_ferry_header_skip PATTERN gpu.h EXCLUDE)
endif()
install(DIRECTORY include/ferry DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev
        FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp" ${_ferry_header_skip})

# --- CMake package: find_package(ferry CONFIG) ----------------------------------------------
include(CMakePackageConfigHelpers)
set(FERRY_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ferry)
install(EXPORT ferry-targets NAMESPACE ferry:: DESTINATION ${FERRY_CMAKE_DIR} COMPONENT dev)
if(FERRY_HAVE_GPU)
  install(EXPORT ferry-gpu-targets NAMESPACE ferry:: DESTINATION ${FERRY_CMAKE_DIR} COMPONENT dev)
endif()
configure_package_config_file(cmake/ferry-config.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/ferry-config.cmake
                              INSTALL_DESTINATION ${FERRY_CMAKE_DIR})
# 0.x: a minor version may break the API, so only the same minor version is compatible.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/ferry-config-version.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ferry-config.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/ferry-config-version.cmake
        DESTINATION ${FERRY_CMAKE_DIR} COMPONENT dev)

# --- pkg-config: ferry.pc, ferry-gpu.pc ------------------------------------------------------
# Written at install time, so that the prefix is the one installed to (cmake --install --prefix,
# CPack's /usr), not the one configured.
set(FERRY_PC_LIBS_PRIVATE "-pthread")
set(FERRY_GPU_PC_LIBS_PRIVATE "")
if(FERRY_HAVE_GPU)
  # The static GPU library needs the CUDA runtime it was built with.
  set(FERRY_GPU_PC_LIBS_PRIVATE "-L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -ldl -lrt -pthread")
endif()
set(_ferry_pc_files ferry)
if(FERRY_HAVE_GPU)
  list(APPEND _ferry_pc_files ferry-gpu)
endif()
# The prefix stays a placeholder in the build tree's copy; the install script fills it in.
set(FERRY_PC_PREFIX "@FERRY_PC_PREFIX@")
foreach(_pc ${_ferry_pc_files})
  configure_file(cmake/${_pc}.pc.in ${CMAKE_CURRENT_BINARY_DIR}/pkgconfig/${_pc}.pc.in @ONLY)
  install(CODE "
    set(FERRY_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
    configure_file(\"${CMAKE_CURRENT_BINARY_DIR}/pkgconfig/${_pc}.pc.in\"
                   \"${CMAKE_CURRENT_BINARY_DIR}/pkgconfig/${_pc}.pc\" @ONLY)
    file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig\"
         TYPE FILE FILES \"${CMAKE_CURRENT_BINARY_DIR}/pkgconfig/${_pc}.pc\")"
    COMPONENT dev)
endforeach()

# --- man pages: ferry(1) and ferry-COMMAND(1), made from the commands' --help -----------------
add_custom_command(OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/man/stamp
                   COMMAND sh ${PROJECT_SOURCE_DIR}/cmake/manpages.sh $<TARGET_FILE:ferry_cli>
                           ${CMAKE_CURRENT_BINARY_DIR}/man ${PROJECT_VERSION}
                   DEPENDS ferry_cli ${PROJECT_SOURCE_DIR}/cmake/manpages.sh
                   COMMENT "Man pages from the commands' --help")
add_custom_target(ferry_man ALL DEPENDS ${CMAKE_CURRENT_BINARY_DIR}/man/stamp)
install(DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/man/ DESTINATION ${CMAKE_INSTALL_MANDIR}/man1
        COMPONENT cli FILES_MATCHING PATTERN "*.1.gz")

# --- documentation ---------------------------------------------------------------------------
file(GLOB _ferry_docs CONFIGURE_DEPENDS docs/*.md)
install(FILES README.md ${_ferry_docs} DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT dev)

# --- make uninstall: what the last install wrote (install_manifest.txt) ----------------------
add_custom_target(uninstall
                  COMMAND ${CMAKE_COMMAND} -DMANIFEST=${CMAKE_CURRENT_BINARY_DIR}/install_manifest.txt
                          -P ${PROJECT_SOURCE_DIR}/cmake/uninstall.cmake
                  COMMENT "Removing what install_manifest.txt lists")
