/// @file
/// The lowering rules of the operators that only name a value again (docs/design/faces.md §2): Flatten, Reshape, Identity,
/// Dropout (inference) and Constant. None of them emits a step.
#include "ir/lowerer.h"

namespace facetrace::faces::detail {

Status Lowerer::lower_flatten(const Node& n, const Entry& x) {
  const Shape s = x.is_const() ? x.c->dims : x.shape;
  auto axis = attr_int(n, "axis", 1);
  if (!axis) return axis.status();
  const auto r = static_cast<std::int64_t>(s.size());
  std::int64_t ax = *axis < 0 ? *axis + r : *axis;
  if (ax < 0 || ax > r)
    return err(n, "attribute 'axis' = " + std::to_string(*axis) + " for rank " + std::to_string(r));
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t i = 0; i < r; ++i) (i < ax ? outer : inner) *= s[static_cast<std::size_t>(i)];
  if (!x.is_const() && ax == 0) mixes(n, "flattens dim 0 into the rest");
  define_alias(n, x, {outer, inner});
  return {};
}

Status Lowerer::lower_reshape(const Node& n, const Entry& x) {
  auto sh = const_input(n, 1, "shape");
  if (!sh) return sh.status();
  if (!(*sh)->is_int) return err(n, "shape must be INT64");
  auto az = attr_int(n, "allowzero", 0);
  if (!az) return az.status();
  const Shape in = x.is_const() ? x.c->dims : x.shape;
  const std::int64_t total = x.is_const() ? x.c->count() : count_of(in);
  if (static_cast<std::int64_t>((*sh)->i.size()) > limits_.max_rank)
    return err(n, "target rank above " + std::to_string(limits_.max_rank));
  Shape out;
  int minus = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < (*sh)->i.size(); ++i) {
    std::int64_t d = (*sh)->i[i];
    if (i == 0 && !x.is_const() && is_batch_dim(d)) d = 1;  // the batch (docs/design/faces.md §2)
    if (d == 0) {
      if (*az != 0) return unsupported(n, "allowzero = 1 with a 0 in the shape");
      if (i >= in.size())
        return err(n, "shape copies dim " + std::to_string(i) + " of a rank " + std::to_string(in.size()) +
                          " input");
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
    if (known == 0 || total % known != 0)
      return err(n, "cannot infer -1 for " + std::to_string(total) + " elements");
    out[static_cast<std::size_t>(minus)] = total / known;
  } else if (known != total) {
    return err(n, "shape " + shape_str(out) + " holds " + std::to_string(known) + " elements, the input " +
                      std::to_string(total));
  }
  if (!x.is_const() && (out.empty() || out[0] != 1)) mixes(n, "reshapes dim 0 away");
  define_alias(n, x, out);
  return {};
}

Status Lowerer::lower_identity(const Node& n, const Entry& x) {
  if (n.op == "Dropout")  // drop rate and seed act in training only; at inference Dropout is the identity
    for (const char* a : {"ratio", "seed", "is_test"}) mark_read(n, a);
  if (n.op == "Dropout" && has_input(n, 2)) {
    auto tm = const_input(n, 2, "training_mode");
    if (!tm) return tm.status();
    if ((*tm)->count() != 1 || ((*tm)->is_int ? (*tm)->i[0] != 0 : (*tm)->f[0] != 0.0f))
      return unsupported(n, "training_mode must be 0");
  }
  define_alias(n, x, x.is_const() ? x.c->dims : x.shape);
  return {};
}

Status Lowerer::lower_constant(const Node& n, const Entry&) {
  if (n.attrs.size() != 1) return err(n, "needs exactly one value attribute");
  const auto& [name, a] = *n.attrs.begin();
  mark_read(n, name);  // its one attribute is the value, or refused below
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
    return unsupported(
        n, "attribute '" + core::printable(name) + "' (only value, value_float(s), value_int(s))");
  }
  define_const(n, std::move(c));
  return {};
}

}  // namespace facetrace::faces::detail
