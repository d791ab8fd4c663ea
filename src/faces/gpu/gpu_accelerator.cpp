/// @file
/// GpuAccelerator (gpu_accelerator.h): programs as one Workload each on the device runtime, residents per model,
/// the failure mapping of docs/design/faces.md §4, and make_gpu_accelerator.
#include "gpu/gpu_accelerator.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>

#include "facetrace/core/env.h"
#include "facetrace/faces/detector.h"
#include "gpu/faces_ops.h"
#include "gpu/pace.h"
#include "gpu/program_codec.h"
#include "log.h"

namespace facetrace::faces {

GpuAcceleratorOptions GpuAcceleratorOptions::from_env() {
  GpuAcceleratorOptions o;
  const std::int64_t mb = core::env_int_clamped("FACETRACE_FACES_RESIDENT_MB", 768, 0, 1 << 20);
  o.resident_budget_bytes = static_cast<std::uint64_t>(mb) << 20;
  return o;
}

}  // namespace facetrace::faces

namespace facetrace::faces::gpu {
namespace {

constexpr std::chrono::milliseconds kRunDeadline{30000};  // docs/design/faces.md §4: a submission over 30 s
constexpr std::int64_t kMaxIndex = std::int64_t{1}
                                   << 31;       // docs/design/faces.md §4: element index ≥ 2³¹ declines
constexpr std::size_t kIdentityCacheSize = 16;  // programs remembered by constant identity

std::uint64_t fnv1a(std::span<const std::byte> b, std::uint64_t h = 0xcbf29ce484222325ull) {
  for (std::byte x : b) {
    h ^= static_cast<std::uint8_t>(x);
    h *= 0x100000001b3ull;
  }
  return h;
}

std::span<const std::byte> bytes_of(const std::vector<float>& v) { return std::as_bytes(std::span(v)); }

/// One model known to this accelerator: its encoded structure, constants and where each lives on the device.
struct Model {
  std::uint64_t key = 0;
  EncodedProgram enc;
  std::vector<std::int64_t> output_lens;  ///< per Program::outputs entry, at batch 1
  std::int64_t max_len = 0;               ///< largest value at batch 1
  std::vector<bool> resident;             ///< per constant: uploaded as a resident (else sent with every run)
  bool uploaded = false;                  ///< the residents above are on the executor
  /// Per batch: the plan choices of the first child that planned it (faces_ops.h), sent with every later run
  /// so a replacement child plans the same kernels (docs/design/faces.md §8.2 "Plan choices").
  std::map<std::uint32_t, std::vector<std::byte>> choices;
};

/// Identity of a program's constants (the same shared blobs give the same model without rehashing them).
struct Identity {
  std::uint64_t structure = 0;
  std::vector<std::weak_ptr<const std::vector<float>>> blobs;
  std::uint64_t key = 0;
  bool matches(std::uint64_t s, const std::vector<Blob>& b) const {
    if (s != structure || b.size() != blobs.size()) return false;
    for (std::size_t i = 0; i < b.size(); ++i) {
      const auto locked = blobs[i].lock();
      if (!locked || locked != b[i]) return false;
    }
    return true;
  }
};

class GpuAccelerator;

/// One submission of a faces op: the op, its FacesRunArgs (batch, input_bytes, output_bytes set by the caller;
/// key, precision and the inline table filled by the workload), the op's own arguments after them, and a writer
/// of the input region's first part (input_bytes bytes).
struct Request {
  runtime::OpId op = kOpFacesRun;
  FacesRunArgs args;
  std::vector<std::byte> tail;
  std::function<void(std::byte*)> write;
};

/// One run: the Workload seam (runtime/backend.h) around one faces op; the reply's bytes come back raw.
class RunWorkload final : public runtime::Workload {
 public:
  RunWorkload(GpuAccelerator& acc, Model& model, Request request, std::optional<runtime::FaultKind> fault)
      : acc_(acc), model_(model), request_(std::move(request)), fault_(fault) {}

