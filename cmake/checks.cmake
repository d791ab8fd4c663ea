# Repository checks run as ctests (label cpu): the include rules of docs/design/layout.md §3 and the section
# references of the code against the headings of docs/design/. Both are python3 scripts that read the source
# tree only, so they run in every configuration, CUDA or not. Each also has a self-test on a generated tree with
# planted violations, so a check that stopped detecting anything would fail too.
if(NOT FT_BUILD_TESTS)
  return()
endif()
find_package(Python3 COMPONENTS Interpreter)
if(NOT Python3_Interpreter_FOUND)
  message(WARNING "python3 not found: the check_layering and check_doc_refs tests are not registered")
  return()
endif()
foreach(check check_layering check_doc_refs)
  add_test(NAME ${check} COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/${check}
                                 --root ${PROJECT_SOURCE_DIR})
  add_test(NAME ${check}_self_test COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/${check} --self-test)
  set_tests_properties(${check} ${check}_self_test PROPERTIES LABELS cpu)
endforeach()
