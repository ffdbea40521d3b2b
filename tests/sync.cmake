# The approximate-time synchroniser: its policy core and the synchroniser over real subscribers.
add_executable(sync_test ${CMAKE_CURRENT_SOURCE_DIR}/sync_test.c)
target_link_libraries(sync_test PRIVATE ferry_testutil ferry_static)
target_include_directories(sync_test PRIVATE ${PROJECT_SOURCE_DIR}/src)
add_test(NAME sync_test COMMAND sync_test)
set_tests_properties(sync_test PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77)
