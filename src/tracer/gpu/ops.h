/// @file
/// Private: the tracer's device ops (runtime op seam, docs/runtime.md) — ids and argument layouts shared by
/// the host workload (gpu/trace_workload.cpp) and the handler (gpu/ops.cpp, CUDA builds, linked into facetrace-gpud).
#pragma once

#include <cstdint>
#include <string>
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
/// With kHdrEnv the scene's HDR map is the resident named hdr_resident_name(env_key) (hdr_resident_floats
/// floats: the texels' RGB, the row CDF, the column CDFs, the row-edge cosines, as EnvLight holds them) and the
/// chunk runs under it (docs/design/tracer.md §6.1, §10.1).
struct TraceChunkArgs {
  ChunkArgs chunk;  ///< scene, range and kernel configuration: passed to launch_trace_chunk as they are
  std::uint32_t buffer = 0;  ///< 0/1: device buffer pair (the chunk in flight keeps the other)
  std::uint32_t flags = 0;
  static constexpr std::uint32_t kReturnTuples = 1;
  static constexpr std::uint32_t kHdrEnv = 2;
  std::uint64_t env_key = 0;  ///< kHdrEnv: which map (a hash of its sha256)
  std::uint32_t env_width = 0, env_height = 0;
  float env_exposure = 1.0f;
  std::uint32_t env_nee = 1;
};
static_assert(std::is_trivially_copyable_v<TraceChunkArgs>);
static_assert(sizeof(TraceChunkArgs) <= runtime::OpReply::kMaxInlineBytes);

/// The floats of an HDR map's resident: 3·w·h texel RGB, h + 1 row CDF, h·(w + 1) column CDF, h + 1 row cosines.
inline constexpr std::uint64_t hdr_resident_floats(std::uint64_t w, std::uint64_t h) {
  return 3 * w * h + (h + 1) + h * (w + 1) + (h + 1);
}

/// The resident name of the HDR map with key `key`: "tracer.env.<16 hex digits>".
inline std::string hdr_resident_name(std::uint64_t key) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s = "tracer.env.";
  for (int i = 15; i >= 0; --i) s += kHex[(key >> (4 * i)) & 15u];
  return s;
}

/// Bytes of a chunk's seed/result block for `pixels` pixels.
inline constexpr std::uint64_t chunk_io_bytes(std::uint64_t pixels) { return pixels * 12 + 4; }

/// Registers the tracer's ops (CUDA builds). Linked into facetrace-gpud via ft_add_gpu_ops; in-process users
/// call OpRegistry::global().add_provider(&register_tracer_ops).
void register_tracer_ops(runtime::OpRegistry& registry);

}  // namespace facetrace::tracer
