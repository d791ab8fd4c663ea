/// @file
/// faces::Net: load → parse → lower (cached for the declared shape) → run on the CPU interpreter.
#include "facetrace/faces/net.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <utility>
#include <vector>

#include "facetrace/core/file.h"
#include "facetrace/core/text.h"
#include "log.h"
#include "onnx/graph.h"

namespace facetrace::faces {

struct Net::Impl {
  detail::Graph graph;
  NetOptions options;
  std::shared_ptr<const Program> declared;  // lowered for the declared shape (batch 0 → 1), when concrete
  Shape declared_shape;
  bool per_image = false;  // `declared` is per image and right for any batch (docs/design/faces.md §2)
  Shape input_dims;        // the input's dims as declared (graph.inputs[0].dims may be freed, NetOptions)
  std::atomic<int> threads{0};
  // The attributes no operator rule looked at (Lowerer::unread_attributes), from the first lowering: noted once.
  mutable std::mutex ignored_mu;
  bool ignored_known = false;  // under ignored_mu, as ignored
  std::vector<std::string> ignored;

  /// The attached accelerator (docs/design/faces.md §4), shared by every copy of the Net.
  struct Attached {
    std::shared_ptr<Accelerator> acc;
    std::uint64_t generation = 0;  ///< acc->generation() when its check passed
    std::optional<std::string> detach_reason;
  };
  mutable std::mutex acc_mu;      // attached
  mutable std::mutex recheck_mu;  // one re-check at a time
  mutable Attached attached;      // the const API changes it only under acc_mu

