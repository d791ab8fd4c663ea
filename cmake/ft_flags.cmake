# INTERFACE flag targets (docs/design/style.md §8).
add_library(ft_warnings INTERFACE)
target_compile_options(ft_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)

add_library(ft_cuda_flags INTERFACE)
target_compile_options(ft_cuda_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CUDA>:--default-stream=per-thread -lineinfo>)
if(FT_SYNC_CHECK)
  target_compile_definitions(ft_cuda_flags INTERFACE FT_SYNC_CHECK=1)
endif()

# ft_add_cpu_test(name sources... LIBS libs...): a GoogleTest binary labelled `cpu`.
function(ft_add_test name label)
  cmake_parse_arguments(A "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_link_libraries(${name} PRIVATE ${A_LIBS} ft_test_support GTest::gtest GTest::gtest_main ft_warnings)
  target_compile_definitions(${name} PRIVATE FT_TEST_DATA_DIR="${FT_TEST_DATA_DIR}")
  gtest_discover_tests(${name} PROPERTIES LABELS ${label} DISCOVERY_TIMEOUT 60)
endfunction()
