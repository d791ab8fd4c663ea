# The face networks on the device runtime (docs/design/faces.md §4, §8): the Program codec, the faces device ops
# (kOpFacesRun; kOpFacesDetect with the YuNet pre/post kernels of ft_cuda_faces_prepost; CUDA builds, linked into
# facetrace-gpud), the GPU accelerator over runtime::GpuBackend, the pace, and the simulated ops for CPU tests
# (ft_faces_gpu). Needs ft_faces and ft_runtime; the CUDA op needs the GPU
# program library ft_cuda_faces (cmake/area_faces_gpu.cmake), included before this file.
add_library(ft_faces_gpu STATIC
  src/faces/gpu/program_codec.cpp
  src/faces/gpu/faces_ops_common.cpp
  src/faces/gpu/gpu_accelerator.cpp
  src/faces/gpu/pace.cpp
  src/faces/gpu/sim_ops.cpp)
target_include_directories(ft_faces_gpu PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> PRIVATE ${PROJECT_SOURCE_DIR}/src/faces)
target_link_libraries(ft_faces_gpu PUBLIC ft_faces ft_runtime PRIVATE ft_core_internal ft_warnings)
if(FT_ENABLE_CUDA)
  if(TARGET ft_cuda_faces AND TARGET ft_cuda_faces_prepost)
    target_sources(ft_faces_gpu PRIVATE src/faces/gpu/faces_ops.cpp)
    # cuda/ for faces/gpu_program.h (the GpuProgram interface) and common/cuda_check.cuh (FT_CUDA_TRY).
    target_include_directories(ft_faces_gpu PRIVATE ${PROJECT_SOURCE_DIR}/cuda)
    target_compile_definitions(ft_faces_gpu PRIVATE FT_HAVE_CUDA_FACES=1)
    target_link_libraries(ft_faces_gpu PRIVATE ft_cuda_faces ft_cuda_faces_prepost CUDA::cudart_static)
    ft_add_gpu_ops(ft_faces_gpu facetrace::faces::gpu::register_faces_ops)
  else()
    message(STATUS "faces: ft_cuda_faces not defined; the GPU accelerator is built without its CUDA op")
  endif()
endif()

if(FT_BUILD_TESTS)
  ft_add_test(faces_accel_test cpu SOURCES tests/unit/faces_accel_test.cpp
              LIBS ft_faces_gpu onnx_proto protobuf::libprotobuf)
  target_include_directories(faces_accel_test PRIVATE ${PROJECT_SOURCE_DIR}/src/faces)
  if(NOT FT_ENABLE_CUDA)
    target_compile_definitions(faces_accel_test PRIVATE FT_FACES_TEST_NO_CUDA=1)
  endif()
  if(FT_ENABLE_CUDA AND TARGET ft_cuda_faces)
    ft_add_test(faces_accel_gpu_test gpu SOURCES tests/gpu/faces_accel_gpu_test.cpp LIBS ft_faces_gpu)
    target_include_directories(faces_accel_gpu_test PRIVATE ${PROJECT_SOURCE_DIR}/src/faces)
    add_dependencies(faces_accel_gpu_test facetrace-gpud)
    # The exported PyTorch models and the built-in YuNet with the GPU attached (issue 11).
    ft_add_test(faces_exported_gpu_test gpu SOURCES tests/gpu/faces_exported_gpu_test.cpp
                LIBS ft_faces_gpu ft_core nlohmann_json::nlohmann_json)
    target_compile_definitions(faces_exported_gpu_test PRIVATE
                               FT_EXPORTED_MODELS_DIR="${PROJECT_SOURCE_DIR}/tests/models")
    add_dependencies(faces_exported_gpu_test facetrace-gpud)
  endif()
endif()

if(FT_ENABLE_CUDA AND TARGET ft_cuda_faces AND TARGET bench_faces)
  # bench_faces' product rows (make_gpu_accelerator + Net::attach_checked) and, with the tracer's render loop,
  # the share row (a GPU render beside a paced YuNet stream).
  target_link_libraries(bench_faces PRIVATE ft_faces_gpu)
  target_compile_definitions(bench_faces PRIVATE FT_HAVE_FACES_RUNTIME=1)
  add_dependencies(bench_faces facetrace-gpud)
  if(TARGET ft_render)
    target_link_libraries(bench_faces PRIVATE ft_render)
    target_compile_definitions(bench_faces PRIVATE FT_HAVE_TRACER_RENDER=1)
  endif()
endif()

if(FT_BUILD_TESTS AND FT_ENABLE_CUDA AND TARGET ft_cuda_faces AND TARGET ft_cuda_faces_prepost)
  # YuNet end to end on the GPU (kOpFacesDetect) against the host decode and the CPU detector.
  ft_add_test(faces_detect_gpu_test gpu SOURCES tests/gpu/faces_detect_gpu_test.cpp LIBS ft_faces_gpu)
  add_dependencies(faces_detect_gpu_test facetrace-gpud)
endif()