  /// The attached accelerator, re-checked first when its device was replaced since its check: a failed re-check
  /// detaches it with the reason, a declined one keeps it attached and this call runs on the CPU. Null: the CPU.
  std::shared_ptr<Accelerator> ready_accelerator() const;
  /// The outputs from `acc`, or nullopt: run this call on the CPU (declined; out of memory; or any other error,
  /// which detaches `acc` for good with a log line — the caller never sees it). docs/design/faces.md §4.
  std::optional<std::vector<std::vector<std::vector<float>>>> run_accelerated(
      const std::shared_ptr<Accelerator>& acc, const Program& prog,
      std::span<const std::span<const float>> inputs) const;
  /// The failure table for an error from `acc` (Net::accelerator_failed).
  void failed(const std::shared_ptr<Accelerator>& acc, const Status& error) const;
  /// Detaches `acc` if it is still the attached one, keeping `reason`, with one warning.
  void detach_for(const std::shared_ptr<Accelerator>& acc, const std::string& reason) const;
  // Programs lowered for other shapes (YuNet at a photo's own size, docs/design/faces.md §5), most recently used
  // last, at most kMaxLoweredShapes.
  std::mutex lowered_mu;
  std::vector<std::pair<Shape, std::shared_ptr<const Program>>> lowered;
  // The declared program serves `s`: the declared shape, or any batch of it when per image.
  bool fits(const Shape& s) const {
    return declared &&
           (s == declared_shape || (per_image && !s.empty() && s.size() == declared_shape.size() &&
                                    std::equal(s.begin() + 1, s.end(), declared_shape.begin() + 1)));
  }
};

namespace {

constexpr std::uint32_t kCheckSeed = 0x2545F491u;   // docs/design/faces.md §4
constexpr double kFp32Abs = 1e-4, kFp32Rel = 1e-3;  // docs/design/faces.md §4 (fp32 bar)
constexpr double kLooseCosine = 0.999;              // docs/design/faces.md §4 (tf32/bf16 bar)
constexpr float kCheckMax = 255.0f;  // the check input's range, 0..255 (docs/design/faces.md §4)

/// xorshift32 noise, value = state >> 8 scaled to [0, kCheckMax] (docs/design/faces.md §4).
std::vector<float> check_input(std::size_t n) {
  std::vector<float> v(n);
  std::uint32_t x = kCheckSeed;
  for (auto& f : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    f = static_cast<float>(x >> 8) * (kCheckMax / 16777215.0f);
  }
  return v;
}

/// Why `acc` does not agree with `cpu` at `p`'s bar, or nullopt when every output does.
std::optional<std::string> disagreement(const Program& prog, const std::vector<std::vector<float>>& cpu,
                                        const std::vector<std::vector<float>>& acc, Precision p) {
  if (acc.size() != cpu.size())
    return "returned " + std::to_string(acc.size()) + " outputs, expected " + std::to_string(cpu.size());
  for (std::size_t o = 0; o < cpu.size(); ++o) {
    const std::string name = o < prog.outputs.size() ? prog.outputs[o].name : std::to_string(o);
    if (acc[o].size() != cpu[o].size())
      return "output '" + name + "' has " + std::to_string(acc[o].size()) + " values, expected " +
             std::to_string(cpu[o].size());
    double max_cpu = 0.0, max_diff = 0.0, dot = 0.0, na = 0.0, nc = 0.0;
    for (std::size_t i = 0; i < cpu[o].size(); ++i) {
      const double c = cpu[o][i], a = acc[o][i];
      if (!std::isfinite(a)) return "output '" + name + "' has a non-finite value at " + std::to_string(i);
      max_cpu = std::max(max_cpu, std::abs(c));
      max_diff = std::max(max_diff, std::abs(a - c));
      dot += a * c, na += a * a, nc += c * c;
    }
    if (p == Precision::kFp32) {
      const double bar = kFp32Abs + kFp32Rel * max_cpu;
      if (max_diff > bar)
        return "output '" + name + "': max|acc - cpu| = " + std::to_string(max_diff) +
               " above the fp32 bar " + std::to_string(bar);
    } else {
      const double cosine = (na == 0.0 && nc == 0.0) ? 1.0 : dot / std::sqrt(na * nc);
      if (!(cosine >= kLooseCosine))
        return "output '" + name + "': cosine " + std::to_string(cosine) + " below " +
               std::to_string(kLooseCosine) + " (" + std::string(precision_name(p)) + ")";
    }
  }
  return std::nullopt;
}

/// Runs the check of `acc` on `prog`: ok, kDeclined (acc declined), or the failure / disagreement.
Status check_accelerator(Accelerator& acc, const Program& prog, int threads) {
  const std::vector<float> in = check_input(static_cast<std::size_t>(prog.lens[0]));
  const std::span<const float> one[1] = {in};
  auto cpu = run_program_cpu(prog, one, threads);
  if (!cpu) return cpu.status().with_context("attach_checked: the CPU reference");
  auto got = acc.run_program(prog, one);
  if (!got) return Status(Code::kDeclined, "attach_checked: " + acc.device() + " declined the check input");
  if (!*got) return got->status().with_context("attach_checked: " + acc.device());
  if ((*got)->size() != 1) return invalid_argument("attach_checked: " + acc.device() + " returned no result");
  if (auto why = disagreement(prog, (*cpu)[0], (**got)[0], acc.precision()))
    return invalid_argument("attach_checked: " + acc.device() + " disagrees with the CPU: " + *why);
  return {};
}

bool all_finite(std::span<const std::span<const float>> inputs) {
  for (const auto& in : inputs)
    for (float v : in)
      if (!std::isfinite(v)) return false;
  return true;
}

constexpr std::size_t kMaxLoweredShapes = 16;
constexpr std::size_t kIgnoredNamedInNote =
    8;  // the note names this many ignored attributes, then counts the rest

/// Keeps the attributes the first lowering found unread and notes them, once per model (one warning naming node,
/// op and attribute): an attribute facetrace does not know changes nothing in what it computes, which may not be
/// what the model's author meant.
void note_ignored(Net::Impl& impl, std::vector<std::string> ignored) {
  std::lock_guard<std::mutex> lock(impl.ignored_mu);
  if (impl.ignored_known) return;
  impl.ignored_known = true;
  impl.ignored = std::move(ignored);
  if (impl.ignored.empty()) return;
  std::string list;
  for (std::size_t i = 0; i < impl.ignored.size() && i < kIgnoredNamedInNote; ++i)
    list += (i ? "; " : "") + impl.ignored[i];
  if (impl.ignored.size() > kIgnoredNamedInNote)
    list += "; and " + std::to_string(impl.ignored.size() - kIgnoredNamedInNote) + " more";
  FT_LOG_WARN(
      "faces: ONNX model with input '{}' ({} nodes): {} attribute{} not used by facetrace and "
      "change{} nothing: {}",
      core::printable(impl.graph.inputs[0].name), impl.graph.nodes.size(), impl.ignored.size(),
      impl.ignored.size() == 1 ? " is" : "s are", impl.ignored.size() == 1 ? "s" : "", list);
}

/// The program for `shape`: the declared one (when it fits), a cached one, or lowered now (and cached).
Expected<std::shared_ptr<const Program>> program_for(Net::Impl& impl, const Shape& shape) {
  if (impl.fits(shape)) return impl.declared;
  {
    std::lock_guard<std::mutex> lock(impl.lowered_mu);
    for (auto it = impl.lowered.begin(); it != impl.lowered.end(); ++it)
      if (it->first == shape) {
        std::shared_ptr<const Program> p = it->second;
        std::rotate(it, it + 1, impl.lowered.end());
        return p;
      }
  }
  std::vector<std::string> ignored;
  auto p = detail::lower_graph(impl.graph, shape, impl.options.limits, nullptr, &ignored);
  if (!p) return p.status();
  note_ignored(impl, std::move(ignored));
  auto prog = std::make_shared<const Program>(std::move(*p));
  std::lock_guard<std::mutex> lock(impl.lowered_mu);
  if (impl.lowered.size() >= kMaxLoweredShapes) impl.lowered.erase(impl.lowered.begin());
  impl.lowered.emplace_back(shape, prog);
  return prog;
}

}  // namespace

void Net::Impl::detach_for(const std::shared_ptr<Accelerator>& acc, const std::string& reason) const {
  {
    std::lock_guard lock(acc_mu);
    if (attached.acc != acc) return;  // another call detached it first
    attached.acc.reset();
    attached.detach_reason = reason;
  }
  FT_LOG_WARN("faces: accelerator {} detached, the CPU runs this net from now on: {}", acc->device(), reason);
}

std::shared_ptr<Accelerator> Net::Impl::ready_accelerator() const {
  std::shared_ptr<Accelerator> acc;
  std::uint64_t checked = 0;
  {
    std::lock_guard lock(acc_mu);
    acc = attached.acc;
    checked = attached.generation;
  }
  if (!acc) return nullptr;
  const std::uint64_t now = acc->generation();
  if (now == checked) return acc;
  std::lock_guard one(recheck_mu);
  {
    std::lock_guard lock(acc_mu);
    if (attached.acc != acc) return attached.acc;  // replaced or detached meanwhile
    if (attached.generation == now) return acc;    // another call re-checked it
  }
  Status st = declared ? check_accelerator(*acc, *declared, threads.load())
                       : invalid_argument("the model's input shape is symbolic");
  if (st.ok()) {
    std::lock_guard lock(acc_mu);
    if (attached.acc == acc) attached.generation = now;
    FT_LOG_INFO("faces: accelerator {} re-attached after its device was replaced (check passed)",
                acc->device());
    return acc;
  }
  if (st.code() == Code::kDeclined || st.code() == Code::kOutOfMemory) {
    FT_LOG_DEBUG("faces: re-check after a device replacement declined ({}); this call runs on the CPU",
                 st.to_string());
    return nullptr;
  }
  detach_for(acc, "re-check after the device was replaced: " + st.to_string());
  return nullptr;
}

std::optional<std::vector<std::vector<std::vector<float>>>> Net::Impl::run_accelerated(
    const std::shared_ptr<Accelerator>& acc, const Program& prog,
    std::span<const std::span<const float>> inputs) const {
  auto r = acc->run_program(prog, inputs);
  if (!r) return std::nullopt;  // declined: the CPU runs this call
  if (!*r) {
    failed(acc, r->status());
    return std::nullopt;
  }
  auto& out = **r;
  bool shaped = out.size() == inputs.size();
  bool finite = true;
  for (std::size_t b = 0; shaped && b < out.size(); ++b) {
    shaped = out[b].size() == prog.outputs.size();
    for (std::size_t o = 0; shaped && o < out[b].size(); ++o) {
      shaped = static_cast<std::int64_t>(out[b][o].size()) ==
               prog.lens[static_cast<std::size_t>(prog.outputs[o].value)];
      for (float v : out[b][o]) finite = finite && std::isfinite(v);
    }
  }
  if (!shaped) {
    detach_for(acc, "returned outputs that do not match the program's");
    return std::nullopt;
  }
  if (!finite) return std::nullopt;  // the CPU gives the values or names the non-finite node
  return std::move(out);
}

void Net::Impl::failed(const std::shared_ptr<Accelerator>& acc, const Status& error) const {
  if (error.code() == Code::kOutOfMemory || error.code() == Code::kDeclined) {
    FT_LOG_DEBUG("faces: {} could not take this call; the CPU runs it: {}", acc->device(), error.to_string());
    return;
  }
  detach_for(acc, error.to_string());
}

std::string_view precision_name(Precision p) noexcept {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kTf32: return "tf32";
    case Precision::kBf16: return "bf16";
  }
  return "?";
}

