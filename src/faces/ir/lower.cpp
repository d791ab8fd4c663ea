/// @file
/// Graph → Program for one input shape (docs/design/faces.md §2, §3): topological order, the operator rules by name, free
/// lists and the live-memory bound; the fusion pass runs on the result. Every refusal names the node and the
/// attribute or input.
#include <algorithm>
#include <functional>
#include <map>
#include <queue>
#include <set>
#include <string>
#include <string_view>

#include "ir/fuse.h"
#include "ir/lowerer.h"

namespace facetrace::faces::detail {
namespace {

// How an operator's rule takes input 0: it reads its operands itself, or lower_node fetches input 0 first (any
// entry, or a graph value only).
enum class Input0 : std::uint8_t { kSelf, kAny, kValue };

struct Rule {
  Input0 input0;
  Status (*lower)(Lowerer&, const Node&, const Entry&);
  bool many_outputs = false;  // Split: any number of outputs (else only output 0 may be used)
};

// The supported operators (docs/design/faces.md §2).
const std::map<std::string, Rule, std::less<>>& rules() {
  using K = Input0;
  static const std::map<std::string, Rule, std::less<>> r = {
      {"Conv", {K::kValue, [](auto& l, auto& n, auto& x) { return l.lower_conv(n, x); }}},
      {"Relu", {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_unary(n, x, UnaryKind::kRelu); }}},
      {"Sigmoid",
       {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_unary(n, x, UnaryKind::kSigmoid); }}},
      {"Clip", {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_clip(n, x); }}},
      {"Add", {K::kSelf, [](auto& l, auto& n, auto& x) { return l.lower_binary(n, x, BinaryKind::kAdd); }}},
      {"Sub", {K::kSelf, [](auto& l, auto& n, auto& x) { return l.lower_binary(n, x, BinaryKind::kSub); }}},
      {"Mul", {K::kSelf, [](auto& l, auto& n, auto& x) { return l.lower_binary(n, x, BinaryKind::kMul); }}},
      {"PRelu", {K::kValue, [](auto& l, auto& n, auto& x) { return l.lower_prelu(n, x); }}},
      {"BatchNormalization", {K::kValue, [](auto& l, auto& n, auto& x) { return l.lower_batchnorm(n, x); }}},
      {"Gemm", {K::kValue, [](auto& l, auto& n, auto& x) { return l.lower_gemm(n, x, false); }}},
      {"MatMul", {K::kValue, [](auto& l, auto& n, auto& x) { return l.lower_gemm(n, x, true); }}},
      {"Flatten", {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_flatten(n, x); }}},
      {"Reshape", {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_reshape(n, x); }}},
      {"Transpose", {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_transpose(n, x); }}},
      {"MaxPool", {K::kValue, [](auto& l, auto& n, auto& x) { return l.lower_maxpool(n, x); }}},
      {"Resize", {K::kValue, [](auto& l, auto& n, auto& x) { return l.lower_resize(n, x); }}},
      {"GlobalAveragePool", {K::kValue, [](auto& l, auto& n, auto& x) { return l.lower_gap(n, x); }}},
      {"Constant", {K::kSelf, [](auto& l, auto& n, auto& x) { return l.lower_constant(n, x); }}},
      {"Identity", {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_identity(n, x); }}},
      {"Dropout", {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_identity(n, x); }}},
      // shape subgraphs (folded for the input shape) and data movement
      {"Shape", {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_shape(n, x); }}},
      {"Gather", {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_gather(n, x); }}},
      {"Unsqueeze", {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_unsqueeze(n, x); }}},
      {"Squeeze", {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_squeeze(n, x); }}},
      {"Concat", {K::kSelf, [](auto& l, auto& n, auto& x) { return l.lower_concat(n, x); }}},
      {"Slice", {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_slice(n, x); }}},
      {"Cast", {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_cast(n, x); }}},
      {"ConstantOfShape",
       {K::kSelf, [](auto& l, auto& n, auto& x) { return l.lower_constant_of_shape(n, x); }}},
      {"Range", {K::kSelf, [](auto& l, auto& n, auto& x) { return l.lower_range(n, x); }}},
      {"Expand", {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_expand(n, x); }}},
      {"Split", {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_split(n, x); }, true}},
      {"Equal", {K::kSelf, [](auto& l, auto& n, auto& x) { return l.lower_compare(n, x); }}},
      {"Less", {K::kSelf, [](auto& l, auto& n, auto& x) { return l.lower_compare(n, x); }}},
      {"Greater", {K::kSelf, [](auto& l, auto& n, auto& x) { return l.lower_compare(n, x); }}},
      {"Where", {K::kSelf, [](auto& l, auto& n, auto& x) { return l.lower_where(n, x); }}},
      // the other operators
      {"Div", {K::kSelf, [](auto& l, auto& n, auto& x) { return l.lower_binary(n, x, BinaryKind::kDiv); }}},
      {"LeakyRelu",
       {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_unary(n, x, UnaryKind::kLeakyRelu); }}},
      {"Tanh", {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_unary(n, x, UnaryKind::kTanh); }}},
      {"HardSigmoid",
       {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_unary(n, x, UnaryKind::kHardSigmoid); }}},
      {"HardSwish",
       {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_unary(n, x, UnaryKind::kHardSwish); }}},
      {"Sqrt", {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_unary(n, x, UnaryKind::kSqrt); }}},
      {"Softmax", {K::kValue, [](auto& l, auto& n, auto& x) { return l.lower_softmax(n, x); }}},
      {"AveragePool", {K::kValue, [](auto& l, auto& n, auto& x) { return l.lower_avgpool(n, x); }}},
      {"Pad", {K::kValue, [](auto& l, auto& n, auto& x) { return l.lower_pad(n, x); }}},
      {"ReduceMean", {K::kValue, [](auto& l, auto& n, auto& x) { return l.lower_reduce_mean(n, x); }}},
      {"Tile", {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_tile(n, x); }}},
      {"Neg", {K::kAny, [](auto& l, auto& n, auto& x) { return l.lower_neg(n, x); }}},
      {"Sum", {K::kSelf, [](auto& l, auto& n, auto& x) { return l.lower_sum(n, x); }}},
      {"Upsample", {K::kValue, [](auto& l, auto& n, auto& x) { return l.lower_upsample(n, x); }}},
  };
  return r;
}

}  // namespace

