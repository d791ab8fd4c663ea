/// @file
/// The lowering rules of shape subgraphs and data movement (docs/design/faces.md §2): Shape, Gather, Unsqueeze,
/// Squeeze, Concat, Slice, Cast, ConstantOfShape, Range, Expand, Split, Equal/Less/Greater and Where. On constants
/// (and shapes, which are known once the input shape is) they fold when the program is lowered; on graph values
/// Unsqueeze/Squeeze are aliases and Gather/Slice/Expand/Split become strided copies (TransposeOp), Concat a
/// ConcatOp.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/lowerer.h"

namespace facetrace::faces::detail {
namespace {

ConstPtr int_const(Shape dims, std::vector<std::int64_t> v) {
  auto c = std::make_shared<ConstTensor>();
  c->dims = std::move(dims);
  c->is_int = true;
  c->i = std::move(v);
  return c;
}

// ONNX Slice's clamping of one axis (docs/design/faces.md §2): returns the first index and the count.
void slice_axis(std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step,
                std::int64_t* first, std::int64_t* count) {
  if (dim <= 0) {
    *first = 0, *count = 0;
    return;
  }
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::clamp<std::int64_t>(start, 0, dim);
    end = std::clamp<std::int64_t>(end, 0, dim);
    *count = end > start ? (end - start + step - 1) / step : 0;
  } else {
    start = std::clamp<std::int64_t>(start, 0, dim - 1);
    end = std::clamp<std::int64_t>(end, -1, dim - 1);
    *count = start > end ? (start - end + (-step) - 1) / (-step) : 0;
  }
  *first = start;
}

// Saturates INT64_MAX-style "to the end" values before arithmetic.
std::int64_t sat(std::int64_t v) {
  constexpr std::int64_t kBig = std::int64_t{1} << 40;
  return std::clamp(v, -kBig, kBig);
}

}  // namespace

Expected<std::vector<std::int64_t>> Lowerer::const_ints(const Node& n, std::size_t i,
                                                        const char* what) const {
  auto c = const_input(n, i, what);
  if (!c) return c.status();
  if ((*c)->is_int) return (*c)->i;
  std::vector<std::int64_t> v;
  for (float f : (*c)->f) {
    if (f != std::floor(f) || std::abs(f) > 1e15f) return err(n, std::string(what) + " must be INT64");
    v.push_back(static_cast<std::int64_t>(f));
  }
  return v;
}

Status Lowerer::strided(const Node& n, const Entry& x, const Shape& dims,
                        const std::vector<std::int64_t>& strides, std::int64_t offset, std::size_t out) {
  if (!x.is_const()) {
    TransposeOp op;
    op.dims = dims;
    op.strides = strides;
    op.offset = offset;
    // a copy of the whole value in order is an alias
    bool same = offset == 0 && count_of(dims) == count_of(x.shape);
    const auto natural = strides_of(dims);
    for (std::size_t k = 0; same && k < dims.size(); ++k) same = dims[k] == 1 || strides[k] == natural[k];
    if (same) {
      define_alias(n, x, dims, out);
      return {};
    }
    return emit(n, std::move(op), {Arg::value(x.value)}, dims, out);
  }
  FT_TRY(check_shape(n, dims.empty() ? Shape{1} : dims));
  auto c = std::make_shared<ConstTensor>();
  c->dims = dims;
  c->is_int = x.c->is_int;
  const std::int64_t total = count_of(dims);
  std::vector<std::int64_t> idx(dims.size(), 0);
  for (std::int64_t j = 0; j < total; ++j) {
    std::int64_t at = offset;
    for (std::size_t k = 0; k < dims.size(); ++k) at += idx[k] * strides[k];
    if (at < 0 || at >= x.c->count())
      return internal_error("node '" + core::printable(n.name) + "': strided read out of range");
    if (c->is_int)
      c->i.push_back(x.c->i[static_cast<std::size_t>(at)]);
    else
      c->f.push_back(x.c->f[static_cast<std::size_t>(at)]);
    for (std::size_t k = dims.size(); k-- > 0;) {
      if (++idx[k] < dims[k]) break;
      idx[k] = 0;
    }
  }
  define_const(n, std::move(c), out);
  return {};
}

