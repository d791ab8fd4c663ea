/// @file
/// The lowering rules of the exporter's other operators (docs/design/faces.md §2): Softmax, AveragePool, Pad,
/// ReduceMean, MatMul (and Gemm with rows beyond the batch), Upsample and the general Resize.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/lowerer.h"

namespace facetrace::faces::detail {

Status Lowerer::lower_softmax(const Node& n, const Entry& x) {
  const Shape& s = x.shape;
  const bool legacy = g_.opset > 0 && g_.opset < 13;  // coerced to 2-D at axis
  std::int64_t axis_attr = 0;
  FT_TRY(take(attr_int(n, "axis", legacy ? 1 : -1), axis_attr));
  if (s.empty()) return err(n, "scalar input");
  std::size_t axis = 0;
  FT_TRY(take(norm_axis(n, axis_attr, s.size()), axis));
  if (axis == 0) mixes(n, "normalises along dim 0");
  SoftmaxOp op{1, 1, 1};
  for (std::size_t k = 0; k < s.size(); ++k) {
    if (k < axis)
      op.outer *= s[k];
    else if (k == axis || legacy)
      op.axis *= s[k];
    else
      op.inner *= s[k];
  }
  return emit(n, op, {Arg::value(x.value)}, s);
}

Status Lowerer::lower_avgpool(const Node& n0, const Entry& x) {
  auto g = pool_geometry(n0, x);
  if (!g) return g.status();
  std::int64_t cip = 0;
  FT_TRY(take(attr_int(g->n, "count_include_pad", 0), cip));
  const Shape& s = g->s;
  const auto& p = g->pads;
  AvgPoolOp op;
  op.channels = s[0] * s[1], op.h = s[2], op.w = s[3];  // N > 1 only lowered whole
  op.kh = g->kh, op.kw = g->kw, op.sh = g->sh, op.sw = g->sw, op.oh = g->oh, op.ow = g->ow;
  op.pt = p[0], op.pl = p[1], op.pb = p[2], op.pr = p[3];
  op.count_include_pad = cip != 0;
  return emit(g->n, op, {Arg::value(x.value)}, pool_shape(*g));
}

Status Lowerer::lower_pad(const Node& n, const Entry& x) {
  const Shape& s = x.shape;
  std::string mode;
  FT_TRY(take(attr_string(n, "mode", "constant"), mode));
  if (mode != "constant") return unsupported(n, "attribute 'mode' = " + mode + " (only constant)");
  std::vector<std::int64_t> pads;
  float value = 0.0f;
  if (g_.opset > 0 && g_.opset < 11) {
    FT_TRY(take(attr_ints(n, "pads", {}), pads));
    FT_TRY(take(attr_float(n, "value", 0.0f), value));
  } else {
    FT_TRY(take(const_ints(n, 1, "pads"), pads));
    if (has_input(n, 2)) {
      auto v = const_input(n, 2, "constant_value");
      if (!v) return v.status();
      if ((*v)->count() > 1) return err(n, "constant_value must be a scalar");
      if ((*v)->count() == 1) value = (*v)->is_int ? static_cast<float>((*v)->i[0]) : (*v)->f[0];
    }
  }
  const std::size_t r = s.size();
  std::vector<std::int64_t> axes;
  if (has_input(n, 3)) {
    std::vector<std::int64_t> a;
    FT_TRY(take(const_ints(n, 3, "axes"), a));
    for (auto q : a) {
      std::size_t k = 0;
      FT_TRY(take(norm_axis(n, q, r), k));
      axes.push_back(static_cast<std::int64_t>(k));
    }
  } else {
    for (std::size_t k = 0; k < r; ++k) axes.push_back(static_cast<std::int64_t>(k));
  }
  if (pads.size() != 2 * axes.size())
    return err(n, "pads hold " + std::to_string(pads.size()) + " values for " + std::to_string(axes.size()) +
                      " axes");
  if (!std::isfinite(value)) return err(n, "non-finite constant_value");
  for (auto q : pads)
    if (q < -(std::int64_t{1} << 31) || q > (std::int64_t{1} << 31))
      return err(n, "pad " + std::to_string(q));
  std::vector<std::int64_t> begin(r, 0), end(r, 0);
  for (std::size_t k = 0; k < axes.size(); ++k) {
    begin[static_cast<std::size_t>(axes[k])] = pads[k];
    end[static_cast<std::size_t>(axes[k])] = pads[k + axes.size()];
  }
  bool any = false;
  for (std::size_t k = 0; k < r; ++k) any = any || begin[k] != 0 || end[k] != 0;
  if (r > 0 && (begin[0] != 0 || end[0] != 0)) mixes(n, "pads dim 0");
  if (!any) {
    define_alias(n, x, s);
    return {};
  }
  // negative pads crop: a strided copy first (docs/design/faces.md §2)
  Entry src = x;
  Shape cs = s;
  bool crop = false;
  std::int64_t offset = 0;
  const auto st = strides_of(s);
  for (std::size_t k = 0; k < r; ++k) {
    if (begin[k] < 0) offset += -begin[k] * st[k], cs[k] += begin[k], begin[k] = 0, crop = true;
    if (end[k] < 0) cs[k] += end[k], end[k] = 0, crop = true;
    if (cs[k] <= 0) return err(n, "pads crop axis " + std::to_string(k) + " away");
  }
  if (crop) {
    std::int32_t id = -1;
    TransposeOp t;
    t.dims = cs;
    t.strides = st;
    t.offset = offset;
    FT_TRY(emit(n, std::move(t), {Arg::value(x.value)}, cs, n.outputs.size(), &id));
    src = Entry{nullptr, id, cs};
  }
  if (r > 4) {
    for (std::size_t k = 0; k + 4 < r; ++k)
      if (begin[k] != 0 || end[k] != 0 || cs[k] != 1)
        return unsupported(n, "padding of a rank-" + std::to_string(r) + " value beyond its last 4 axes");
  }
  PadOp op;
  op.value = value;
  op.in_dims = {1, 1, 1, 1};
  Shape out = cs;
  for (std::size_t k = 0; k < r; ++k) {
    out[k] = cs[k] + begin[k] + end[k];
    if (k + 4 >= r) {
      const std::size_t j = 4 - (r - k);
      op.in_dims[j] = cs[k];
      op.begin[j] = begin[k];
      op.end[j] = end[k];
    }
  }
  bool any2 = false;
  for (int j = 0; j < 4; ++j) any2 = any2 || op.begin[j] != 0 || op.end[j] != 0;
  if (!any2) {
    define_alias(n, src, out);
    return {};
  }
  return emit(n, op, {Arg::value(src.value)}, out);
}

Status Lowerer::lower_reduce_mean(const Node& n, const Entry& x) {
  const Shape& s = x.shape;
  std::vector<std::int64_t> axes;
  std::int64_t keep = 1, noop = 0;
  FT_TRY(take(attr_int(n, "keepdims", 1), keep));
  FT_TRY(take(attr_int(n, "noop_with_empty_axes", 0), noop));
  if (has_input(n, 1))
    FT_TRY(take(const_ints(n, 1, "axes"), axes));
  else
    FT_TRY(take(attr_ints(n, "axes", {}), axes));
  if (axes.empty() && noop != 0) {
    define_alias(n, x, s);
    return {};
  }
  std::vector<bool> red(s.size(), axes.empty());
  for (auto a : axes) {
    std::size_t k = 0;
    FT_TRY(take(norm_axis(n, a, s.size()), k));
    red[k] = true;
  }
  if (!red.empty() && red[0]) mixes(n, "reduces dim 0");
  // the reduced axes (size-1 axes dropped) must be one contiguous run
  std::int64_t first = -1, last = -1;
  for (std::size_t k = 0; k < s.size(); ++k)
    if (red[k] && s[k] != 1) {
      if (first < 0) first = static_cast<std::int64_t>(k);
      last = static_cast<std::int64_t>(k);
    }
  ReduceMeanOp op{1, 1, 1};
  for (std::int64_t k = first; first >= 0 && k <= last; ++k)
    if (!red[static_cast<std::size_t>(k)] && s[static_cast<std::size_t>(k)] != 1)
      return unsupported(n, "reduced axes that are not adjacent");
  for (std::size_t k = 0; k < s.size(); ++k) {
    const auto ki = static_cast<std::int64_t>(k);
    if (first < 0 || ki < first)
      op.outer *= s[k];
    else if (ki <= last)
      op.len *= s[k];
    else
      op.inner *= s[k];
  }
  Shape out;
  for (std::size_t k = 0; k < s.size(); ++k)
    if (!red[k])
      out.push_back(s[k]);
    else if (keep != 0)
      out.push_back(1);
  if (first < 0) {  // only size-1 axes: no arithmetic
    define_alias(n, x, out);
    return {};
  }
  return emit(n, op, {Arg::value(x.value)}, out);
}

Status Lowerer::lower_matmul(const Node& n, const Entry& a_in) {
  const bool gemm = n.op == "Gemm";
  auto be = input(n, 1);
  if (!be) return be.status();
  if (be->is_const() && be->c->is_int) return err(n, "INT64 operand");
  Entry a = a_in;
  if (gemm) {  // transA: a transposing copy first
    std::int64_t ta = 0;
    FT_TRY(take(attr_int(n, "transA", 0), ta));
    if (ta != 0 && ta != 1) return err(n, "attribute 'transA' must be 0 or 1");
    if (ta == 1) {
      if (a.shape.size() != 2) return err(n, "A must be 2-D");
      mixes(n, "transposes A across dim 0");
      TransposeOp t;
      t.dims = {a.shape[1], a.shape[0]};
      t.strides = {1, a.shape[1]};
      std::int32_t id = -1;
      const Shape ts = t.dims;  // (t is moved from in the call)
      FT_TRY(emit(n, std::move(t), {Arg::value(a.value)}, ts, n.outputs.size(), &id));
      a = Entry{nullptr, id, {a_in.shape[1], a_in.shape[0]}};
    }
  }
  Shape as = a.shape, bs = shape_of(*be);
  bool trans_b = false;
  float alpha = 1.0f, beta = 1.0f;
  if (gemm) {
    std::int64_t tb = 0;
    FT_TRY(take(attr_int(n, "transB", 0), tb));
    FT_TRY(take(attr_float(n, "alpha", 1.0f), alpha));
    FT_TRY(take(attr_float(n, "beta", 1.0f), beta));
    if (tb != 0 && tb != 1) return err(n, "attribute 'transB' must be 0 or 1");
    trans_b = tb == 1;
    if (as.size() != 2 || bs.size() != 2) return err(n, "A and B must be 2-D");
  } else if (has_input(n, 2)) {
    return err(n, "MatMul takes two operands");
  }
  if (as.empty() || bs.empty()) return err(n, "scalar operand");
  // 1-D operands as numpy: A [K] → [1,K], B [K] → [K,1], the added axis dropped from the result
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  MatMulOp op;
  op.m = as[as.size() - 2];
  op.k = as.back();
  op.trans_b = trans_b;
  op.n = trans_b ? bs[bs.size() - 2] : bs.back();
  const std::int64_t bk = trans_b ? bs.back() : bs[bs.size() - 2];
  if (bk != op.k)
    return err(n, "A " + shape_str(a.shape) + " and B " + shape_str(shape_of(*be)) + " do not multiply");
  const Shape abat(as.begin(), as.end() - 2), bbat(bs.begin(), bs.end() - 2);
  const std::int64_t na = count_of(abat), nb = count_of(bbat);
  Shape batch;
  if (nb == 1) {
    batch = abat;
    op.batch = na, op.a_stride = op.m * op.k, op.b_stride = 0;
  } else if (na == 1) {
    batch = bbat;
    op.batch = nb, op.a_stride = 0, op.b_stride = op.k * op.n;
  } else {
    // equal batch dims (right-aligned, leading 1s ignored)
    Shape x = abat, y = bbat;
    while (!x.empty() && x.front() == 1) x.erase(x.begin());
    while (!y.empty() && y.front() == 1) y.erase(y.begin());
    if (x != y)
      return unsupported(n, "batch dims " + shape_str(abat) + " and " + shape_str(bbat) + " broadcast");
    batch = abat.size() >= bbat.size() ? abat : bbat;
    op.batch = na, op.a_stride = op.m * op.k, op.b_stride = op.k * op.n;
  }
  Shape out = batch;
  if (!a1) out.push_back(op.m);
  if (!b1) out.push_back(op.n);
  if (a1 || as.size() < out.size()) mixes(n, "multiplies across dim 0");
  if (!be->is_const() && (bs.size() != out.size() || out.size() < 3))
    mixes(n, "multiplies by a value across dim 0");
  if (be->is_const() && bs.size() == out.size() && out.size() >= 3 && bs[0] != 1)
    mixes(n, "broadcasts a constant along dim 0");
  const Arg barg = be->is_const() ? Arg::constant(const_id(be->c)) : Arg::value(be->value);
  if (!gemm || (!has_input(n, 2) && alpha == 1.0f)) return emit(n, op, {Arg::value(a.value), barg}, out);
  // Gemm: alpha·(A·B) + beta·C as MatMul, then Mul and Add steps with constants
  std::int32_t id = -1;
  const std::size_t hidden = n.outputs.size();  // an unnamed intermediate
  FT_TRY(emit(n, op, {Arg::value(a.value), barg}, out, hidden, &id));
  auto bin = [&](BinaryKind k, std::int32_t v, std::vector<float> c, bool last) -> Status {
    BinaryOp b;
    b.kind = k;
    b.dims = {1, 1, op.m, op.n};
    b.a_strides = {0, 0, op.n, 1};
    b.b_strides = {0, 0, c.size() == 1 ? 0 : (static_cast<std::int64_t>(c.size()) == op.n ? 0 : op.n),
                   c.size() == 1 ? 0 : 1};
    const std::int32_t cid = add_const(std::move(c));
    return emit(n, b, {Arg::value(v), Arg::constant(cid)}, out, last ? 0 : hidden, &id);
  };
  if (alpha != 1.0f) FT_TRY(bin(BinaryKind::kMul, id, {alpha}, !has_input(n, 2)));
  if (has_input(n, 2) &&
      !input(n, 2)->is_const()) {  // C a graph value: (beta·C) + the product, as Binary steps
    const std::string ab = n.name + "#ab", bc = n.name + "#betac", k = n.name + "#beta";
    names_[ab] = Entry{nullptr, id, out};
    std::string c_name = n.inputs[2];
    if (beta != 1.0f) {
      auto c = std::make_shared<ConstTensor>();
      c->f = {beta};
      names_[k] = Entry{c, -1, {}};
      Node mul{n.name, "Mul", {n.inputs[2], k}, {bc}, {}};
      FT_TRY(lower_binary(mul, Entry{}, BinaryKind::kMul));
      c_name = bc;
    }
    Node add{n.name, "Add", {ab, c_name}, {n.outputs[0]}, {}};
    return lower_binary(add, Entry{}, BinaryKind::kAdd);
  }
  if (has_input(n, 2)) {
    auto c = const_float(n, 2, "C");
    if (!c) return c.status();
    const Shape& cs = (*c)->dims;
    std::vector<float> cv = (*c)->f;
    const std::int64_t cc = (*c)->count();
    bool ok = cc == 1 || (cc == op.n && cs.back() == op.n) || (cc == op.m * op.n && cs.size() == 2);
    if (cc == op.m && cs.size() == 2 && cs[1] == 1 && op.n != 1) {  // a column [M,1]: broadcast by hand
      std::vector<float> full(static_cast<std::size_t>(op.m * op.n));
      for (std::int64_t i = 0; i < op.m; ++i)
        for (std::int64_t j = 0; j < op.n; ++j)
          full[static_cast<std::size_t>(i * op.n + j)] = cv[static_cast<std::size_t>(i)];
      cv = std::move(full);
      ok = true;
    }
    if (!ok) return err(n, "C " + shape_str(cs) + " does not broadcast to " + shape_str(out));
    for (float& v : cv) v *= beta;
    FT_TRY(bin(BinaryKind::kAdd, id, std::move(cv), true));
  }
  return {};
}

Status Lowerer::lower_neg(const Node& n, const Entry&) {
  // −x as x·(−1) (exact): a Binary step with a scalar constant
  auto k = std::make_shared<ConstTensor>();
  k->f = {-1.0f};
  const std::string kn = n.name + "#minus1";
  names_[kn] = Entry{k, -1, {}};
  Node mul{n.name, "Neg", {n.inputs[0], kn}, {n.outputs[0]}, {}};
  return lower_binary(mul, Entry{}, BinaryKind::kMul);
}

Status Lowerer::lower_sum(const Node& n, const Entry&) {
  // Sum of k operands: k − 1 Adds in operand order
  if (n.inputs.empty()) return err(n, "no operands");
  if (n.inputs.size() == 1) {
    auto x = input(n, 0);
    if (!x) return x.status();
    define_alias(n, *x, shape_of(*x));
    return {};
  }
  std::string acc = n.inputs[0];
  for (std::size_t i = 1; i < n.inputs.size(); ++i) {
    const std::string o = i + 1 == n.inputs.size() ? n.outputs[0] : n.name + "#sum" + std::to_string(i);
    Node add{n.name, "Sum", {acc, n.inputs[i]}, {o}, {}};
    FT_TRY(lower_binary(add, Entry{}, BinaryKind::kAdd));
    acc = o;
  }
  return {};
}

Status Lowerer::lower_upsample(const Node& n, const Entry& x) {
  const Shape& s = x.shape;
  if (s.size() != 4) return unsupported(n, "input rank " + std::to_string(s.size()));
  std::string mode;
  FT_TRY(take(attr_string(n, "mode", "nearest"), mode));
  std::vector<float> f;
  if (has_input(n, 1)) {
    auto sc = const_float(n, 1, "scales");
    if (!sc) return sc.status();
    f = (*sc)->f;
  } else {
    const Attr* a = attr(n, "scales");
    if (!a || a->type != Attr::Type::kFloats) return err(n, "no scales");
    f = a->floats;
  }
  if (f.size() != 4) return err(n, "scales must hold 4 values");
  if (f[0] != 1.0f || f[1] != 1.0f) return unsupported(n, "scales for N and C must be 1");
  if (mode != "nearest" && mode != "linear" && mode != "bilinear")
    return unsupported(n, "attribute 'mode' = " + mode);
  for (int i = 2; i < 4; ++i)
    if (!(f[static_cast<std::size_t>(i)] > 0.0f) || !std::isfinite(f[static_cast<std::size_t>(i)]) ||
        static_cast<double>(s[static_cast<std::size_t>(i)]) * f[static_cast<std::size_t>(i)] > 1e9)
      return err(n, "scale " + std::to_string(f[static_cast<std::size_t>(i)]));
  const auto oh = static_cast<std::int64_t>(std::floor(static_cast<double>(s[2]) * f[2]));
  const auto ow = static_cast<std::int64_t>(std::floor(static_cast<double>(s[3]) * f[3]));
  if (oh <= 0 || ow <= 0) return err(n, "empty output");
  const bool whole = f[2] >= 1.0f && f[2] <= 16.0f && f[2] == std::floor(f[2]) && f[3] >= 1.0f &&
                     f[3] <= 16.0f && f[3] == std::floor(f[3]);
  if (mode == "nearest" && whole) {
    ResizeOp op{s[0] * s[1], s[2], s[3], static_cast<std::int64_t>(f[2]), static_cast<std::int64_t>(f[3])};
    op.oh = oh, op.ow = ow, op.scale_y = f[2], op.scale_x = f[3];
    return emit(n, op, {Arg::value(x.value)}, {s[0], s[1], oh, ow});
  }
  return lower_resize_general(n, x, mode == "nearest" ? ResizeMode::kNearest : ResizeMode::kLinear,
                              ResizeCoord::kAsymmetric, ResizeNearest::kFloor, oh, ow, f[2], f[3]);
}

Status Lowerer::lower_resize_general(const Node& n, const Entry& x, ResizeMode mode, ResizeCoord coord,
                                     ResizeNearest nearest, std::int64_t oh, std::int64_t ow, float sy,
                                     float sx) {
  const Shape& s = x.shape;
  ResizeOp op;
  op.channels = s[0] * s[1], op.h = s[2], op.w = s[3];  // N > 1 only when lowered whole
  op.sy = 0, op.sx = 0;                                 // not the integer nearest up-scale
  op.oh = oh, op.ow = ow;
  op.mode = mode;
  op.coord = coord;
  op.nearest = nearest;
  op.scale_y = sy, op.scale_x = sx;
  return emit(n, op, {Arg::value(x.value)}, {s[0], s[1], oh, ow});
}

}  // namespace facetrace::faces::detail
