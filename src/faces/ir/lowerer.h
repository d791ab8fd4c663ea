/// @file
/// Private: the lowering of a parsed ONNX graph (docs/design/faces.md §2, §3): the Lowerer class, shared by lower.cpp (order,
/// dispatch, free lists, the live-memory bound) and the operator rules in lower_ops.cpp and lower_aliases.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "facetrace/core/text.h"
#include "onnx/graph.h"

namespace facetrace::faces::detail {

inline std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) r += ',';
    r += std::to_string(s[i]);
  }
  r += ']';
  return r;
}

inline std::int64_t count_of(const Shape& s) {
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

/// Graph → Program for one input shape (docs/design/faces.md §2, §3). One per lowering.
class Lowerer {
 public:
  /// whole: lower for the input shape as given, dim 0 an ordinary dimension (docs/design/faces.md §2), for graphs
  /// that mix the batch; otherwise per image (dim 0 of every value is the batch, 1).
  Lowerer(const Graph& g, const NetLimits& limits, bool whole = false)
      : g_(g), limits_(limits), whole_(whole) {}

  /// The program for `input_shape` (batch 1); errors name the node.
  Expected<Program> run(const Shape& input_shape);

  // --- helpers for the operator rules
  // "node '<name>' (<op>)" for messages, both cut and escaped (core/text.h): they come from the file.
  static std::string node_where(const Node& n) {
    return "node '" + core::printable(n.name) + "' (" + core::printable(n.op) + ")";
  }
  Status err(const Node& n, const std::string& what) const {
    return invalid_argument(node_where(n) + ": " + what);
  }
  Status unsupported(const Node& n, const std::string& what) const {
    return not_supported(node_where(n) + ": " + what);
  }
  // Every attribute a rule looks at goes through here (or mark_read): what no rule looked at is reported as
  // ignored (unread_attributes).
  const Attr* attr(const Node& n, const char* name) const {
    mark_read(n, name);
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
    if (a->type != Attr::Type::kString)
      return err(n, std::string("attribute '") + name + "' must be a STRING");
    return a->s;
  }
  Expected<std::vector<std::int64_t>> attr_ints(const Node& n, const char* name,
                                                std::vector<std::int64_t> def) const {
    const Attr* a = attr(n, name);
    if (!a) return def;
    if (a->type != Attr::Type::kInts) return err(n, std::string("attribute '") + name + "' must be INTS");
    return a->ints;
  }
  // Moves the value of `e` into `out`, or returns its error.
  template <class T>
  static Status take(Expected<T> e, T& out) {
    if (!e) return e.status();
    out = std::move(*e);
    return {};
  }
  // The window attributes Conv and the pools share (docs/design/faces.md §2), with their types checked: two
  // positive strides and dilations (a pool refuses dilations other than 1 itself).
  struct Window {
    std::vector<std::int64_t> kernel, strides, pads, dilations;
    std::string auto_pad;
  };
  // Resolves auto_pad (SAME_UPPER / SAME_LOWER / VALID / NOTSET) into four explicit pads for input h×w, kernel
  // extent (dilated) eh×ew; errors name the node.
  Status resolve_pads(const Node& n, Window& w, std::int64_t h, std::int64_t wd, std::int64_t eh,
                      std::int64_t ew) const;
  Expected<Window> window(const Node& n, std::vector<std::int64_t> kernel_default) const;
  bool has_input(const Node& n, std::size_t i) const { return i < n.inputs.size() && !n.inputs[i].empty(); }
  Expected<Entry> input(const Node& n, std::size_t i) const {
    if (!has_input(n, i)) return err(n, "missing operand " + std::to_string(i));
    auto it = names_.find(n.inputs[i]);
    if (it == names_.end()) return err(n, "input '" + core::printable(n.inputs[i]) + "' is not defined");
    return it->second;
  }
  Expected<ConstPtr> const_input(const Node& n, std::size_t i, const char* what) const {
    auto e = input(n, i);
    if (!e) return e.status();
    if (!e->is_const())
      return unsupported(n, std::string(what) + " (input " + std::to_string(i) + ") must be constant");
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
      return unsupported(n, "input '" + core::printable(n.inputs[i]) +
                                "' is constant; only graph values are supported here");
    return e;
  }
  Status check_outputs(const Node& n, std::size_t max_out) const {
    if (n.outputs.empty() || n.outputs[0].empty()) return err(n, "no output");
    for (std::size_t i = max_out; i < n.outputs.size(); ++i)
      if (!n.outputs[i].empty())
        return unsupported(n, "output " + std::to_string(i) + " ('" + core::printable(n.outputs[i]) + "')");
    return {};
  }
  Status check_shape(const Node& n, const Shape& s) const {
    if (static_cast<std::int64_t>(s.size()) > limits_.max_rank)
      return err(n, "rank above " + std::to_string(limits_.max_rank));
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
  // Emits a step writing output `out` of node n (default: output 0); returns the new value's id in *id when set.
  Status emit(const Node& n, Op op, std::vector<Arg> args, const Shape& out_shape, std::size_t out = 0,
              std::int32_t* id = nullptr) {
    FT_TRY(check_shape(n, out_shape));
    const auto v = static_cast<std::int32_t>(prog_.lens.size());
    prog_.lens.push_back(count_of(out_shape));
    prog_.shapes.push_back(out_shape);
    prog_.steps.push_back(Step{std::move(op), std::move(args), v, n.name, Fusion{}});
    if (out < n.outputs.size() && !n.outputs[out].empty())
      names_[n.outputs[out]] = Entry{nullptr, v, out_shape};
    if (id) *id = v;
    return {};
  }
  void define_const(const Node& n, ConstPtr c, std::size_t out = 0) {
    names_[n.outputs[out]] = Entry{std::move(c), -1, {}};
  }
  void define_alias(const Node& n, const Entry& e, Shape shape, std::size_t out = 0) {
    if (e.is_const()) {
      auto c = std::make_shared<ConstTensor>(*e.c);
      c->dims = std::move(shape);
      names_[n.outputs[out]] = Entry{std::move(c), -1, {}};
    } else {
      names_[n.outputs[out]] = Entry{nullptr, e.value, std::move(shape)};
    }
  }
  // The shape of an entry (a constant's dims or a value's shape).
  static Shape shape_of(const Entry& e) { return e.is_const() ? e.c->dims : e.shape; }
  // The INT64 values of constant input i (a shape, axes, indices...): an error unless it is a constant integer
  // tensor (a FLOAT constant holding whole numbers is accepted too, as exporters sometimes emit).
  Expected<std::vector<std::int64_t>> const_ints(const Node& n, std::size_t i, const char* what) const;
  // A strided view of x as a new value (docs/design/faces.md §3: TransposeOp): out[j] = x[offset + Σ j_k·strides_k].
  // A constant x is folded; a graph value becomes a TransposeOp step. Defines output `out` of n.
  Status strided(const Node& n, const Entry& x, const Shape& dims, const std::vector<std::int64_t>& strides,
                 std::int64_t offset, std::size_t out = 0);
  // Row-major strides of a shape.
  static std::vector<std::int64_t> strides_of(const Shape& s) {
    std::vector<std::int64_t> st(s.size(), 1);
    for (std::size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
    return st;
  }
  // An axis attribute/operand normalised to [0, rank) (rank_extra: Unsqueeze's output rank grows).
  Expected<std::size_t> norm_axis(const Node& n, std::int64_t axis, std::size_t rank) const {
    const auto r = static_cast<std::int64_t>(rank);
    const std::int64_t a = axis < 0 ? axis + r : axis;
    if (a < 0 || a >= r) return err(n, "axis " + std::to_string(axis) + " for rank " + std::to_string(rank));
    return static_cast<std::size_t>(a);
  }
  // The batch dimension of the graph input (docs/design/faces.md §2): a reshape target whose dim 0 is one of these
  // (the declared batch when > 1, the batch the program is lowered for when > 1) means "the batch" and becomes 1.
  bool is_batch_dim(std::int64_t d) const {
    return !whole_ && d > 1 && (d == declared_batch_ || d == lowered_batch_);
  }
  // Per image, a rule that would compute across dim 0 (the batch) records why: the graph is then lowered whole
  // for a batch above 1 (docs/design/faces.md §2). Every per-image value has dim 0 = 1.
  void mixes(const Node& n, const std::string& why) {
    if (!whole_ && mix_.empty()) mix_ = node_where(n) + " " + why;
  }
  const std::string& mix_reason() const { return mix_; }
  bool whole() const { return whole_; }
  void mark_read(const Node& n, const std::string& name) const { read_.emplace(n.name, name); }
  /// After run(): "node '<name>' (<op>) attribute '<attr>'" for each attribute of the graph that no rule looked
  /// at (so it changed nothing), in graph order; names cut and escaped (core/text.h).
  std::vector<std::string> unread_attributes() const {
    std::vector<std::string> r;
    for (const Node& n : g_.nodes)
      for (const auto& [name, a] : n.attrs)
        if (!read_.count({n.name, name}))
          r.push_back(node_where(n) + " attribute '" + core::printable(name) + "'");
    return r;
  }
  std::int64_t opset() const { return g_.opset; }

  // --- operators (lower_ops.cpp, lower_aliases.cpp): each lowers one node whose single output lower_node has
  // checked; x is input 0 as the operator's rule asks for it (empty for rules that read their operands
  // themselves)
 public:
  Status lower_conv(const Node& n, const Entry& x);
  Status lower_unary(const Node& n, const Entry& x, UnaryKind kind);
  Status lower_clip(const Node& n, const Entry& x);
  Status lower_binary(const Node& n, const Entry& none, BinaryKind kind);
  Status lower_prelu(const Node& n, const Entry& x);
  Status lower_batchnorm(const Node& n, const Entry& x);
  Status lower_gemm(const Node& n, const Entry& a, bool matmul);
  Status lower_transpose(const Node& n, const Entry& x);
  Status lower_maxpool(const Node& n, const Entry& x);
  Status lower_resize(const Node& n, const Entry& x);
  Status lower_gap(const Node& n, const Entry& x);
  Status lower_flatten(const Node& n, const Entry& x);
  Status lower_reshape(const Node& n, const Entry& x);
  Status lower_identity(const Node& n, const Entry& x);
  Status lower_constant(const Node& n, const Entry& none);
  // shape subgraphs and data movement (lower_shape.cpp)
  Status lower_shape(const Node& n, const Entry& x);
  Status lower_gather(const Node& n, const Entry& x);
  Status lower_unsqueeze(const Node& n, const Entry& x);
  Status lower_squeeze(const Node& n, const Entry& x);
  Status lower_concat(const Node& n, const Entry& none);
  Status lower_slice(const Node& n, const Entry& x);
  Status lower_cast(const Node& n, const Entry& x);
  Status lower_constant_of_shape(const Node& n, const Entry& none);
  Status lower_range(const Node& n, const Entry& none);
  Status lower_expand(const Node& n, const Entry& x);
  Status lower_split(const Node& n, const Entry& x);
  Status lower_tile(const Node& n, const Entry& x);
  Status lower_neg(const Node& n, const Entry& x);
  Status lower_sum(const Node& n, const Entry& none);
  // A 1-D window node (Conv, pools on [N,C,L]) with its attributes widened to 2-D of height 1.
  static Node widen_1d(const Node& n);
  Status lower_compare(const Node& n, const Entry& none);
  Status lower_where(const Node& n, const Entry& none);
  // the other new operators (lower_nn.cpp)
  Status lower_softmax(const Node& n, const Entry& x);
  Status lower_avgpool(const Node& n, const Entry& x);
  // The geometry both pools share (MaxPool, AveragePool on [N,C,H,W] or 1-D [N,C,L]): the node widened to 2-D,
  // the 4-D input shape, kernel, strides, resolved pads [t,l,b,r] (each smaller than the kernel) and output size.
  struct PoolGeometry {
    Node n;
    Shape s;
    bool one_d = false;
    std::int64_t kh = 0, kw = 0, sh = 1, sw = 1, oh = 0, ow = 0;
    std::vector<std::int64_t> pads;
  };
  Expected<PoolGeometry> pool_geometry(const Node& n0, const Entry& x) const;
  // The output shape of a pool of geometry g ([N,C,OW] for 1-D).
  static Shape pool_shape(const PoolGeometry& g) {
    return g.one_d ? Shape{g.s[0], g.s[1], g.ow} : Shape{g.s[0], g.s[1], g.oh, g.ow};
  }
  Status lower_pad(const Node& n, const Entry& x);
  Status lower_reduce_mean(const Node& n, const Entry& x);
  Status lower_matmul(const Node& n, const Entry& a);
  Status lower_upsample(const Node& n, const Entry& x);
  Status lower_resize_general(const Node& n, const Entry& x, ResizeMode mode, ResizeCoord coord,
                              ResizeNearest nearest, std::int64_t oh, std::int64_t ow, float sy, float sx);
  // Pool output size (docs/design/faces.md §2): floor or ceil of (in + pads − k)/s + 1, a ceil window that would start
  // past the input and its leading pad dropped (as PyTorch and onnxruntime).
  static std::int64_t pool_out(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p0,
                               std::int64_t p1, bool ceil) {
    const std::int64_t span = in + p0 + p1 - k;
    std::int64_t o = (ceil ? (span + s - 1) / s : span / s) + 1;
    if (ceil && (o - 1) * s >= in + p0) --o;
    return o;
  }

 private:
  Status lower_node(const Node& n);
  Expected<std::vector<std::size_t>> topo_order() const;
  Status finish();

  const Graph& g_;
  const NetLimits& limits_;
  Program prog_;
  std::map<std::string, Entry> names_;
  std::map<const ConstTensor*, std::int32_t> const_ids_;
  std::int64_t declared_batch_ = 0, lowered_batch_ = 1;
  bool whole_ = false;
  std::string mix_;
  mutable std::set<std::pair<std::string, std::string>> read_;  // (node name, attribute) looked at
};

}  // namespace facetrace::faces::detail