bool parse_precision(std::string_view text, Precision& out) noexcept {
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kBf16})
    if (text == precision_name(p)) {
      out = p;
      return true;
    }
  return false;
}

std::string_view op_name(const Op& op) {
  static constexpr std::string_view kNames[] = {"Conv",          "Unary",     "ChannelAffine", "ChannelPrelu",
                                                "Binary",        "Transpose", "MaxPool",       "Resize",
                                                "GlobalAverage", "Gemv",      "AvgPool",       "Softmax",
                                                "Concat",        "MatMul",    "ReduceMean",    "Pad"};
  static_assert(std::size(kNames) == std::variant_size_v<Op>);
  return kNames[op.index()];
}

std::int64_t Program::macs() const {
  std::int64_t m = 0;
  for (const auto& s : steps)
    if (const auto* j = std::get_if<ConvJob>(&s.op)) m += j->macs();
  return m;
}

Expected<Net> Net::create(std::span<const std::uint8_t> bytes, const NetOptions& options) {
  auto g = detail::parse_onnx(bytes, options.limits);
  if (!g) return g.status();
  auto impl = std::make_shared<Impl>();
  impl->graph = std::move(*g);
  impl->options = options;
  impl->threads = options.threads;
  if (impl->graph.inputs.size() != 1)
    return not_supported("ONNX graph: " + std::to_string(impl->graph.inputs.size()) +
                         " inputs (exactly one is supported)");
  Shape s = impl->graph.inputs[0].dims;
  if (!s.empty() && s[0] == 0) s[0] = 1;
  bool concrete = !s.empty();
  for (auto d : s) concrete = concrete && d > 0;
  if (concrete) {
    std::vector<std::string> ignored;
    auto p = detail::lower_graph(impl->graph, s, options.limits, &impl->per_image, &ignored);
    if (!p) return p.status();
    note_ignored(*impl, std::move(ignored));
    impl->declared = std::make_shared<const Program>(std::move(*p));
    impl->declared_shape = s;
  }
  impl->input_dims = impl->graph.inputs[0].dims;
  if (options.free_spatial_dims) {  // the lowering checks against the graph's dims: free them there
    auto& dims = impl->graph.inputs[0].dims;
    for (std::size_t i = 2; i < dims.size(); ++i) dims[i] = 0;
    for (auto& o : impl->graph.outputs) o.dims.clear();
  }
  return Net(std::move(impl));
}

