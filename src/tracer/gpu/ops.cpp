/// @file
/// The tracer's device op (CUDA builds): seed upload, megakernel + reduction, readback through the ring.
#include "gpu/ops.h"

#include <string>

#include "common/cuda_check.cuh"
#include "log.h"
#include "tracer/transport_launch.h"

namespace facetrace::tracer {
namespace {

/// kOpTraceChunk: H2D seed → transport_main + reduce_xyz → ring copy of the continued sums (+ tuples).
/// Everything is queued on the context's stream; nothing here synchronises.
Status trace_chunk(runtime::DeviceContext& ctx, const runtime::OpArgs& a) {
  TraceChunkArgs t;
  FT_TRY(a.args_as(t));
  const ChunkRange& range = t.chunk.range;
  FT_TRY(can_implement_chunk(t.chunk));
  const std::uint64_t io_bytes = chunk_io_bytes(range.pixel_count);
  if (a.in.size() < io_bytes)
    return invalid_argument("trace_chunk: input region of " + std::to_string(a.in.size()) + " bytes, need " +
                            std::to_string(io_bytes));
  const std::uint64_t tuple_bytes = std::uint64_t{range.pixel_count} * range.spp * 12;
  const bool odd = (t.buffer & 1u) != 0;
  auto sums = ctx.scratch(odd ? "tracer.sums.1" : "tracer.sums.0", io_bytes);
  if (!sums) return sums.status();
  auto tuples = ctx.scratch(odd ? "tracer.tuples.1" : "tracer.tuples.0", tuple_bytes);
  if (!tuples) return tuples.status();
  auto* sums_f = static_cast<float*>(sums->data);
  auto* counter = reinterpret_cast<std::uint32_t*>(static_cast<std::byte*>(sums->data) + io_bytes - 4);
  FT_CUDA_TRY(cudaMemcpyAsync(sums->data, a.in.data(), io_bytes, cudaMemcpyHostToDevice, ctx.stream()));
  physics::EnvMapView map{};
  const physics::EnvMapView* hdr = nullptr;
  if (t.flags & TraceChunkArgs::kHdrEnv) {  // the map's resident, laid out as hdr_resident_floats says
    const std::string name = hdr_resident_name(t.env_key);
    auto r = ctx.resident(name);
    if (!r) return r.status().with_context("trace_chunk: HDR map");
    const std::uint64_t w = t.env_width, h = t.env_height;
    if (w == 0 || h == 0 || r->bytes != hdr_resident_floats(w, h) * 4)
      return invalid_argument("trace_chunk: resident " + name + " holds " + std::to_string(r->bytes) +
                              " bytes, not a " + std::to_string(w) + "x" + std::to_string(h) + " map's");
    const auto* f = static_cast<const float*>(r->data);
    map.rgb = f;
    map.row_cdf = f + 3 * w * h;
    map.col_cdf = map.row_cdf + (h + 1);
    map.row_cos = map.col_cdf + h * (w + 1);
    map.width = t.env_width;
    map.height = t.env_height;
    map.exposure = t.env_exposure;
    map.nee = t.env_nee;
    hdr = &map;
  }
  void* handoff = nullptr;
  // The Tier 1 megakernel's handoff and the queues of the phased medium kernels (an isotropic stone under an HDR
  // map or a lit model runs one launch, docs/design/tracer.md §6.1, §6.2, §10.1): handoff_bytes says which.
  if (const std::uint64_t bytes = handoff_bytes(t.chunk);
      bytes > 0 && (hdr == nullptr || physics::needs_medium_transport(t.chunk.scene.medium))) {
    auto h = ctx.scratch("tracer.handoff", bytes);
    if (!h) return h.status();
    handoff = h->data;
  }
  FT_TRY(launch_trace_chunk(t.chunk, static_cast<float*>(tuples->data), sums_f, counter, handoff,
                            ctx.stream(), hdr));
  auto ticket = ctx.ring().record_copy(sums->data, io_bytes, ctx.stream());
  if (!ticket) return ticket.status();
  a.reply.tickets.push_back(*ticket);
  if (t.flags & TraceChunkArgs::kReturnTuples) {
    auto tt = ctx.ring().record_copy(tuples->data, tuple_bytes, ctx.stream());
    if (!tt) return tt.status();
    a.reply.tickets.push_back(*tt);
  }
  return {};
}

}  // namespace

void register_tracer_ops(runtime::OpRegistry& registry) {
  // An id clash (a second registration) leaves the first handler in place; say so instead of dropping it.
  if (Status st = registry.add(kOpTraceChunk, "tracer.trace_chunk", trace_chunk); !st.ok())
    FT_LOG_ERROR("tracer ops: {}", st.to_string());
}

}  // namespace facetrace::tracer
