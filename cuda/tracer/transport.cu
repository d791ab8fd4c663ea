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

/// Launch configurations of the megakernel (block size, minimum resident blocks per SM → register cap, and
/// the refill threshold of the path-regenerating form; 0 = one tuple per thread). Results never depend on the
/// choice (tracer.md §9 G1/G2: every tuple is the same pure function, wherever and whenever it runs);
/// FACETRACE_TRACER_KERNEL picks one for tuning.
struct KernelConfig {
  unsigned block;
  unsigned min_blocks;
  unsigned refill;
  const char* name;
  unsigned throttle_smem = 0;  // dynamic shared memory requested only to cap the resident blocks per SM
};
constexpr KernelConfig kConfigs[] = {
    {256, 2, 0, "b256_r128"},         // one tuple per thread, ≤ 128 registers, 16 warps per SM
    {128, 4, 0, "b128_r128"},         // one tuple per thread, smaller blocks
    {64, 1, 0, "b64"},                // tracer.md §10.1: block size starts at 64; compiler's register choice
    {128, 5, 0, "b128_r102"},         // ≤ 102 registers: 20 warps per SM
    {128, 6, 0, "b128_r85"},          // ≤ 85 registers: 24 warps per SM
    {256, 5, 0, "b256_r51"},          // ≤ 51 registers: 40 warps per SM
    {256, 6, 0, "b256_r42"},          // ≤ 42 registers: 48 warps per SM
    {256, 2, 0, "b256_occ16", 100 * 1024},  // at most 2 blocks (16 warps) per SM: per-thread local data fits L1
    {256, 2, 0, "b256_occ24", 68 * 1024},   // at most 3 blocks (24 warps) per SM
    {256, 2, 8, "regen8_b256_r128"},  // persistent, refill when ≥ 8 lanes of a warp are idle
    {256, 2, 12, "regen12_b256_r128"},
    {256, 2, 16, "regen16_b256_r128"},
};
constexpr unsigned kConfigCount = sizeof(kConfigs) / sizeof(kConfigs[0]);

/// Tuples a warp of the regenerating kernel takes from the chunk's counter at a time: a few refills' worth
/// of consecutive tuples (neighbouring samples of one or two pixels: coherent camera rays).
constexpr unsigned kRegenSegment = 128;

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

/// Persistent megakernel with batched path regeneration. Each warp runs paths bounce by bounce
/// (physics::path_step); lanes whose path ended wait, holding its state, until at least `Refill` lanes of the
/// warp are idle (or all are), and then all of them are finished (path_finish, tuple written) and refilled with
/// the next tuples of the warp's segment at once — so begin/finish run as one batch, not every bounce, and a
/// warp does not idle behind its longest path. Tuple i is trace_sample(pixel_offset + i / spp, first_sample +
/// i % spp) bit for bit (the same functions in the same order) and lands in tuples[3i..3i+2].
template <unsigned Block, unsigned MinBlocks, unsigned Refill>
__global__ void __launch_bounds__(Block, MinBlocks) transport_regen_kernel(const ChunkScene scene,
                                                                          const ChunkRange range,
                                                                          float* __restrict__ tuples,
                                                                          std::uint32_t* __restrict__ nonfinite,
                                                                          unsigned long long* __restrict__ next_segment) {
  __shared__ physics::GpuPlane planes[physics::kMaxPlanes];
  const std::uint32_t n = scene.params.plane_count;
  for (std::uint32_t j = threadIdx.x; j < n; j += blockDim.x) planes[j] = scene.planes[j];
  __syncthreads();
  constexpr unsigned kFull = 0xffffffffu;
  const std::uint32_t count = range.pixel_count * range.spp;  // ≤ kMaxTuplesPerLaunch
  const unsigned lane = threadIdx.x & 31u;
  const unsigned below = (1u << lane) - 1u;
  physics::PathState ps;
  std::uint32_t idx = 0;
  bool active = false;
  bool pending = false;  // the path ended; its tuple is written at the next refill
  std::uint32_t seg_next = 0, seg_end = 0;  // warp-uniform: the rest of the warp's segment
  bool exhausted = false;                   // warp-uniform: the chunk's counter ran out
  std::uint32_t local_nonfinite = 0;
  for (;;) {
    const unsigned idle = __ballot_sync(kFull, !active);
    if (idle == kFull || __popc(idle) >= static_cast<int>(Refill)) {
      if (pending) {
        const physics::SampleXyz r = physics::path_finish(ps, scene.params);
        local_nonfinite += r.finite ? 0u : 1u;
        tuples[3ull * idx + 0] = r.x;
        tuples[3ull * idx + 1] = r.y;
        tuples[3ull * idx + 2] = r.z;
        pending = false;
      }
      unsigned need = idle;
      while (need != 0u && !exhausted) {
        if (seg_next >= seg_end) {
          unsigned long long base = 0;
          if (lane == 0) base = atomicAdd(next_segment, static_cast<unsigned long long>(kRegenSegment));
          base = __shfl_sync(kFull, base, 0);
          if (base >= count) {
            exhausted = true;
            break;
          }
          seg_next = static_cast<std::uint32_t>(base);
          seg_end = static_cast<std::uint32_t>(base + kRegenSegment < count ? base + kRegenSegment : count);
        }
        const unsigned avail = seg_end - seg_next;
        const unsigned rank = static_cast<unsigned>(__popc(need & below));
        const bool mine = ((need >> lane) & 1u) != 0u && rank < avail;
        if (mine) {
          idx = seg_next + rank;
          const std::uint32_t pixel_local = idx / range.spp;
          const std::uint32_t pixel = range.pixel_offset + pixel_local;
          physics::path_begin(ps, scene.params, pixel % scene.params.width, pixel / scene.params.width,
                              range.first_sample + (idx - pixel_local * range.spp));
          active = scene.params.max_bounces > 0;
          pending = !active;
        }
        const unsigned taken = __ballot_sync(kFull, mine);
        seg_next += static_cast<unsigned>(__popc(taken));
        need &= ~taken;
      }
      if (exhausted && __ballot_sync(kFull, active || pending) == 0u) break;
      if (!__any_sync(kFull, active)) continue;  // only max_bounces = 0 paths: write them at once
    }
    if (active && !physics::path_step(ps, scene.params, planes)) {
      active = false;
      pending = true;
    }
  }
  if (local_nonfinite) atomicAdd(nonfinite, local_nonfinite);
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

/// Resident blocks of a regenerating configuration on the current device (one wave fills the GPU); 0 when the
/// occupancy query fails.
template <unsigned Block, unsigned MinBlocks, unsigned Refill>
unsigned regen_grid() {
  static const unsigned resident = [] {
    int device = 0, sms = 0, per_sm = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, transport_regen_kernel<Block, MinBlocks, Refill>,
                                                      static_cast<int>(Block), 0) != cudaSuccess)
      return 0u;
    return static_cast<unsigned>(sms) * static_cast<unsigned>(per_sm);
  }();
  return resident;
}

