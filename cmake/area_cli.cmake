# The `facetrace` CLI: one dispatcher plus one command file per area.
# ft_cli_support: what several commands share (signals → cancel, --progress, --metrics-file; docs/cli.md);
# private to the CLI, linked into the executable and the cli_* tests, never installed.
add_library(ft_cli_support STATIC src/cli/signals.cpp src/cli/progress.cpp src/cli/metrics.cpp)
target_include_directories(ft_cli_support PUBLIC ${PROJECT_SOURCE_DIR}/src/cli)
target_link_libraries(ft_cli_support PUBLIC ft_core PRIVATE ft_warnings)
add_executable(facetrace src/cli/main.cpp src/cli/version.cpp)
target_include_directories(facetrace PRIVATE ${PROJECT_SOURCE_DIR}/src/cli)
target_link_libraries(facetrace PRIVATE ft_cli_support ft_core CLI11::CLI11 spdlog::spdlog ft_warnings)

# `facetrace --version` (docs/cli.md "Version"): the project version, the git commit (regenerated at build
# time by cmake/ft_git_sha.cmake), the CUDA runtime the GPU child is built with and the compiled architectures.
set(ft_git_sha_cpp ${CMAKE_CURRENT_BINARY_DIR}/generated/ft_git_sha.cpp)
add_custom_target(facetrace_git_sha
                  BYPRODUCTS ${ft_git_sha_cpp}
                  COMMAND ${CMAKE_COMMAND} -DSRC=${PROJECT_SOURCE_DIR} -DOUT=${ft_git_sha_cpp}
                          -P ${PROJECT_SOURCE_DIR}/cmake/ft_git_sha.cmake
                  COMMENT "facetrace --version: git commit" VERBATIM)
target_sources(facetrace PRIVATE ${ft_git_sha_cpp})
add_dependencies(facetrace facetrace_git_sha)
target_compile_definitions(facetrace PRIVATE FT_PROJECT_VERSION="${PROJECT_VERSION}")
if(FT_ENABLE_CUDA)
  target_compile_definitions(facetrace PRIVATE FT_CUDA_RUNTIME_VERSION="${CUDAToolkit_VERSION}")
endif()
if(TARGET ft_cuda_archs)  # the one arch list (CMakeLists.txt) as FT_CUDA_ARCHS="sm_80 ... compute_120"
  target_link_libraries(facetrace PRIVATE ft_cuda_archs)
elseif(FT_ENABLE_CUDA)  # without that target: CMake's own list, "90-real 90-virtual"
  string(REPLACE ";" " " ft_cli_archs "${CMAKE_CUDA_ARCHITECTURES}")
  target_compile_definitions(facetrace PRIVATE "FT_CUDA_ARCHS=\"${ft_cli_archs}\"")
endif()
if(FT_BUILD_TESTS)
  ft_add_test(cli_signals_test cpu SOURCES tests/unit/cli_signals_test.cpp LIBS ft_cli_support)
  ft_add_test(cli_progress_test cpu SOURCES tests/unit/cli_progress_test.cpp
              LIBS ft_cli_support nlohmann_json::nlohmann_json)
  ft_add_test(cli_metrics_test cpu SOURCES tests/unit/cli_metrics_test.cpp LIBS ft_cli_support)
endif()
if(FT_WITH_TRACER)
  target_sources(facetrace PRIVATE src/cli/cmd_render.cpp)
  target_compile_definitions(facetrace PRIVATE FT_HAVE_TRACER=1)
  target_link_libraries(facetrace PRIVATE ft_tracer ft_tracer_io ft_render nlohmann_json::nlohmann_json)
  if(FT_BUILD_TESTS)
    # docs/cli.md: every exit code, --help/--version, render --json, --progress, --metrics-file, signals; the
    # binary runs in child processes.
    ft_add_test(cli_render_test cpu SOURCES tests/unit/cli_render_test.cpp LIBS nlohmann_json::nlohmann_json)
    target_compile_definitions(cli_render_test PRIVATE FT_FACETRACE_EXE="$<TARGET_FILE:facetrace>")
    add_dependencies(cli_render_test facetrace)
  endif()
