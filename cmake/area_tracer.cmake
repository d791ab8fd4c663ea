# Tracer: scene helpers, host side of the shared physics, the CPU reference tracer (tracer.md).
# Tracer targets never build with fast math (tracer.md conventions).
add_library(ft_tracer STATIC
  src/tracer/scene.cpp
  src/tracer/trace_params.cpp
  src/tracer/cpu_tracer.cpp)
target_include_directories(ft_tracer PUBLIC ${PROJECT_SOURCE_DIR}/include PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(ft_tracer PUBLIC ft_core Threads::Threads PRIVATE ft_warnings)
target_compile_features(ft_tracer PUBLIC cxx_std_20)
# No implicit FMA contraction: the physics writes fmaf where it wants one, so CPU and GPU round alike.
target_compile_options(ft_tracer PRIVATE -ffp-contract=off)

if(FT_ENABLE_CUDA)
  # Compiles the header-only physics for the device (and a small probe kernel) so the GPU tracer reuses it.
  add_library(ft_cuda_tracer_physics STATIC cuda/tracer/physics_check.cu)
  target_include_directories(ft_cuda_tracer_physics PUBLIC ${PROJECT_SOURCE_DIR}/include
                                                          ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/cuda)
  set_target_properties(ft_cuda_tracer_physics PROPERTIES CUDA_ARCHITECTURES "90-real;90-virtual"
                                                          CUDA_SEPARABLE_COMPILATION OFF
                                                          CUDA_STANDARD 17)  # CMake 3.25 lacks CUDA20 flags for nvcc 13
  target_link_libraries(ft_cuda_tracer_physics PUBLIC ft_core PRIVATE CUDA::cudart ft_warnings ft_cuda_flags)
endif()

if(FT_BUILD_TESTS)
  foreach(t physics scene cpu_tracer)
    ft_add_test(tracer_${t}_test cpu SOURCES tests/unit/tracer_${t}_test.cpp LIBS ft_tracer)
    target_include_directories(tracer_${t}_test PRIVATE ${PROJECT_SOURCE_DIR}/src)
  endforeach()
endif()
