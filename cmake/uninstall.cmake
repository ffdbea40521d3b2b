# make uninstall: removes every file an install listed in its manifest (paths with DESTDIR
# already applied), then the directories of ferry's own (include/ferry, lib/cmake/ferry,
# share/doc/ferry, the Python package's ferry/) once empty, and above them lib/cmake and
# lib/pkgconfig when that left them empty (an install makes them where they were missing).
# Shared directories such as lib/, share/man/man1 or Python's dist-packages stay.
# usage: cmake -DMANIFEST=build/install_manifest.txt -P cmake/uninstall.cmake
if(NOT EXISTS "${MANIFEST}")
  message(FATAL_ERROR "nothing to uninstall: ${MANIFEST} not found (install first)")
endif()
file(STRINGS "${MANIFEST}" _files)
set(_dirs "")
foreach(_f IN LISTS _files)
  if(IS_SYMLINK "${_f}" OR EXISTS "${_f}")
    message(STATUS "Removing ${_f}")
    file(REMOVE "${_f}")
  endif()
  get_filename_component(_d "${_f}" DIRECTORY)
  list(APPEND _dirs "${_d}")
endforeach()
list(REMOVE_DUPLICATES _dirs)
# Upwards from each directory a file was removed from, while the directory is empty and one an
# install makes.
foreach(_d IN LISTS _dirs)
  while(IS_DIRECTORY "${_d}")
    get_filename_component(_name "${_d}" NAME)
    file(GLOB _left "${_d}/*")
    if(_left OR NOT _name MATCHES "^(ferry|cmake|pkgconfig)$")
      break()
    endif()
    message(STATUS "Removing ${_d}/ (left empty)")
    file(REMOVE_RECURSE "${_d}")
    get_filename_component(_d "${_d}" DIRECTORY)
  endwhile()
endforeach()
