# Tracer: scene helpers, host side of the shared physics, the CPU reference tracer (tracer.md).
# Tracer targets never build with fast math (tracer.md conventions).
# Private include root: src/tracer (physics/, scene/, cpu/, gpu/, render/, io/).
add_library(ft_tracer STATIC
  src/tracer/scene/scene.cpp
  src/tracer/scene/materials.cpp
  src/tracer/scene/tiers.cpp
  src/tracer/cpu/trace_params.cpp
  src/tracer/cpu/cpu_tracer.cpp)
target_include_directories(ft_tracer PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> PRIVATE ${PROJECT_SOURCE_DIR}/src/tracer)
target_link_libraries(ft_tracer PUBLIC ft_core Threads::Threads PRIVATE ft_warnings)
target_compile_features(ft_tracer PUBLIC cxx_std_20)
# No implicit FMA contraction: the physics writes fmaf where it wants one, so CPU and GPU round alike.
target_compile_options(ft_tracer PRIVATE -ffp-contract=off)

# The device build of the physics is the megakernel itself (cmake/area_tracer_gpu.cmake, cuda/tracer/transport.cu).

if(FT_BUILD_TESTS)
  foreach(t physics scene cpu_tracer uniaxial medium edge_rounding presets)
    ft_add_test(tracer_${t}_test cpu SOURCES tests/unit/tracer_${t}_test.cpp LIBS ft_tracer)
    target_include_directories(tracer_${t}_test PRIVATE ${PROJECT_SOURCE_DIR}/src/tracer)
  endforeach()
endif()
