# Core: Status / Expected, logging, environment helpers, the capped file reader, the one parallel loop, the one
# image type (JPEG decode through libjpeg-turbo, PNG decode and the atomic PNG writer through libpng).
find_package(JPEG REQUIRED)   # libjpeg62-turbo-dev (scripts/setup)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)  # libssl-dev (scripts/setup): SHA-256 (src/core/sha256.cpp)
# Private include root: src/core (the library's spdlog logger, log.h), handed to the other library modules
# through ft_core_internal; the CLI, gpud and benchmarks see only include/facetrace (docs/design/layout.md).
add_library(ft_core STATIC
  src/core/status.cpp
  src/core/log.cpp
  src/core/env.cpp
  src/core/parallel.cpp
  src/core/image.cpp
  src/core/file.cpp
  src/core/sha256.cpp
  src/core/text.cpp)
# The public headers: include/ in the build tree, <prefix>/include once installed (cmake/ft_install.cmake); the
# other library modules name only the build-tree form and get the installed one through ft_core.
target_include_directories(ft_core
  PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
  PRIVATE ${PROJECT_SOURCE_DIR}/src/core)
target_link_libraries(ft_core PUBLIC Threads::Threads PRIVATE spdlog::spdlog fmt::fmt PNG::PNG JPEG::JPEG
                      OpenSSL::Crypto ft_warnings)
target_compile_features(ft_core PUBLIC cxx_std_20)

# The library modules' view of core's private headers (log.h: FT_LOG_* through spdlog, .cpp files only).
add_library(ft_core_internal INTERFACE)
target_include_directories(ft_core_internal INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/src/core>)
target_link_libraries(ft_core_internal INTERFACE ft_core spdlog::spdlog fmt::fmt)

if(FT_BUILD_TESTS)
  add_library(ft_test_support OBJECT tests/support/log_guard.cpp)
  target_compile_definitions(ft_test_support PRIVATE FT_TEST_DATA_DIR="${FT_TEST_DATA_DIR}")
  target_include_directories(ft_test_support PUBLIC ${PROJECT_SOURCE_DIR}/tests/support)
  target_link_libraries(ft_test_support PUBLIC ft_core_internal GTest::gtest PRIVATE spdlog::spdlog)
  # core_image_test makes its inputs with libjpeg's and libpng's encoders
  ft_add_test(core_test cpu SOURCES tests/unit/core_test.cpp tests/unit/core_image_test.cpp
              tests/unit/core_file_test.cpp tests/unit/core_escape_test.cpp
              LIBS ft_core JPEG::JPEG PNG::PNG)
endif()

if(FT_BUILD_BENCHMARKS)
  # benchmarks/bench_common: statistics, run context, JSON lines and the stderr table of every benchmark. The
  # git sha is read at build time (cmake/bench_git_sha.cmake), so a rebuild after a commit reports the new one.
  find_package(Git QUIET)
  set(ft_bench_sha_h ${CMAKE_CURRENT_BINARY_DIR}/generated/bench/bench_git_sha.h)
  add_custom_target(ft_bench_git_sha
    COMMAND ${CMAKE_COMMAND} -DGIT=${GIT_EXECUTABLE} -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DOUTPUT=${ft_bench_sha_h}
            -P ${PROJECT_SOURCE_DIR}/cmake/bench_git_sha.cmake
    BYPRODUCTS ${ft_bench_sha_h})
  add_library(ft_bench_common STATIC benchmarks/bench_common.cpp)
  add_dependencies(ft_bench_common ft_bench_git_sha)
  target_include_directories(ft_bench_common PUBLIC ${PROJECT_SOURCE_DIR}/benchmarks
                             PRIVATE ${CMAKE_CURRENT_BINARY_DIR}/generated/bench)
  target_compile_definitions(ft_bench_common PRIVATE FT_BUILD_TYPE="$<CONFIG>")
  target_link_libraries(ft_bench_common PUBLIC ft_core nlohmann_json::nlohmann_json PRIVATE ft_warnings)
endif()
