/// @file
/// Graph → Program for one input shape (faces.md §2, §3): topological order, constant folding, aliases, shape
/// inference, free lists and the live-memory bound. Every refusal names the node and the attribute or input.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <set>
#include <string>

#include "ir/fuse.h"
#include "onnx/graph.h"

namespace facetrace::faces::detail {
namespace {

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) r += ',';
    r += std::to_string(s[i]);
  }
  r += ']';
  return r;
}

std::int64_t count_of(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

// A name's meaning during lowering: a constant, or a program value seen through some shape.
struct Entry {
  ConstPtr c;  // set for constants
  std::int32_t value = -1;
  Shape shape;
  bool is_const() const { return c != nullptr; }
};

class Lowerer {
 public:
  Lowerer(const Graph& g, const NetLimits& limits) : g_(g), limits_(limits) {}

  Expected<Program> run(const Shape& input_shape);

 private:
  // --- helpers
  Status err(const Node& n, const std::string& what) const {
    return invalid_argument("node '" + n.name + "' (" + n.op + "): " + what);
  }
  Status unsupported(const Node& n, const std::string& what) const {
    return not_supported("node '" + n.name + "' (" + n.op + "): " + what);
  }
  const Attr* attr(const Node& n, const char* name) const {
    auto it = n.attrs.find(name);
    return it == n.attrs.end() ? nullptr : &it->second;
  }
  Expected<std::int64_t> attr_int(const Node& n, const char* name, std::int64_t def) const {
    const Attr* a = attr(n, name);
    if (!a) return def;
    if (a->type != Attr::Type::kInt) return err(n, std::string("attribute '") + name + "' must be an INT");
    return a->i;
  }
  Expected<float> attr_float(const Node& n, const char* name, float def) const {
    const Attr* a = attr(n, name);
    if (!a) return def;
    if (a->type != Attr::Type::kFloat) return err(n, std::string("attribute '") + name + "' must be a FLOAT");
    return a->f;
  }
  Expected<std::string> attr_string(const Node& n, const char* name, const std::string& def) const {
    const Attr* a = attr(n, name);
    if (!a) return def;
    if (a->type != Attr::Type::kString) return err(n, std::string("attribute '") + name + "' must be a STRING");
    return a->s;
  }
  Expected<std::vector<std::int64_t>> attr_ints(const Node& n, const char* name,
                                                std::vector<std::int64_t> def) const {
    const Attr* a = attr(n, name);
    if (!a) return def;
    if (a->type != Attr::Type::kInts) return err(n, std::string("attribute '") + name + "' must be INTS");
    return a->ints;
  }
  bool has_input(const Node& n, std::size_t i) const { return i < n.inputs.size() && !n.inputs[i].empty(); }
  Expected<Entry> input(const Node& n, std::size_t i) const {
    if (!has_input(n, i)) return err(n, "missing operand " + std::to_string(i));
    auto it = names_.find(n.inputs[i]);
    if (it == names_.end()) return err(n, "input '" + n.inputs[i] + "' is not defined");
    return it->second;
  }
  Expected<ConstPtr> const_input(const Node& n, std::size_t i, const char* what) const {
    auto e = input(n, i);
    if (!e) return e.status();
    if (!e->is_const()) return unsupported(n, std::string(what) + " (input " + std::to_string(i) + ") must be constant");
    return e->c;
  }
  Expected<ConstPtr> const_float(const Node& n, std::size_t i, const char* what) const {
    auto c = const_input(n, i, what);
    if (!c) return c;
    if ((*c)->is_int) return err(n, std::string(what) + " must be FLOAT");
    return c;
  }
  Expected<Entry> value_input(const Node& n, std::size_t i) const {
    auto e = input(n, i);
    if (!e) return e;
    if (e->is_const())
      return unsupported(n, "input '" + n.inputs[i] + "' is constant; only graph values are supported here");
    return e;
  }
  Status check_outputs(const Node& n, std::size_t max_out) const {
    if (n.outputs.empty() || n.outputs[0].empty()) return err(n, "no output");
    for (std::size_t i = max_out; i < n.outputs.size(); ++i)
      if (!n.outputs[i].empty()) return unsupported(n, "output " + std::to_string(i) + " ('" + n.outputs[i] + "')");
    return {};
  }
  Status check_shape(const Node& n, const Shape& s) const {
    if (static_cast<std::int64_t>(s.size()) > limits_.max_rank) return err(n, "rank above " + std::to_string(limits_.max_rank));
    std::int64_t c = 1;
    for (auto d : s) {
      if (d <= 0) return err(n, "empty output shape " + shape_str(s));
      if (c > limits_.max_tensor_elements / d) return err(n, "output " + shape_str(s) + " is too large");
      c *= d;
    }
    return {};
  }
  std::int32_t add_const(std::vector<float> data) {
    prog_.consts.push_back(std::make_shared<const std::vector<float>>(std::move(data)));
    return static_cast<std::int32_t>(prog_.consts.size() - 1);
  }
  std::int32_t const_id(const ConstPtr& c) {
    auto it = const_ids_.find(c.get());
    if (it != const_ids_.end()) return it->second;
    const std::int32_t id = add_const(c->f);
    const_ids_[c.get()] = id;
    return id;
  }
  Expected<std::int32_t> emit(const Node& n, Op op, std::vector<Arg> args, const Shape& out_shape) {
    FT_TRY(check_shape(n, out_shape));
    const auto v = static_cast<std::int32_t>(prog_.lens.size());
    prog_.lens.push_back(count_of(out_shape));
    prog_.shapes.push_back(out_shape);
    prog_.steps.push_back(Step{std::move(op), std::move(args), v, n.name, Fusion{}});
    names_[n.outputs[0]] = Entry{nullptr, v, out_shape};
    return v;
  }
  void define_const(const Node& n, ConstPtr c) { names_[n.outputs[0]] = Entry{std::move(c), -1, {}}; }
  void define_alias(const Node& n, const Entry& e, Shape shape) {
    if (e.is_const()) {
      auto c = std::make_shared<ConstTensor>(*e.c);
      c->dims = std::move(shape);
      names_[n.outputs[0]] = Entry{std::move(c), -1, {}};
    } else {
      names_[n.outputs[0]] = Entry{nullptr, e.value, std::move(shape)};
    }
  }

  // --- operators
  Status lower_node(const Node& n);
  Status lower_conv(const Node& n);
  Status lower_unary(const Node& n, UnaryKind kind);
  Status lower_clip(const Node& n);
  Status lower_binary(const Node& n, BinaryKind kind);
  Status lower_prelu(const Node& n);
  Status lower_batchnorm(const Node& n);
  Status lower_gemm(const Node& n, bool matmul);
  Status lower_flatten(const Node& n);
  Status lower_reshape(const Node& n);
  Status lower_transpose(const Node& n);
  Status lower_maxpool(const Node& n);
  Status lower_resize(const Node& n);
  Status lower_gap(const Node& n);
  Status lower_constant(const Node& n);

  Expected<std::vector<std::size_t>> topo_order() const;
  Status finish();

  const Graph& g_;
  const NetLimits& limits_;
  Program prog_;
  std::map<std::string, Entry> names_;
  std::map<const ConstTensor*, std::int32_t> const_ids_;
};

Expected<std::vector<std::size_t>> Lowerer::topo_order() const {
  const std::size_t nn = g_.nodes.size();
  std::map<std::string, std::size_t> producer;
  for (std::size_t i = 0; i < nn; ++i)
    for (const auto& o : g_.nodes[i].outputs) {
      if (o.empty()) continue;
      if (g_.inits.count(o) || o == g_.inputs[0].name || !producer.emplace(o, i).second)
        return err(g_.nodes[i], "output '" + o + "' is defined twice");
    }
  std::vector<std::vector<std::size_t>> users(nn);
  std::vector<std::size_t> pending(nn, 0);
  for (std::size_t i = 0; i < nn; ++i) {
    std::set<std::size_t> deps;
    for (const auto& in : g_.nodes[i].inputs) {
      if (in.empty() || in == g_.inputs[0].name || g_.inits.count(in)) continue;
      auto it = producer.find(in);
      if (it == producer.end()) return err(g_.nodes[i], "reads '" + in + "', which nothing produces");
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
    return not_supported("ONNX graph: " + std::to_string(g_.inputs.size()) + " inputs (exactly one is supported)");
  const GraphIo& in = g_.inputs[0];
  if (input_shape.size() != in.dims.size())
    return invalid_argument("input '" + in.name + "': shape " + shape_str(input_shape) + " does not match the declared " +
                            shape_str(in.dims));
  if (input_shape.empty() || input_shape[0] != 1)
    return invalid_argument("input '" + in.name + "': shape " + shape_str(input_shape) + " must have batch 1");
  for (std::size_t i = 0; i < in.dims.size(); ++i) {
    if (input_shape[i] <= 0 || (in.dims[i] != 0 && in.dims[i] != input_shape[i]))
      return invalid_argument("input '" + in.name + "': shape " + shape_str(input_shape) +
                              " does not match the declared " + shape_str(in.dims));
  }
  std::int64_t c = 1;
  for (auto d : input_shape) {
    if (c > limits_.max_tensor_elements / d)
      return invalid_argument("input '" + in.name + "': shape " + shape_str(input_shape) + " is too large");
    c *= d;
  }
  prog_.input_shape = input_shape;
  prog_.lens.push_back(c);
  prog_.shapes.push_back(input_shape);
  for (const auto& [name, t] : g_.inits) names_[name] = Entry{t, -1, {}};
  names_[in.name] = Entry{nullptr, kInputValue, input_shape};
  auto order = topo_order();
  if (!order) return order.status();
  for (std::size_t i : *order) FT_TRY(lower_node(g_.nodes[i]));
  FT_TRY(finish());
  return std::move(prog_);
}

Status Lowerer::finish() {
  for (const auto& o : g_.outputs) {
    auto it = names_.find(o.name);
    if (it == names_.end()) return invalid_argument("graph output '" + o.name + "' is not produced by any node");
    if (it->second.is_const()) return not_supported("graph output '" + o.name + "' is a constant");
    const Shape& s = it->second.shape;
    bool match = o.dims.empty() || o.dims.size() == s.size();
    for (std::size_t i = 0; match && i < o.dims.size(); ++i) match = o.dims[i] == 0 || o.dims[i] == s[i];
    if (!match)
      return invalid_argument("graph output '" + o.name + "': inferred shape " + shape_str(s) +
                              " differs from the declared " + shape_str(o.dims));
    prog_.outputs.push_back({o.name, it->second.value, s});
  }
  // free lists: each value is released after its last reader; graph outputs never.
  const std::size_t nv = prog_.lens.size();
  std::vector<std::int64_t> last(nv, -1);
  for (std::size_t i = 0; i < prog_.steps.size(); ++i) {
    last[static_cast<std::size_t>(prog_.steps[i].out)] = std::max<std::int64_t>(last[prog_.steps[i].out], static_cast<std::int64_t>(i));
    for (const Arg& a : prog_.steps[i].args)
      if (a.kind == Arg::Kind::kValue) last[static_cast<std::size_t>(a.id)] = static_cast<std::int64_t>(i);
  }
  std::vector<bool> is_out(nv, false);
  for (const auto& o : prog_.outputs) is_out[static_cast<std::size_t>(o.value)] = true;
  prog_.free.assign(prog_.steps.size(), {});
  for (std::size_t v = 0; v < nv; ++v)
    if (!is_out[v] && last[v] >= 0) prog_.free[static_cast<std::size_t>(last[v])].push_back(static_cast<std::int32_t>(v));
  // live activations + conv scratch (packed weights) must stay within the limit.
  std::int64_t live = prog_.lens[0], peak = live;
  for (std::size_t i = 0; i < prog_.steps.size(); ++i) {
    const Step& s = prog_.steps[i];
    std::int64_t scratch = 0;
    if (const auto* cj = std::get_if<ConvJob>(&s.op)) scratch = cj->cout * (cj->cin / cj->groups) * cj->kh * cj->kw;
    live += prog_.lens[static_cast<std::size_t>(s.out)];
    peak = std::max(peak, live + scratch);
    for (auto v : prog_.free[i]) live -= prog_.lens[static_cast<std::size_t>(v)];
  }
  if (peak > limits_.max_live_bytes / 4)
    return invalid_argument("program needs " + std::to_string(peak * 4) + " bytes of live tensors, above the limit of " +
                            std::to_string(limits_.max_live_bytes));
  return {};
}

Status Lowerer::lower_node(const Node& n) {
  const std::string& op = n.op;
  if (op == "Conv") return lower_conv(n);
  if (op == "Relu") return lower_unary(n, UnaryKind::kRelu);
  if (op == "Sigmoid") return lower_unary(n, UnaryKind::kSigmoid);
  if (op == "Clip") return lower_clip(n);
  if (op == "Add") return lower_binary(n, BinaryKind::kAdd);
  if (op == "Sub") return lower_binary(n, BinaryKind::kSub);
  if (op == "Mul") return lower_binary(n, BinaryKind::kMul);
  if (op == "PRelu") return lower_prelu(n);
  if (op == "BatchNormalization") return lower_batchnorm(n);
  if (op == "Gemm") return lower_gemm(n, false);
  if (op == "MatMul") return lower_gemm(n, true);
  if (op == "Flatten") return lower_flatten(n);
  if (op == "Reshape") return lower_reshape(n);
  if (op == "Transpose") return lower_transpose(n);
  if (op == "MaxPool") return lower_maxpool(n);
  if (op == "Resize") return lower_resize(n);
  if (op == "GlobalAveragePool") return lower_gap(n);
  if (op == "Constant") return lower_constant(n);
  if (op == "Identity" || op == "Dropout") {
    FT_TRY(check_outputs(n, 1));
    auto x = input(n, 0);
    if (!x) return x.status();
    if (op == "Dropout" && has_input(n, 2)) {
      auto tm = const_input(n, 2, "training_mode");
      if (!tm) return tm.status();
      if ((*tm)->count() != 1 || ((*tm)->is_int ? (*tm)->i[0] != 0 : (*tm)->f[0] != 0.0f))
        return unsupported(n, "training_mode must be 0");
    }
    define_alias(n, *x, x->is_const() ? x->c->dims : x->shape);
    return {};
  }
  return unsupported(n, "operator '" + op + "' is not supported");
}

Status Lowerer::lower_conv(const Node& n) {
  FT_TRY(check_outputs(n, 1));
  auto x = value_input(n, 0);
  if (!x) return x.status();
  if (!has_input(n, 1)) return err(n, "no weights (input 1)");
  auto w = const_float(n, 1, "weights");
  if (!w) return w.status();
  const Shape& xs = x->shape;
  const Shape& ws = (*w)->dims;
  if (xs.size() != 4) return unsupported(n, "input rank " + std::to_string(xs.size()) + " (only 2-D conv)");
  if (ws.size() != 4) return unsupported(n, "weights rank " + std::to_string(ws.size()) + " (only 2-D conv)");
  auto group = attr_int(n, "group", 1);
  auto strides = attr_ints(n, "strides", {1, 1});
  auto pads = attr_ints(n, "pads", {0, 0, 0, 0});
  auto dil = attr_ints(n, "dilations", {1, 1});
  auto autopad = attr_string(n, "auto_pad", "NOTSET");
  auto ks = attr_ints(n, "kernel_shape", {ws[2], ws[3]});
  if (!group) return group.status();
  if (!strides) return strides.status();
  if (!pads) return pads.status();
  if (!dil) return dil.status();
  if (!autopad) return autopad.status();
  if (!ks) return ks.status();
  if (*autopad != "NOTSET") return unsupported(n, "attribute 'auto_pad' = " + *autopad + " (only NOTSET)");
  if (dil->size() != 2 || (*dil)[0] != 1 || (*dil)[1] != 1) return unsupported(n, "attribute 'dilations' must be [1,1]");
  if (strides->size() != 2 || (*strides)[0] <= 0 || (*strides)[1] <= 0)
    return err(n, "attribute 'strides' must be two positive values");
  if (pads->size() != 4) return err(n, "attribute 'pads' must have 4 values");
  for (auto p : *pads)
    if (p < 0 || p > 4096) return err(n, "attribute 'pads' holds " + std::to_string(p));
  if (ks->size() != 2 || (*ks)[0] != ws[2] || (*ks)[1] != ws[3]) return err(n, "attribute 'kernel_shape' disagrees with the weights");
  ConvJob j;
  j.cin = xs[1], j.h = xs[2], j.w = xs[3];
  j.cout = ws[0], j.groups = *group, j.kh = ws[2], j.kw = ws[3];
  j.sh = (*strides)[0], j.sw = (*strides)[1], j.pt = (*pads)[0], j.pl = (*pads)[1];
  if (j.groups < 1) return err(n, "attribute 'group' = " + std::to_string(j.groups));
  if (j.cout <= 0 || j.kh <= 0 || j.kw <= 0 || ws[1] <= 0) return err(n, "empty weights " + shape_str(ws));
  if (ws[1] * j.groups != j.cin)
    return err(n, "channel mismatch: input has " + std::to_string(j.cin) + " channels, weights expect " +
                      std::to_string(ws[1]) + " × group " + std::to_string(j.groups));
  if (j.cout % j.groups != 0) return err(n, "output channels " + std::to_string(j.cout) + " not divisible by group");
  const std::int64_t ph = j.h + j.pt + (*pads)[2], pw = j.w + j.pl + (*pads)[3];
  if (j.kh > ph || j.kw > pw) return err(n, "kernel " + std::to_string(j.kh) + "x" + std::to_string(j.kw) +
                                                " is larger than the padded input " + std::to_string(ph) + "x" + std::to_string(pw));
  j.oh = (ph - j.kh) / j.sh + 1;
  j.ow = (pw - j.kw) / j.sw + 1;
  j.weights = std::make_shared<const std::vector<float>>((*w)->f);
  if (has_input(n, 2)) {
    auto b = const_float(n, 2, "bias");
    if (!b) return b.status();
    if ((*b)->count() != j.cout) return err(n, "bias has " + std::to_string((*b)->count()) + " values, expected " + std::to_string(j.cout));
    j.bias = std::make_shared<const std::vector<float>>((*b)->f);
  }
  j.layer = static_cast<std::int32_t>(prog_.conv_count++);
  auto v = emit(n, j, {Arg::value(x->value)}, {1, j.cout, j.oh, j.ow});
  return v ? Status{} : v.status();
}

float apply_unary(UnaryKind k, float x, float lo, float hi) {
  switch (k) {
    case UnaryKind::kRelu: return x > 0.0f ? x : 0.0f;
    case UnaryKind::kSigmoid: return 1.0f / (1.0f + std::exp(-x));
    case UnaryKind::kClip: return std::min(std::max(x, lo), hi);
  }
  return x;
}

Status Lowerer::lower_unary(const Node& n, UnaryKind kind) {
  FT_TRY(check_outputs(n, 1));
  auto x = input(n, 0);
  if (!x) return x.status();
  UnaryOp op{kind, -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity()};
  if (x->is_const()) {  // fold
    if (x->c->is_int) return err(n, "INT64 operand");
    auto c = std::make_shared<ConstTensor>(*x->c);
    for (float& v : c->f) v = apply_unary(kind, v, op.lo, op.hi);
    define_const(n, std::move(c));
    return {};
  }
  auto v = emit(n, op, {Arg::value(x->value)}, x->shape);
  return v ? Status{} : v.status();
}

Status Lowerer::lower_clip(const Node& n) {
  FT_TRY(check_outputs(n, 1));
  auto x = input(n, 0);
  if (!x) return x.status();
  float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
  if (g_.opset > 0 && g_.opset < 11) {
    auto a = attr_float(n, "min", lo);
    auto b = attr_float(n, "max", hi);
    if (!a) return a.status();
    if (!b) return b.status();
    lo = *a, hi = *b;
  } else {
    for (std::size_t i = 1; i <= 2; ++i) {
      if (!has_input(n, i)) continue;
      auto c = const_float(n, i, i == 1 ? "min" : "max");
      if (!c) return c.status();
      if ((*c)->count() != 1) return err(n, std::string(i == 1 ? "min" : "max") + " must be a scalar");
      (i == 1 ? lo : hi) = (*c)->f[0];
    }
  }
  if (std::isnan(lo) || std::isnan(hi)) return err(n, "NaN bound");
  if (x->is_const()) {
    if (x->c->is_int) return err(n, "INT64 operand");
    auto c = std::make_shared<ConstTensor>(*x->c);
    for (float& v : c->f) v = apply_unary(UnaryKind::kClip, v, lo, hi);
    define_const(n, std::move(c));
    return {};
  }
  auto v = emit(n, UnaryOp{UnaryKind::kClip, lo, hi}, {Arg::value(x->value)}, x->shape);
  return v ? Status{} : v.status();
}

Status Lowerer::lower_binary(const Node& n, BinaryKind kind) {
  FT_TRY(check_outputs(n, 1));
  if (n.inputs.size() != 2) return err(n, "needs exactly two operands");
  auto a = input(n, 0);
  if (!a) return a.status();
  auto b = input(n, 1);
  if (!b) return b.status();
  const Shape as = a->is_const() ? a->c->dims : a->shape;
  const Shape bs = b->is_const() ? b->c->dims : b->shape;
  if ((a->is_const() && a->c->is_int) || (b->is_const() && b->c->is_int)) return err(n, "INT64 operand");
  if (as.size() > 4 || bs.size() > 4) return unsupported(n, "operand rank above 4");
  const std::size_t rank = std::max(as.size(), bs.size());
  BinaryOp op;
  op.kind = kind;
  std::array<std::int64_t, 4> ad{1, 1, 1, 1}, bd{1, 1, 1, 1};
  for (std::size_t i = 0; i < as.size(); ++i) ad[4 - as.size() + i] = as[i];
  for (std::size_t i = 0; i < bs.size(); ++i) bd[4 - bs.size() + i] = bs[i];
  for (int i = 0; i < 4; ++i) {
    if (ad[i] != bd[i] && ad[i] != 1 && bd[i] != 1)
      return err(n, "shapes " + shape_str(as) + " and " + shape_str(bs) + " do not broadcast");
    op.dims[i] = std::max(ad[i], bd[i]);
  }
  std::int64_t sa = 1, sb = 1;
  for (int i = 3; i >= 0; --i) {
    op.a_strides[i] = ad[i] == 1 ? 0 : sa;
    op.b_strides[i] = bd[i] == 1 ? 0 : sb;
    sa *= ad[i];
    sb *= bd[i];
  }
  Shape out(op.dims.begin() + static_cast<std::ptrdiff_t>(4 - rank), op.dims.end());
  if (a->is_const() && b->is_const()) {  // fold
    auto c = std::make_shared<ConstTensor>();
    c->dims = out;
    c->f.resize(static_cast<std::size_t>(count_of(out)));
    std::size_t o = 0;
    for (std::int64_t i0 = 0; i0 < op.dims[0]; ++i0)
      for (std::int64_t i1 = 0; i1 < op.dims[1]; ++i1)
        for (std::int64_t i2 = 0; i2 < op.dims[2]; ++i2)
          for (std::int64_t i3 = 0; i3 < op.dims[3]; ++i3) {
            const float x = a->c->f[static_cast<std::size_t>(i0 * op.a_strides[0] + i1 * op.a_strides[1] + i2 * op.a_strides[2] + i3 * op.a_strides[3])];
            const float y = b->c->f[static_cast<std::size_t>(i0 * op.b_strides[0] + i1 * op.b_strides[1] + i2 * op.b_strides[2] + i3 * op.b_strides[3])];
            c->f[o++] = kind == BinaryKind::kAdd ? x + y : kind == BinaryKind::kSub ? x - y : x * y;
          }
    define_const(n, std::move(c));
    return {};
  }
  const Arg aa = a->is_const() ? Arg::constant(const_id(a->c)) : Arg::value(a->value);
  const Arg ba = b->is_const() ? Arg::constant(const_id(b->c)) : Arg::value(b->value);
  auto v = emit(n, op, {aa, ba}, out);
  return v ? Status{} : v.status();
}

Status Lowerer::lower_prelu(const Node& n) {
  FT_TRY(check_outputs(n, 1));
  auto x = value_input(n, 0);
  if (!x) return x.status();
  auto s = const_float(n, 1, "slope");
  if (!s) return s.status();
  const Shape& xs = x->shape;
  if (xs.size() < 2) return unsupported(n, "input rank below 2");
  const std::int64_t ch = xs[1];
  const std::int64_t plane = count_of(xs) / ch;
  std::vector<float> slope;
  if ((*s)->count() == 1) {
    slope.assign(static_cast<std::size_t>(ch), (*s)->f[0]);
  } else {
    const Shape& ss = (*s)->dims;
    bool ok = ss.size() <= xs.size() && (*s)->count() == ch;
    for (std::size_t i = 0; ok && i < ss.size(); ++i) {
      const std::size_t axis = xs.size() - ss.size() + i;
      ok = axis == 1 ? ss[i] == ch : ss[i] == 1;
    }
    if (!ok) return unsupported(n, "slope " + shape_str(ss) + " is neither per channel nor a scalar for input " + shape_str(xs));
    slope = (*s)->f;
  }
  const std::int32_t id = add_const(std::move(slope));
  auto v = emit(n, ChannelPreluOp{ch, plane}, {Arg::value(x->value), Arg::constant(id)}, xs);
  return v ? Status{} : v.status();
}

Status Lowerer::lower_batchnorm(const Node& n) {
  FT_TRY(check_outputs(n, 1));
  auto x = value_input(n, 0);
  if (!x) return x.status();
  auto eps = attr_float(n, "epsilon", 1e-5f);
  if (!eps) return eps.status();
  auto tm = attr_int(n, "training_mode", 0);
  if (!tm) return tm.status();
  if (*tm != 0) return unsupported(n, "attribute 'training_mode' must be 0");
  const Shape& xs = x->shape;
  if (xs.size() < 2) return unsupported(n, "input rank below 2");
  const std::int64_t ch = xs[1];
  ConstPtr p[4];
  const char* what[4] = {"scale", "B", "mean", "var"};
  for (int i = 0; i < 4; ++i) {
    auto c = const_float(n, static_cast<std::size_t>(i + 1), what[i]);
    if (!c) return c.status();
    if ((*c)->count() != ch) return err(n, std::string(what[i]) + " has " + std::to_string((*c)->count()) + " values, expected " + std::to_string(ch));
    p[i] = *c;
  }
  std::vector<float> scale(static_cast<std::size_t>(ch)), shift(static_cast<std::size_t>(ch));
  for (std::size_t c = 0; c < scale.size(); ++c) {  // faces.md §3: folded in double
    const double var = static_cast<double>(p[3]->f[c]) + static_cast<double>(*eps);
    if (!(var > 0.0)) return err(n, "variance + epsilon ≤ 0 at channel " + std::to_string(c));
    const double s = static_cast<double>(p[0]->f[c]) / std::sqrt(var);
    scale[c] = static_cast<float>(s);
    shift[c] = static_cast<float>(static_cast<double>(p[1]->f[c]) - static_cast<double>(p[2]->f[c]) * s);
  }
  const std::int32_t si = add_const(std::move(scale)), hi = add_const(std::move(shift));
  auto v = emit(n, ChannelAffineOp{ch, count_of(xs) / ch}, {Arg::value(x->value), Arg::constant(si), Arg::constant(hi)}, xs);
  return v ? Status{} : v.status();
}

Status Lowerer::lower_gemm(const Node& n, bool matmul) {
  FT_TRY(check_outputs(n, 1));
  auto a = value_input(n, 0);
  if (!a) return a.status();
  auto b = const_float(n, 1, "B");
  if (!b) return b.status();
  const Shape& as = a->shape;
  const Shape& bs = (*b)->dims;
  GemvOp op;
  Shape out;
  if (bs.size() != 2) return unsupported(n, "B must be 2-D, got " + shape_str(bs));
  if (matmul) {
    if (as.size() < 2 || count_of(as) != as.back()) return unsupported(n, "A must be [1,...,1,K], got " + shape_str(as));
    if (has_input(n, 2)) return err(n, "MatMul takes two operands");
    op.k = as.back();
    op.n = bs[1];
    if (bs[0] != op.k) return err(n, "A " + shape_str(as) + " and B " + shape_str(bs) + " do not multiply");
    out = as;
    out.back() = op.n;
  } else {
    auto ta = attr_int(n, "transA", 0);
    auto tb = attr_int(n, "transB", 0);
    auto al = attr_float(n, "alpha", 1.0f);
    auto be = attr_float(n, "beta", 1.0f);
    if (!ta) return ta.status();
    if (!tb) return tb.status();
    if (!al) return al.status();
    if (!be) return be.status();
    if (*ta != 0) return unsupported(n, "attribute 'transA' must be 0");
    if (*tb != 0 && *tb != 1) return err(n, "attribute 'transB' must be 0 or 1");
    if (as.size() != 2 || as[0] != 1) return unsupported(n, "A must be [1,K], got " + shape_str(as));
    op.trans_b = *tb == 1;
    op.alpha = *al;
    op.beta = *be;
    op.k = as[1];
    op.n = op.trans_b ? bs[0] : bs[1];
    if ((op.trans_b ? bs[1] : bs[0]) != op.k) return err(n, "A " + shape_str(as) + " and B " + shape_str(bs) + " do not multiply");
    out = {1, op.n};
  }
  std::vector<Arg> args{Arg::value(a->value), Arg::constant(const_id(*b))};
  if (!matmul && has_input(n, 2)) {
    auto c = const_float(n, 2, "C");
    if (!c) return c.status();
    std::vector<float> bias;
    if ((*c)->count() == 1)
      bias.assign(static_cast<std::size_t>(op.n), (*c)->f[0]);
    else if ((*c)->count() == op.n && count_of((*c)->dims) == op.n && (*c)->dims.size() <= 2 && (*c)->dims.back() == op.n)
      bias = (*c)->f;
    else
      return err(n, "C " + shape_str((*c)->dims) + " does not broadcast to [1," + std::to_string(op.n) + "]");
    op.has_bias = true;
    args.push_back(Arg::constant(add_const(std::move(bias))));
  }
  auto v = emit(n, op, std::move(args), out);
  return v ? Status{} : v.status();
}

Status Lowerer::lower_flatten(const Node& n) {
  FT_TRY(check_outputs(n, 1));
  auto x = input(n, 0);
  if (!x) return x.status();
  const Shape s = x->is_const() ? x->c->dims : x->shape;
  auto axis = attr_int(n, "axis", 1);
  if (!axis) return axis.status();
  const auto r = static_cast<std::int64_t>(s.size());
  std::int64_t ax = *axis < 0 ? *axis + r : *axis;
  if (ax < 0 || ax > r) return err(n, "attribute 'axis' = " + std::to_string(*axis) + " for rank " + std::to_string(r));
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t i = 0; i < r; ++i) (i < ax ? outer : inner) *= s[static_cast<std::size_t>(i)];
  define_alias(n, *x, {outer, inner});
  return {};
}

Status Lowerer::lower_reshape(const Node& n) {
  FT_TRY(check_outputs(n, 1));
  auto x = input(n, 0);
  if (!x) return x.status();
  auto sh = const_input(n, 1, "shape");
  if (!sh) return sh.status();
  if (!(*sh)->is_int) return err(n, "shape must be INT64");
  auto az = attr_int(n, "allowzero", 0);
  if (!az) return az.status();
  const Shape in = x->is_const() ? x->c->dims : x->shape;
  const std::int64_t total = x->is_const() ? x->c->count() : count_of(in);
  if (static_cast<std::int64_t>((*sh)->i.size()) > limits_.max_rank) return err(n, "target rank above " + std::to_string(limits_.max_rank));
  Shape out;
  int minus = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < (*sh)->i.size(); ++i) {
    std::int64_t d = (*sh)->i[i];
    if (d == 0) {
      if (*az != 0) return unsupported(n, "allowzero = 1 with a 0 in the shape");
      if (i >= in.size()) return err(n, "shape copies dim " + std::to_string(i) + " of a rank " + std::to_string(in.size()) + " input");
      d = in[i];
    }
    if (d == -1) {
      if (minus >= 0) return err(n, "more than one -1 in the shape");
      minus = static_cast<int>(i);
      out.push_back(1);
      continue;
    }
    if (d < 0) return err(n, "shape holds " + std::to_string(d));
    if (d > 0 && known > limits_.max_tensor_elements / d) return err(n, "shape is too large");
    known *= d;
    out.push_back(d);
  }
  if (minus >= 0) {
    if (known == 0 || total % known != 0) return err(n, "cannot infer -1 for " + std::to_string(total) + " elements");
    out[static_cast<std::size_t>(minus)] = total / known;
  } else if (known != total) {
    return err(n, "shape " + shape_str(out) + " holds " + std::to_string(known) + " elements, the input " + std::to_string(total));
  }
  define_alias(n, *x, out);
  return {};
}

Status Lowerer::lower_transpose(const Node& n) {
  FT_TRY(check_outputs(n, 1));
  auto x = value_input(n, 0);
  if (!x) return x.status();
  const Shape& s = x->shape;
  const std::size_t r = s.size();
  std::vector<std::int64_t> perm(r);
  for (std::size_t i = 0; i < r; ++i) perm[i] = static_cast<std::int64_t>(r - 1 - i);
  auto p = attr_ints(n, "perm", perm);
  if (!p) return p.status();
  perm = *p;
  if (perm.size() != r) return err(n, "attribute 'perm' has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(r));
  std::vector<bool> seen(r, false);
  for (auto q : perm) {
    if (q < 0 || q >= static_cast<std::int64_t>(r) || seen[static_cast<std::size_t>(q)]) return err(n, "attribute 'perm' is not a permutation");
    seen[static_cast<std::size_t>(q)] = true;
  }
  std::vector<std::int64_t> in_strides(r, 1);
  for (std::size_t i = r; i-- > 1;) in_strides[i - 1] = in_strides[i] * s[i];
  TransposeOp op;
  Shape out(r);
  for (std::size_t k = 0; k < r; ++k) {
    out[k] = s[static_cast<std::size_t>(perm[k])];
    op.dims.push_back(out[k]);
    op.strides.push_back(in_strides[static_cast<std::size_t>(perm[k])]);
  }
  auto v = emit(n, std::move(op), {Arg::value(x->value)}, out);
  return v ? Status{} : v.status();
}

Status Lowerer::lower_maxpool(const Node& n) {
  FT_TRY(check_outputs(n, 1));
  auto x = value_input(n, 0);
  if (!x) return x.status();
  const Shape& s = x->shape;
  if (s.size() != 4) return unsupported(n, "input rank " + std::to_string(s.size()) + " (only 2-D pooling)");
  auto ks = attr_ints(n, "kernel_shape", {});
  auto st = attr_ints(n, "strides", {1, 1});
  auto pads = attr_ints(n, "pads", {0, 0, 0, 0});
  auto dil = attr_ints(n, "dilations", {1, 1});
  auto ceil = attr_int(n, "ceil_mode", 0);
  auto ap = attr_string(n, "auto_pad", "NOTSET");
  auto so = attr_int(n, "storage_order", 0);
  if (!ks) return ks.status();
  if (!st) return st.status();
  if (!pads) return pads.status();
  if (!dil) return dil.status();
  if (!ceil) return ceil.status();
  if (!ap) return ap.status();
  if (!so) return so.status();
  if (ks->size() != 2 || (*ks)[0] <= 0 || (*ks)[1] <= 0) return err(n, "attribute 'kernel_shape' must be two positive values");
  if (st->size() != 2 || (*st)[0] <= 0 || (*st)[1] <= 0) return err(n, "attribute 'strides' must be two positive values");
  for (auto q : *pads)
    if (q != 0) return unsupported(n, "attribute 'pads' must be all 0");
  if (dil->size() != 2 || (*dil)[0] != 1 || (*dil)[1] != 1) return unsupported(n, "attribute 'dilations' must be [1,1]");
  if (*ceil != 0) return unsupported(n, "attribute 'ceil_mode' must be 0");
  if (*ap != "NOTSET" && *ap != "VALID") return unsupported(n, "attribute 'auto_pad' = " + *ap);
  MaxPoolOp op{s[1], s[2], s[3], (*ks)[0], (*ks)[1], (*st)[0], (*st)[1], 0, 0};
  if (op.kh > op.h || op.kw > op.w) return err(n, "kernel larger than the input");
  op.oh = (op.h - op.kh) / op.sh + 1;
  op.ow = (op.w - op.kw) / op.sw + 1;
  auto v = emit(n, op, {Arg::value(x->value)}, {1, op.channels, op.oh, op.ow});
  return v ? Status{} : v.status();
}

Status Lowerer::lower_resize(const Node& n) {
  FT_TRY(check_outputs(n, 1));
  auto x = value_input(n, 0);
  if (!x) return x.status();
  const Shape& s = x->shape;
  if (s.size() != 4) return unsupported(n, "input rank " + std::to_string(s.size()));
  auto mode = attr_string(n, "mode", "nearest");
  auto ctm = attr_string(n, "coordinate_transformation_mode", "half_pixel");
  auto nm = attr_string(n, "nearest_mode", "round_prefer_floor");
  if (!mode) return mode.status();
  if (!ctm) return ctm.status();
  if (!nm) return nm.status();
  if (*mode != "nearest") return unsupported(n, "attribute 'mode' = " + *mode + " (only nearest)");
  // For whole-number scales these coincide with out[y] = in[y/s] (faces.md §2).
  const bool floor_ok = *ctm == "asymmetric" && *nm == "floor";
  const bool half_ok = (*ctm == "half_pixel" || *ctm == "pytorch_half_pixel") &&
                       (*nm == "round_prefer_floor" || *nm == "round_prefer_ceil");
  if (g_.opset >= 11 && !floor_ok && !half_ok)
    return unsupported(n, "attribute 'coordinate_transformation_mode' = " + *ctm + " with 'nearest_mode' = " + *nm);
  const std::size_t si = g_.opset > 0 && g_.opset < 11 ? 1 : 2;
  if (g_.opset >= 11 && has_input(n, 3)) return unsupported(n, "sizes (input 3); only constant scales");
  auto sc = const_float(n, si, "scales");
  if (!sc) return sc.status();
  if ((*sc)->count() != 4) return err(n, "scales must hold 4 values");
  const auto& f = (*sc)->f;
  if (f[0] != 1.0f || f[1] != 1.0f) return unsupported(n, "scales for N and C must be 1");
  for (int i = 2; i < 4; ++i)
    if (!(f[static_cast<std::size_t>(i)] >= 1.0f && f[static_cast<std::size_t>(i)] <= 16.0f) ||
        f[static_cast<std::size_t>(i)] != std::floor(f[static_cast<std::size_t>(i)]))
      return unsupported(n, "scale " + std::to_string(f[static_cast<std::size_t>(i)]) + " is not a whole number in 1..16");
  ResizeOp op{s[1], s[2], s[3], static_cast<std::int64_t>(f[2]), static_cast<std::int64_t>(f[3])};
  auto v = emit(n, op, {Arg::value(x->value)}, {1, op.channels, op.h * op.sy, op.w * op.sx});
  return v ? Status{} : v.status();
}

Status Lowerer::lower_gap(const Node& n) {
  FT_TRY(check_outputs(n, 1));
  auto x = value_input(n, 0);
  if (!x) return x.status();
  const Shape& s = x->shape;
  if (s.size() != 4) return unsupported(n, "input rank " + std::to_string(s.size()) + " (only 4-D)");
  auto v = emit(n, GlobalAverageOp{s[1], s[2] * s[3]}, {Arg::value(x->value)}, {1, s[1], 1, 1});
  return v ? Status{} : v.status();
}

Status Lowerer::lower_constant(const Node& n) {
  FT_TRY(check_outputs(n, 1));
  if (n.attrs.size() != 1) return err(n, "needs exactly one value attribute");
  const auto& [name, a] = *n.attrs.begin();
  auto c = std::make_shared<ConstTensor>();
  if (name == "value" && a.type == Attr::Type::kTensor) {
    *c = *a.t;
  } else if (name == "value_float" && a.type == Attr::Type::kFloat) {
    c->f = {a.f};
  } else if (name == "value_floats" && a.type == Attr::Type::kFloats) {
    c->f = a.floats;
    c->dims = {static_cast<std::int64_t>(a.floats.size())};
  } else if (name == "value_int" && a.type == Attr::Type::kInt) {
    c->is_int = true;
    c->i = {a.i};
  } else if (name == "value_ints" && a.type == Attr::Type::kInts) {
    c->is_int = true;
    c->i = a.ints;
    c->dims = {static_cast<std::int64_t>(a.ints.size())};
  } else {
    return unsupported(n, "attribute '" + name + "' (only value, value_float(s), value_int(s))");
  }
  define_const(n, std::move(c));
  return {};
}

}  // namespace

Expected<Program> lower_graph(const Graph& graph, const Shape& shape, const NetLimits& limits) {
  Lowerer l(graph, limits);
  auto p = l.run(shape);
  if (p) fuse(*p);  // once, after lowering: every executor runs the groups it marks
  return p;
}

}  // namespace facetrace::faces::detail
