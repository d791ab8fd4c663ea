# Tracer I/O: scene JSON, display path (PNG), linear EXR; their tests and the tracer benchmark.
add_library(ft_tracer_io STATIC
  src/tracer/io/scene_json.cpp
  src/tracer/io/output.cpp)
target_include_directories(ft_tracer_io PUBLIC ${PROJECT_SOURCE_DIR}/include PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(ft_tracer_io
  PUBLIC ft_core ft_tracer
  PRIVATE nlohmann_json::nlohmann_json PNG::PNG OpenEXR::OpenEXR ft_warnings)

if(FT_BUILD_TESTS)
  ft_add_test(tracer_io_scene_json_test cpu SOURCES tests/unit/tracer_io_scene_json_test.cpp
              LIBS ft_tracer_io ft_tracer)
  target_compile_definitions(tracer_io_scene_json_test PRIVATE FT_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  ft_add_test(tracer_io_output_test cpu SOURCES tests/unit/tracer_io_output_test.cpp
              LIBS ft_tracer_io PNG::PNG)
endif()

if(FT_BUILD_BENCHMARKS)
  add_executable(bench_tracer benchmarks/bench_tracer.cpp)
  target_link_libraries(bench_tracer PRIVATE ft_tracer ft_tracer_io ft_core CLI11::CLI11 ft_warnings)
  target_compile_definitions(bench_tracer PRIVATE FT_BUILD_TYPE="$<CONFIG>")
  if(FT_BUILD_TESTS)
    add_test(NAME bench_tracer_smoke COMMAND bench_tracer --device cpu --short)
    set_tests_properties(bench_tracer_smoke PROPERTIES LABELS cpu TIMEOUT 120)
  endif()
endif()
