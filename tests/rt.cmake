# Real-time controls and the lifecycle node: rt_test (argument checks, refusals without the
# privilege in a child that dropped it, SCHED_FIFO and pinning applied as root, and a two-process
# 720p stream with 0 page faults and 0 heap calls per frame in steady state) and
# lifecycle_node_test (every transition, managed endpoints, pause, teardown counts).

foreach(entry rt_test:120 lifecycle_node_test:60)
  string(REPLACE ":" ";" parts "${entry}")
  list(GET parts 0 name)
  list(GET parts 1 seconds)
  add_executable(${name} ${CMAKE_CURRENT_SOURCE_DIR}/${name}.c)
  target_link_libraries(${name} PRIVATE ferry_testutil ferry_static Threads::Threads)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${seconds} SKIP_RETURN_CODE 77)
endforeach()