Expected<Net> Net::load(const std::string& path, const NetOptions& options) {
  const auto cap = static_cast<std::uint64_t>(std::max<std::int64_t>(options.limits.max_file_bytes, 0));
  auto bytes = core::read_file(path, cap);
  if (!bytes) return bytes.status().with_context("model");
  auto n = create(*bytes, options);
  if (!n) return n.status().with_context("model '" + core::printable(path) + "'");
  return n;
}

const std::string& Net::input_name() const { return impl_->graph.inputs[0].name; }
const Shape& Net::input_shape() const { return impl_->input_dims; }
std::vector<std::string> Net::output_names() const {
  std::vector<std::string> r;
  for (const auto& o : impl_->graph.outputs) r.push_back(o.name);
  return r;
}
std::int64_t Net::opset() const { return impl_->graph.opset; }
std::vector<std::string> Net::ignored_attributes() const {
  std::lock_guard<std::mutex> lock(impl_->ignored_mu);
  return impl_->ignored;
}
int Net::threads() const { return impl_->threads.load(); }
void Net::set_threads(int threads) { impl_->threads = threads < 0 ? 0 : threads; }

Expected<Program> Net::program(const Shape& shape) const {
  auto p = program_for(*impl_, shape);
  if (!p) return p.status();
  return **p;
}

Status Net::validate_input(const Shape& shape) const {
  if (impl_->fits(shape)) return {};
  auto p = detail::lower_graph(impl_->graph, shape, impl_->options.limits);
  return p ? Status{} : p.status();
}