template <unsigned Block, unsigned MinBlocks, unsigned Refill>
Status launch_regen(const ChunkScene& scene, const ChunkRange& range, float* tuples, std::uint32_t* nonfinite,
                    unsigned long long* work_counter, CUstream_st* stream) {
  const std::uint64_t tuple_count = std::uint64_t{range.pixel_count} * range.spp;
  const unsigned resident = regen_grid<Block, MinBlocks, Refill>();
  if (resident == 0) return Status(Code::kDeclined, "could not size the regenerating megakernel's grid");
  const std::uint64_t warps_needed = (tuple_count + kRegenSegment - 1) / kRegenSegment;
  const std::uint64_t blocks_needed = (warps_needed + Block / 32 - 1) / (Block / 32);
  const unsigned grid = static_cast<unsigned>(blocks_needed < resident ? blocks_needed : resident);
  if (const cudaError_t e = cudaMemsetAsync(work_counter, 0, sizeof(unsigned long long), stream); e != cudaSuccess)
    return runtime::cuda_status(e, "cudaMemsetAsync(tracer work counter)", __FILE__, __LINE__);
  transport_regen_kernel<Block, MinBlocks, Refill><<<grid, Block, 0, stream>>>(scene, range, tuples, nonfinite,
                                                                               work_counter);
  return {};
}

Status launch_trace_chunk(const ChunkScene& scene, const ChunkRange& range, float* tuples, float* sums,
                          std::uint32_t* nonfinite, unsigned long long* work_counter, CUstream_st* stream) {
  FT_TRY(can_implement_chunk(scene, range));
  const std::uint64_t tuple_count = std::uint64_t{range.pixel_count} * range.spp;
  const unsigned config = config_index();
  const unsigned block = kConfigs[config].block;
  const unsigned grid = static_cast<unsigned>((tuple_count + block - 1) / block);
  switch (config) {
    case 1: transport_main_kernel<128, 4><<<grid, block, 0, stream>>>(scene, range, tuples, nonfinite); break;
    case 2: transport_main_kernel<64, 1><<<grid, block, 0, stream>>>(scene, range, tuples, nonfinite); break;
    case 3: transport_main_kernel<128, 5><<<grid, block, 0, stream>>>(scene, range, tuples, nonfinite); break;
    case 4: transport_main_kernel<128, 6><<<grid, block, 0, stream>>>(scene, range, tuples, nonfinite); break;
    case 5: transport_main_kernel<256, 5><<<grid, block, 0, stream>>>(scene, range, tuples, nonfinite); break;
    case 6: transport_main_kernel<256, 6><<<grid, block, 0, stream>>>(scene, range, tuples, nonfinite); break;
    case 7:
    case 8: {
      const unsigned smem = kConfigs[config].throttle_smem;
      static const bool attr_ok =
          cudaFuncSetAttribute(transport_main_kernel<256, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               100 * 1024) == cudaSuccess;  // the largest throttle above
      if (!attr_ok) return Status(Code::kDeclined, "could not raise the megakernel's dynamic shared memory");
      transport_main_kernel<256, 2><<<grid, block, smem, stream>>>(scene, range, tuples, nonfinite);
      break;
    }
    case 9: FT_TRY((launch_regen<256, 2, 8>(scene, range, tuples, nonfinite, work_counter, stream))); break;
    case 10: FT_TRY((launch_regen<256, 2, 12>(scene, range, tuples, nonfinite, work_counter, stream))); break;
    case 11: FT_TRY((launch_regen<256, 2, 16>(scene, range, tuples, nonfinite, work_counter, stream))); break;
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
