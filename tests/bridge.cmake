# The DDS bridge (src/bridge, `ferry bridge`): shell scripts that run real processes over real
# sockets, in network namespaces of their own (root needed), plus two plain Cyclone DDS programs
# with their own copy of the ROS 2 types. Every script exits 77 (skipped) when the bridge is not
# built, when not root, or when network namespaces cannot be made.
set(_bridge_plain "none")
if(FERRY_HAVE_BRIDGE)
  idlc_generate(TARGET ferry_test_ros2_idl FILES ${CMAKE_CURRENT_SOURCE_DIR}/bridge/ros2_image_types.idl
                NO_TYPE_INFO DEFAULT_EXTENSIBILITY final)
  foreach(_prog plain_sub plain_pub)
    add_executable(bridge_${_prog} bridge/${_prog}.c ${CMAKE_CURRENT_BINARY_DIR}/ros2_image_types.c)
    add_dependencies(bridge_${_prog} ferry_test_ros2_idl_generate)
    target_include_directories(bridge_${_prog} PRIVATE ${CMAKE_CURRENT_BINARY_DIR}
                               ${CMAKE_CURRENT_SOURCE_DIR}/bridge)
    target_link_libraries(bridge_${_prog} PRIVATE CycloneDDS::ddsc)
    target_compile_options(bridge_${_prog} PRIVATE -Wno-missing-prototypes)
  endforeach()
  # The hostile peer: the same type names, strings as octet sequences (ros2_raw_types.idl).
  idlc_generate(TARGET ferry_test_ros2_raw_idl FILES ${CMAKE_CURRENT_SOURCE_DIR}/bridge/ros2_raw_types.idl
                NO_TYPE_INFO DEFAULT_EXTENSIBILITY final)
  add_executable(bridge_plain_bad bridge/plain_bad.c ${CMAKE_CURRENT_BINARY_DIR}/ros2_raw_types.c)
  add_dependencies(bridge_plain_bad ferry_test_ros2_raw_idl_generate)
  target_include_directories(bridge_plain_bad PRIVATE ${CMAKE_CURRENT_BINARY_DIR}
                             ${CMAKE_CURRENT_SOURCE_DIR}/bridge)
  target_link_libraries(bridge_plain_bad PRIVATE CycloneDDS::ddsc)
  target_compile_options(bridge_plain_bad PRIVATE -Wno-missing-prototypes)
  set(_bridge_plain $<TARGET_FILE_DIR:bridge_plain_sub>)
  # The CDR reader of the in path (src/bridge/bridge_cdr.h), fed valid, truncated and corrupted
  # serialisations; no network, no root.
  add_executable(bridge_cdr_test bridge/cdr_test.c)
  target_link_libraries(bridge_cdr_test PRIVATE ferry_bridge)
  add_test(NAME bridge_cdr_test COMMAND bridge_cdr_test)
  set_tests_properties(bridge_cdr_test PROPERTIES TIMEOUT 60)
endif()

# name -> timeout in seconds; the set runs in about 80 s.
set(FERRY_BRIDGE_TESTS
  bridge_netns_test:60
  bridge_plain_test:45
  bridge_loop_test:60
  bridge_failure_test:90
  bridge_large_test:75
  bridge_fullhd_test:60
  bridge_hostile_test:60
)
foreach(entry IN LISTS FERRY_BRIDGE_TESTS)
  string(REPLACE ":" ";" parts "${entry}")
  list(GET parts 0 name)
  list(GET parts 1 seconds)
  string(REPLACE "bridge_" "" script "${name}")
  add_test(NAME ${name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bridge/${script}.sh
                   $<TARGET_FILE:ferry_cli> ${_bridge_plain})
  # RUN_SERIAL: the large-frame test changes net.core.rmem_max, and CPU-heavy tests side by
  # side would turn timing into flakiness.
  set_tests_properties(${name} PROPERTIES TIMEOUT ${seconds} SKIP_RETURN_CODE 77 RUN_SERIAL ON)
  if(FERRY_SANITIZE)
    # Too slow for 30 fps of large frames: the timed tests check integrity only (lib.sh's loss).
    set_tests_properties(${name} PROPERTIES ENVIRONMENT FERRY_BRIDGE_TEST_SANITIZED=1)
  endif()
endforeach()
