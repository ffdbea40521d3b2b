# Hostile peers and fuzzing: processes that break the protocol on purpose (hostile_test), and
# the fuzz targets. In every build the fuzz targets are linked with a small replay main and
# ctest runs them over the corpus kept in tests/fuzz/corpus. With -DFERRY_FUZZ=ON and clang they
# are also built as libFuzzer programs (fuzz_proto, fuzz_conn) against a copy of the library
# compiled with -fsanitize=fuzzer-no-link,address,undefined; tests/fuzz/run.sh drives them.

option(FERRY_FUZZ "Build the libFuzzer targets (clang only)" OFF)

set(FERRY_HOSTILE_DIR ${CMAKE_CURRENT_SOURCE_DIR})

add_executable(hostile_test ${FERRY_HOSTILE_DIR}/hostile_test.c)
target_include_directories(hostile_test PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(hostile_test PRIVATE ferry_testutil ferry_static pthread)
# One ctest entry per scenario, so that they run side by side and a failure names its scenario.
foreach(scenario sub_scribbles pub_scribbles socket_garbage fake_publisher empty_datagram_fds
                 fake_segment_shrink fake_offset_race stall_wakeups blocking_refused
                 silent_lockout hoarder silent_publisher)
  add_test(NAME hostile_${scenario} COMMAND hostile_test ${scenario})
  set_tests_properties(hostile_${scenario} PROPERTIES TIMEOUT 30 SKIP_RETURN_CODE 77)
endforeach()

foreach(target fuzz_proto fuzz_conn)
  add_executable(${target}_replay ${FERRY_HOSTILE_DIR}/fuzz/${target}.c
                                  ${FERRY_HOSTILE_DIR}/fuzz/replay_main.c)
  target_include_directories(${target}_replay PRIVATE ${PROJECT_SOURCE_DIR}/src
                                                      ${FERRY_HOSTILE_DIR}/fuzz)
  target_link_libraries(${target}_replay PRIVATE ferry_static)
  add_test(NAME ${target}_replay
           COMMAND ${target}_replay ${FERRY_HOSTILE_DIR}/fuzz/corpus/${target})
  set_tests_properties(${target}_replay PROPERTIES TIMEOUT 30)
endforeach()

if(FERRY_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "FERRY_FUZZ needs clang (CC=clang)")
  endif()
  # A copy of the library with coverage for the fuzzer and the sanitizers, whatever
  # FERRY_SANITIZE says for the rest of the build.
  set(_fuzz_flags -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
                  -fno-omit-frame-pointer -g)
  add_library(ferry_fuzzlib STATIC ${FERRY_SOURCES})
  target_include_directories(ferry_fuzzlib PUBLIC ${PROJECT_SOURCE_DIR}/include
                                           PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_definitions(ferry_fuzzlib PUBLIC FERRY_STATIC)
  target_compile_options(ferry_fuzzlib PRIVATE ${_fuzz_flags})
  foreach(target fuzz_proto fuzz_conn)
    add_executable(${target} ${FERRY_HOSTILE_DIR}/fuzz/${target}.c)
    target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/src
                                                 ${FERRY_HOSTILE_DIR}/fuzz)
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer,address,undefined
                                             -fno-sanitize-recover=all -fno-omit-frame-pointer -g)
    target_link_libraries(${target} PRIVATE ferry_fuzzlib)
    target_link_options(${target} PRIVATE -fsanitize=fuzzer,address,undefined)
  endforeach()
endif()
