/// @file
/// The tracer megakernel `transport_main_kernel` and the per-pixel reduction `reduce_xyz_kernel`
/// (tracer.md §10.1), built from the same physics headers as the CPU tracer (src/tracer/physics).
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "tracer/physics/transport.h"
#include "facetrace/runtime/cuda_errors.h"
#include "transport_launch.h"

namespace facetrace::tracer {
namespace {

constexpr unsigned kReduceBlock = 128;

/// Launch configurations of the megakernel (block size, minimum resident blocks per SM → register cap).
/// Results never depend on the choice (tracer.md §9 G1/G2: every tuple is the same pure function, wherever it
/// runs); FACETRACE_TRACER_KERNEL picks one for tuning. Measured on the H200 in benchmarks/NOTES.md.
struct KernelConfig {
  unsigned block;
  unsigned min_blocks;
  const char* name;
};
constexpr KernelConfig kConfigs[] = {
    {256, 2, "b256_r128"},  // default: the rolled kernel needs 56 registers → 4 blocks (32 warps) per SM
    {128, 4, "b128_r128"},  // smaller blocks
    {64, 1, "b64"},         // tracer.md §10.1: block size starts at 64
    {256, 5, "b256_r51"},   // ≤ 51 registers: 5 blocks (40 warps) per SM
};
constexpr unsigned kConfigCount = sizeof(kConfigs) / sizeof(kConfigs[0]);

/// Thread ↔ data: thread i = pixel_local·spp + sample_local (tracer.md §10.1). The planes are copied from the
/// by-value parameter into shared memory once per block; the trace parameters stay in parameter (constant)
/// space. Each thread writes its tuple's XYZ (12 B) to global `tuples`. Deterministic per tuple (G1).
template <unsigned Block, unsigned MinBlocks>
__global__ void __launch_bounds__(Block, MinBlocks) transport_main_kernel(const ChunkScene scene,
                                                                         const ChunkRange range,
                                                                         float* __restrict__ tuples,
                                                                         std::uint32_t* __restrict__ nonfinite) {
  __shared__ physics::GpuPlane planes[physics::kMaxPlanes];
  const std::uint32_t n = scene.params.plane_count;
  for (std::uint32_t j = threadIdx.x; j < n; j += blockDim.x) planes[j] = scene.planes[j];
  __syncthreads();
  const std::uint64_t i = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const std::uint64_t count = std::uint64_t{range.pixel_count} * range.spp;
  if (i >= count) return;
  const std::uint32_t pixel_local = static_cast<std::uint32_t>(i / range.spp);
  const std::uint32_t sample_local = static_cast<std::uint32_t>(i - std::uint64_t{pixel_local} * range.spp);
  const std::uint32_t pixel = range.pixel_offset + pixel_local;
  const std::uint32_t x = pixel % scene.params.width;
  const std::uint32_t y = pixel / scene.params.width;
  const physics::SampleXyz r = physics::trace_sample(scene.params, planes, x, y, range.first_sample + sample_local);
  if (!r.finite) atomicAdd(nonfinite, 1u);
  tuples[3 * i + 0] = r.x;
  tuples[3 * i + 1] = r.y;
  tuples[3 * i + 2] = r.z;
}

/// Thread ↔ pixel: sums[p] (global, seeded with the caller's running sums) += that pixel's tuples in
/// ascending sample order, one float add at a time — the same order as the CPU tracer (tracer.md §9 G2/G3).
__global__ void reduce_xyz_kernel(const float* __restrict__ tuples, float* __restrict__ sums,
                                  std::uint32_t pixel_count, std::uint32_t spp) {
  const std::uint32_t p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= pixel_count) return;
  float x = sums[3 * p + 0], y = sums[3 * p + 1], z = sums[3 * p + 2];
  const float* t = tuples + std::uint64_t{p} * spp * 3;
  for (std::uint32_t s = 0; s < spp; ++s) {
    x = __fadd_rn(x, t[3 * s + 0]);
    y = __fadd_rn(y, t[3 * s + 1]);
    z = __fadd_rn(z, t[3 * s + 2]);
  }
  sums[3 * p + 0] = x;
  sums[3 * p + 1] = y;
  sums[3 * p + 2] = z;
}

/// The configuration index from FACETRACE_TRACER_KERNEL (0 = default), read once.
unsigned config_index() {
  static const unsigned index = [] {
    const char* v = std::getenv("FACETRACE_TRACER_KERNEL");
    if (v == nullptr) return 0u;
    for (unsigned i = 0; i < kConfigCount; ++i)
      if (std::strcmp(v, kConfigs[i].name) == 0) return i;
    return 0u;
  }();
  return index;
}

}  // namespace


