# The GPU face program (docs/design/faces.md §8): cuDNN convolutions, cuBLAS matrix products and own kernels for
# every other IR op, planned once per (program, batch, precision) and replayed as a CUDA graph (ft_cuda_faces).
# Included from the top-level CMakeLists.txt when FT_ENABLE_CUDA and FT_WITH_FACES.
find_package(CUDNN REQUIRED)  # cmake/FindCUDNN.cmake: CUDNN::cudnn (libcudnn.so, linked dynamically)

# The kernels (.cu, C++17) and the planner (gpu_program.cpp, C++20: it includes the faces public headers).
add_library(ft_cuda_faces STATIC
  cuda/faces/eltwise.cu
  cuda/faces/pool.cu
  cuda/faces/resize.cu
  cuda/faces/conv.cu
  cuda/faces/heads.cu
  cuda/faces/band.cu
  cuda/faces/gpu_program.cpp
  cuda/faces/nhwc_layout.cpp
  cuda/faces/conv_graph.cpp)
# cuda/ for cuda/common/cuda_check.cuh and the family headers (included as "faces/<family>.cuh").
target_include_directories(ft_cuda_faces PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> PRIVATE ${PROJECT_SOURCE_DIR}/cuda)
set_target_properties(ft_cuda_faces PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
target_link_libraries(ft_cuda_faces PUBLIC ft_faces ft_core CUDA::cudart_static CUDA::cublas CUDNN::cudnn
                      PRIVATE ft_runtime ft_core_internal ft_cuda_flags ft_warnings)

if(FT_BUILD_TESTS)
  ft_add_test(faces_gpu_test gpu SOURCES tests/gpu/faces_gpu_test.cpp
    LIBS ft_cuda_faces ft_faces ft_runtime onnx_proto protobuf::libprotobuf)
  target_include_directories(faces_gpu_test PRIVATE ${PROJECT_SOURCE_DIR}/cuda)
  # the photo of the YuNet precision test (FT_TEST_DATA_DIR in the environment overrides it on another machine)
  target_compile_definitions(faces_gpu_test PRIVATE FT_FACES_GPU_TEST_DATA_DIR="${FT_TEST_DATA_DIR}")
endif()

if(FT_BUILD_BENCHMARKS)
  # bench_faces gains its GPU rows (--device gpu|all) in CUDA builds.
  target_include_directories(bench_faces PRIVATE ${PROJECT_SOURCE_DIR}/cuda)
  target_link_libraries(bench_faces PRIVATE ft_cuda_faces ft_cuda_faces_prepost CUDA::cudart_static)
  target_compile_definitions(bench_faces PRIVATE FT_HAVE_CUDA_FACES=1)
endif()

if(FT_BUILD_TESTS)
  # the channels-last rewrite (cuda/faces/nhwc_layout.h) checked on the CPU: no GPU needed
  ft_add_test(faces_nhwc_test cpu SOURCES tests/unit/faces_nhwc_test.cpp LIBS ft_cuda_faces ft_faces)
  target_include_directories(faces_nhwc_test PRIVATE ${PROJECT_SOURCE_DIR}/cuda)
endif()