Status Lowerer::lower_shape(const Node& n, const Entry& x) {
  const Shape s = shape_of(x);
  const auto r = static_cast<std::int64_t>(s.size());
  std::int64_t start = 0, end = r;
  FT_TRY(take(attr_int(n, "start", 0), start));
  FT_TRY(take(attr_int(n, "end", r), end));
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<std::int64_t>(start, 0, r);
  end = std::clamp<std::int64_t>(end, start, r);
  std::vector<std::int64_t> v(s.begin() + start, s.begin() + end);
  const auto len = static_cast<std::int64_t>(v.size());
  define_const(n, int_const({len}, std::move(v)));
  return {};
}

Status Lowerer::lower_gather(const Node& n, const Entry& x) {
  std::vector<std::int64_t> idx;
  FT_TRY(take(const_ints(n, 1, "indices"), idx));
  auto ie = input(n, 1);
  if (!ie) return ie.status();
  const Shape ishape = ie->c->dims;
  const Shape s = shape_of(x);
  std::int64_t axis_attr = 0;
  FT_TRY(take(attr_int(n, "axis", 0), axis_attr));
  std::size_t axis = 0;
  FT_TRY(take(norm_axis(n, axis_attr, s.size()), axis));
  const std::int64_t dim = s[axis];
  for (auto& i : idx) {
    if (i < -dim || i >= dim)
      return err(n, "index " + std::to_string(i) + " out of range for dim " + std::to_string(dim));
    if (i < 0) i += dim;
  }
  const auto st = strides_of(s);
  // out shape: s[:axis] + indices' shape + s[axis+1:]
  Shape out(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(axis));
  out.insert(out.end(), ishape.begin(), ishape.end());
  out.insert(out.end(), s.begin() + static_cast<std::ptrdiff_t>(axis) + 1, s.end());
  std::vector<std::int64_t> strides(st.begin(), st.begin() + static_cast<std::ptrdiff_t>(axis));
  std::int64_t offset = 0;
  if (idx.empty()) return unsupported(n, "empty indices");
  if (x.is_const() && idx.size() > 1) {  // any indices: fold index by index
    auto c = std::make_shared<ConstTensor>();
    c->dims = out;
    c->is_int = x.c->is_int;
    std::int64_t outer = 1, inner = 1;
    for (std::size_t k = 0; k < axis; ++k) outer *= s[k];
    for (std::size_t k = axis + 1; k < s.size(); ++k) inner *= s[k];
    for (std::int64_t o = 0; o < outer; ++o)
      for (auto i : idx)
        for (std::int64_t q = 0; q < inner; ++q) {
          const auto at = static_cast<std::size_t>((o * dim + i) * inner + q);
          if (c->is_int)
            c->i.push_back(x.c->i[at]);
          else
            c->f.push_back(x.c->f[at]);
        }
    define_const(n, std::move(c));
    return {};
  }
  if (axis == 0 && !x.is_const()) mixes(n, "gathers along dim 0");
  // a value: evenly stepping indices are one strided copy (one index drops the axis); any others are one copy
  // per index concatenated along the axis
  const std::int64_t step = idx.size() > 1 ? idx[1] - idx[0] : 0;
  bool even = ishape.size() <= 1;
  for (std::size_t k = 1; even && k < idx.size(); ++k) even = idx[k] - idx[k - 1] == step;
  if (!even) {
    if (idx.size() > 64) return unsupported(n, "more than 64 uneven indices on a graph value");
    ConcatOp cat;
    cat.outer = 1, cat.inner = 1;
    for (std::size_t k = 0; k < axis; ++k) cat.outer *= s[k];
    for (std::size_t k = axis + 1; k < s.size(); ++k) cat.inner *= s[k];
    std::vector<Arg> args;
    Shape one = s;
    one[axis] = 1;
    for (auto i : idx) {
      std::int32_t id = -1;
      TransposeOp t;
      t.dims = one;
      t.strides = st;
      t.offset = i * st[axis];
      FT_TRY(emit(n, std::move(t), {Arg::value(x.value)}, one, n.outputs.size(), &id));
      args.push_back(Arg::value(id));
      cat.parts.push_back(1);
    }
    Shape cs = s;
    cs[axis] = static_cast<std::int64_t>(idx.size());
    std::int32_t id = -1;
    FT_TRY(emit(n, std::move(cat), std::move(args), cs, n.outputs.size(), &id));
    define_alias(n, Entry{nullptr, id, cs}, out);
    return {};
  }
  offset = idx[0] * st[axis];
  if (!ishape.empty()) strides.push_back(step * st[axis]);
  strides.insert(strides.end(), st.begin() + static_cast<std::ptrdiff_t>(axis) + 1, st.end());
  return strided(n, x, out, strides, offset);
}

