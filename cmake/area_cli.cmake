# The `facetrace` CLI: one dispatcher plus one command file per area.
add_executable(facetrace src/cli/main.cpp)
target_include_directories(facetrace PRIVATE ${PROJECT_SOURCE_DIR}/src/cli)
target_link_libraries(facetrace PRIVATE ft_core CLI11::CLI11 spdlog::spdlog ft_warnings)
if(FT_WITH_TRACER)
  target_sources(facetrace PRIVATE src/cli/cmd_render.cpp)
  target_compile_definitions(facetrace PRIVATE FT_HAVE_TRACER=1)
  target_link_libraries(facetrace PRIVATE ft_tracer ft_tracer_io ft_render)
endif()
if(FT_WITH_RUNTIME)
  target_sources(facetrace PRIVATE src/cli/cmd_info.cpp)
  target_compile_definitions(facetrace PRIVATE FT_HAVE_RUNTIME=1)
  target_link_libraries(facetrace PRIVATE ft_runtime nlohmann_json::nlohmann_json)  # info --json
endif()
if(FT_WITH_FACES)
  target_sources(facetrace PRIVATE src/cli/cmd_faces.cpp)
  target_compile_definitions(facetrace PRIVATE FT_HAVE_FACES=1)
  target_link_libraries(facetrace PRIVATE ft_faces nlohmann_json::nlohmann_json)
  if(FT_BUILD_TESTS)
    # docs/faces.md "CLI": the built-in detector with no setup (FACETRACE_MODELS unset), and the bad-input exit
    # code 2 for a missing photo and for a truncated model.
    add_test(NAME cli_faces_detect_builtin
             COMMAND facetrace faces detect --json ${FT_TEST_DATA_DIR}/images/obama_portrait_2012.jpg)
    set_tests_properties(cli_faces_detect_builtin PROPERTIES LABELS cpu
                         ENVIRONMENT_MODIFICATION "FACETRACE_MODELS=unset:"
                         PASS_REGULAR_EXPRESSION
                         "\"width\":910,\"height\":1137,\"faces\":\\[\\{\"score\":0\\.[0-9]+,\"box\":\\[[^{}]*\\]\\}\\]\\}\\]\\}")
    add_test(NAME cli_faces_missing_photo_is_bad_input
             COMMAND sh -c "\"$0\" faces detect \"$1\"; test $? -eq 2" $<TARGET_FILE:facetrace>
                     ${CMAKE_CURRENT_BINARY_DIR}/no_such_photo.jpg)
    add_test(NAME cli_faces_truncated_model_is_bad_input
             COMMAND sh -c "t=$(mktemp) && head -c 100000 \"$1\" > \"$t\" && \"$0\" faces detect --model \"$t\" \"$2\"; r=$?; rm -f \"$t\"; test $r -eq 2"
                     $<TARGET_FILE:facetrace> ${PROJECT_SOURCE_DIR}/models/face_detection_yunet_2023mar.onnx
                     ${FT_TEST_DATA_DIR}/images/obama_portrait_2012.jpg)
    set_tests_properties(cli_faces_missing_photo_is_bad_input cli_faces_truncated_model_is_bad_input
                         PROPERTIES LABELS cpu)
  endif()
endif()