  std::size_t scratch_bytes() const override { return static_cast<std::size_t>(request_.args.output_bytes); }
  void seed_scratch(std::span<std::byte>) override {}  // the one ticket overwrites every byte
  Status begin_turn(runtime::Executor& ex) override;
  Expected<bool> run_chunk(runtime::Executor& ex, std::span<std::byte> scratch) override;
  Status drain(runtime::Executor& ex, std::span<std::byte> scratch, bool discard) override;
  void commit(std::span<const std::byte> scratch) override {
    reply_.assign(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(request_.args.output_bytes));
  }

  /// The first failure of a hook (nullopt when none ran or none failed).
  const std::optional<Status>& error() const { return error_; }
  std::vector<std::byte> take_reply() { return std::move(reply_); }

 private:
  Status note(Status st) {
    if (!st.ok() && !error_) error_ = st;
    return st;
  }

  GpuAccelerator& acc_;
  Model& model_;
  Request request_;
  std::optional<runtime::FaultKind> fault_;
  std::optional<runtime::RingTicket> ticket_;
  runtime::ArenaBlock block_;
  std::optional<Status> error_;
  std::vector<std::byte> reply_;
};

class GpuAccelerator final : public Accelerator, public std::enable_shared_from_this<GpuAccelerator> {
 public:
  GpuAccelerator(runtime::GpuBackend& backend, GpuAcceleratorOptions options)
      : backend_(backend), options_(options) {}

  std::optional<Expected<std::vector<float>>> conv(const ConvJob& job,
                                                   std::span<const float> input) override {
    if (job.macs() < kMinMacs) return std::nullopt;
    if (static_cast<std::int64_t>(input.size()) != job.cin * job.h * job.w) return std::nullopt;
    Program p;
    p.input_shape = {1, job.cin, job.h, job.w};
    p.lens = {job.cin * job.h * job.w, job.cout * job.oh * job.ow};
    p.shapes = {p.input_shape, {1, job.cout, job.oh, job.ow}};
    p.steps.push_back(Step{job, {Arg::value(kInputValue)}, 1, "conv", Fusion{}});
    p.free = {{kInputValue}};
    p.outputs.push_back(ProgramOutput{"y", 1, p.shapes[1]});
    p.conv_count = 1;
    const std::span<const float> one[1] = {input};
    auto r = run_program(p, one);
    if (!r) return std::nullopt;
    if (!*r) return Expected<std::vector<float>>(r->status());
    return Expected<std::vector<float>>(std::move((**r)[0][0]));
  }

  std::optional<Expected<ProgramOutputs>> run_program(
      const Program& program, std::span<const std::span<const float>> inputs) override;
  std::optional<Expected<DetectionLists>> detect_yunet(const Program& program, int n,
                                                       std::span<const RgbFrame> frames,
                                                       const DetectOptions& options) override;

  std::string device() const override {
    return backend_.adapter_label().value_or("GPU (unavailable)") + " " +
           std::string(precision_name(precision()));
  }
  Precision precision() const override { return options_.precision; }
  std::uint64_t resident_bytes() const override { return resident_bytes_.load(std::memory_order_acquire); }
  /// The backend's recoveries: a replaced GPU child is a new generation. A lost backend is offered a recovery
  /// first (non-blocking, under its policy), so a Net that asks before a run re-checks on the new device.
  std::uint64_t generation() const override {
    if (backend_.is_lost()) backend_.try_recover();
    return backend_.recoveries();
  }

  /// The plan choices kept for (m, batch) (empty when none yet).
  std::vector<std::byte> choices_of(const Model& m, std::uint32_t batch) {
    std::lock_guard lock(mu_);
    const auto it = m.choices.find(batch);
    return it == m.choices.end() ? std::vector<std::byte>() : it->second;
  }
  /// Keeps the first non-empty plan choices a child replied with for (m, batch).
  void remember_choices(Model& m, std::uint32_t batch, std::span<const std::byte> bytes) {
    if (bytes.empty() || bytes.size() > kMaxPlanChoiceBytes) return;
    std::lock_guard lock(mu_);
    m.choices.try_emplace(batch, bytes.begin(), bytes.end());
  }