Status Lowerer::lower_unsqueeze(const Node& n, const Entry& x) {
  std::vector<std::int64_t> axes;
  if (g_.opset >= 13 || has_input(n, 1))
    FT_TRY(take(const_ints(n, 1, "axes"), axes));
  else
    FT_TRY(take(attr_ints(n, "axes", {}), axes));
  const Shape s = shape_of(x);
  const std::size_t r = s.size() + axes.size();
  std::vector<bool> is_new(r, false);
  for (auto a : axes) {
    std::size_t k = 0;
    FT_TRY(take(norm_axis(n, a, r), k));
    if (is_new[k]) return err(n, "axis " + std::to_string(a) + " given twice");
    is_new[k] = true;
  }
  Shape out;
  std::size_t j = 0;
  for (std::size_t k = 0; k < r; ++k) out.push_back(is_new[k] ? 1 : s[j++]);
  if (!x.is_const() && !is_new.empty() && is_new[0]) mixes(n, "inserts an axis before dim 0");
  define_alias(n, x, out);
  return {};
}

Status Lowerer::lower_squeeze(const Node& n, const Entry& x) {
  std::vector<std::int64_t> axes;
  if (has_input(n, 1))
    FT_TRY(take(const_ints(n, 1, "axes"), axes));
  else
    FT_TRY(take(attr_ints(n, "axes", {}), axes));
  const Shape s = shape_of(x);
  std::vector<bool> drop(s.size(), axes.empty());
  if (axes.empty())
    for (std::size_t k = 0; k < s.size(); ++k) drop[k] = s[k] == 1;
  for (auto a : axes) {
    std::size_t k = 0;
    FT_TRY(take(norm_axis(n, a, s.size()), k));
    if (s[k] != 1)
      return err(n, "axis " + std::to_string(a) + " has size " + std::to_string(s[k]) + ", not 1");
    drop[k] = true;
  }
  Shape out;
  for (std::size_t k = 0; k < s.size(); ++k)
    if (!drop[k]) out.push_back(s[k]);
  if (!x.is_const() && !drop.empty() && drop[0]) mixes(n, "removes dim 0");
  define_alias(n, x, out);
  return {};
}