endif()
if(TARGET ft_farm)  # docs/design/farm.md §1: worker + merge
  target_sources(facetrace PRIVATE src/cli/cmd_worker.cpp src/cli/cmd_merge.cpp)
  target_compile_definitions(facetrace PRIVATE FT_HAVE_FARM=1)
  target_link_libraries(facetrace PRIVATE ft_farm)
endif()
if(FT_WITH_RUNTIME)
  target_sources(facetrace PRIVATE src/cli/cmd_info.cpp src/cli/gpu_device_option.cpp)
  target_compile_definitions(facetrace PRIVATE FT_HAVE_RUNTIME=1)
  target_link_libraries(facetrace PRIVATE ft_runtime nlohmann_json::nlohmann_json)  # info --json
  if(FT_BUILD_TESTS AND FT_ENABLE_CUDA)
    # docs/cli.md "info": with a GPU, --require-gpu exits 0 (the no-GPU side is in cli_render_test). Skipped (77)
    # where nvidia-smi sees no GPU.
    add_test(NAME cli_info_require_gpu_ready
             COMMAND sh -c "nvidia-smi -L 2>/dev/null | grep -q '^GPU ' || exit 77; exec \"$0\" info --require-gpu"
                     $<TARGET_FILE:facetrace>)
    set_tests_properties(cli_info_require_gpu_ready PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
  endif()
endif()
if(FT_WITH_FACES)
  target_sources(facetrace PRIVATE src/cli/cmd_faces.cpp)
  target_compile_definitions(facetrace PRIVATE FT_HAVE_FACES=1)
  target_link_libraries(facetrace PRIVATE ft_faces nlohmann_json::nlohmann_json)
  if(TARGET ft_faces_gpu)  # make_gpu_accelerator (cmake/area_faces_runtime.cmake)
    target_link_libraries(facetrace PRIVATE ft_faces_gpu)
  else()
    target_sources(facetrace PRIVATE src/faces/gpu/without_runtime.cpp)  # --device gpu: says why not
  endif()
  if(FT_BUILD_TESTS)
    # docs/faces.md "CLI": the built-in detector with no setup (FACETRACE_MODELS unset), one JSON line per photo;
    # a missing photo is an error record and exit 1; a truncated model is bad input, exit 2.
    add_test(NAME cli_faces_detect_builtin
             COMMAND facetrace faces detect --json --device cpu ${FT_TEST_DATA_DIR}/images/obama_portrait_2012.jpg)
    set_tests_properties(cli_faces_detect_builtin PROPERTIES LABELS cpu
                         ENVIRONMENT_MODIFICATION "FACETRACE_MODELS=unset:"
                         PASS_REGULAR_EXPRESSION
                         "^\\{\"path\":\"[^\"]*obama_portrait_2012\\.jpg\",\"width\":910,\"height\":1137,\"faces\":\\[\\{\"score\":0\\.[0-9]+,\"box\":\\[[^{}]*\\]\\}\\]\\}\n$")
    add_test(NAME cli_faces_missing_photo_is_a_failure
             COMMAND sh -c "\"$0\" faces detect --device cpu \"$1\"; test $? -eq 1" $<TARGET_FILE:facetrace>
                     ${CMAKE_CURRENT_BINARY_DIR}/no_such_photo.jpg)
    add_test(NAME cli_faces_truncated_model_is_bad_input
             COMMAND sh -c "t=$(mktemp) && head -c 100000 \"$1\" > \"$t\" && \"$0\" faces detect --model \"$t\" \"$2\"; r=$?; rm -f \"$t\"; test $r -eq 2"
                     $<TARGET_FILE:facetrace> ${PROJECT_SOURCE_DIR}/models/face_detection_yunet_2023mar.onnx
                     ${FT_TEST_DATA_DIR}/images/obama_portrait_2012.jpg)
    set_tests_properties(cli_faces_missing_photo_is_a_failure cli_faces_truncated_model_is_bad_input
                         PROPERTIES LABELS cpu)
    # The batch CLI end to end (streaming, @lists, every exit code, --device, native input, annotations,
    # progress, embed): tests/unit/cli_faces_test.cpp runs this binary in child processes.
    ft_add_test(cli_faces_test cpu SOURCES tests/unit/cli_faces_test.cpp
                LIBS ft_core nlohmann_json::nlohmann_json onnx_proto protobuf::libprotobuf)
    target_compile_definitions(cli_faces_test PRIVATE FT_FACETRACE_EXE="$<TARGET_FILE:facetrace>")
    add_dependencies(cli_faces_test facetrace)
  endif()
endif()

# Outputs that never destroy anything (core/file.h): render and faces detect refuse an output that is an input,
# another output, a directory, a FIFO, a device or unwritable (exit 2, before any work), write through symbolic
# links, keep the old PNG on a full disk, and survive two renders writing the same files at once.
if(FT_BUILD_TESTS AND FT_WITH_TRACER)
  ft_add_test(cli_outputs_test cpu SOURCES tests/unit/cli_outputs_test.cpp LIBS ft_core ft_tracer_io)
  target_compile_definitions(cli_outputs_test PRIVATE FT_FACETRACE_EXE="$<TARGET_FILE:facetrace>"
                             $<$<BOOL:${FT_WITH_FACES}>:FT_HAVE_FACES=1>)
  add_dependencies(cli_outputs_test facetrace)
  # Hostile input (docs/limits.md "Echoed input"): a 10 MB field, terminal escapes and invalid UTF-8 in scenes,
  # file names and flag values come back cut and escaped; every --json output parses.
  ft_add_test(cli_escape_test cpu SOURCES tests/unit/cli_escape_test.cpp LIBS nlohmann_json::nlohmann_json)
  target_compile_definitions(cli_escape_test PRIVATE FT_FACETRACE_EXE="$<TARGET_FILE:facetrace>"
                             $<$<BOOL:${FT_WITH_FACES}>:FT_HAVE_FACES=1>)
  add_dependencies(cli_escape_test facetrace)
endif()

# docs/limits.md: every enforced limit at its value and one past it, through the API or the binary.
if(FT_BUILD_TESTS AND TARGET ft_farm AND TARGET ft_faces)
  ft_add_test(limits_test cpu SOURCES tests/unit/limits_test.cpp
              LIBS ft_core ft_tracer_io ft_farm ft_faces onnx_proto protobuf::libprotobuf ZLIB::ZLIB)
  target_compile_definitions(limits_test PRIVATE FT_FACETRACE_EXE="$<TARGET_FILE:facetrace>")
  add_dependencies(limits_test facetrace)
endif()

if(FT_WITH_RUNTIME AND FT_BUILD_TESTS)
  # docs/runtime.md "Device selection": a malformed --gpu-device is a usage error (exit 2) on any command;
  # --list-devices always answers (a machine without a GPU lists none and says why) and exits 0.
  add_test(NAME cli_gpu_device_malformed_is_bad_usage
           COMMAND sh -c "\"$0\" info --gpu-device 1x >/dev/null 2>&1; a=$?; \"$0\" --gpu-device GPU- info >/dev/null 2>&1; b=$?; test $a -eq 2 && test $b -eq 2"
                   $<TARGET_FILE:facetrace>)
  add_test(NAME cli_info_list_devices_answers
           COMMAND sh -c "\"$0\" info --list-devices --json | grep -q '\"built_for\"'" $<TARGET_FILE:facetrace>)
  set_tests_properties(cli_gpu_device_malformed_is_bad_usage cli_info_list_devices_answers PROPERTIES LABELS cpu)
  if(FT_WITH_TRACER)
    # --device gpu never quietly renders on the CPU: without a usable GPU (here: no facetrace-gpud) it fails
    # with exit 43, GPU unavailable (docs/cli.md "Exit codes"), and says why.
    add_test(NAME cli_render_device_gpu_without_a_gpu_fails
             COMMAND sh -c "d=$(mktemp -d) && FACETRACE_GPUD=/nonexistent/facetrace-gpud \"$0\" render --device gpu --spp 1 --width 8 --height 8 -o \"$d/x.png\" 2>\"$d/err\"; r=$?; grep -q 'no usable GPU' \"$d/err\"; g=$?; test -e \"$d/x.png\"; w=$?; rm -rf \"$d\"; test $r -eq 43 && test $g -eq 0 && test $w -ne 0"
                     $<TARGET_FILE:facetrace>)
    set_tests_properties(cli_render_device_gpu_without_a_gpu_fails PROPERTIES LABELS cpu)
  endif()
endif()
