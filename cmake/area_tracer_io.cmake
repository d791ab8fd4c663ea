# Tracer I/O: scene JSON, display path (PNG), linear EXR, HDR environment maps; their tests and the tracer
# benchmark.
add_library(ft_tracer_io STATIC
  src/tracer/io/scene_json.cpp
  src/tracer/io/output.cpp
  src/tracer/io/env_map.cpp)
target_include_directories(ft_tracer_io PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> PRIVATE ${PROJECT_SOURCE_DIR}/src/tracer)
target_link_libraries(ft_tracer_io
  PUBLIC ft_core ft_tracer
  PRIVATE nlohmann_json::nlohmann_json PNG::PNG OpenEXR::OpenEXR ft_warnings)

if(FT_BUILD_TESTS)
  ft_add_test(tracer_io_scene_json_test cpu SOURCES tests/unit/tracer_io_scene_json_test.cpp
              LIBS ft_tracer_io ft_tracer)
  target_compile_definitions(tracer_io_scene_json_test PRIVATE FT_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  ft_add_test(tracer_io_output_test cpu SOURCES tests/unit/tracer_io_output_test.cpp
              LIBS ft_tracer_io PNG::PNG OpenEXR::OpenEXR)  # OpenEXR: the test reads the EXR's parts itself
  ft_add_test(tracer_io_env_map_test cpu SOURCES tests/unit/tracer_io_env_map_test.cpp
              LIBS ft_tracer_io OpenEXR::OpenEXR)  # OpenEXR: the test writes its maps itself
  target_compile_definitions(tracer_io_env_map_test PRIVATE FT_FUZZ_CORPUS_DIR="${PROJECT_SOURCE_DIR}/tests/fuzz/corpus"
                                                         FT_EXAMPLES_DIR="${PROJECT_SOURCE_DIR}/examples")
  # HDR environments on the CPU tracer (docs/design/tracer.md §6.1): needs the physics headers and the renderer.
  ft_add_test(tracer_hdr_env_test cpu SOURCES tests/unit/tracer_hdr_env_test.cpp LIBS ft_tracer_io ft_render ft_tracer)
  target_include_directories(tracer_hdr_env_test PRIVATE ${PROJECT_SOURCE_DIR}/src/tracer)
  target_compile_definitions(tracer_hdr_env_test PRIVATE FT_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
endif()

if(FT_BUILD_BENCHMARKS)
  add_executable(bench_tracer benchmarks/bench_tracer.cpp)
  target_link_libraries(bench_tracer PRIVATE ft_tracer ft_tracer_io ft_render ft_core ft_bench_common CLI11::CLI11
                        ft_warnings)
  if(FT_BUILD_TESTS)
    add_test(NAME bench_tracer_smoke COMMAND bench_tracer --device cpu --short)
    set_tests_properties(bench_tracer_smoke PROPERTIES LABELS cpu TIMEOUT 120)
  endif()
endif()

# CLI smoke tests (label cpu): a tiny render with PNG + EXR, and bad input exiting with code 2.
if(FT_BUILD_TESTS)
  add_test(NAME render_cli_smoke
           COMMAND facetrace render --width 16 --height 12 --spp 2 --quiet
                   -o ${CMAKE_CURRENT_BINARY_DIR}/render_cli_smoke.png --exr ${CMAKE_CURRENT_BINARY_DIR}/render_cli_smoke.exr)
  add_test(NAME render_cli_bad_input_exits_2
           COMMAND sh -c "$<TARGET_FILE:facetrace> render --spp 0 --quiet; test $? -eq 2")
  add_test(NAME render_cli_gpu_is_a_clear_error
           COMMAND sh -c "$<TARGET_FILE:facetrace> render --device gpu --quiet 2>&1 | grep -q 'no usable GPU'")
  # The HDR example renders on the CPU as docs/scene-format.md says (tracer_gpu_test renders it on the GPU).
  add_test(NAME render_cli_hdr_example_on_the_cpu
           COMMAND facetrace render ${PROJECT_SOURCE_DIR}/examples/diamond-hdr.json --device cpu --width 24
                   --height 24 --spp 2 --quiet -o ${CMAKE_CURRENT_BINARY_DIR}/render_cli_hdr_example.png)
  set_tests_properties(render_cli_smoke render_cli_bad_input_exits_2 render_cli_gpu_is_a_clear_error
                       render_cli_hdr_example_on_the_cpu
                       PROPERTIES LABELS cpu TIMEOUT 120)
endif()
