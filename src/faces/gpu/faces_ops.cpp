/// @file
/// kOpFacesRun and kOpFacesDetect on CUDA (faces_ops.h; CUDA builds, linked into facetrace-gpud): the model's
/// program and constants from its residents (or the input region), one GpuProgram cached per (model, batch,
/// precision, graph) in this process and shared by both ops, the batch uploaded once from the pinned arena, the
/// run, and every output (kOpFacesRun) or the final detections (kOpFacesDetect) in one ring ticket.
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "common/cuda_check.cuh"
#include "faces/gpu_program.h"
#include "faces/yunet_gpu.h"
#include "gpu/faces_ops.h"
#include "gpu/program_codec.h"
#include "log.h"

namespace facetrace::faces::gpu {
namespace {

constexpr std::uint32_t kMaxBatch = 1u << 16;
static_assert(sizeof(GpuDetection) == kDetectionFloats * sizeof(float));

/// A model decoded in this process: the program with every constant bound to a host copy (plan reads the
/// weights; conv weights are packed at plan time).
struct ChildModel {
  Program program;
  std::vector<std::uint64_t> blob_floats;
  std::vector<Blob> host;  ///< per constant, filled on first sight
  bool bound = false;
};

struct PlanKey {
  std::uint64_t key;
  std::uint32_t batch;
  std::uint8_t precision;
  std::uint8_t use_graph;
  bool operator<(const PlanKey& o) const {
    return std::tie(key, batch, precision, use_graph) < std::tie(o.key, o.batch, o.precision, o.use_graph);
  }
};

struct PlanEntry {
  std::unique_ptr<GpuProgram> plan;
  ConstTable table;  ///< the device pointers it was planned with (a captured graph holds them)
  Status declined;   ///< non-ok: plan declined this (model, batch, precision); the caller runs the CPU
  std::vector<std::byte> choices;  ///< the plan's choices as every reply carries them (faces_ops.h)
};

/// Per-process caches (the child's whole life; a replaced child starts empty). Ops run one at a time per
/// executor, but an in-process executor may share the process with another: one lock.
std::mutex g_mu;
std::map<std::uint64_t, std::unique_ptr<ChildModel>> g_models;
std::map<PlanKey, PlanEntry> g_plans;

/// The caches hold device memory for the process's life. In an in-process executor's process, free it before
/// the CUDA runtime's own exit handler destroys the context (an atexit handler registered after the runtime's
/// initialisation runs before it), so that compute-sanitizer's leak check sees what is really leaked
/// (docs/testing.md "Sanitizers"). Skipped while an op still runs (it holds g_mu): the driver frees it at exit.
void release_caches_at_exit() {
  std::unique_lock lock(g_mu, std::try_to_lock);
  if (!lock.owns_lock()) return;
  g_plans.clear();
  g_models.clear();
}

Blob host_blob(std::span<const std::byte> bytes) {
  auto v = std::make_shared<std::vector<float>>(bytes.size() / sizeof(float));
  std::memcpy(v->data(), bytes.data(), v->size() * sizeof(float));
  return v;
}

/// Copies a device buffer to a new host blob (synchronous on the op's stream; once per model and constant).
Expected<Blob> read_back(runtime::DeviceContext& ctx, const runtime::DeviceSpan& d, std::uint64_t floats) {
  if (d.bytes < floats * sizeof(float))
    return invalid_argument("faces_run: resident shorter than its constant");
  auto v = std::make_shared<std::vector<float>>(static_cast<std::size_t>(floats));
  if (floats > 0) {
    FT_CUDA_TRY(
        cudaMemcpyAsync(v->data(), d.data, floats * sizeof(float), cudaMemcpyDeviceToHost, ctx.stream()));
    FT_CUDA_TRY(cudaStreamSynchronize(ctx.stream()));
  }
  return Blob(v);
}

Expected<ChildModel*> child_model(runtime::DeviceContext& ctx, std::uint64_t key) {
  if (auto it = g_models.find(key); it != g_models.end()) return it->second.get();
  auto r = ctx.resident(program_resident_name(key));
  if (!r) return r.status();
  std::vector<std::byte> bytes(static_cast<std::size_t>(r->bytes));
  if (!bytes.empty()) {
    FT_CUDA_TRY(cudaMemcpyAsync(bytes.data(), r->data, bytes.size(), cudaMemcpyDeviceToHost, ctx.stream()));
    FT_CUDA_TRY(cudaStreamSynchronize(ctx.stream()));
  }
  auto d = decode_program(bytes);
  if (!d) return d.status();
  auto m = std::make_unique<ChildModel>();
  m->program = std::move(d->program);
  m->blob_floats = std::move(d->blob_floats);
  m->host.assign(m->blob_floats.size(), nullptr);
  ChildModel* raw = m.get();
  g_models.emplace(key, std::move(m));
  return raw;
}

/// What both ops share: the model of `args.key` (decoded once), its constants' device pointers (residents in
/// place, inline ones uploaded), and the GpuProgram cached per (model, batch, precision, graph).
struct Planned {
  ChildModel* model = nullptr;
  GpuProgram* plan = nullptr;
  std::span<const std::byte> batch;                 ///< the input region's first part (args.input_bytes)
  const std::vector<std::byte>* choices = nullptr;  ///< PlanEntry::choices
};

/// `carried`: the plan-choice blob the parent sent (faces_ops.h), used when this call plans.
Expected<Planned> planned(runtime::DeviceContext& ctx, const FacesRunArgs& args,
                          std::span<const std::byte> region, std::span<const std::byte> carried) {
  if (args.batch < 1 || args.batch > kMaxBatch)
    return invalid_argument("faces_run: batch " + std::to_string(args.batch) + " outside 1.." +
                            std::to_string(kMaxBatch));
  if (args.precision > static_cast<std::uint8_t>(Precision::kBf16))
    return invalid_argument("faces_run: precision " + std::to_string(args.precision));
  auto model = child_model(ctx, args.key);
  if (!model) return model.status();
  ChildModel& m = **model;
  auto in = parse_input(args, region, m.blob_floats);
  if (!in) return in.status();

  // Device pointers of every constant in wire order (Program::consts, then the conv weights and biases: the
  // table form of cuda/faces/gpu_program.h): residents in place; inline ones uploaded to this model's scratch.
  std::uint64_t inline_bytes = 0;
  for (const auto& b : in->inline_blobs) inline_bytes += align_up(b.size());
  std::byte* inline_dev = nullptr;
  if (inline_bytes > 0) {
    auto s = ctx.scratch(const_resident_name(args.key, m.blob_floats.size()) + ".inline", inline_bytes);
    if (!s) return s.status();
    inline_dev = static_cast<std::byte*>(s->data);
  }
  ConstTable table(m.blob_floats.size(), nullptr);
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < m.blob_floats.size(); ++i) {
    const std::uint64_t floats = m.blob_floats[i];
    const std::span<const std::byte> inl = in->inline_blobs[i];
    if (floats == 0) {  // an empty constant: nothing to point at, but never a null entry
      if (!m.host[i]) m.host[i] = host_blob({});
      table[i] = reinterpret_cast<const float*>(&m.host[i]);
      continue;
    }
    if (!inl.empty()) {
      if (!m.host[i]) m.host[i] = host_blob(inl);
      FT_CUDA_TRY(
          cudaMemcpyAsync(inline_dev + at, inl.data(), inl.size(), cudaMemcpyHostToDevice, ctx.stream()));
      table[i] = reinterpret_cast<const float*>(inline_dev + at);
      at += align_up(inl.size());
      continue;
    }
    auto r = ctx.resident(const_resident_name(args.key, i));
    if (!r) return r.status();
    if (r->bytes != floats * sizeof(float))
      return invalid_argument("faces_run: resident constant " + std::to_string(i) + " has " +
                              std::to_string(r->bytes) + " bytes, expected " +
                              std::to_string(floats * sizeof(float)));
    if (!m.host[i]) {
      auto h = read_back(ctx, *r, floats);
      if (!h) return h.status();
      m.host[i] = *h;
    }
    table[i] = static_cast<const float*>(r->data);
  }
  if (!m.bound) {
    FT_TRY(bind_blobs(m.program, m.host));
    m.bound = true;
  }

