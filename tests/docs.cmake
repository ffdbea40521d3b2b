# The API reference: doxygen over the public headers and the Markdown pages with the project's
# Doxyfile (what `make docs` runs) must give no warning, so an undocumented declaration or a
# broken doc command fails the tests. Skipped when doxygen is not installed.
add_test(NAME docs_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/docs_test.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(docs_test PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
