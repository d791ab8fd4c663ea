# YuNet pre- and post-processing on the GPU (docs/design/faces.md §5): letterbox / native pad of decoded frames and
# decode + score filter + top-k + NMS (Thrust) in cuda/faces/{preprocess,yunet_post}.cu, host API
# cuda/faces/yunet_gpu.h. Its own small library so it builds beside ft_cuda_faces (cmake/area_faces_gpu.cmake).
add_library(ft_cuda_faces_prepost STATIC cuda/faces/preprocess.cu cuda/faces/yunet_post.cu cuda/faces/yunet_gpu.cpp)
target_include_directories(ft_cuda_faces_prepost PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> PRIVATE ${PROJECT_SOURCE_DIR}/cuda)
set_target_properties(ft_cuda_faces_prepost PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
# --fmad=false: no a*b+c contraction anywhere in these TUs, so every step rounds as the CPU's letterbox_bgr and
# decode_yunet do (the kernels also spell the rounding out with __f*_rn / __d*_rn intrinsics).
target_compile_options(ft_cuda_faces_prepost PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--fmad=false>)
target_link_libraries(ft_cuda_faces_prepost PUBLIC ft_core ft_runtime PRIVATE CUDA::cudart_static ft_cuda_flags
                      ft_warnings)

if(FT_BUILD_TESTS)
  ft_add_test(faces_prepost_gpu_test gpu SOURCES tests/gpu/faces_prepost_gpu_test.cpp
              LIBS ft_cuda_faces_prepost ft_faces CUDA::cudart_static)
  target_include_directories(faces_prepost_gpu_test PRIVATE ${PROJECT_SOURCE_DIR}/cuda)
endif()