  void arm(runtime::FaultKind kind) {
    std::lock_guard lock(mu_);
    fault_ = kind;
  }

  /// Uploads the model's residents once (in the run's turn). A resident that does not fit (kOutOfMemory) and
  /// every later one of the model go with each run instead; other failures end the run.
  Status upload(runtime::Executor& ex, Model& m) {
    std::lock_guard lock(mu_);
    if (m.uploaded) return {};
    FT_TRY(ex.put_resident(program_resident_name(m.key), m.enc.bytes));
    bool fits = true;
    for (std::size_t i = 0; i < m.enc.blobs.size(); ++i) {
      if (!m.resident[i]) continue;
      if (!fits) {
        m.resident[i] = false;
        continue;
      }
      const auto& blob = *m.enc.blobs[i];
      Status st = ex.put_resident(const_resident_name(m.key, i), bytes_of(blob));
      if (st.code() == Code::kOutOfMemory) {
        FT_LOG_DEBUG(
            "faces: resident {} of model {:016x} does not fit ({}); later constants go with every run", i,
            m.key, st.what());
        fits = false;
        m.resident[i] = false;
        continue;
      }
      FT_TRY(st);
      resident_bytes_.fetch_add(blob.size() * sizeof(float), std::memory_order_acq_rel);
    }
    m.uploaded = true;
    return {};
  }

 private:
  /// The model of `program` (encoded, keyed, its constants placed), or a Status: kDeclined when the program is
  /// not one the device op can take (its own bytes do not validate), anything else a failure.
  Expected<Model*> model_of(const Program& program);
  /// One sub-batch as one Workload; the failure mapping of docs/design/faces.md §4.
  std::optional<Expected<std::vector<std::byte>>> run_once(Model& m, Request request);
  /// The sub-batch limits of docs/design/faces.md §4 for `m`: the bytes of the transfer region one submission
  /// may use beside the constants that travel with it, and the ring's quarter.
  struct Room {
    std::uint64_t input = 0;
    std::uint64_t reply = 0;
  };
  std::optional<Room> room(const Model& m);

