# The fault soak (issue 13, docs/runtime.md "Soak"): one gtest binary, soak_test, with its own main (the
# --soak-* flags) and its own log sink (device losses are expected warnings there), registered twice: the
# simulated soak (label cpu) and the GPU soak (label gpu: a real facetrace-gpud; skips without a usable GPU).
if(FT_BUILD_TESTS AND TARGET ft_render AND TARGET ft_faces_gpu)
  add_executable(soak_test tests/soak/soak_test.cpp)
  target_include_directories(soak_test PRIVATE ${PROJECT_SOURCE_DIR}/tests/support ${PROJECT_SOURCE_DIR}/src/tracer
                             ${PROJECT_SOURCE_DIR}/src/faces ${PROJECT_SOURCE_DIR}/cuda)
  target_link_libraries(soak_test PRIVATE ft_render ft_faces_gpu ft_core_internal onnx_proto protobuf::libprotobuf
                        spdlog::spdlog GTest::gtest Threads::Threads ft_warnings)
  add_dependencies(soak_test facetrace-gpud)
  # Under a sanitizer (cmake/sanitizers.cmake) 200 losses instead of 1 000: the same paths, a fifth of the time.
  set(ft_soak_args)
  if(FT_SANITIZE)
    set(ft_soak_args --soak-faults 200)
  endif()
  add_test(NAME soak_simulated COMMAND soak_test --gtest_filter=Soak.* ${ft_soak_args})
  set_tests_properties(soak_simulated PROPERTIES LABELS cpu TIMEOUT 600)
  add_test(NAME soak_gpu COMMAND soak_test --gtest_filter=SoakGpu.*)
  set_tests_properties(soak_gpu PROPERTIES LABELS gpu TIMEOUT 600 SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
endif()