Status Lowerer::lower_concat(const Node& n, const Entry&) {
  if (n.inputs.empty()) return err(n, "no operands");
  std::vector<Entry> ins;
  bool all_const = true;
  for (std::size_t i = 0; i < n.inputs.size(); ++i) {
    auto e = input(n, i);
    if (!e) return e.status();
    all_const = all_const && e->is_const();
    ins.push_back(*e);
  }
  std::int64_t axis_attr = 0;
  if (!attr(n, "axis")) return err(n, "attribute 'axis' is required");
  FT_TRY(take(attr_int(n, "axis", 0), axis_attr));
  Shape s0 = shape_of(ins[0]);
  if (s0.empty()) return err(n, "scalar operand");
  std::size_t axis = 0;
  FT_TRY(take(norm_axis(n, axis_attr, s0.size()), axis));
  ConcatOp op;
  Shape out = s0;
  out[axis] = 0;
  for (std::size_t i = 0; i < ins.size(); ++i) {
    const Shape s = shape_of(ins[i]);
    bool ok = s.size() == s0.size();
    for (std::size_t k = 0; ok && k < s.size(); ++k) ok = k == axis || s[k] == s0[k];
    if (!ok)
      return err(n, "operand shapes " + shape_str(s0) + " and " + shape_str(s) + " do not concatenate");
    op.parts.push_back(s[axis]);
    out[axis] += s[axis];
  }
  op.outer = 1, op.inner = 1;
  for (std::size_t k = 0; k < axis; ++k) op.outer *= s0[k];
  for (std::size_t k = axis + 1; k < s0.size(); ++k) op.inner *= s0[k];
  if (all_const) {
    const bool is_int = ins[0].c->is_int;
    auto c = std::make_shared<ConstTensor>();
    c->dims = out;
    c->is_int = is_int;
    for (const auto& e : ins)
      if (e.c->is_int != is_int) return err(n, "mixed INT64 and FLOAT operands");
    for (std::int64_t o = 0; o < op.outer; ++o)
      for (std::size_t i = 0; i < ins.size(); ++i) {
        const std::int64_t len = op.parts[i] * op.inner;
        const auto b = static_cast<std::ptrdiff_t>(o * len), e = b + static_cast<std::ptrdiff_t>(len);
        if (is_int)
          c->i.insert(c->i.end(), ins[i].c->i.begin() + b, ins[i].c->i.begin() + e);
        else
          c->f.insert(c->f.end(), ins[i].c->f.begin() + b, ins[i].c->f.begin() + e);
      }
    define_const(n, std::move(c));
    return {};
  }
  if (axis == 0) mixes(n, "concatenates along dim 0");
  std::vector<Arg> args;
  std::vector<std::int64_t> parts;
  for (std::size_t i = 0; i < ins.size(); ++i) {
    if (op.parts[i] == 0) continue;  // an empty operand adds nothing
    if (ins[i].is_const()) {
      if (ins[i].c->is_int) return err(n, "INT64 operand with graph values");
      args.push_back(Arg::constant(const_id(ins[i].c)));
    } else {
      args.push_back(Arg::value(ins[i].value));
    }
    parts.push_back(op.parts[i]);
  }
  op.parts = std::move(parts);
  if (args.size() == 1 && args[0].kind == Arg::Kind::kValue) {  // one operand: an alias
    for (const auto& e : ins)
      if (!e.is_const() && e.value == args[0].id) define_alias(n, e, out);
    return {};
  }
  return emit(n, std::move(op), std::move(args), out);
}

Status Lowerer::lower_slice(const Node& n, const Entry& x) {
  std::vector<std::int64_t> starts, ends, axes, steps;
  if (g_.opset > 0 && g_.opset < 10) {
    FT_TRY(take(attr_ints(n, "starts", {}), starts));
    FT_TRY(take(attr_ints(n, "ends", {}), ends));
    FT_TRY(take(attr_ints(n, "axes", {}), axes));
  } else {
    FT_TRY(take(const_ints(n, 1, "starts"), starts));
    FT_TRY(take(const_ints(n, 2, "ends"), ends));
    if (has_input(n, 3)) FT_TRY(take(const_ints(n, 3, "axes"), axes));
    if (has_input(n, 4)) FT_TRY(take(const_ints(n, 4, "steps"), steps));
  }
  const Shape s = shape_of(x);
  if (starts.size() != ends.size()) return err(n, "starts and ends differ in length");
  if (axes.empty())
    for (std::size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<std::int64_t>(k));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size())
    return err(n, "starts, ends, axes and steps differ in length");
  const auto st = strides_of(s);
  Shape out = s;
  std::vector<std::int64_t> strides = st;
  std::int64_t offset = 0;
  std::vector<bool> seen(s.size(), false);
  for (std::size_t k = 0; k < starts.size(); ++k) {
    std::size_t a = 0;
    FT_TRY(take(norm_axis(n, axes[k], s.size()), a));
    if (seen[a]) return err(n, "axis " + std::to_string(axes[k]) + " given twice");
    seen[a] = true;
    if (steps[k] == 0) return err(n, "step 0");
    std::int64_t first = 0, cnt = 0;
    slice_axis(s[a], sat(starts[k]), sat(ends[k]), sat(steps[k]), &first, &cnt);
    if (cnt <= 0) return unsupported(n, "empty slice on axis " + std::to_string(a));
    if (a == 0 && !x.is_const() && !(first == 0 && steps[k] == 1 && ends[k] >= (std::int64_t{1} << 31)))
      mixes(n, "slices dim 0");
    out[a] = cnt;
    offset += first * st[a];
    strides[a] = steps[k] * st[a];
  }
  return strided(n, x, out, strides, offset);
}

