# `ferry bench bridge --quick` (bench/bridge/): the table, the CSV and the clean-up of its
# namespaces and sysctls, also after SIGINT. Skipped (77) without the bridge, root or `ip`.
# RUN_SERIAL: it changes net.core.rmem_max / wmem_max and wants the CPUs to itself.
add_test(NAME bench_bridge_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bench_bridge_test.sh $<TARGET_FILE:ferry_cli>)
set_tests_properties(bench_bridge_test PROPERTIES TIMEOUT 200 SKIP_RETURN_CODE 77 RUN_SERIAL ON)
