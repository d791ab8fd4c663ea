/// @file
/// A probe kernel built for 80-real only (CUDA_ARCHITECTURES of its object library in cmake/area_runtime.cmake).
#include "kernel_image_probe.h"

namespace facetrace::testing {
namespace {

/// Never launched: only its image (or its absence) matters.
__global__ void probe_sm80_sass_kernel(int* p) {
  if (p != nullptr) *p = 80;
}

}  // namespace

const void* probe_kernel_sm80_sass() { return reinterpret_cast<const void*>(&probe_sm80_sass_kernel); }

}  // namespace facetrace::testing