Status can_implement_chunk(const ChunkScene& scene, const ChunkRange& range) {
  const auto& p = scene.params;
  if (p.plane_count > physics::kMaxPlanes)
    return Status(Code::kDeclined, "scene has " + std::to_string(p.plane_count) + " planes; the GPU keeps at most " +
                                       std::to_string(physics::kMaxPlanes) + " in shared memory");
  if (range.pixel_count == 0 || range.spp == 0) return invalid_argument("trace chunk: empty range");
  const std::uint64_t tuples = std::uint64_t{range.pixel_count} * range.spp;
  if (tuples > kMaxTuplesPerLaunch)
    return invalid_argument("trace chunk: " + std::to_string(tuples) + " tuples exceed the per-launch limit " +
                            std::to_string(kMaxTuplesPerLaunch));
  const std::uint64_t pixels = std::uint64_t{p.width} * p.height;
  if (std::uint64_t{range.pixel_offset} + range.pixel_count > pixels)
    return invalid_argument("trace chunk: pixels [" + std::to_string(range.pixel_offset) + ", +" +
                            std::to_string(range.pixel_count) + ") exceed the image's " + std::to_string(pixels));
  if (std::uint64_t{range.first_sample} + range.spp > 0xFFFFFFFFull)
    return invalid_argument("trace chunk: sample range exceeds 2^32");
  return {};
}

Status launch_trace_chunk(const ChunkScene& scene, const ChunkRange& range, float* tuples, float* sums,
                          std::uint32_t* nonfinite, CUstream_st* stream) {
  FT_TRY(can_implement_chunk(scene, range));
  const std::uint64_t tuple_count = std::uint64_t{range.pixel_count} * range.spp;
  const unsigned config = config_index();
  const unsigned block = kConfigs[config].block;
  const unsigned grid = static_cast<unsigned>((tuple_count + block - 1) / block);
  switch (config) {
    case 1: transport_main_kernel<128, 4><<<grid, block, 0, stream>>>(scene, range, tuples, nonfinite); break;
    case 2: transport_main_kernel<64, 1><<<grid, block, 0, stream>>>(scene, range, tuples, nonfinite); break;
    case 3: transport_main_kernel<256, 5><<<grid, block, 0, stream>>>(scene, range, tuples, nonfinite); break;
    default: transport_main_kernel<256, 2><<<grid, block, 0, stream>>>(scene, range, tuples, nonfinite); break;
  }
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return runtime::cuda_status(e, "transport_main_kernel<<<>>>", __FILE__, __LINE__);
  const unsigned rgrid = (range.pixel_count + kReduceBlock - 1) / kReduceBlock;
  reduce_xyz_kernel<<<rgrid, kReduceBlock, 0, stream>>>(tuples, sums, range.pixel_count, range.spp);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return runtime::cuda_status(e, "reduce_xyz_kernel<<<>>>", __FILE__, __LINE__);
#ifdef FT_SYNC_CHECK
  if (const cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess)
    return runtime::cuda_status(e, "cudaStreamSynchronize(trace chunk)", __FILE__, __LINE__);
#endif
  return {};
}

}  // namespace facetrace::tracer
