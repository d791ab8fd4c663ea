/// @file
/// Private: the lowering of a parsed ONNX graph (docs/design/faces.md §2, §3): the Lowerer class, shared by lower.cpp (order,
/// dispatch, free lists, the live-memory bound) and the operator rules in lower_ops.cpp and lower_aliases.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

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
  Lowerer(const Graph& g, const NetLimits& limits) : g_(g), limits_(limits) {}

  /// The program for `input_shape` (batch 1); errors name the node.
  Expected<Program> run(const Shape& input_shape);

  // --- helpers for the operator rules
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
  // The window attributes Conv and MaxPool share (docs/design/faces.md §2), with their types checked; both accept only
  // [1,1] dilations and two positive strides, which are checked here.
  struct Window {
    std::vector<std::int64_t> kernel, strides, pads;
    std::string auto_pad;
  };
  Expected<Window> window(const Node& n, std::vector<std::int64_t> kernel_default) const;
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
      return unsupported(n, "input '" + n.inputs[i] + "' is constant; only graph values are supported here");
    return e;
  }
  Status check_outputs(const Node& n, std::size_t max_out) const {
    if (n.outputs.empty() || n.outputs[0].empty()) return err(n, "no output");
    for (std::size_t i = max_out; i < n.outputs.size(); ++i)
      if (!n.outputs[i].empty())
        return unsupported(n, "output " + std::to_string(i) + " ('" + n.outputs[i] + "')");
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
  Status emit(const Node& n, Op op, std::vector<Arg> args, const Shape& out_shape) {
    FT_TRY(check_shape(n, out_shape));
    const auto v = static_cast<std::int32_t>(prog_.lens.size());
    prog_.lens.push_back(count_of(out_shape));
    prog_.shapes.push_back(out_shape);
    prog_.steps.push_back(Step{std::move(op), std::move(args), v, n.name, Fusion{}});
    names_[n.outputs[0]] = Entry{nullptr, v, out_shape};
    return {};
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

 private:
  Status lower_node(const Node& n);
  Expected<std::vector<std::size_t>> topo_order() const;
  Status finish();

  const Graph& g_;
  const NetLimits& limits_;
  Program prog_;
  std::map<std::string, Entry> names_;
  std::map<const ConstTensor*, std::int32_t> const_ids_;
};

}  // namespace facetrace::faces::detail