Status Lowerer::lower_cast(const Node& n, const Entry& x) {
  std::int64_t to = 0;
  FT_TRY(take(attr_int(n, "to", 0), to));
  constexpr std::int64_t kFloat = 1, kInt32 = 6, kInt64 = 7, kBool = 9, kDouble = 11, kFloat16 = 10;
  const bool to_float = to == kFloat || to == kDouble || to == kFloat16;
  const bool to_int = to == kInt64 || to == kInt32 || to == kBool;
  if (!to_float && !to_int) return unsupported(n, "cast to data type " + std::to_string(to));
  if (!x.is_const()) {
    if (!to_float) return unsupported(n, "cast of a graph value to an integer type");
    define_alias(n, x, x.shape);  // values are float already
    return {};
  }
  auto c = std::make_shared<ConstTensor>();
  c->dims = x.c->dims;
  if (to_float) {
    if (x.c->is_int)
      for (auto v : x.c->i) c->f.push_back(static_cast<float>(v));
    else
      c->f = x.c->f;
  } else {
    c->is_int = true;
    if (x.c->is_int) {
      c->i = x.c->i;
    } else {
      for (float v : x.c->f) {
        if (!std::isfinite(v) || std::abs(v) > 9e18f) return err(n, "cast of an out-of-range value");
        c->i.push_back(static_cast<std::int64_t>(v));  // truncation toward zero
      }
    }
    if (to == kBool)
      for (auto& v : c->i) v = v != 0;
  }
  define_const(n, std::move(c));
  return {};
}

Status Lowerer::lower_constant_of_shape(const Node& n, const Entry&) {
  std::vector<std::int64_t> dims;
  FT_TRY(take(const_ints(n, 0, "shape"), dims));
  if (dims.empty()) dims = {};
  std::int64_t total = 1;
  for (auto d : dims) {
    if (d < 0 || (d > 0 && total > limits_.max_tensor_elements / d))
      return err(n, "shape " + shape_str(dims));
    total *= d;
  }
  auto c = std::make_shared<ConstTensor>();
  c->dims = dims;
  const Attr* v = attr(n, "value");
  if (v && (v->type != Attr::Type::kTensor || v->t->count() != 1))
    return err(n, "attribute 'value' must be a one-element tensor");
  if (v && v->t->is_int) {
    c->is_int = true;
    c->i.assign(static_cast<std::size_t>(total), v->t->i[0]);
  } else {
    c->f.assign(static_cast<std::size_t>(total), v ? v->t->f[0] : 0.0f);
  }
  define_const(n, std::move(c));
  return {};
}

Status Lowerer::lower_range(const Node& n, const Entry&) {
  ConstPtr p[3];
  for (std::size_t i = 0; i < 3; ++i) {
    auto c = const_input(n, i, i == 0 ? "start" : i == 1 ? "limit" : "delta");
    if (!c) return c.status();
    if ((*c)->count() != 1) return err(n, "operands must be scalars");
    p[i] = *c;
  }
  auto c = std::make_shared<ConstTensor>();
  if (p[0]->is_int) {
    const std::int64_t a = sat(p[0]->i[0]), b = sat(p[1]->is_int ? p[1]->i[0] : 0),
                       d = sat(p[2]->is_int ? p[2]->i[0] : 0);
    if (!p[1]->is_int || !p[2]->is_int) return err(n, "mixed operand types");
    if (d == 0) return err(n, "delta 0");
    const std::int64_t cnt = std::max<std::int64_t>(0, (b - a + d + (d > 0 ? -1 : 1)) / d);
    if (cnt > limits_.max_tensor_elements) return err(n, "too many elements");
    c->is_int = true;
    for (std::int64_t k = 0; k < cnt; ++k) c->i.push_back(a + k * d);
  } else {
    if (p[1]->is_int || p[2]->is_int) return err(n, "mixed operand types");
    const double a = p[0]->f[0], b = p[1]->f[0], d = p[2]->f[0];
    if (d == 0.0) return err(n, "delta 0");
    const double cnt = std::max(0.0, std::ceil((b - a) / d));
    if (cnt > static_cast<double>(limits_.max_tensor_elements)) return err(n, "too many elements");
    for (std::int64_t k = 0; k < static_cast<std::int64_t>(cnt); ++k)
      c->f.push_back(static_cast<float>(a + static_cast<double>(k) * d));
  }
  c->dims = {c->count()};
  define_const(n, std::move(c));
  return {};
}

