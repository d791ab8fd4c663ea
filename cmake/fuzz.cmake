# Fuzzing (docs/testing.md "Fuzzing"): FT_ENABLE_FUZZ builds the libFuzzer targets of tests/fuzz/ with clang,
# every library instrumented for coverage and checked by ASan + UBSan; scripts/fuzz runs them. Included before the
# areas: the instrumentation must cover the library code under test, so with FT_ENABLE_FUZZ (and only then) the
# flags apply to every target of this build. A CPU-only build (FT_ENABLE_CUDA=OFF) is enough: no target needs CUDA.
# Without FT_ENABLE_FUZZ only the regression test of the inputs the fuzzers found (fuzz_regressions_test) is built.
option(FT_ENABLE_FUZZ "Build the libFuzzer targets of tests/fuzz (clang only)" OFF)
set(ft_fuzz_targets scene_json onnx image partial protocol hdr)

if(FT_ENABLE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "FT_ENABLE_FUZZ needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++ "
                        "(Debian's clang package; scripts/fuzz does this)")
  endif()
  if(FT_ENABLE_CUDA)
    message(FATAL_ERROR "FT_ENABLE_FUZZ builds the CPU code only: configure with -DFT_ENABLE_CUDA=OFF")
  endif()
  set(ft_fuzz_sanitizers -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_compile_options(-fsanitize=fuzzer-no-link ${ft_fuzz_sanitizers} -g)
  add_link_options(${ft_fuzz_sanitizers})
  # gemm.cpp's kernel_body carries no vector target and relies on GCC flattening it into the AVX2 / AVX-512
  # kernels; clang refuses its __m512 calls ("changes the ABI") unless the whole file may use AVX-512F. The fuzz
  # build runs only on the machine that built it, which must then have AVX-512F.
  set_source_files_properties(src/faces/cpu/gemm.cpp PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mavx512f")
endif()

# One executable per target, tests/fuzz/<target>_fuzz.cpp, run as `fuzz_<target> [libFuzzer flags] corpus…`.
# The ctest fuzz_<target>_corpus replays tests/fuzz/corpus/<target>/ once (-runs=0): every seed and every input
# that once crashed must pass.
if(FT_ENABLE_FUZZ)
  foreach(t IN LISTS ft_fuzz_targets)
    add_executable(fuzz_${t} tests/fuzz/${t}_fuzz.cpp tests/fuzz/fuzz_common.cpp)
    target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
    target_link_libraries(fuzz_${t} PRIVATE spdlog::spdlog ft_warnings)
    if(FT_BUILD_TESTS)
      add_test(NAME fuzz_${t}_corpus
               COMMAND fuzz_${t} -runs=0 -rss_limit_mb=4096 ${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/${t})
      set_tests_properties(fuzz_${t}_corpus PROPERTIES LABELS cpu TIMEOUT 300)
    endif()
  endforeach()
  target_link_libraries(fuzz_scene_json PRIVATE ft_tracer_io ft_tracer)
  target_link_libraries(fuzz_onnx PRIVATE ft_faces)
  target_link_libraries(fuzz_image PRIVATE ft_core JPEG::JPEG)  # the target reads JPEG headers itself
  target_link_libraries(fuzz_partial PRIVATE ft_farm ZLIB::ZLIB)
  target_link_libraries(fuzz_protocol PRIVATE ft_runtime)
  target_link_libraries(fuzz_hdr PRIVATE ft_tracer_io)
  target_include_directories(fuzz_protocol PRIVATE ${PROJECT_SOURCE_DIR}/src/runtime)
endif()

# The inputs the fuzzers found, through the normal API (tests/unit/fuzz_regressions_test.cpp): every build.
if(FT_BUILD_TESTS AND FT_WITH_TRACER AND FT_WITH_RUNTIME)
  ft_add_test(fuzz_regressions_test cpu SOURCES tests/unit/fuzz_regressions_test.cpp LIBS ft_farm ft_runtime ft_tracer)
  target_compile_definitions(fuzz_regressions_test PRIVATE FT_FUZZ_CORPUS_DIR="${PROJECT_SOURCE_DIR}/tests/fuzz/corpus")
  if(FT_WITH_FACES)
    target_link_libraries(fuzz_regressions_test PRIVATE ft_faces onnx_proto protobuf::libprotobuf)  # onnx_builder.h
    target_compile_definitions(fuzz_regressions_test PRIVATE FT_FUZZ_REGRESSIONS_FACES=1)
  endif()
endif()