Expected<std::vector<std::size_t>> Lowerer::topo_order() const {
  const std::size_t nn = g_.nodes.size();
  std::map<std::string, std::size_t> producer;
  for (std::size_t i = 0; i < nn; ++i)
    for (const auto& o : g_.nodes[i].outputs) {
      if (o.empty()) continue;
      if (g_.inits.count(o) || o == g_.inputs[0].name || !producer.emplace(o, i).second)
        return err(g_.nodes[i], "output '" + core::printable(o) + "' is defined twice");
    }
  std::vector<std::vector<std::size_t>> users(nn);
  std::vector<std::size_t> pending(nn, 0);
  for (std::size_t i = 0; i < nn; ++i) {
    std::set<std::size_t> deps;
    for (const auto& in : g_.nodes[i].inputs) {
      if (in.empty() || in == g_.inputs[0].name || g_.inits.count(in)) continue;
      auto it = producer.find(in);
      if (it == producer.end())
        return err(g_.nodes[i], "reads '" + core::printable(in) + "', which nothing produces");
      deps.insert(it->second);
    }
    pending[i] = deps.size();
    for (auto d : deps) users[d].push_back(i);
  }
  std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready;
  for (std::size_t i = 0; i < nn; ++i)
    if (pending[i] == 0) ready.push(i);
  std::vector<std::size_t> order;
  order.reserve(nn);
  while (!ready.empty()) {
    const std::size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (auto u : users[i])
      if (--pending[u] == 0) ready.push(u);
  }
  if (order.size() != nn) return invalid_argument("ONNX graph: the nodes form a cycle");
  return order;
}

Expected<Program> Lowerer::run(const Shape& input_shape) {
  if (g_.inputs.size() != 1)
    return not_supported("ONNX graph: " + std::to_string(g_.inputs.size()) +
                         " inputs (exactly one is supported)");
  const GraphIo& in = g_.inputs[0];
  if (input_shape.size() != in.dims.size())
    return invalid_argument("input '" + core::printable(in.name) + "': shape " + shape_str(input_shape) +
                            " does not match the declared " + shape_str(in.dims));
  if (input_shape.empty())
    return invalid_argument("input '" + core::printable(in.name) +
                            "': a scalar input (a batch dimension is needed)");
  // dim 0 is the batch (docs/design/faces.md §2): per image the program is lowered for batch 1 whatever batch is
  // declared or asked; whole, for the shape as given
  declared_batch_ = in.dims[0];
  lowered_batch_ = input_shape[0];
  Shape one = input_shape;
  if (!whole_) one[0] = 1;
  for (std::size_t i = 0; i < in.dims.size(); ++i) {
    if (input_shape[i] <= 0 || ((i > 0 || whole_) && in.dims[i] != 0 && in.dims[i] != input_shape[i]))
      return invalid_argument("input '" + core::printable(in.name) + "': shape " + shape_str(input_shape) +
                              " does not match the declared " + shape_str(in.dims));
  }
  std::int64_t c = 1;
  for (auto d : one) {
    if (c > limits_.max_tensor_elements / d)
      return invalid_argument("input '" + core::printable(in.name) + "': shape " + shape_str(input_shape) +
                              " is too large");
    c *= d;
  }
  prog_.input_shape = one;
  prog_.lens.push_back(c);
  prog_.shapes.push_back(one);
  for (const auto& [name, t] : g_.inits) names_[name] = Entry{t, -1, {}};
  names_[in.name] = Entry{nullptr, kInputValue, one};
  auto order = topo_order();
  if (!order) return order.status();
  for (std::size_t i : *order) FT_TRY(lower_node(g_.nodes[i]));
  FT_TRY(finish());
  return std::move(prog_);
}

