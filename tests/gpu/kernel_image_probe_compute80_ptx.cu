/// @file
/// A probe kernel built for 80-virtual only (CUDA_ARCHITECTURES of its object library in cmake/area_runtime.cmake).
#include "kernel_image_probe.h"

namespace facetrace::testing {
namespace {

/// Never launched: only its image (or its absence) matters.
__global__ void probe_compute80_ptx_kernel(int* p) {
  if (p != nullptr) *p = 80;
}

}  // namespace

const void* probe_kernel_compute80_ptx() {
  return reinterpret_cast<const void*>(&probe_compute80_ptx_kernel);
}

}  // namespace facetrace::testing
