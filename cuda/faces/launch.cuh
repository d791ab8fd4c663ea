/// @file
/// Private, CUDA builds only: the grid of the face kernels' element loops (one thread per output element,
/// grid-stride so any size fits one launch), and the one launcher of every face kernel, pdl_launch, with
/// programmatic dependent launch (docs/design/faces.md §8.4).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <utility>

namespace facetrace::faces::gpu {

inline constexpr int kThreads = 256;

/// Blocks for n elements at kThreads each (at least 1, at most 2^20: the loop strides over the rest).
inline unsigned blocks_for(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<std::int64_t>(b, 1, std::int64_t{1} << 20));
}

/// The grid-stride loop index of the current thread and the stride.
#define FT_FOR_EACH(i, n)                                                                          \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

/// FT_FOR_EACH in index type I (32-bit where the launcher found every index below 2^30: 64-bit division is
/// many instructions on the GPU).
#define FT_FOR_EACH_T(I, i, n)                                               \
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<I>(gridDim.x) * blockDim.x)

/// True when 32-bit indices hold every index of a launch whose largest index is below n.
inline bool small_index(std::int64_t n) { return n < (std::int64_t{1} << 30); }

/// The first statement of every face kernel (docs/design/faces.md §8.4). On sm_90 and newer it waits until the
/// kernel before it on the stream has finished and its writes are visible (griddepcontrol.wait), then lets the
/// next kernel's blocks be scheduled (griddepcontrol.launch_dependents), so the next launch overlaps this
/// kernel's run instead of following its last block. Both are no-ops for a kernel launched without the
/// attribute and on older GPUs. Nothing may read or write global memory before it.
__device__ __forceinline__ void pdl_entry() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/// True when face kernels are launched with programmatic dependent launch on the current device:
/// FACETRACE_FACES_PDL=1 and compute capability 9.0 or newer. Off by default: on the H200 it made YuNet's
/// batch-1 graph 30 µs slower (0.388 against 0.360 ms) and changed nothing at batch 64 and 256
/// (benchmarks/NOTES.md, issue 11 session 5). The capability is read once per device.
inline bool pdl_enabled() {
  static const bool allowed = [] {
    const char* e = std::getenv("FACETRACE_FACES_PDL");
    return e != nullptr && e[0] == '1' && e[1] == '\0';
  }();
  if (!allowed) return false;
  static std::array<std::atomic<int>, 64> major{};  // 0: not read yet; else capability major + 1
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= static_cast<int>(major.size())) return false;
  int m = major[static_cast<std::size_t>(dev)].load(std::memory_order_relaxed);
  if (m == 0) {
    int v = 0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
    m = v + 1;
    major[static_cast<std::size_t>(dev)].store(m, std::memory_order_relaxed);
  }
  return m - 1 >= 9;
}

/// Launches `kernel` like kernel<<<grid, block, shared, stream>>>(args...), with programmatic stream
/// serialisation where pdl_enabled(). The kernel must begin with pdl_entry(). The caller checks the launch with
/// FT_CUDA_LAUNCH_CHECK as after any launch (a failed launch also sets the last error it reads).
template <typename... Params, typename... Args>
void pdl_launch(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared, cudaStream_t stream,
                Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = pdl_enabled() ? 1 : 0;
  static_cast<void>(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace facetrace::faces::gpu
