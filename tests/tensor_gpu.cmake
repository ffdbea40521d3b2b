# Device tensors (src/gpu/tensor_gpu.c): a publisher process of device tensors and a subscriber
# process that views, copies back and exports them (tensor_gpu_test), and the same through
# ctypes into PyTorch and NumPy (dlpack_torch.py). Without a CUDA device (or without torch for
# the device part of the Python test) they exit 77 (skipped) after the checks that need none.
if(FERRY_HAVE_GPU)
  add_executable(tensor_gpu_pub gpu/tensor_gpu_pub.c)
  target_link_libraries(tensor_gpu_pub PRIVATE ferry_gpu_static)

  add_executable(tensor_gpu_test gpu/tensor_gpu_test.c)
  target_link_libraries(tensor_gpu_test PRIVATE ferry_gpu_static ferry_testutil)
  add_dependencies(tensor_gpu_test tensor_gpu_pub)
  add_test(NAME tensor_gpu_test COMMAND tensor_gpu_test $<TARGET_FILE:tensor_gpu_pub>)
  set_tests_properties(tensor_gpu_test PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS gpu)

  # Through Python's ctypes: not with sanitizers, whose runtime Python does not load.
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_Interpreter_FOUND AND NOT FERRY_SANITIZE)
    add_test(NAME tensor_dlpack_torch
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/gpu/dlpack_torch.py
                     --lib $<TARGET_FILE:ferry> --gpu-lib $<TARGET_FILE:ferry_gpu>
                     --pub $<TARGET_FILE:tensor_gpu_pub>)
    set_tests_properties(tensor_dlpack_torch PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS gpu)
  endif()
endif()
