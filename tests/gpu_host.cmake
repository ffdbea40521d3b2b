# Host frames to the GPU (src/gpu/host.c): multi-process tests with their kernels. Without a
# device they check FERRY_ENODEV and exit 77 (skipped).
if(FERRY_HAVE_GPU)
  add_executable(gpu_host_test gpu/host_test.c gpu/host_kernels.cu)
  # The test reads the core's view of a sample (ferry__sample_where_get) to know its chunk.
  target_include_directories(gpu_host_test PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(gpu_host_test PRIVATE ferry_gpu_static ferry_testutil ferry_static)
  add_test(NAME gpu_host_test COMMAND gpu_host_test)
  set_tests_properties(gpu_host_test PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS gpu)
endif()
