/// @file
/// GpuAccelerator (gpu_accelerator.h): programs as one Workload each on the device runtime, residents per model,
/// the failure mapping of docs/design/faces.md §4, and make_gpu_accelerator.
#include "gpu/gpu_accelerator.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <optional>

#include "facetrace/core/env.h"
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

/// One run: the Workload seam (runtime/backend.h) around one kOpFacesRun.
class RunWorkload final : public runtime::Workload {
 public:
  RunWorkload(GpuAccelerator& acc, Model& model, std::span<const std::span<const float>> inputs,
              std::optional<runtime::FaultKind> fault)
      : acc_(acc), model_(model), inputs_(inputs), fault_(fault) {
    for (auto l : model.output_lens)
      output_bytes_ += static_cast<std::uint64_t>(l) * inputs.size() * sizeof(float);
  }

  std::size_t scratch_bytes() const override { return static_cast<std::size_t>(output_bytes_); }
  void seed_scratch(std::span<std::byte>) override {}  // the one ticket overwrites every byte
  Status begin_turn(runtime::Executor& ex) override;
  Expected<bool> run_chunk(runtime::Executor& ex, std::span<std::byte> scratch) override;
  Status drain(runtime::Executor& ex, std::span<std::byte> scratch, bool discard) override;
  void commit(std::span<const std::byte> scratch) override {
    const std::size_t b = inputs_.size();
    outputs_.assign(b, {});
    std::uint64_t at = 0;
    for (std::size_t o = 0; o < model_.output_lens.size(); ++o) {
      const auto n = static_cast<std::size_t>(model_.output_lens[o]);
      for (std::size_t i = 0; i < b; ++i) {
        std::vector<float> v(n);
        std::memcpy(v.data(), scratch.data() + at, n * sizeof(float));
        at += n * sizeof(float);
        outputs_[i].push_back(std::move(v));
      }
    }
  }

  /// The first failure of a hook (nullopt when none ran or none failed).
  const std::optional<Status>& error() const { return error_; }
  ProgramOutputs take_outputs() { return std::move(outputs_); }

 private:
  Status note(Status st) {
    if (!st.ok() && !error_) error_ = st;
    return st;
  }

  GpuAccelerator& acc_;
  Model& model_;
  std::span<const std::span<const float>> inputs_;
  std::optional<runtime::FaultKind> fault_;
  std::uint64_t output_bytes_ = 0;
  std::optional<runtime::RingTicket> ticket_;
  runtime::ArenaBlock block_;
  std::optional<Status> error_;
  ProgramOutputs outputs_;
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
  std::optional<Expected<ProgramOutputs>> run_once(Model& m, std::span<const std::span<const float>> inputs);

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
  const std::size_t b = inputs_.size();
  FacesRunArgs a;
  a.key = model_.key;
  a.batch = static_cast<std::uint32_t>(b);
  a.precision = static_cast<std::uint8_t>(acc_.precision());
  a.output_bytes = output_bytes_;
  a.input_bytes = static_cast<std::uint64_t>(inputs_[0].size()) * b * sizeof(float);
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
  for (std::size_t i = 0; i < b; ++i)
    std::memcpy(dst + i * inputs_[0].size() * sizeof(float), inputs_[i].data(),
                inputs_[i].size() * sizeof(float));
  if (!table.empty()) {
    std::memcpy(dst + layout.table_offset, table.data(), table.size() * sizeof(std::uint32_t));
    for (std::size_t k = 0; k < table.size(); ++k) {
      const auto& blob = *model_.enc.blobs[table[k]];
      std::memcpy(dst + layout.blob_offsets[k], blob.data(), blob.size() * sizeof(float));
    }
  }
  runtime::OpCall call;
  call.op = kOpFacesRun;
  call.args = std::as_bytes(std::span(&a, 1));
  call.in = block->range();
  call.in.size = layout.total;
  call.deadline = kRunDeadline;
  auto reply = ex.invoke(call);
  if (!reply) return note(reply.status());
  if (reply->tickets.size() != 1)
    return note(internal_error("faces_run returned " + std::to_string(reply->tickets.size()) +
                               " ring tickets, expected 1"));
  ticket_ = reply->tickets[0];
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
    if (bytes.size() < output_bytes_ || scratch.size() < output_bytes_) {
      short_slot = true;
      return;
    }
    std::memcpy(scratch.data(), bytes.data(), static_cast<std::size_t>(output_bytes_));
  });
  block_ = runtime::ArenaBlock();
  if (!st.ok()) return note(st);
  if (short_slot) return note(internal_error("faces_run readback is shorter than the program's outputs"));
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
  runtime::Executor* ex = backend_.executor();
  if (!ex) return std::nullopt;
  const auto per_in = static_cast<std::uint64_t>(program.lens[0]) * sizeof(float);
  std::uint64_t per_out = 0, inline_bytes = 0;
  for (auto l : m.output_lens) per_out += static_cast<std::uint64_t>(l) * sizeof(float);
  for (std::size_t i = 0; i < m.enc.blobs.size(); ++i)
    if (!m.resident[i]) inline_bytes += align_up(m.enc.blobs[i]->size() * sizeof(float));
  const std::uint64_t room = ex->arena().transfer_bytes() / 2;
  std::uint64_t cap = room > inline_bytes + kInlineAlign ? (room - inline_bytes - kInlineAlign) / per_in : 0;
  cap = std::min<std::uint64_t>(cap, ex->arena().ring_bytes() / 4 / std::max<std::uint64_t>(per_out, 1));
  cap = std::min<std::uint64_t>(cap, static_cast<std::uint64_t>(kMaxIndex / std::max<std::int64_t>(m.max_len, 1)));
  if (cap == 0)
    return Expected<ProgramOutputs>(Status(Code::kOutOfMemory, "faces: one image of this program does not fit "
                                                               "the runtime's transfer region and ring"));
  ProgramOutputs all;
  for (std::size_t at = 0; at < inputs.size(); at += static_cast<std::size_t>(cap)) {
    const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(cap), inputs.size() - at);
    auto r = run_once(m, inputs.subspan(at, n));
    if (!r || !*r) return r;
    for (auto& image : **r) all.push_back(std::move(image));
  }
  return Expected<ProgramOutputs>(std::move(all));
}

std::optional<Expected<ProgramOutputs>> GpuAccelerator::run_once(Model& m,
                                                                 std::span<const std::span<const float>> inputs) {
  std::optional<runtime::FaultKind> fault;
  {
    std::lock_guard lock(mu_);
    fault = fault_;
    fault_.reset();
  }
  RunWorkload work(*this, m, inputs, fault);
  runtime::Outcome outcome;
  {
    Pace::Slot slot(Pace::global());
    outcome = backend_.accumulate(work);
  }
  if (outcome == runtime::Outcome::kDone) return Expected<ProgramOutputs>(work.take_outputs());
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
      return Expected<ProgramOutputs>(*err);
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