Status Lowerer::lower_expand(const Node& n, const Entry& x) {
  std::vector<std::int64_t> target;
  FT_TRY(take(const_ints(n, 1, "shape"), target));
  const Shape s = shape_of(x);
  const std::size_t r = std::max(s.size(), target.size());
  Shape out(r), in(r, 1), tg(r, 1);
  for (std::size_t k = 0; k < s.size(); ++k) in[r - s.size() + k] = s[k];
  for (std::size_t k = 0; k < target.size(); ++k) tg[r - target.size() + k] = target[k];
  const auto st = strides_of(in);
  std::vector<std::int64_t> strides(r);
  for (std::size_t k = 0; k < r; ++k) {
    if (in[k] != tg[k] && in[k] != 1 && tg[k] != 1)
      return err(n, "shape " + shape_str(s) + " does not expand to " + shape_str(target));
    out[k] = std::max(in[k], tg[k]);
    strides[k] = in[k] == 1 ? 0 : st[k];
  }
  if (!x.is_const() && (s.size() != r || (r > 0 && out[0] != 1))) mixes(n, "expands along dim 0");
  return strided(n, x, out, strides, 0);
}

Status Lowerer::lower_tile(const Node& n, const Entry& x) {
  std::vector<std::int64_t> reps;
  FT_TRY(take(const_ints(n, 1, "repeats"), reps));
  const Shape s = shape_of(x);
  if (reps.size() != s.size())
    return err(
        n, "repeats hold " + std::to_string(reps.size()) + " values for rank " + std::to_string(s.size()));
  // [r0, d0, r1, d1, ...] with stride 0 on the repeat axes, then seen as [r0·d0, r1·d1, ...]
  const auto st = strides_of(s);
  Shape dims, out;
  std::vector<std::int64_t> strides;
  for (std::size_t k = 0; k < s.size(); ++k) {
    if (reps[k] < 1) return unsupported(n, "repeat " + std::to_string(reps[k]));
    if (s[k] > 0 && reps[k] > limits_.max_tensor_elements / s[k])  // before reps·dim can overflow
      return err(n, "repeat " + std::to_string(reps[k]) + " of dim " + std::to_string(k) + " (" +
                        std::to_string(s[k]) + ") is too large");
    dims.push_back(reps[k]);
    strides.push_back(0);
    dims.push_back(s[k]);
    strides.push_back(st[k]);
    out.push_back(reps[k] * s[k]);
  }
  if (!x.is_const() && !reps.empty() && reps[0] != 1) mixes(n, "repeats dim 0");
  if (x.is_const()) {
    FT_TRY(strided(n, x, dims, strides, 0));
    auto it = names_.find(n.outputs[0]);
    define_alias(n, it->second, out);
    return {};
  }
  std::int32_t id = -1;
  TransposeOp t;
  t.dims = dims;
  t.strides = strides;
  FT_TRY(emit(n, std::move(t), {Arg::value(x.value)}, dims, n.outputs.size(), &id));
  define_alias(n, Entry{nullptr, id, dims}, out);
  return {};
}

