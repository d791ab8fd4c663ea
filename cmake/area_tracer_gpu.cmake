# The GPU tracer on the device runtime (docs/design/tracer.md §10): the megakernel + its device op (ft_cuda_tracer,
# linked into facetrace-gpud), the TraceWorkload, and the render loop with CPU fallback (ft_render).
add_library(ft_render STATIC src/tracer/gpu/trace_workload.cpp src/tracer/render/renderer.cpp)
# cuda/ for the one launch header src/ may include (cuda/tracer/transport_launch.h: the chunk arguments).
target_include_directories(ft_render PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                           PRIVATE ${PROJECT_SOURCE_DIR}/src/tracer ${PROJECT_SOURCE_DIR}/cuda)
target_link_libraries(ft_render PUBLIC ft_tracer ft_runtime PRIVATE ft_core_internal ft_warnings)

if(FT_ENABLE_CUDA)
  add_library(ft_cuda_tracer STATIC cuda/tracer/transport.cu src/tracer/gpu/ops.cpp)
  target_include_directories(ft_cuda_tracer PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                             PRIVATE ${PROJECT_SOURCE_DIR}/src/tracer ${PROJECT_SOURCE_DIR}/cuda)
  # One TU for the megakernel, no relocatable device code (inlining across the physics headers), no fast math.
  # Architectures and standard: the top-level CMakeLists.txt, for every CUDA target.
  set_target_properties(ft_cuda_tracer PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
  # --fmad=false: no implicit FMA contraction, so the device does the CPU tracer's arithmetic (docs/design/tracer.md §12
  # per-sample agreement; with contraction some paths diverge at a Fresnel / roulette decision, benchmarks/NOTES.md).
  option(FT_TRACER_FMAD "Let nvcc contract the tracer's a*b+c into FMA (faster; GPU samples then differ from the CPU's)" OFF)
  if(FT_TRACER_FMAD)
    target_compile_options(ft_cuda_tracer PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-v --fmad=true>)
  else()
    target_compile_options(ft_cuda_tracer PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-v --fmad=false>)
  endif()
  # Rolled per-channel loops in the megakernel (host_device.h FT_CHANNELS): one copy of each channel's code, so
  # fewer registers per thread, more resident warps and a smaller kernel (the comparison is in
  # benchmarks/NOTES.md, "Session 3"). OFF keeps the unrolled form.
  option(FT_TRACER_ROLLED "Megakernel with rolled per-channel loops (channel arrays in local memory)" ON)
  if(FT_TRACER_ROLLED)
    target_compile_definitions(ft_cuda_tracer PRIVATE FT_TRACER_ROLLED=1)
  endif()
  target_link_libraries(ft_cuda_tracer PUBLIC ft_core ft_runtime PRIVATE ft_core_internal CUDA::cudart_static
                        ft_cuda_flags)
  target_link_libraries(ft_render PRIVATE ft_cuda_tracer)
  target_compile_definitions(ft_render PRIVATE FT_HAVE_CUDA_TRACER=1)
  ft_add_gpu_ops(ft_cuda_tracer facetrace::tracer::register_tracer_ops)
endif()

if(FT_BUILD_TESTS)
  ft_add_test(tracer_gpu_workload_test cpu SOURCES tests/unit/tracer_gpu_workload_test.cpp LIBS ft_render)
  target_include_directories(tracer_gpu_workload_test PRIVATE ${PROJECT_SOURCE_DIR}/src/tracer ${PROJECT_SOURCE_DIR}/cuda)
  if(FT_ENABLE_CUDA)
    ft_add_test(tracer_gpu_test gpu SOURCES tests/gpu/tracer_gpu_test.cpp LIBS ft_render ft_tracer_io)
    target_include_directories(tracer_gpu_test PRIVATE ${PROJECT_SOURCE_DIR}/src/tracer ${PROJECT_SOURCE_DIR}/cuda)
    target_compile_definitions(tracer_gpu_test PRIVATE FT_EXAMPLES_DIR="${PROJECT_SOURCE_DIR}/examples")
    add_dependencies(tracer_gpu_test facetrace-gpud)
    # Tier 2 media on the GPU (docs/design/tracer.md §7.7, §12).
    ft_add_test(tracer_tier2_gpu_test gpu SOURCES tests/gpu/tracer_tier2_gpu_test.cpp LIBS ft_render ft_tracer_io)
    target_include_directories(tracer_tier2_gpu_test PRIVATE ${PROJECT_SOURCE_DIR}/src/tracer ${PROJECT_SOURCE_DIR}/cuda)
    target_compile_definitions(tracer_tier2_gpu_test PRIVATE FT_EXAMPLES_DIR="${PROJECT_SOURCE_DIR}/examples")
    add_dependencies(tracer_tier2_gpu_test facetrace-gpud)
    # The Tier 2 lighting presets on the GPU (docs/design/tracer.md §6.2, §12).
    ft_add_test(tracer_presets_gpu_test gpu SOURCES tests/gpu/tracer_presets_gpu_test.cpp LIBS ft_render ft_tracer_io)
    target_include_directories(tracer_presets_gpu_test PRIVATE ${PROJECT_SOURCE_DIR}/src/tracer ${PROJECT_SOURCE_DIR}/cuda)
    add_dependencies(tracer_presets_gpu_test facetrace-gpud)
  endif()
endif()
