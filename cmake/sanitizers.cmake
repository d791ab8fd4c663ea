# Sanitizer builds (docs/testing.md "Sanitizers"): FT_SANITIZE=address is AddressSanitizer + UndefinedBehavior-
# Sanitizer (+ LeakSanitizer, part of ASan on Linux), FT_SANITIZE=thread is ThreadSanitizer. The presets `asan`
# and `tsan` (CMakePresets.json) set it together with a CPU-only build; scripts/sanitize builds and runs them.
#
# The one place this project sets flags for a whole directory rather than per target (docs/design/style.md §8):
# a sanitizer must instrument every translation unit and every link, the test support and the generated sources
# too (an uninstrumented TU gives TSan false races and hides ASan's reports), so the options go on the top-level
# directory before any target is made (CMakeLists.txt includes this file ahead of the areas). C++ only: nvcc takes
# no -fsanitize, so with FT_ENABLE_CUDA=ON the .cu host code stays uninstrumented, and the CUDA runtime maps
# memory into ASan's shadow gap (run with ASAN_OPTIONS=protect_shadow_gap=0). CI therefore sanitizes the CPU-only
# build; the GPU side is checked with compute-sanitizer (scripts/device_sanitize).
set(FT_SANITIZE "" CACHE STRING "Sanitizer build: empty (none) | address (ASan + UBSan) | thread (TSan)")
set_property(CACHE FT_SANITIZE PROPERTY STRINGS "" address thread)

if(FT_SANITIZE STREQUAL "")
  return()
elseif(FT_SANITIZE STREQUAL "address")
  # -fno-sanitize-recover=all: the first UB report aborts the process, so a test cannot pass over it.
  set(ft_sanitize_flags -fsanitize=address,undefined -fno-sanitize-recover=all)
elseif(FT_SANITIZE STREQUAL "thread")
  set(ft_sanitize_flags -fsanitize=thread)
else()
  message(FATAL_ERROR "FT_SANITIZE='${FT_SANITIZE}' is not empty, address or thread")
endif()
if(FT_ENABLE_CUDA)
  message(WARNING "FT_SANITIZE=${FT_SANITIZE} with FT_ENABLE_CUDA=ON: the .cu files are not instrumented "
                  "(cmake/sanitizers.cmake); the asan and tsan presets build CPU only")
endif()
# Frame pointers keep the reports' stacks whole at -O1 (the presets' level: cheap to compile, fast to run).
list(APPEND ft_sanitize_flags -fno-omit-frame-pointer)
add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${ft_sanitize_flags}>")
add_link_options("$<$<LINK_LANGUAGE:CXX>:${ft_sanitize_flags}>")
message(STATUS "facetrace: sanitizer build FT_SANITIZE=${FT_SANITIZE} (${ft_sanitize_flags})")
