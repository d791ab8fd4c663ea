/// @file
/// Launchers of the tracer megakernel and its per-pixel reduction (cuda/tracer/transport.cu). Plain header:
/// host code reaches the kernels only through these (docs/design/style.md §3).
#pragma once

#include <cstdint>
#include <string_view>

#include "facetrace/core/status.h"
#include "physics/chunk.h"
#include "physics/hdr_environment.h"

struct CUstream_st;

namespace facetrace::tracer {

/// One chunk: pixels [pixel_offset, pixel_offset + pixel_count) × samples [first_sample, first_sample + spp).
struct ChunkRange {
  std::uint32_t pixel_offset = 0;
  std::uint32_t pixel_count = 0;
  std::uint32_t first_sample = 0;
  std::uint32_t spp = 0;
};

/// A launch configuration of the megakernel (docs/design/tracer.md §10.1): threads per block, minimum resident blocks per SM
/// (__launch_bounds__, which caps the registers per thread) and the split bounce: 0 = every path runs to its end
/// in one launch; b > 0 = paths still going after b bounces are handed off to a second launch that runs them
/// packed, one per thread, so their warps are not held by the paths that ended. Results never depend on the
/// choice (docs/design/tracer.md §9 G1/G2: every tuple is the same pure function, wherever it runs).
struct KernelConfig {
  std::uint32_t block = 256;
  std::uint32_t min_blocks = 4;
  std::uint32_t split = 6;
};

constexpr bool same_kernel_config(const KernelConfig& a, const KernelConfig& b) {
  return a.block == b.block && a.min_blocks == b.min_blocks && a.split == b.split;
}

/// The configurations transport.cu instantiates, by name (the names FACETRACE_TRACER_KERNEL takes); the first
/// is the default. The comparisons between them are in benchmarks/NOTES.md.
struct NamedKernelConfig {
  const char* name;
  KernelConfig config;
};
inline constexpr NamedKernelConfig kKernelConfigs[] = {
    {"b256_r64_s6",
     {256, 4, 6}},  // default: handoff after 6 bounces, ≤ 64 registers (4 blocks, 32 warps per SM)
    {"b256_r128", {256, 2, 0}},    // one launch, ≤ 128 registers
    {"b128_r128", {128, 4, 0}},    // smaller blocks
    {"b64", {64, 1, 0}},           // docs/design/tracer.md §10.1: block size starts at 64
    {"b256_r51", {256, 5, 0}},     // ≤ 51 registers: 5 blocks (40 warps) per SM
    {"b256_r64_s5", {256, 4, 5}},  // handoff after 5 bounces
    {"b256_r64_s7", {256, 4, 7}},  // handoff after 7 bounces
};
static_assert(same_kernel_config(kKernelConfigs[0].config, KernelConfig{}), "KernelConfig{} is the default");

/// The configuration called `name` (exact match), or null.
inline const KernelConfig* find_kernel_config(std::string_view name) {
  for (const NamedKernelConfig& c : kKernelConfigs)
    if (name == c.name) return &c.config;
  return nullptr;
}

/// Everything a chunk launch is a function of: can_implement_chunk, handoff_bytes and launch_trace_chunk read
/// nothing else (no environment variable, no global state), in the manner of CUTLASS's can_implement /
/// get_workspace_size. Carried verbatim in the tracer op's arguments (gpu/ops.h).
struct ChunkArgs {
  physics::ChunkScene scene;
  ChunkRange range;
  KernelConfig kernel;
};

/// Tuples per launch: ≤ min(64 MiB/12, 65 535·64) (docs/design/tracer.md §10.2).
inline constexpr std::uint64_t kMaxTuplesPerLaunch = 4194240;

/// Can this chunk run? kInvalidArgument for empty/oversized ranges, pixels past the image or a kernel
/// configuration that is not one of kKernelConfigs; kDeclined for more planes than fit in shared memory.
Status can_implement_chunk(const ChunkArgs& args);

/// Bytes of the path-handoff buffer the chunk can use (launch_trace_chunk's `handoff`). Tier 1: a counter and the
/// saved states of up to a quarter of the chunk's paths (those past the split bounce; more than that finish in
/// the first kernel); 0 when args.kernel does not split or the environment is an HDR map or a lit model. A
/// uniaxial stone with inclusions: the queues of the phased medium kernels (docs/design/tracer.md §10.1) for up
/// to 2^21 tuples at a time. 0 for the other media (one launch).
std::uint64_t handoff_bytes(const ChunkArgs& args);

/// Megakernel: tuples[i] = trace_sample(pixel_offset + i / spp, first_sample + i % spp), 3 floats per tuple
/// (non-finite samples give 0 and increment *nonfinite). Then, per pixel, sums[p] (seeded by the caller) +=
/// its tuples in ascending sample order. `tuples` holds ≥ pixel_count·spp·3 floats, `sums` pixel_count·3
/// floats, `nonfinite` one u32 (not cleared here). `handoff` (handoff_bytes(args) bytes, or null) lets paths
/// still going at the split bounce continue in a second, compacted launch. Asynchronous on `stream`.
/// `hdr` (device pointers, or null): the chunk runs under that HDR map (physics::HdrEnv,
/// docs/design/tracer.md §6.1) in one launch of 256-thread blocks, whatever args.kernel says (`handoff` unused
/// unless the stone is uniaxial with inclusions).
Status launch_trace_chunk(const ChunkArgs& args, float* tuples, float* sums, std::uint32_t* nonfinite,
                          void* handoff, CUstream_st* stream, const physics::EnvMapView* hdr = nullptr);

}  // namespace facetrace::tracer
