# The examples (examples/), run end to end by examples_test.sh in a private domain directory:
# camera_pub + consumer, camera_pub + lidar_pub + fusion, and camera_pub + gpu_consumer when the
# GPU module is built (that part is skipped without a device).
set(_ferry_examples_gpu "")
if(FERRY_HAVE_GPU)
  set(_ferry_examples_gpu $<TARGET_FILE:example_gpu_consumer>)
endif()
add_test(NAME examples_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/examples_test.sh
                 $<TARGET_FILE_DIR:example_camera_pub> ${_ferry_examples_gpu})
set_tests_properties(examples_test PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77)
