# A lifecycle node holding GPU resources (a device buffer cache, a stream, host registrations of
# a publisher's frames) between configure and cleanup, fed by a forked publisher process.
# Without a device it checks FERRY_ENODEV and a clean failed configure, then exits 77 (skipped).
if(FERRY_HAVE_GPU)
  add_executable(lifecycle_gpu_test gpu/lifecycle_gpu_test.c gpu/lifecycle_gpu_kernels.cu)
  # The test reads the core's view of a sample (its chunk) and the module's registration counts.
  target_include_directories(lifecycle_gpu_test PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(lifecycle_gpu_test PRIVATE ferry_gpu_static ferry_testutil ferry_static)
  add_test(NAME lifecycle_gpu_test COMMAND lifecycle_gpu_test)
  set_tests_properties(lifecycle_gpu_test PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS gpu)
endif()