  runtime::GpuBackend& backend_;
  GpuAcceleratorOptions options_;
  std::mutex mu_;  // models_, identities_, planned_bytes_, fault_, residency
  std::map<std::uint64_t, std::unique_ptr<Model>> models_;
  std::deque<Identity> identities_;
  std::uint64_t planned_bytes_ = 0;  ///< resident bytes promised to models (the budget check)
  std::atomic<std::uint64_t> resident_bytes_{0};
  std::optional<runtime::FaultKind> fault_;
};

Status RunWorkload::begin_turn(runtime::Executor& ex) { return note(acc_.upload(ex, model_)); }

Expected<bool> RunWorkload::run_chunk(runtime::Executor& ex, std::span<std::byte>) {
  if (fault_) {
    const runtime::FaultKind kind = *fault_;
    fault_.reset();
    Status st = ex.inject_fault(kind);
    if (st.ok()) st = internal_error("fault injection reported no fault");
    return note(st);
  }
  FacesRunArgs& a = request_.args;
  a.key = model_.key;
  a.precision = static_cast<std::uint8_t>(acc_.precision());
  std::vector<std::uint32_t> table;
  std::vector<std::uint64_t> floats;
  {
    // The residency of a model only changes in upload (under the accelerator's lock, in a turn: this one).
    for (std::size_t i = 0; i < model_.enc.blobs.size(); ++i)
      if (!model_.resident[i]) {
        table.push_back(static_cast<std::uint32_t>(i));
        floats.push_back(model_.enc.blobs[i]->size());
      }
  }
  a.inline_count = static_cast<std::uint32_t>(table.size());
  const InputLayout layout = input_layout(a.input_bytes, floats);
  auto block = ex.arena().allocate(std::max<std::uint64_t>(layout.total, 1));
  if (!block) return note(block.status().with_context("faces: staging the batch"));
  std::byte* dst = block->bytes().data();
  request_.write(dst);
  if (!table.empty()) {
    std::memcpy(dst + layout.table_offset, table.data(), table.size() * sizeof(std::uint32_t));
    for (std::size_t k = 0; k < table.size(); ++k) {
      const auto& blob = *model_.enc.blobs[table[k]];
      std::memcpy(dst + layout.blob_offsets[k], blob.data(), blob.size() * sizeof(float));
    }
  }
  const std::vector<std::byte> choices = acc_.choices_of(model_, a.batch);
  a.flags = choices.empty() ? 0 : kRunFlagPlanChoices;
  std::vector<std::byte> args(sizeof a);
  std::memcpy(args.data(), &a, sizeof a);
  args.insert(args.end(), request_.tail.begin(), request_.tail.end());
  args.insert(args.end(), choices.begin(), choices.end());
  runtime::OpCall call;
  call.op = request_.op;
  call.args = args;
  call.in = block->range();
  call.in.size = layout.total;
  call.deadline = kRunDeadline;
  auto reply = ex.invoke(call);
  if (!reply) return note(reply.status());
  if (reply->tickets.size() != 1)
    return note(internal_error("faces op returned " + std::to_string(reply->tickets.size()) +
                               " ring tickets, expected 1"));
  ticket_ = reply->tickets[0];
  acc_.remember_choices(model_, a.batch, reply->bytes);
  block_ = std::move(*block);
  return false;  // one chunk: drain collects it
}

Status RunWorkload::drain(runtime::Executor& ex, std::span<std::byte> scratch, bool discard) {
  if (!ticket_) return {};
  const runtime::RingTicket t = *ticket_;
  ticket_.reset();
  bool short_slot = false;
  Status st = ex.collect(t, kRunDeadline, [&](std::span<const std::byte> bytes) {
    if (discard) return;
    const std::uint64_t want = request_.args.output_bytes;
    if (bytes.size() < want || scratch.size() < want) {
      short_slot = true;
      return;
    }
    std::memcpy(scratch.data(), bytes.data(), static_cast<std::size_t>(want));
  });
  block_ = runtime::ArenaBlock();
  if (!st.ok()) return note(st);
  if (short_slot) return note(internal_error("faces op readback is shorter than its reply"));
  return {};
}

Expected<Model*> GpuAccelerator::model_of(const Program& program) {
  auto enc = encode_program(program);
  if (!enc) return Status(Code::kDeclined, enc.status().what());
  const std::uint64_t structure = fnv1a(enc->bytes);
  std::lock_guard lock(mu_);
  std::optional<std::uint64_t> key;
  for (const auto& id : identities_)
    if (id.matches(structure, enc->blobs)) key = id.key;
  if (!key) {
    std::uint64_t h = structure;
    for (const auto& b : enc->blobs) h = fnv1a(bytes_of(*b), h);
    key = h;
    Identity id{structure, {}, h};
    for (const auto& b : enc->blobs) id.blobs.push_back(b);
    identities_.push_front(std::move(id));
    if (identities_.size() > kIdentityCacheSize) identities_.pop_back();
  }
  if (auto it = models_.find(*key); it != models_.end()) return it->second.get();
  // A new model: its own bytes must validate the way the device op will decode them.
  auto decoded = decode_program(enc->bytes);
  if (!decoded)
    return Status(Code::kDeclined, "the device op cannot take this program: " + decoded.status().what());
  auto m = std::make_unique<Model>();
  m->key = *key;
  for (const auto& o : program.outputs)
    m->output_lens.push_back(program.lens[static_cast<std::size_t>(o.value)]);
  for (auto l : program.lens) m->max_len = std::max(m->max_len, l);
  m->resident.assign(enc->blobs.size(), false);
  for (std::size_t i = 0; i < enc->blobs.size(); ++i) {
    const std::uint64_t bytes = enc->blobs[i]->size() * sizeof(float);
    if (planned_bytes_ + bytes > options_.resident_budget_bytes) continue;  // past the budget: sent per run
    planned_bytes_ += bytes;
    m->resident[i] = true;
  }
  m->enc = std::move(*enc);
  Model* raw = m.get();
  models_.emplace(*key, std::move(m));
  return raw;
}

std::optional<Expected<ProgramOutputs>> GpuAccelerator::run_program(
    const Program& program, std::span<const std::span<const float>> inputs) {
  if (inputs.empty()) return Expected<ProgramOutputs>(ProgramOutputs{});
  if (backend_.unavailable_reason() || program.lens.empty()) return std::nullopt;
  for (const auto& in : inputs)
    if (static_cast<std::int64_t>(in.size()) != program.lens[0]) return std::nullopt;
  auto model = model_of(program);
  if (!model) {
    if (model.status().code() == Code::kDeclined) {
      FT_LOG_DEBUG("faces: GPU declines the program: {}", model.status().what());
      return std::nullopt;
    }
    return Expected<ProgramOutputs>(model.status());
  }
  Model& m = **model;
  // Sub-batches: each fits half the transfer region (with the constants that travel with it), a quarter of the
  // ring, and element indices below 2³¹ (docs/design/faces.md §4).
  const std::optional<Room> r = room(m);
  if (!r) return std::nullopt;
  const auto per_in = static_cast<std::uint64_t>(program.lens[0]) * sizeof(float);
  std::uint64_t per_out = 0;
  for (auto l : m.output_lens) per_out += static_cast<std::uint64_t>(l) * sizeof(float);
  std::uint64_t cap = r->input / per_in;
  cap = std::min<std::uint64_t>(cap, r->reply / std::max<std::uint64_t>(per_out, 1));
  cap = std::min<std::uint64_t>(cap, static_cast<std::uint64_t>(kMaxIndex / std::max<std::int64_t>(m.max_len, 1)));
  if (cap == 0)
    return Expected<ProgramOutputs>(Status(Code::kOutOfMemory, "faces: one image of this program does not fit "
                                                               "the runtime's transfer region and ring"));
  ProgramOutputs all;
  for (std::size_t at = 0; at < inputs.size(); at += static_cast<std::size_t>(cap)) {
    const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(cap), inputs.size() - at);
    const auto part = inputs.subspan(at, n);
    Request q;
    q.args.batch = static_cast<std::uint32_t>(n);
    q.args.input_bytes = per_in * n;
    q.args.output_bytes = per_out * n;
    q.write = [part, per_in](std::byte* dst) {
      for (std::size_t i = 0; i < part.size(); ++i)
        std::memcpy(dst + i * per_in, part[i].data(), static_cast<std::size_t>(per_in));
    };
    auto reply = run_once(m, std::move(q));
    if (!reply) return std::nullopt;
    if (!*reply) return Expected<ProgramOutputs>(reply->status());
    // Every Program::outputs entry in order, each n·lens image-major.
    const std::size_t first = all.size();
    all.resize(first + n);
    std::uint64_t off = 0;
    for (auto l : m.output_lens)
      for (std::size_t i = 0; i < n; ++i) {
        std::vector<float> v(static_cast<std::size_t>(l));
        std::memcpy(v.data(), (*reply)->data() + off, v.size() * sizeof(float));
        off += v.size() * sizeof(float);
        all[first + i].push_back(std::move(v));
      }
  }
  return Expected<ProgramOutputs>(std::move(all));
}

std::optional<GpuAccelerator::Room> GpuAccelerator::room(const Model& m) {
  runtime::Executor* ex = backend_.executor();
  if (!ex) return std::nullopt;
  std::uint64_t inline_bytes = 0;
  {
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < m.enc.blobs.size(); ++i)
      if (!m.resident[i]) inline_bytes += align_up(m.enc.blobs[i]->size() * sizeof(float));
  }
  const std::uint64_t half = ex->arena().transfer_bytes() / 2;
  Room r;
  r.input = half > inline_bytes + kInlineAlign ? half - inline_bytes - kInlineAlign : 0;
  r.reply = ex->arena().ring_bytes() / 4;
  return r;
}

