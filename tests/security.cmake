# Permissions, resource limits and graceful shutdown. security_test runs peers as another uid
# and needs root for that part (CI runs as root); without root it exits 77 after the rest.

foreach(entry IN ITEMS security_test:30 limits_test:30)
  string(REPLACE ":" ";" parts "${entry}")
  list(GET parts 0 name)
  list(GET parts 1 seconds)
  add_executable(${name} ${name}.c)
  target_link_libraries(${name} PRIVATE ferry_testutil ferry_static)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${seconds} SKIP_RETURN_CODE 77)
endforeach()

add_test(NAME shutdown_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/shutdown_test.sh $<TARGET_FILE:ferry_cli>)
set_tests_properties(shutdown_test PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77)
