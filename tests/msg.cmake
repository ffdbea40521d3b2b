# Typed frames (src/core/msg.c): images and point clouds, in one process.
add_executable(msg_test msg_test.c)
target_link_libraries(msg_test PRIVATE ferry_testutil ferry_static)
add_test(NAME msg_test COMMAND msg_test)
set_tests_properties(msg_test PROPERTIES TIMEOUT 30 SKIP_RETURN_CODE 77)