Status Lowerer::lower_split(const Node& n, const Entry& x) {
  const Shape s = shape_of(x);
  std::int64_t axis_attr = 0;
  FT_TRY(take(attr_int(n, "axis", 0), axis_attr));
  std::size_t axis = 0;
  FT_TRY(take(norm_axis(n, axis_attr, s.size()), axis));
  std::vector<std::int64_t> parts;
  if (has_input(n, 1))
    FT_TRY(take(const_ints(n, 1, "split"), parts));
  else
    FT_TRY(take(attr_ints(n, "split", {}), parts));
  const auto outs = static_cast<std::int64_t>(n.outputs.size());
  const std::int64_t dim = s[axis];
  if (parts.empty()) {
    std::int64_t num = outs;
    FT_TRY(take(attr_int(n, "num_outputs", outs), num));
    if (num != outs || num <= 0) return err(n, "attribute 'num_outputs' disagrees with the outputs");
    const std::int64_t each = (dim + num - 1) / num;  // opset 18: the last part may be smaller
    for (std::int64_t k = 0, left = dim; k < num; ++k, left -= each) parts.push_back(std::min(each, left));
  }
  if (static_cast<std::int64_t>(parts.size()) != outs) return err(n, "split sizes disagree with the outputs");
  std::int64_t sum = 0;
  for (auto p : parts) {
    if (p <= 0) return unsupported(n, "split size " + std::to_string(p));
    sum += p;
  }
  if (sum != dim)
    return err(n, "split sizes sum to " + std::to_string(sum) + ", the axis has " + std::to_string(dim));
  if (axis == 0 && !x.is_const()) mixes(n, "splits dim 0");
  const auto st = strides_of(s);
  std::int64_t at = 0;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    Shape out = s;
    out[axis] = parts[k];
    if (!n.outputs[k].empty()) FT_TRY(strided(n, x, out, st, at * st[axis], k));
    at += parts[k];
  }
  return {};
}

Status Lowerer::lower_compare(const Node& n, const Entry&) {
  ConstPtr a, b;
  FT_TRY(take(const_input(n, 0, "A"), a));
  FT_TRY(take(const_input(n, 1, "B"), b));
  if (a->count() != b->count() && a->count() != 1 && b->count() != 1)
    return unsupported(n, "broadcasting beyond a scalar");
  const std::int64_t cnt = std::max(a->count(), b->count());
  auto val = [](const ConstPtr& c, std::int64_t i) {
    const auto k = static_cast<std::size_t>(c->count() == 1 ? 0 : i);
    return c->is_int ? static_cast<double>(c->i[k]) : static_cast<double>(c->f[k]);
  };
  std::vector<std::int64_t> v;
  for (std::int64_t i = 0; i < cnt; ++i) {
    const double x = val(a, i), y = val(b, i);
    v.push_back(n.op == "Equal" ? x == y : n.op == "Less" ? x < y : x > y);
  }
  define_const(n, int_const(a->count() >= b->count() ? a->dims : b->dims, std::move(v)));
  return {};
}

Status Lowerer::lower_where(const Node& n, const Entry&) {
  ConstPtr c, x, y;
  FT_TRY(take(const_input(n, 0, "condition"), c));
  FT_TRY(take(const_input(n, 1, "X"), x));
  FT_TRY(take(const_input(n, 2, "Y"), y));
  if (x->is_int != y->is_int) return err(n, "X and Y differ in type");
  const std::int64_t cnt = std::max({c->count(), x->count(), y->count()});
  for (const auto* p : {&c, &x, &y})
    if ((*p)->count() != cnt && (*p)->count() != 1) return unsupported(n, "broadcasting beyond a scalar");
  auto r = std::make_shared<ConstTensor>();
  r->dims = c->count() == cnt ? c->dims : x->count() == cnt ? x->dims : y->dims;
  r->is_int = x->is_int;
  auto at = [&](const ConstPtr& p, std::int64_t i) {
    return static_cast<std::size_t>(p->count() == 1 ? 0 : i);
  };
  for (std::int64_t i = 0; i < cnt; ++i) {
    const bool pick = c->is_int ? c->i[at(c, i)] != 0 : c->f[at(c, i)] != 0.0f;
    const ConstPtr& s = pick ? x : y;
    if (r->is_int)
      r->i.push_back(s->i[at(s, i)]);
    else
      r->f.push_back(s->f[at(s, i)]);
  }
  define_const(n, std::move(r));
  return {};
}

}  // namespace facetrace::faces::detail