std::optional<Expected<DetectionLists>> GpuAccelerator::detect_yunet(const Program& program, int n,
                                                                     std::span<const RgbFrame> frames,
                                                                     const DetectOptions& options) {
  if (frames.empty()) return Expected<DetectionLists>(DetectionLists{});
  if (backend_.unavailable_reason() || n < 1 || n > 4096 || program.lens.empty() ||
      program.input_shape != Shape{1, 3, n, n})
    return std::nullopt;
  // The op finds YuNet's 12 outputs by name (yunet_layout); anything else is not a YuNet for it.
  for (const char* kind : {"cls_", "obj_", "bbox_", "kps_"})
    for (const char* stride : {"8", "16", "32"}) {
      const std::string name = std::string(kind) + stride;
      if (std::none_of(program.outputs.begin(), program.outputs.end(),
                       [&](const ProgramOutput& o) { return o.name == name; }))
        return std::nullopt;
    }
  auto model = model_of(program);
  if (!model) {
    if (model.status().code() == Code::kDeclined) return std::nullopt;
    return Expected<DetectionLists>(model.status());
  }
  Model& m = **model;
  const std::optional<Room> r = room(m);
  if (!r) return std::nullopt;
  const int clamped = std::clamp(options.max_faces, 0, 10000);
  const std::uint64_t capacity = static_cast<std::uint64_t>(std::clamp(clamped, 1, 4000));
  const std::uint64_t per_record = kDetectionFloats * sizeof(float);
  const auto frame_bytes = [&](const RgbFrame& f) {
    return sizeof(FrameHeader) + align_up(static_cast<std::uint64_t>(f.width) * f.height * 3);
  };
  // docs/design/faces.md §4: each sub-batch fits the transfer region, its reply the ring's quarter, and the
  // program's values stay below 2³¹ elements.
  const auto max_images = static_cast<std::size_t>(kMaxIndex / std::max<std::int64_t>(m.max_len, 1));
  DetectionLists all;
  all.reserve(frames.size());
  for (std::size_t at = 0; at < frames.size();) {
    std::size_t count = 0;
    std::uint64_t bytes = kInlineAlign;  // the headers' alignment
    while (at + count < frames.size() && count < max_images && count < 4096) {
      const std::uint64_t more = bytes + frame_bytes(frames[at + count]);
      if (more > r->input || detect_reply_bytes(count + 1, capacity) > r->reply) break;
      bytes = more;
      ++count;
    }
    if (count == 0)
      return Expected<DetectionLists>(Status(Code::kOutOfMemory, "faces: a " + std::to_string(frames[at].width) +
                                                                     "x" + std::to_string(frames[at].height) +
                                                                     " photo does not fit the runtime's "
                                                                     "transfer region"));
    const auto part = frames.subspan(at, count);
    const std::uint64_t header_bytes = align_up(count * sizeof(FrameHeader));
    std::vector<FrameHeader> headers(count);
    std::uint64_t off = header_bytes;
    for (std::size_t i = 0; i < count; ++i) {
      headers[i] = {static_cast<std::uint32_t>(part[i].width), static_cast<std::uint32_t>(part[i].height), off};
      off = align_up(off + part[i].rgb.size());
    }
    Request q;
    q.op = kOpFacesDetect;
    q.args.batch = static_cast<std::uint32_t>(count);
    q.args.input_bytes = off;
    q.args.output_bytes = detect_reply_bytes(count, capacity);
    FacesDetectArgs d;
    d.n = static_cast<std::uint32_t>(n);
    d.capacity = static_cast<std::uint32_t>(capacity);
    d.score = options.score;
    d.nms_iou = options.nms_iou;
    d.max_faces = options.max_faces;
    q.tail.resize(sizeof d - sizeof(FacesRunArgs));
    std::memcpy(q.tail.data(), reinterpret_cast<const std::byte*>(&d) + sizeof(FacesRunArgs), q.tail.size());
    q.write = [part, headers](std::byte* dst) {
      std::memcpy(dst, headers.data(), headers.size() * sizeof(FrameHeader));
      for (std::size_t i = 0; i < part.size(); ++i)
        std::memcpy(dst + headers[i].offset, part[i].rgb.data(), part[i].rgb.size());
    };
    auto reply = run_once(m, std::move(q));
    if (!reply) return std::nullopt;
    if (!*reply) return Expected<DetectionLists>(reply->status());
    const std::byte* base = (*reply)->data();
    for (std::size_t i = 0; i < count; ++i) {
      std::int32_t k = 0;
      std::memcpy(&k, base + i * sizeof k, sizeof k);
      if (k < 0 || static_cast<std::uint64_t>(k) > capacity)
        return Expected<DetectionLists>(internal_error("faces_detect returned " + std::to_string(k) +
                                                       " detections for one photo (capacity " +
                                                       std::to_string(capacity) + ")"));
      std::vector<Detection> dets(static_cast<std::size_t>(k));
      const std::byte* rec = base + detect_records_offset(count) + i * capacity * per_record;
      for (std::size_t j = 0; j < dets.size(); ++j) {
        float f[kDetectionFloats];
        std::memcpy(f, rec + j * per_record, sizeof f);
        Detection& det = dets[j];
        det.x0 = f[0], det.y0 = f[1], det.x1 = f[2], det.y1 = f[3], det.score = f[4];
        for (std::size_t l = 0; l < 5; ++l) det.landmarks[l] = {f[5 + 2 * l], f[6 + 2 * l]};
      }
      all.push_back(std::move(dets));
    }
    at += count;
  }
  return Expected<DetectionLists>(std::move(all));
}

