/// @file
/// faces::Net: load → parse → lower (cached for the declared shape) → run on the CPU interpreter.
#include "facetrace/faces/net.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

#include "facetrace/core/file.h"
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

constexpr std::size_t kMaxLoweredShapes = 16;

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
  auto p = detail::lower_graph(impl.graph, shape, impl.options.limits);
  if (!p) return p.status();
  auto prog = std::make_shared<const Program>(std::move(*p));
  std::lock_guard<std::mutex> lock(impl.lowered_mu);
  if (impl.lowered.size() >= kMaxLoweredShapes) impl.lowered.erase(impl.lowered.begin());
  impl.lowered.emplace_back(shape, prog);
  return prog;
}

}  // namespace

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
    auto p = detail::lower_graph(impl->graph, s, options.limits, &impl->per_image);
    if (!p) return p.status();
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
  if (!n) return n.status().with_context("model '" + path + "'");
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
  auto r = run_program_cpu(*prog, inputs, impl_->threads.load());
  if (!r) return r.status();
  std::vector<std::vector<NamedTensor>> out(r->size());
  for (std::size_t b = 0; b < r->size(); ++b)
    for (std::size_t o = 0; o < prog->outputs.size(); ++o)
      out[b].push_back(NamedTensor{prog->outputs[o].name, prog->outputs[o].shape, std::move((*r)[b][o])});
  return out;
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
