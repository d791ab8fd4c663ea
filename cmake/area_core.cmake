# Core: Status / Expected, logging, environment helpers.
add_library(ft_core STATIC
  src/core/status.cpp
  src/core/log.cpp
  src/core/env.cpp)
target_include_directories(ft_core PUBLIC ${PROJECT_SOURCE_DIR}/include PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(ft_core PUBLIC Threads::Threads PRIVATE spdlog::spdlog fmt::fmt ft_warnings)
target_compile_features(ft_core PUBLIC cxx_std_20)

if(FT_BUILD_TESTS)
  add_library(ft_test_support OBJECT tests/support/log_guard.cpp)
  target_compile_definitions(ft_test_support PRIVATE FT_TEST_DATA_DIR="${FT_TEST_DATA_DIR}")
  target_include_directories(ft_test_support PUBLIC ${PROJECT_SOURCE_DIR}/tests/support ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(ft_test_support PUBLIC ft_core GTest::gtest PRIVATE spdlog::spdlog)
  ft_add_test(core_test cpu SOURCES tests/unit/core_test.cpp LIBS ft_core)
endif()
