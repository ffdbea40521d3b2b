# `ferry demo` (what `make demo` runs), in short runs: the tables it prints, its exit status, the
# plot when gnuplot is there, the real-time options, and its usage errors.
add_test(NAME demo_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/demo_test.sh $<TARGET_FILE:ferry_cli>)
set_tests_properties(demo_test PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
