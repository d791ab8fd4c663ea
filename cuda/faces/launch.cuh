/// @file
/// Private, CUDA builds only: the grid of the face kernels' element loops (one thread per output element,
/// grid-stride so any size fits one launch).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace facetrace::faces::gpu {

inline constexpr int kThreads = 256;

/// Blocks for n elements at kThreads each (at least 1, at most 2^20: the loop strides over the rest).
inline unsigned blocks_for(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<std::int64_t>(b, 1, std::int64_t{1} << 20));
}

/// The grid-stride loop index of the current thread and the stride.
#define FT_FOR_EACH(i, n)                                                                              \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

}  // namespace facetrace::faces::gpu
