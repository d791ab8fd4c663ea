# Farm rendering (docs/design/farm.md §1): jobs, work units, the partial files (.ftp) and the canonical merge, used by
# `facetrace worker` / `facetrace merge` (src/cli/cmd_worker.cpp, cmd_merge.cpp) and facetrace-mpi.
# The build identity recorded in partials holds the git describe of the tree, read at build time.
find_package(ZLIB REQUIRED)  # CRC-32 of the unit blocks (libpng's dependency)
find_package(Git QUIET)
set(ft_farm_sha_h ${CMAKE_CURRENT_BINARY_DIR}/generated/farm/farm_git_sha.h)
add_custom_target(ft_farm_git_sha
  COMMAND ${CMAKE_COMMAND} -DGIT=${GIT_EXECUTABLE} -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DOUTPUT=${ft_farm_sha_h}
          -DMACRO=FT_FARM_GIT_SHA -P ${PROJECT_SOURCE_DIR}/cmake/bench_git_sha.cmake
  BYPRODUCTS ${ft_farm_sha_h})
add_library(ft_farm STATIC
  src/tracer/farm/job.cpp
  src/tracer/farm/partial.cpp
  src/tracer/farm/merge.cpp)
add_dependencies(ft_farm ft_farm_git_sha)
target_include_directories(ft_farm PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                           PRIVATE ${PROJECT_SOURCE_DIR}/src/tracer ${CMAKE_CURRENT_BINARY_DIR}/generated/farm)
target_compile_definitions(ft_farm PRIVATE FT_FARM_VERSION="${PROJECT_VERSION}")
target_link_libraries(ft_farm PUBLIC ft_core ft_tracer ft_render
                      PRIVATE ft_tracer_io ft_core_internal nlohmann_json::nlohmann_json ZLIB::ZLIB ft_warnings)

if(FT_BUILD_TESTS)
  ft_add_test(tracer_farm_test cpu SOURCES tests/unit/tracer_farm_test.cpp LIBS ft_farm ft_tracer_io ZLIB::ZLIB)
endif()
if(FT_BUILD_TESTS)
  # worker + merge end to end through the built CLI (src/cli/cmd_worker.cpp, cmd_merge.cpp), kills included
  ft_add_test(tracer_farm_cli_test cpu SOURCES tests/unit/tracer_farm_cli_test.cpp LIBS ft_farm ft_tracer_io)
  target_compile_definitions(tracer_farm_cli_test PRIVATE FT_FACETRACE_EXE="$<TARGET_FILE:facetrace>")
  add_dependencies(tracer_farm_cli_test facetrace)
endif()
if(FT_BUILD_TESTS AND FT_ENABLE_CUDA)
  # GPU units: identical bits for any request split and any grouping (label gpu; skips without a device)
  ft_add_test(tracer_farm_gpu_test gpu SOURCES tests/gpu/tracer_farm_gpu_test.cpp LIBS ft_farm)
  add_dependencies(tracer_farm_gpu_test facetrace-gpud)
endif()