std::optional<Expected<std::vector<std::byte>>> GpuAccelerator::run_once(Model& m, Request request) {
  std::optional<runtime::FaultKind> fault;
  {
    std::lock_guard lock(mu_);
    fault = fault_;
    fault_.reset();
  }
  RunWorkload work(*this, m, std::move(request), fault);
  runtime::Outcome outcome;
  {
    Pace::Slot slot(Pace::global());
    outcome = backend_.accumulate(work);
  }
  if (outcome == runtime::Outcome::kDone) return Expected<std::vector<std::byte>>(work.take_reply());
  const std::optional<Status>& err = work.error();
  if (!err || backend_.is_lost()) return std::nullopt;  // declined before any work, or the device was lost
  switch (err->code()) {
    case Code::kDeclined:
      FT_LOG_DEBUG("faces: GPU declined a run: {}", err->what());
      return std::nullopt;
    case Code::kDeviceLost:
    case Code::kCancelled:
      return std::nullopt;
    default:
      return Expected<std::vector<std::byte>>(*err);
  }
}

}  // namespace

Expected<std::shared_ptr<Accelerator>> make_gpu_accelerator_on(runtime::GpuBackend& backend,
                                                               const GpuAcceleratorOptions& options) {
  if (auto why = backend.unavailable_reason())
    return not_supported("no usable GPU for the face networks: " + *why);
#ifdef FT_HAVE_CUDA_FACES
  runtime::OpRegistry::global().add_provider(&register_faces_ops);
#endif
  return std::shared_ptr<Accelerator>(std::make_shared<GpuAccelerator>(backend, options));
}

void arm_fault(Accelerator& acc, runtime::FaultKind kind) {
  if (auto* g = dynamic_cast<GpuAccelerator*>(&acc)) g->arm(kind);
}

}  // namespace facetrace::faces::gpu

namespace facetrace::faces {

Expected<std::shared_ptr<Accelerator>> make_gpu_accelerator(const GpuAcceleratorOptions& options) {
#ifndef FT_HAVE_CUDA_FACES
  (void)options;
  return not_supported("no usable GPU for the face networks: built without CUDA (FT_ENABLE_CUDA=OFF)");
#else
  return gpu::make_gpu_accelerator_on(runtime::shared_backend(), options);
#endif
}

}  // namespace facetrace::faces
