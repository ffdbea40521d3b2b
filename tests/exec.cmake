# The executor: callbacks and timers over real subscribers fed by publisher processes.
add_executable(exec_test ${CMAKE_CURRENT_SOURCE_DIR}/exec_test.c)
target_link_libraries(exec_test PRIVATE ferry_testutil ferry_static Threads::Threads)
target_include_directories(exec_test PRIVATE ${PROJECT_SOURCE_DIR}/src)
add_test(NAME exec_test COMMAND exec_test)
set_tests_properties(exec_test PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77)
