/// @file
/// Launchers of the tracer megakernel and its per-pixel reduction (cuda/tracer/transport.cu). Plain header:
/// host code reaches the kernels only through these (style.md §3).
#pragma once

#include <cstdint>

#include "facetrace/core/status.h"
#include "physics/chunk.h"

struct CUstream_st;

namespace facetrace::tracer {

/// One chunk: pixels [pixel_offset, pixel_offset + pixel_count) × samples [first_sample, first_sample + spp).
struct ChunkRange {
  std::uint32_t pixel_offset = 0;
  std::uint32_t pixel_count = 0;
  std::uint32_t first_sample = 0;
  std::uint32_t spp = 0;
};

/// Tuples per launch: ≤ min(64 MiB/12, 65 535·64) (tracer.md §10.2).
inline constexpr std::uint64_t kMaxTuplesPerLaunch = 4194240;

/// Can this chunk run? kInvalidArgument for empty/oversized ranges or pixels past the image, kDeclined
/// for more planes than fit in shared memory.
Status can_implement_chunk(const physics::ChunkScene& scene, const ChunkRange& range);

/// Bytes of the path-handoff buffer a chunk of `tuples` tuples can use (launch_trace_chunk's `handoff`): a
/// counter and the saved states of up to a quarter of the chunk's paths (those past the split bounce; more than
/// that finish in the first kernel). 0 when the megakernel configuration does not split.
std::uint64_t handoff_bytes(std::uint64_t tuples);

/// Megakernel: tuples[i] = trace_sample(pixel_offset + i / spp, first_sample + i % spp), 3 floats per tuple
/// (non-finite samples give 0 and increment *nonfinite). Then, per pixel, sums[p] (seeded by the caller) +=
/// its tuples in ascending sample order. `tuples` holds ≥ pixel_count·spp·3 floats, `sums` pixel_count·3
/// floats, `nonfinite` one u32 (not cleared here). `handoff` (handoff_bytes(tuples), or null) lets paths
/// still going at the split bounce continue in a second, compacted launch. Asynchronous on `stream`.
Status launch_trace_chunk(const physics::ChunkScene& scene, const ChunkRange& range, float* tuples, float* sums,
                          std::uint32_t* nonfinite, void* handoff, CUstream_st* stream);

}  // namespace facetrace::tracer
