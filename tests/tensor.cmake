# Tensors (src/core/tensor.c): host tensors across a forked publisher, hostile headers, DLPack
# export and its deleter. Built against DLPack's own header when it is installed (static checks
# of the ABI), never needing it.

add_executable(tensor_test tensor_test.c)
target_include_directories(tensor_test PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(tensor_test PRIVATE ferry_testutil ferry_static Threads::Threads)
add_test(NAME tensor_test COMMAND tensor_test)
set_tests_properties(tensor_test PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77)
