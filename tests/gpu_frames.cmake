# Device frames across processes (src/gpu/frames.c): multi-process tests with their kernels.
# Without a device they check FERRY_ENODEV and exit 77 (skipped).
if(FERRY_HAVE_GPU)
  add_executable(gpu_frames_test gpu/frames_test.c gpu/frames_kernels.cu)
  # The test reads the core's view of a sample (chunk index) and the module's counters.
  target_include_directories(gpu_frames_test PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(gpu_frames_test PRIVATE ferry_gpu_static ferry_testutil ferry_static)
  add_test(NAME gpu_frames_test COMMAND gpu_frames_test)
  set_tests_properties(gpu_frames_test PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS gpu)
endif()
