# Tests of the GPU module, built with it (FERRY_HAVE_GPU). Without a CUDA device they check that
# every call fails with FERRY_ENODEV or FERRY_EINVAL and exit 77 (skipped). With one, run
# tests/gpu/device_run.sh: ctest, then compute-sanitizer on each test in short mode.
if(FERRY_HAVE_GPU)
  add_executable(gpu_cache_test gpu/cache_test.c gpu/cache_kernels.cu)
  target_include_directories(gpu_cache_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/gpu ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(gpu_cache_test PRIVATE ferry_gpu_static ferry_testutil Threads::Threads)
  add_test(NAME gpu_cache_test COMMAND gpu_cache_test)
  set_tests_properties(gpu_cache_test PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS gpu)
endif()
