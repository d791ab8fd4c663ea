/// @file
/// Test seam: the tracer's chunk op (kOpTraceChunk) on a runtime::SimulatedExecutor, computed with the host physics
/// (seed, then each pixel's samples added in ascending order), so the GPU request logic (TraceWorkload, the render
/// loop) runs without a GPU and its films equal the CPU tracer's bit for bit (docs/design/tracer.md §10, §12).
/// Needs the tracer's private include roots (src/tracer, cuda).
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "facetrace/runtime/testing/simulated_executor.h"
#include "gpu/ops.h"
#include "physics/medium.h"
#include "physics/transport.h"

namespace facetrace::tracer::testing {

/// The simulated kOpTraceChunk: the CUDA op's contract (seed sums in, sums plus a non-finite counter out in one
/// ring ticket; with kReturnTuples a second ticket of every tuple's XYZ). `seen` (may be null) gets each chunk's
/// kernel configuration.
inline Status sim_trace_chunk(runtime::SimDevice& dev, const runtime::OpArgs& a,
                              KernelConfig* seen = nullptr) {
  TraceChunkArgs t;
  FT_TRY(a.args_as(t));
  if (seen) *seen = t.chunk.kernel;
  const ChunkRange& range = t.chunk.range;
  const physics::ChunkScene& scene = t.chunk.scene;
  const std::uint64_t io = chunk_io_bytes(range.pixel_count);
  if (a.in.size() < io) return invalid_argument("sim trace_chunk: short input");
  std::vector<std::byte> out(a.in.begin(), a.in.begin() + static_cast<std::ptrdiff_t>(io));
  std::vector<float> tuples;
  auto* sums = reinterpret_cast<float*>(out.data());
  std::uint32_t nonfinite = 0;
  for (std::uint32_t i = 0; i < range.pixel_count; ++i) {
    const std::uint32_t p = range.pixel_offset + i;
    for (std::uint32_t s = 0; s < range.spp; ++s) {
      const std::uint32_t x = p % scene.params.width, y = p / scene.params.width;
      const std::uint32_t si = range.first_sample + s;
      const physics::MediumParams& md = scene.medium;
      const auto r = md.kind == physics::kMediumUniaxial
                         ? physics::trace_sample_medium<physics::kMediumUniaxial>(
                               scene.params, md, scene.planes, physics::AnalyticEnv{}, x, y, si)
                     : physics::needs_medium_transport(md)
                         ? physics::trace_sample_medium<physics::kMediumIsotropic>(
                               scene.params, md, scene.planes, physics::AnalyticEnv{}, x, y, si)
                         : physics::trace_sample(scene.params, scene.planes, x, y, si);
      if (!r.finite) ++nonfinite;
      sums[3 * i] += r.x;
      sums[3 * i + 1] += r.y;
      sums[3 * i + 2] += r.z;
      if (t.flags & TraceChunkArgs::kReturnTuples) tuples.insert(tuples.end(), {r.x, r.y, r.z});
    }
  }
  std::memcpy(out.data() + io - 4, &nonfinite, 4);
  auto ticket = dev.emit(out);
  if (!ticket) return ticket.status();
  a.reply.tickets.push_back(*ticket);
  if (t.flags & TraceChunkArgs::kReturnTuples) {
    auto tt = dev.emit(std::as_bytes(std::span(tuples)));
    if (!tt) return tt.status();
    a.reply.tickets.push_back(*tt);
  }
  return {};
}

/// Registers sim_trace_chunk as kOpTraceChunk on `ex`.
inline void add_sim_trace_op(runtime::SimulatedExecutor& ex) {
  ex.add_op(kOpTraceChunk,
            [](runtime::SimDevice& dev, const runtime::OpArgs& a) { return sim_trace_chunk(dev, a); });
}

}  // namespace facetrace::tracer::testing