  static const bool release_registered = std::atexit(release_caches_at_exit) == 0;  // CUDA is up by now
  (void)release_registered;
  const PlanKey pk{args.key, args.batch, args.precision, args.use_graph};
  PlanEntry& e = g_plans[pk];
  if (!e.declined.ok()) return e.declined;
  if (!e.plan || e.table != table) {
    e.plan.reset();
    PlanOptions o;
    o.batch = static_cast<int>(args.batch);
    o.precision = static_cast<Precision>(args.precision);
    o.use_graph = args.use_graph != 0;
    if (!carried.empty() && o.precision == Precision::kFp32) {
      if (auto c = decode_conv_choices(carried); c.ok())
        o.conv_choices = std::move(*c);
      else
        FT_LOG_WARN("faces_run: ignoring the plan choices sent for model {:016x}: {}", args.key,
                    c.status().to_string());
    }
    auto plan = GpuProgram::plan(m.program, table, o, ctx.stream());
    if (!plan) {
      if (plan.status().code() == Code::kDeclined) e.declined = plan.status();
      return plan.status();
    }
    e.plan = std::move(*plan);
    e.table = table;
    e.choices = encode_conv_choices(e.plan->conv_choices());
    FT_LOG_DEBUG(
        "faces_run: planned model {:016x} at batch {} ({}), {} device bytes, {} of {} carried conv "
        "choices taken",
        args.key, args.batch, precision_name(o.precision), e.plan->device_bytes(), e.plan->carried_choices(),
        o.conv_choices.size());
    if (e.plan->carried_choices() < static_cast<int>(o.conv_choices.size()))
      FT_LOG_WARN(
          "faces_run: model {:016x} at batch {}: {} of {} carried conv choices did not fit and were "
          "searched again (results may differ from the earlier plan's in the last bits)",
          args.key, args.batch, o.conv_choices.size() - static_cast<std::size_t>(e.plan->carried_choices()),
          o.conv_choices.size());
  }
  return Planned{&m, e.plan.get(), in->batch, &e.choices};
}

Status faces_run(runtime::DeviceContext& ctx, const runtime::OpArgs& a) {
  FacesRunArgs args;
  std::span<const std::byte> carried;
  FT_TRY(read_op_args(a.args, args, carried));
  std::lock_guard lock(g_mu);
  auto pl = planned(ctx, args, a.in, carried);
  if (!pl) return pl.status();
  const std::uint64_t per_image = static_cast<std::uint64_t>(pl->model->program.lens[0]) * sizeof(float);
  if (args.input_bytes != per_image * args.batch)
    return invalid_argument("faces_run: input of " + std::to_string(args.input_bytes) + " bytes for batch " +
                            std::to_string(args.batch));
  const std::uint64_t out_bytes = pl->plan->output_floats() * sizeof(float);
  if (out_bytes != args.output_bytes)
    return invalid_argument("faces_run: the program's outputs hold " + std::to_string(out_bytes) +
                            " bytes, the caller expects " + std::to_string(args.output_bytes));
  auto d_in = ctx.scratch("faces/in", args.input_bytes);
  if (!d_in) return d_in.status();
  auto d_out = ctx.scratch("faces/out", out_bytes);
  if (!d_out) return d_out.status();
  FT_CUDA_TRY(
      cudaMemcpyAsync(d_in->data, pl->batch.data(), args.input_bytes, cudaMemcpyHostToDevice, ctx.stream()));
  FT_TRY(pl->plan->run(static_cast<const float*>(d_in->data), static_cast<float*>(d_out->data)));
  auto ticket = ctx.ring().record_copy(d_out->data, out_bytes, ctx.stream());
  if (!ticket) return ticket.status();
  a.reply.tickets.push_back(*ticket);
  a.reply.bytes = *pl->choices;
  return {};
}

/// kOpFacesDetect (faces_ops.h): frames up, letterbox, the program, decode + NMS, the final records back.
Status faces_detect(runtime::DeviceContext& ctx, const runtime::OpArgs& a) {
  FacesDetectArgs d;
  std::span<const std::byte> carried;
  FT_TRY(read_op_args(a.args, d, carried));
  const FacesRunArgs& args = d.run;
  if (d.n < 1 || d.n > 4096) return invalid_argument("faces_detect: letterbox side " + std::to_string(d.n));
  if (d.capacity < 1 || d.capacity > 4000)
    return invalid_argument("faces_detect: capacity " + std::to_string(d.capacity) + " outside 1..4000");
  std::lock_guard lock(g_mu);
  auto pl = planned(ctx, args, a.in, carried);
  if (!pl) return pl.status();
  const Program& p = pl->model->program;
  const Shape want{1, 3, d.n, d.n};
  if (p.input_shape != want || p.lens[0] != std::int64_t{3} * d.n * d.n)
    return invalid_argument("faces_detect: the program's input is not [1,3," + std::to_string(d.n) + "," +
                            std::to_string(d.n) + "]");
  const std::uint32_t b = args.batch;
  const std::span<const std::byte> region = pl->batch;
  const std::uint64_t header_bytes = std::uint64_t{b} * sizeof(FrameHeader);
  if (region.size() < header_bytes)
    return invalid_argument("faces_detect: input region shorter than its headers");
  std::vector<FrameHeader> headers(b);
  std::memcpy(headers.data(), region.data(), header_bytes);
  for (std::uint32_t i = 0; i < b; ++i) {
    const FrameHeader& h = headers[i];
    const std::uint64_t bytes = std::uint64_t{h.width} * h.height * 3;
    if (h.width < 1 || h.height < 1 || h.width > 65536 || h.height > 65536 || h.offset < header_bytes ||
        h.offset > region.size() || region.size() - h.offset < bytes)
      return invalid_argument("faces_detect: frame " + std::to_string(i) + " (" + std::to_string(h.width) +
                              "x" + std::to_string(h.height) + " at " + std::to_string(h.offset) +
                              ") outside the input region");
  }
  std::vector<std::string> names;
  std::vector<std::int64_t> lens;
  for (const auto& o : p.outputs) {
    names.push_back(o.name);
    lens.push_back(p.lens[static_cast<std::size_t>(o.value)]);
  }
  auto layout = yunet_layout(names, lens, static_cast<int>(b), static_cast<int>(d.n), static_cast<int>(d.n));
  if (!layout) return layout.status();
  const std::uint64_t out_bytes = pl->plan->output_floats() * sizeof(float);
  if (layout->total_floats * sizeof(float) != out_bytes)
    return internal_error("faces_detect: the program's outputs hold " + std::to_string(out_bytes) +
                          " bytes, the YuNet layout " + std::to_string(layout->total_floats * sizeof(float)));
  const std::uint64_t reply_bytes = detect_reply_bytes(b, d.capacity);
  if (reply_bytes != args.output_bytes)
    return invalid_argument("faces_detect: the reply holds " + std::to_string(reply_bytes) +
                            " bytes, the caller expects " + std::to_string(args.output_bytes));
  auto d_frames = ctx.scratch("faces/frames", region.size());
  if (!d_frames) return d_frames.status();
  auto d_in = ctx.scratch("faces/in", static_cast<std::uint64_t>(p.lens[0]) * b * sizeof(float));
  if (!d_in) return d_in.status();
  auto d_geom = ctx.scratch("faces/geom", std::uint64_t{b} * sizeof(ImageGeom));
  if (!d_geom) return d_geom.status();
  auto d_out = ctx.scratch("faces/out", out_bytes);
  if (!d_out) return d_out.status();
  const std::uint64_t post_bytes = yunet_post_scratch_bytes(*layout);
  auto d_post = ctx.scratch("faces/post", post_bytes);
  if (!d_post) return d_post.status();
  auto d_reply = ctx.scratch("faces/detections", reply_bytes);
  if (!d_reply) return d_reply.status();

  FT_CUDA_TRY(
      cudaMemcpyAsync(d_frames->data, region.data(), region.size(), cudaMemcpyHostToDevice, ctx.stream()));
  std::vector<FrameDesc> frames(b);
  for (std::uint32_t i = 0; i < b; ++i)
    frames[i] = FrameDesc{static_cast<const std::uint8_t*>(d_frames->data) + headers[i].offset,
                          static_cast<int>(headers[i].width), static_cast<int>(headers[i].height)};
  auto* in = static_cast<float*>(d_in->data);
  auto* geom = static_cast<ImageGeom*>(d_geom->data);
  FT_TRY(letterbox_batch(frames.data(), static_cast<int>(b), static_cast<int>(d.n), in, geom, nullptr,
                         ctx.stream()));
  FT_TRY(pl->plan->run(in, static_cast<float*>(d_out->data)));
  DetectOptions o;
  o.score = d.score;
  o.nms_iou = d.nms_iou;
  o.max_faces = d.max_faces;
  auto* reply = static_cast<std::byte*>(d_reply->data);
  const DetectionsOut out{reinterpret_cast<int*>(reply),
                          reinterpret_cast<GpuDetection*>(reply + detect_records_offset(b)),
                          static_cast<int>(d.capacity)};
  FT_TRY(yunet_decode_nms(static_cast<const float*>(d_out->data), *layout, geom, o,
                          DeviceScratch{d_post->data, post_bytes}, out, ctx.stream()));
  auto ticket = ctx.ring().record_copy(d_reply->data, reply_bytes, ctx.stream());
  if (!ticket) return ticket.status();
  a.reply.tickets.push_back(*ticket);
  a.reply.bytes = *pl->choices;
  return {};
}

}  // namespace

void register_faces_ops(runtime::OpRegistry& registry) {
  // An id clash (a second registration) leaves the first handler in place; say so instead of dropping it.
  if (Status st = registry.add(kOpFacesRun, "faces.run", faces_run); !st.ok())
    FT_LOG_ERROR("faces ops: {}", st.to_string());
  if (Status st = registry.add(kOpFacesDetect, "faces.detect", faces_detect); !st.ok())
    FT_LOG_ERROR("faces ops: {}", st.to_string());
}

}  // namespace facetrace::faces::gpu