Expected<std::vector<std::vector<NamedTensor>>> Net::run_batch(std::span<const std::span<const float>> inputs,
                                                               const Shape& shape) const {
  auto lowered = program_for(*impl_, shape);
  if (!lowered) return lowered.status();
  const std::shared_ptr<const Program> prog = std::move(*lowered);
  auto wrap = [&](std::vector<std::vector<std::vector<float>>> r) {
    std::vector<std::vector<NamedTensor>> out(r.size());
    for (std::size_t b = 0; b < r.size(); ++b)
      for (std::size_t o = 0; o < prog->outputs.size(); ++o)
        out[b].push_back(NamedTensor{prog->outputs[o].name, prog->outputs[o].shape, std::move(r[b][o])});
    return out;
  };
  if (auto acc = impl_->ready_accelerator(); acc && !inputs.empty() && all_finite(inputs)) {
    if (auto r = impl_->run_accelerated(acc, *prog, inputs)) return wrap(std::move(*r));
  }
  auto r = run_program_cpu(*prog, inputs, impl_->threads.load());
  if (!r) return r.status();
  return wrap(std::move(*r));
}

Status Net::attach_checked(std::shared_ptr<Accelerator> acc) {
  if (!acc) return invalid_argument("attach_checked: no accelerator");
  if (!impl_->declared) return invalid_argument("attach_checked: the model's input shape is symbolic");
  const std::uint64_t generation = acc->generation();
  if (Status st = check_accelerator(*acc, *impl_->declared, impl_->threads.load()); !st.ok()) {
    detach();  // the net stays (or becomes) CPU-only
    return st;
  }
  std::lock_guard lock(impl_->acc_mu);
  impl_->attached.acc = std::move(acc);
  impl_->attached.generation = generation;
  impl_->attached.detach_reason.reset();
  return {};
}

void Net::detach() {
  std::lock_guard lock(impl_->acc_mu);
  impl_->attached.acc.reset();
}

std::optional<std::string> Net::accelerator() const {
  std::shared_ptr<Accelerator> acc;
  {
    std::lock_guard lock(impl_->acc_mu);
    acc = impl_->attached.acc;
  }
  if (!acc) return std::nullopt;
  return acc->device();
}

std::shared_ptr<Accelerator> Net::ready_accelerator() const { return impl_->ready_accelerator(); }

void Net::accelerator_failed(const std::shared_ptr<Accelerator>& acc, const Status& error) const {
  if (acc && !error.ok()) impl_->failed(acc, error);
}

std::optional<std::string> Net::detach_reason() const {
  std::lock_guard lock(impl_->acc_mu);
  return impl_->attached.detach_reason;
}

Expected<std::vector<NamedTensor>> Net::run(std::span<const float> input, const Shape& shape) const {
  // A batch of shape[0] > 1 runs as that many images when the program is per image, else as one item
  // (docs/design/faces.md §2).
  bool split = false;
  if (!shape.empty() && shape[0] > 1) {
    auto p = program_for(*impl_, shape);
    if (!p) return p.status();
    split = (*p)->input_shape[0] == 1;
  }
  if (split) {
    const auto b = static_cast<std::size_t>(shape[0]);
    if (input.size() % b != 0)
      return invalid_argument("input holds " + std::to_string(input.size()) + " values, not a batch of " +
                              std::to_string(b));
    const std::size_t per = input.size() / b;
    std::vector<std::span<const float>> items;
    for (std::size_t i = 0; i < b; ++i) items.push_back(input.subspan(i * per, per));
    auto r = run_batch(items, shape);
    if (!r) return r.status();
    std::vector<NamedTensor> out = std::move((*r)[0]);
    for (std::size_t o = 0; o < out.size(); ++o) {
      for (std::size_t i = 1; i < b; ++i)
        out[o].data.insert(out[o].data.end(), (*r)[i][o].data.begin(), (*r)[i][o].data.end());
      if (out[o].shape.empty()) out[o].shape = {1};
      out[o].shape[0] *= shape[0];
    }
    return out;
  }
  const std::span<const float> one[1] = {input};
  auto r = run_batch(one, shape);
  if (!r) return r.status();
  return std::move((*r)[0]);
}

Expected<std::vector<NamedTensor>> Net::run(std::span<const float> input) const {
  if (!impl_->declared) return invalid_argument("the model's input shape is symbolic; pass a shape");
  return run(input, impl_->declared_shape);
}

}  // namespace facetrace::faces