Status Lowerer::finish() {
  for (const auto& o : g_.outputs) {
    auto it = names_.find(o.name);
    if (it == names_.end())
      return invalid_argument("graph output '" + core::printable(o.name) + "' is not produced by any node");
    if (it->second.is_const())
      return not_supported("graph output '" + core::printable(o.name) + "' is a constant");
    const Shape& s = it->second.shape;
    // dim 0 of a declared output is the batch when it equals the input's (the program is per image)
    bool match = o.dims.empty() || o.dims.size() == s.size();
    for (std::size_t i = 0; match && i < o.dims.size(); ++i)
      match = o.dims[i] == 0 || o.dims[i] == s[i] || (i == 0 && s[i] == 1 && is_batch_dim(o.dims[i]));
    if (!match)
      return invalid_argument("graph output '" + core::printable(o.name) + "': inferred shape " +
                              shape_str(s) + " differs from the declared " + shape_str(o.dims));
    prog_.outputs.push_back({o.name, it->second.value, s});
  }
  // free lists: each value is released after its last reader; graph outputs never.
  const std::size_t nv = prog_.lens.size();
  std::vector<std::int64_t> last(nv, -1);
  for (std::size_t i = 0; i < prog_.steps.size(); ++i) {
    last[static_cast<std::size_t>(prog_.steps[i].out)] =
        std::max<std::int64_t>(last[prog_.steps[i].out], static_cast<std::int64_t>(i));
    for (const Arg& a : prog_.steps[i].args)
      if (a.kind == Arg::Kind::kValue) last[static_cast<std::size_t>(a.id)] = static_cast<std::int64_t>(i);
  }
  std::vector<bool> is_out(nv, false);
  for (const auto& o : prog_.outputs) is_out[static_cast<std::size_t>(o.value)] = true;
  prog_.free.assign(prog_.steps.size(), {});
  for (std::size_t v = 0; v < nv; ++v)
    if (!is_out[v] && last[v] >= 0)
      prog_.free[static_cast<std::size_t>(last[v])].push_back(static_cast<std::int32_t>(v));
  // live activations + conv scratch (packed weights) must stay within the limit.
  std::int64_t live = prog_.lens[0], peak = live;
  for (std::size_t i = 0; i < prog_.steps.size(); ++i) {
    const Step& s = prog_.steps[i];
    std::int64_t scratch = 0;
    if (const auto* cj = std::get_if<ConvJob>(&s.op))
      scratch = cj->cout * (cj->cin / cj->groups) * cj->kh * cj->kw;
    live += prog_.lens[static_cast<std::size_t>(s.out)];
    peak = std::max(peak, live + scratch);
    for (auto v : prog_.free[i]) live -= prog_.lens[static_cast<std::size_t>(v)];
  }
  if (peak > limits_.max_live_bytes / 4)
    return invalid_argument("program needs " + std::to_string(peak * 4) +
                            " bytes of live tensors, above the limit of " +
                            std::to_string(limits_.max_live_bytes));
  return {};
}

Status Lowerer::lower_node(const Node& n) {
  const auto it = rules().find(n.op);
  if (it == rules().end()) return unsupported(n, "operator '" + core::printable(n.op) + "' is not supported");
  const Rule& rule = it->second;
  FT_TRY(check_outputs(n, rule.many_outputs ? n.outputs.size() : 1));
  if (rule.input0 == Input0::kSelf) return rule.lower(*this, n, Entry{});
  auto x = rule.input0 == Input0::kValue ? value_input(n, 0) : input(n, 0);
  if (!x) return x.status();
  return rule.lower(*this, n, *x);
}

Expected<Program> lower_graph(const Graph& graph, const Shape& shape, const NetLimits& limits,
                              bool* per_image, std::vector<std::string>* ignored) {
  Lowerer l(graph, limits);
  auto p = l.run(shape);
  const bool separable = p.ok() && l.mix_reason().empty();
  if (per_image) *per_image = separable;
  const bool batch =
      !shape.empty() && (shape[0] > 1 || (!graph.inputs.empty() && !graph.inputs[0].dims.empty() &&
                                          graph.inputs[0].dims[0] > 1));
  if (batch && !separable) {  // the graph computes across dim 0: lower it whole (docs/design/faces.md §2)
    Lowerer w(graph, limits, true);
    auto q = w.run(shape);
    if (q) {
      if (ignored) *ignored = w.unread_attributes();
      fuse(*q);
      return q;
    }
    if (!p) return p;
    return q.status().with_context("lowered whole, as " + l.mix_reason());
  }
  if (p && ignored) *ignored = l.unread_attributes();
  if (p) fuse(*p);  // once, after lowering: every executor runs the groups it marks
  return p;
}

}  // namespace facetrace::faces::detail
