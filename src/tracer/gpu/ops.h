/// @file
/// Private: the tracer's device ops (runtime op seam, docs/runtime.md) — ids and argument layouts shared by
/// the host workload (gpu/trace_workload.cpp) and the handler (gpu/ops.cpp, CUDA builds, linked into facetrace-gpud).
#pragma once

#include <cstdint>
#include <type_traits>

#include "facetrace/runtime/op.h"
#include "tracer/transport_launch.h"

namespace facetrace::tracer {

/// Tracer op ids (range 0x0001'xxxx, op.h).
inline constexpr runtime::OpId kOpTraceChunk = 0x00010001;

/// Arguments of kOpTraceChunk. `in` holds the seed sums of the chunk's pixels (pixel_count·3 floats) followed
/// by one u32 zero (the non-finite counter); the reply's first ticket holds the same layout after the chunk
/// (sums continued in ascending sample order, counter = non-finite samples). With kReturnTuples a second
/// ticket holds every tuple's XYZ (pixel-major, ascending sample), for the per-sample agreement test.
struct TraceChunkArgs {
  ChunkArgs chunk;  ///< scene, range and kernel configuration: passed to launch_trace_chunk as they are
  std::uint32_t buffer = 0;  ///< 0/1: device buffer pair (the chunk in flight keeps the other)
  std::uint32_t flags = 0;
  static constexpr std::uint32_t kReturnTuples = 1;
};
static_assert(std::is_trivially_copyable_v<TraceChunkArgs>);
static_assert(sizeof(TraceChunkArgs) <= runtime::OpReply::kMaxInlineBytes);

/// Bytes of a chunk's seed/result block for `pixels` pixels.
inline constexpr std::uint64_t chunk_io_bytes(std::uint64_t pixels) { return pixels * 12 + 4; }

/// Registers the tracer's ops (CUDA builds). Linked into facetrace-gpud via ft_add_gpu_ops; in-process users
/// call OpRegistry::global().add_provider(&register_tracer_ops).
void register_tracer_ops(runtime::OpRegistry& registry);

}  // namespace facetrace::tracer
