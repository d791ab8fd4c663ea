# Faces: ONNX loader (onnx_proto), program IR, CPU interpreter, YuNet, alignment, embedders (faces.md).
find_package(Protobuf REQUIRED)   # before ONNX: its targets link protobuf::libprotobuf
find_package(ONNX REQUIRED)

# Private include root: src/faces (onnx/, ir/, cpu/, models/).
add_library(ft_faces STATIC
  src/faces/onnx/loader.cpp
  src/faces/ir/lower.cpp
  src/faces/ir/lower_ops.cpp
  src/faces/ir/lower_aliases.cpp
  src/faces/ir/lower_shape.cpp
  src/faces/ir/lower_nn.cpp
  src/faces/ir/fuse.cpp
  src/faces/cpu/interpreter.cpp
  src/faces/cpu/conv.cpp
  src/faces/cpu/depthwise.cpp
  src/faces/cpu/eltwise.cpp
  src/faces/cpu/ops.cpp
  src/faces/cpu/gemm.cpp
  src/faces/cpu/buffers.cpp
  src/faces/cpu/cpu_features.cpp
  src/faces/cpu/profile.cpp
  src/faces/models/net.cpp
  src/faces/models/detector.cpp
  src/faces/models/align.cpp
  src/faces/models/embedder.cpp)
target_include_directories(ft_faces PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> PRIVATE ${PROJECT_SOURCE_DIR}/src/faces)
target_link_libraries(ft_faces PUBLIC ft_core PRIVATE ft_core_internal onnx_proto protobuf::libprotobuf
                      ft_warnings)
# The shipped YuNet (models/SOURCES.md) as bytes inside ft_faces: the default detector needs no file or setup.
set(ft_yunet_onnx ${PROJECT_SOURCE_DIR}/models/face_detection_yunet_2023mar.onnx)
set(ft_yunet_cpp ${CMAKE_CURRENT_BINARY_DIR}/generated/faces/yunet_2023mar_onnx.cpp)
add_custom_command(OUTPUT ${ft_yunet_cpp}
  COMMAND ${CMAKE_COMMAND} -DINPUT=${ft_yunet_onnx} -DOUTPUT=${ft_yunet_cpp} -DNAMESPACE=facetrace::faces::detail
          -DNAME=kYunet2023marOnnx -P ${PROJECT_SOURCE_DIR}/cmake/embed_file.cmake
  DEPENDS ${ft_yunet_onnx} ${PROJECT_SOURCE_DIR}/cmake/embed_file.cmake
  COMMENT "Embedding models/face_detection_yunet_2023mar.onnx")
target_sources(ft_faces PRIVATE ${ft_yunet_cpp})

if(FT_BUILD_TESTS)
  ft_add_test(faces_test cpu
    SOURCES tests/unit/faces_ops_test.cpp tests/unit/faces_fuse_test.cpp tests/unit/faces_loader_test.cpp
            tests/unit/faces_models_test.cpp tests/unit/faces_export_test.cpp tests/unit/faces_escape_test.cpp
    LIBS ft_faces onnx_proto protobuf::libprotobuf)
  # faces_fuse_test calls the fusion pass directly (ir/fuse.h)
  target_include_directories(faces_test PRIVATE ${PROJECT_SOURCE_DIR}/src/faces)
endif()

if(FT_BUILD_BENCHMARKS)
  add_executable(bench_faces benchmarks/bench_faces.cpp)
  target_link_libraries(bench_faces PRIVATE ft_faces ft_core ft_bench_common CLI11::CLI11 ft_warnings)
  target_compile_definitions(bench_faces PRIVATE FT_TEST_DATA_DIR="${FT_TEST_DATA_DIR}")
  if(FT_BUILD_TESTS)
    add_test(NAME bench_faces_smoke COMMAND bench_faces --device cpu --short)
    set_tests_properties(bench_faces_smoke PROPERTIES LABELS cpu SKIP_RETURN_CODE 77)
  endif()
endif()

# Models exported with PyTorch's own ONNX exporter (tests/models/README.md) against PyTorch's reference outputs.
if(FT_BUILD_TESTS)
  ft_add_test(faces_exported_test cpu
    SOURCES tests/unit/faces_exported_test.cpp
    LIBS ft_faces nlohmann_json::nlohmann_json)
  target_compile_definitions(faces_exported_test PRIVATE FT_EXPORTED_MODELS_DIR="${PROJECT_SOURCE_DIR}/tests/models")
endif()

# The ONNX project's backend test cases (tests/data/onnx_backend/SOURCES.md) against the loader and interpreter.
if(FT_BUILD_TESTS)
  ft_add_test(faces_conformance_test cpu
    SOURCES tests/unit/faces_conformance_test.cpp
    LIBS ft_faces onnx_proto protobuf::libprotobuf nlohmann_json::nlohmann_json)
endif()
