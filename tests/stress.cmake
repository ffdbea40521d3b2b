# Kill-loop stress test: publishers and subscribers in separate processes, SIGKILLed and
# restarted at random while every frame is verified. FERRY_STRESS_SECONDS sets the length of the
# ctest run; for a long run call the program directly: stress_test --seconds 600 --cli build/ferry
set(FERRY_STRESS_SECONDS 40 CACHE STRING "Length of the stress test under ctest, in seconds")
math(EXPR FERRY_STRESS_TIMEOUT "${FERRY_STRESS_SECONDS} + 80")

add_executable(stress_test stress_test.c)
target_link_libraries(stress_test PRIVATE ferry_testutil ferry_static)
add_test(NAME stress_test
         COMMAND stress_test --seconds ${FERRY_STRESS_SECONDS} --cli $<TARGET_FILE:ferry_cli>)
set_tests_properties(stress_test PROPERTIES TIMEOUT ${FERRY_STRESS_TIMEOUT} SKIP_RETURN_CODE 77
                     LABELS stress)
