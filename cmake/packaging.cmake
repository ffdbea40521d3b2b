# make deb: one Debian package per install component (cmake/install.cmake), built by CPack.
#   libferry0      runtime: libferry.so.0 (and libferry_gpu.so.0 where the GPU module is built)
#   libferry-dev   dev: headers, the .so links, static libraries, pkg-config, CMake package, docs
#   ferry          cli: the command and its man pages
#   python3-ferry  python: the Python module, once a subdirectory installs into that component
# A package is made only for a component that has install rules, so python3-ferry appears with
# the python component. Included when the top-level CMakeLists.txt is done (cmake_language
# DEFER), so that CPack sees every component.

set(CPACK_PACKAGE_NAME ferry)
set(CPACK_PACKAGE_VENDOR "ferry")
set(CPACK_PACKAGE_CONTACT "ferry developers")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
# Each component's description: the package's synopsis line, then the text that follows it.
set(_ferry_about "ferry moves large sensor frames (camera images, point clouds, tensors)
between processes on one host without copying them: a publisher writes a
frame into its own shared memory and every subscriber reads the same pages
through a read-only mapping.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)

set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
# rmw_ferry_cpp (component rmw) goes into a ROS 2 prefix with `make install`: its libraries
# come from ROS 2, which no Debian package provides, so it has no package of its own.
get_cmake_property(_ferry_components COMPONENTS)
list(REMOVE_ITEM _ferry_components rmw)
set(CPACK_COMPONENTS_ALL ${_ferry_components})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "ferry developers")
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# dpkg-shlibdeps (dpkg-dev) derives each package's run-time dependencies from its ELF files.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(_ferry_deb_version "${PROJECT_VERSION}-${CPACK_DEBIAN_PACKAGE_RELEASE}")

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libferry0)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
# A shlibs file for the package that holds shared libraries (libferry0), so that packages built
# against it depend on it.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION
    "zero-copy transport for large sensor frames - shared library\n${_ferry_about}")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libferry-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libferry0 (= ${_ferry_deb_version})")
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "zero-copy transport for large sensor frames - development files\n${_ferry_about}
.
This package holds the headers, the static library, the pkg-config file
(ferry.pc), the CMake package (find_package(ferry CONFIG)) and the
documentation.")

set(CPACK_DEBIAN_CLI_PACKAGE_NAME ferry)
set(CPACK_DEBIAN_CLI_PACKAGE_SECTION utils)
# The command links the library statically; it inspects the status files and sockets of
# programs that use libferry0, so it goes with the library of the same protocol version.
set(CPACK_DEBIAN_CLI_PACKAGE_DEPENDS "libferry0 (= ${_ferry_deb_version})")
set(CPACK_COMPONENT_CLI_DESCRIPTION
    "zero-copy transport for large sensor frames - command-line tool\n${_ferry_about}
.
This package holds the ferry command: pub, echo, hz, topics, info, clean,
the demo, the benchmarks and the DDS bridge where it was built.")

set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-ferry)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "libferry0 (= ${_ferry_deb_version}), python3")
# Frames as arrays (numpy.asarray, the image and tensor helpers) need NumPy; the module imports
# and moves bytes without it.
set(CPACK_DEBIAN_PYTHON_PACKAGE_RECOMMENDS "python3-numpy")
set(CPACK_COMPONENT_PYTHON_DESCRIPTION
    "zero-copy transport for large sensor frames - Python module\n${_ferry_about}
.
This package holds the Python module.")

# The packages land in the build directory; their staging trees stay under _CPack_Packages.
include(CPack)
