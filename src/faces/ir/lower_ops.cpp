/// @file
/// The lowering rules of the operators that become steps (docs/design/faces.md §2): conv, the element-wise and per-channel
/// ops, GEMM/MatMul, transpose, pooling, resize and global average. Constant operands fold here.
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <utility>

#include "ir/lowerer.h"

namespace facetrace::faces::detail {
namespace {

float apply_unary(const UnaryOp& u, float x) {
  switch (u.kind) {
    case UnaryKind::kRelu: return x > 0.0f ? x : 0.0f;
    case UnaryKind::kSigmoid: return 1.0f / (1.0f + std::exp(-x));
    case UnaryKind::kClip: return std::min(std::max(x, u.lo), u.hi);
    case UnaryKind::kLeakyRelu: return x >= 0.0f ? x : u.alpha * x;
    case UnaryKind::kTanh: return std::tanh(x);
    case UnaryKind::kHardSigmoid: return std::max(0.0f, std::min(1.0f, u.alpha * x + u.beta));
    case UnaryKind::kHardSwish: return x * std::max(0.0f, std::min(1.0f, x / 6.0f + 0.5f));
    case UnaryKind::kSqrt: return std::sqrt(x);
  }
  return x;
}

// v repeated `times` times: per-channel factors over a whole-lowered batch ([B, C, …] as B·C channels).
std::vector<float> tiled(std::vector<float> v, std::int64_t times) {
  if (times <= 1) return v;
  std::vector<float> r;
  r.reserve(v.size() * static_cast<std::size_t>(times));
  for (std::int64_t t = 0; t < times; ++t) r.insert(r.end(), v.begin(), v.end());
  return r;
}

}  // namespace

Expected<Lowerer::Window> Lowerer::window(const Node& n, std::vector<std::int64_t> kernel_default) const {
  Window w;
  std::vector<std::int64_t> dil;
  FT_TRY(take(attr_ints(n, "strides", {1, 1}), w.strides));
  FT_TRY(take(attr_ints(n, "pads", {0, 0, 0, 0}), w.pads));
  FT_TRY(take(attr_ints(n, "dilations", {1, 1}), dil));
  FT_TRY(take(attr_string(n, "auto_pad", "NOTSET"), w.auto_pad));
  FT_TRY(take(attr_ints(n, "kernel_shape", std::move(kernel_default)), w.kernel));
  if (dil.size() != 2 || dil[0] <= 0 || dil[1] <= 0 || dil[0] > 4096 || dil[1] > 4096)
    return err(n, "attribute 'dilations' must be two positive values");
  w.dilations = dil;
  if (w.strides.size() != 2 || w.strides[0] <= 0 || w.strides[1] <= 0)
    return err(n, "attribute 'strides' must be two positive values");
  return w;
}

Status Lowerer::resolve_pads(const Node& n, Window& w, std::int64_t h, std::int64_t wd, std::int64_t eh,
                             std::int64_t ew) const {
  if (w.auto_pad == "NOTSET") {
    if (w.pads.size() != 4) return err(n, "attribute 'pads' must have 4 values");
    for (auto p : w.pads)
      if (p < 0 || p > 4096) return err(n, "attribute 'pads' holds " + std::to_string(p));
    return {};
  }
  if (w.auto_pad == "VALID") {
    w.pads = {0, 0, 0, 0};
    return {};
  }
  if (w.auto_pad != "SAME_UPPER" && w.auto_pad != "SAME_LOWER")
    return err(n, "attribute 'auto_pad' = " + w.auto_pad);
  // SAME: out = ceil(in / stride), the total pad split with the odd one at the end (UPPER) or start (LOWER)
  const std::int64_t in[2] = {h, wd}, e[2] = {eh, ew};
  w.pads = {0, 0, 0, 0};
  for (int a = 0; a < 2; ++a) {
    const std::int64_t s = w.strides[static_cast<std::size_t>(a)];
    const std::int64_t out = (in[a] + s - 1) / s;
    const std::int64_t total = std::max<std::int64_t>(0, (out - 1) * s + e[a] - in[a]);
    const std::int64_t small = total / 2, big = total - small;
    const bool upper = w.auto_pad == "SAME_UPPER";
    w.pads[static_cast<std::size_t>(a)] = upper ? small : big;
    w.pads[static_cast<std::size_t>(a + 2)] = upper ? big : small;
  }
  return {};
}

Node Lowerer::widen_1d(const Node& n) {
  Node n2 = n;
  auto widen = [&](const char* name, std::int64_t lead, bool pads) {
    auto it = n2.attrs.find(name);
    if (it == n2.attrs.end() || it->second.type != Attr::Type::kInts) return;
    auto& v = it->second.ints;
    if (pads && v.size() == 2)
      v = {0, v[0], 0, v[1]};
    else if (!pads && v.size() == 1)
      v = {lead, v[0]};
  };
  widen("kernel_shape", 1, false);
  widen("strides", 1, false);
  widen("dilations", 1, false);
  widen("pads", 0, true);
  return n2;
}

Status Lowerer::lower_conv(const Node& n, const Entry& x) {
  if (!has_input(n, 1)) return err(n, "no weights (input 1)");
  auto w = const_float(n, 1, "weights");
  if (!w) return w.status();
  Shape xs = x.shape;
  Shape ws = (*w)->dims;
  // a 1-D conv ([N,C,L], weights [co,ci,k]) runs as a 2-D conv of height 1 (docs/design/faces.md §2)
  const bool one_d = xs.size() == 3 && ws.size() == 3;
  const Node n2 = one_d ? widen_1d(n) : n;  // the 1-D attributes widened to 2-D
  if (one_d) {
    xs.insert(xs.begin() + 2, 1);
    ws.insert(ws.begin() + 2, 1);
  }
  if (xs.size() != 4)
    return unsupported(n, "input rank " + std::to_string(x.shape.size()) + " (only 1-D and 2-D conv)");
  if (ws.size() != 4)
    return unsupported(n, "weights rank " + std::to_string((*w)->dims.size()) + " (only 1-D and 2-D conv)");
  std::int64_t group = 1;
  FT_TRY(take(attr_int(n, "group", 1), group));
  auto win = window(n2, {ws[2], ws[3]});
  if (!win) return win.status();
  const auto& dil = win->dilations;
  FT_TRY(resolve_pads(n, *win, xs[2], xs[3], (ws[2] - 1) * dil[0] + 1, (ws[3] - 1) * dil[1] + 1));
  const auto& ks = win->kernel;
  const auto& strides = win->strides;
  const auto& pads = win->pads;
  if (ks.size() != 2 || ks[0] != ws[2] || ks[1] != ws[3])
    return err(n, "attribute 'kernel_shape' disagrees with the weights");
  ConvJob j;
  j.cin = xs[1], j.h = xs[2], j.w = xs[3];
  j.cout = ws[0], j.groups = group, j.kh = ws[2], j.kw = ws[3];
  j.sh = strides[0], j.sw = strides[1], j.pt = pads[0], j.pl = pads[1];
  j.dh = dil[0], j.dw = dil[1];
  if (j.groups < 1) return err(n, "attribute 'group' = " + std::to_string(j.groups));
  if (j.cout <= 0 || j.kh <= 0 || j.kw <= 0 || ws[1] <= 0) return err(n, "empty weights " + shape_str(ws));
  if (ws[1] * j.groups != j.cin)
    return err(n, "channel mismatch: input has " + std::to_string(j.cin) + " channels, weights expect " +
                      std::to_string(ws[1]) + " × group " + std::to_string(j.groups));
  if (j.cout % j.groups != 0)
    return err(n, "output channels " + std::to_string(j.cout) + " not divisible by group");
  const std::int64_t ph = j.h + j.pt + pads[2], pw = j.w + j.pl + pads[3];
  const std::int64_t eh = (j.kh - 1) * j.dh + 1, ew = (j.kw - 1) * j.dw + 1;  // the dilated extent
  if (eh > ph || ew > pw)
    return err(n, "kernel " + std::to_string(eh) + "x" + std::to_string(ew) +
                      " is larger than the padded input " + std::to_string(ph) + "x" + std::to_string(pw));
  j.oh = (ph - eh) / j.sh + 1;
  j.ow = (pw - ew) / j.sw + 1;
  if (one_d && j.oh != 1)  // 2-D attributes on a 1-D conv: its [N,C,OW] output would be too small
    return err(n, "1-D conv with 2-D 'pads' or 'strides' (output height " + std::to_string(j.oh) + ")");
  j.weights = std::make_shared<const std::vector<float>>((*w)->f);
  if (has_input(n, 2)) {
    auto b = const_float(n, 2, "bias");
    if (!b) return b.status();
    if ((*b)->count() != j.cout)
      return err(n,
                 "bias has " + std::to_string((*b)->count()) + " values, expected " + std::to_string(j.cout));
    j.bias = std::make_shared<const std::vector<float>>((*b)->f);
  }
  const Shape out = one_d ? Shape{xs[0], j.cout, j.ow} : Shape{xs[0], j.cout, j.oh, j.ow};
  if (xs[0] == 1) {
    j.layer = static_cast<std::int32_t>(prog_.conv_count++);
    return emit(n, j, {Arg::value(x.value)}, out);
  }
  // lowered whole with N > 1: one conv per image, concatenated (docs/design/faces.md §2)
  if (xs[0] > 64) return unsupported(n, "a batch above 64 in a graph lowered whole");
  ConcatOp cat{1, j.cout * j.oh * j.ow, std::vector<std::int64_t>(static_cast<std::size_t>(xs[0]), 1)};
  std::vector<Arg> parts;
  const std::int64_t per = j.cin * j.h * j.w;
  for (std::int64_t b = 0; b < xs[0]; ++b) {
    std::int32_t id = -1;
    TransposeOp t;
    t.dims = {1, j.cin, j.h, j.w};
    t.strides = strides_of(t.dims);
    t.offset = b * per;
    FT_TRY(emit(n, std::move(t), {Arg::value(x.value)}, {1, j.cin, j.h, j.w}, n.outputs.size(), &id));
    ConvJob jb = j;
    jb.layer = static_cast<std::int32_t>(prog_.conv_count++);
    FT_TRY(emit(n, jb, {Arg::value(id)}, {1, j.cout, j.oh, j.ow}, n.outputs.size(), &id));
    parts.push_back(Arg::value(id));
  }
  return emit(n, std::move(cat), std::move(parts), out);
}

Status Lowerer::lower_unary(const Node& n, const Entry& x, UnaryKind kind) {
  UnaryOp op{kind, -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity()};
  if (kind == UnaryKind::kLeakyRelu) FT_TRY(take(attr_float(n, "alpha", 0.01f), op.alpha));
  if (kind == UnaryKind::kHardSigmoid) {
    FT_TRY(take(attr_float(n, "alpha", 0.2f), op.alpha));
    FT_TRY(take(attr_float(n, "beta", 0.5f), op.beta));
  }
  if (!std::isfinite(op.alpha) || !std::isfinite(op.beta)) return err(n, "non-finite alpha or beta");
  if (x.is_const()) {  // fold
    if (x.c->is_int) return err(n, "INT64 operand");
    auto c = std::make_shared<ConstTensor>(*x.c);
    for (float& v : c->f) v = apply_unary(op, v);
    define_const(n, std::move(c));
    return {};
  }
  return emit(n, op, {Arg::value(x.value)}, x.shape);
}

Status Lowerer::lower_clip(const Node& n, const Entry& x) {
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
  if (x.is_const()) {
    if (x.c->is_int) return err(n, "INT64 operand");
    auto c = std::make_shared<ConstTensor>(*x.c);
    for (float& v : c->f) v = apply_unary(UnaryOp{UnaryKind::kClip, lo, hi}, v);
    define_const(n, std::move(c));
    return {};
  }
  return emit(n, UnaryOp{UnaryKind::kClip, lo, hi}, {Arg::value(x.value)}, x.shape);
}

Status Lowerer::lower_binary(const Node& n, const Entry&, BinaryKind kind) {
  if (n.inputs.size() != 2) return err(n, "needs exactly two operands");
  auto a = input(n, 0);
  if (!a) return a.status();
  auto b = input(n, 1);
  if (!b) return b.status();
  const Shape as = a->is_const() ? a->c->dims : a->shape;
  const Shape bs = b->is_const() ? b->c->dims : b->shape;
  const bool ints = (a->is_const() && a->c->is_int) || (b->is_const() && b->c->is_int);
  if (ints && !(a->is_const() && b->is_const() && a->c->is_int && b->c->is_int))
    return err(n, "INT64 operand (integer arithmetic folds on constants only)");
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
  for (const auto* e : {&*a, &*b}) {  // per image, dim 0 of the result must be the values' batch
    const Shape es = shape_of(*e);
    if (!e->is_const() && es.size() != rank) mixes(n, "broadcasts a value of lower rank across the batch");
    if (e->is_const() && !(a->is_const() && b->is_const()) && es.size() == rank && rank > 0 && es[0] != 1)
      mixes(n, "broadcasts a constant along dim 0");
  }
  if (ints) {  // integer shape arithmetic, folded (Div truncates toward zero, as onnxruntime)
    auto c = std::make_shared<ConstTensor>();
    c->dims = out;
    c->is_int = true;
    for (std::int64_t i0 = 0; i0 < op.dims[0]; ++i0)
      for (std::int64_t i1 = 0; i1 < op.dims[1]; ++i1)
        for (std::int64_t i2 = 0; i2 < op.dims[2]; ++i2)
          for (std::int64_t i3 = 0; i3 < op.dims[3]; ++i3) {
            const std::int64_t x = a->c->i[static_cast<std::size_t>(
                i0 * op.a_strides[0] + i1 * op.a_strides[1] + i2 * op.a_strides[2] + i3 * op.a_strides[3])];
            const std::int64_t y = b->c->i[static_cast<std::size_t>(
                i0 * op.b_strides[0] + i1 * op.b_strides[1] + i2 * op.b_strides[2] + i3 * op.b_strides[3])];
            if (kind == BinaryKind::kDiv && y == 0) return err(n, "integer division by zero");
            // in unsigned arithmetic (wraps instead of overflowing); INT64_MIN / −1 wraps too
            const auto ux = static_cast<std::uint64_t>(x), uy = static_cast<std::uint64_t>(y);
            c->i.push_back(kind == BinaryKind::kAdd   ? static_cast<std::int64_t>(ux + uy)
                           : kind == BinaryKind::kSub ? static_cast<std::int64_t>(ux - uy)
                           : kind == BinaryKind::kMul ? static_cast<std::int64_t>(ux * uy)
                           : y == -1                  ? static_cast<std::int64_t>(0 - ux)
                                                      : x / y);
          }
    define_const(n, std::move(c));
    return {};
  }
  if (a->is_const() && b->is_const()) {  // fold
    auto c = std::make_shared<ConstTensor>();
    c->dims = out;
    c->f.resize(static_cast<std::size_t>(count_of(out)));
    std::size_t o = 0;
    for (std::int64_t i0 = 0; i0 < op.dims[0]; ++i0)
      for (std::int64_t i1 = 0; i1 < op.dims[1]; ++i1)
        for (std::int64_t i2 = 0; i2 < op.dims[2]; ++i2)
          for (std::int64_t i3 = 0; i3 < op.dims[3]; ++i3) {
            const float x = a->c->f[static_cast<std::size_t>(i0 * op.a_strides[0] + i1 * op.a_strides[1] +
                                                             i2 * op.a_strides[2] + i3 * op.a_strides[3])];
            const float y = b->c->f[static_cast<std::size_t>(i0 * op.b_strides[0] + i1 * op.b_strides[1] +
                                                             i2 * op.b_strides[2] + i3 * op.b_strides[3])];
            c->f[o++] = kind == BinaryKind::kAdd   ? x + y
                        : kind == BinaryKind::kSub ? x - y
                        : kind == BinaryKind::kMul ? x * y
                                                   : x / y;
          }
    define_const(n, std::move(c));
    return {};
  }
  const Arg aa = a->is_const() ? Arg::constant(const_id(a->c)) : Arg::value(a->value);
  const Arg ba = b->is_const() ? Arg::constant(const_id(b->c)) : Arg::value(b->value);
  return emit(n, op, {aa, ba}, out);
}

Status Lowerer::lower_prelu(const Node& n, const Entry& x) {
  auto s = const_float(n, 1, "slope");
  if (!s) return s.status();
  const Shape& xs = x.shape;
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
    // before opset 7 a 1-D slope of C values is per channel (the legacy broadcast)
    if (!ok && g_.opset > 0 && g_.opset < 7 && ss.size() == 1 && ss[0] == ch) ok = true;
    if (!ok) {
      // any other broadcastable slope: relu(x) − slope·relu(−x), which is x ≥ 0 ? x : slope·x exactly
      const std::string neg = n.name + "#neg", rn = n.name + "#reluneg", m = n.name + "#slope",
                        rp = n.name + "#relu";
      Node t{n.name, "PRelu", {n.inputs[0]}, {neg}, {}};
      FT_TRY(lower_neg(t, x));
      t.inputs = {neg}, t.outputs = {rn};
      FT_TRY(lower_unary(t, names_[neg], UnaryKind::kRelu));
      t.inputs = {rn, n.inputs[1]}, t.outputs = {m};
      FT_TRY(lower_binary(t, Entry{}, BinaryKind::kMul));
      t.inputs = {n.inputs[0]}, t.outputs = {rp};
      FT_TRY(lower_unary(t, x, UnaryKind::kRelu));
      t.inputs = {rp, m}, t.outputs = {n.outputs[0]};
      return lower_binary(t, Entry{}, BinaryKind::kSub);
    }
    slope = (*s)->f;
  }
  const std::int32_t id = add_const(tiled(std::move(slope), xs[0]));  // dim 0 > 1 only when lowered whole
  return emit(n, ChannelPreluOp{xs[0] * ch, plane / xs[0]}, {Arg::value(x.value), Arg::constant(id)}, xs);
}

Status Lowerer::lower_batchnorm(const Node& n, const Entry& x) {
  auto eps = attr_float(n, "epsilon", 1e-5f);
  if (!eps) return eps.status();
  auto tm = attr_int(n, "training_mode", 0);
  if (!tm) return tm.status();
  if (*tm != 0) return unsupported(n, "attribute 'training_mode' must be 0");
  auto spatial = attr_int(n, "spatial", 1);  // before opset 9; 0 = statistics per activation, not per channel
  if (!spatial) return spatial.status();
  if (*spatial != 1) return unsupported(n, "attribute 'spatial' = " + std::to_string(*spatial) + " (only 1)");
  mark_read(n, "momentum");  // updates the running statistics in training only
  const Shape& xs = x.shape;
  if (xs.size() < 2) return unsupported(n, "input rank below 2");
  const std::int64_t ch = xs[1];
  ConstPtr p[4];
  const char* what[4] = {"scale", "B", "mean", "var"};
  for (int i = 0; i < 4; ++i) {
    auto c = const_float(n, static_cast<std::size_t>(i + 1), what[i]);
    if (!c) return c.status();
    if ((*c)->count() != ch)
      return err(n, std::string(what[i]) + " has " + std::to_string((*c)->count()) + " values, expected " +
                        std::to_string(ch));
    p[i] = *c;
  }
  std::vector<float> scale(static_cast<std::size_t>(ch)), shift(static_cast<std::size_t>(ch));
  for (std::size_t c = 0; c < scale.size(); ++c) {  // docs/design/faces.md §3: folded in double
    const double var = static_cast<double>(p[3]->f[c]) + static_cast<double>(*eps);
    if (!(var > 0.0)) return err(n, "variance + epsilon ≤ 0 at channel " + std::to_string(c));
    const double s = static_cast<double>(p[0]->f[c]) / std::sqrt(var);
    scale[c] = static_cast<float>(s);
    shift[c] = static_cast<float>(static_cast<double>(p[1]->f[c]) - static_cast<double>(p[2]->f[c]) * s);
  }
  const std::int32_t si = add_const(tiled(std::move(scale), xs[0])),
                     hi = add_const(tiled(std::move(shift), xs[0]));
  return emit(n, ChannelAffineOp{xs[0] * ch, count_of(xs) / (xs[0] * ch)},
              {Arg::value(x.value), Arg::constant(si), Arg::constant(hi)}, xs);
}

Status Lowerer::lower_gemm(const Node& n, const Entry& a, bool matmul) {
  if (matmul) {
    // the GEMV fast path: A is [1,...,1,K] and B a constant [K,N]; anything else is a MatMulOp
    auto be = input(n, 1);
    if (!be) return be.status();
    const Shape& as0 = a.shape;
    if (!be->is_const() || be->c->is_int || be->c->dims.size() != 2 || as0.size() < 2 ||
        count_of(as0) != as0.back())
      return lower_matmul(n, a);
  } else {
    const Shape& as0 = a.shape;
    std::int64_t ta = 0;
    FT_TRY(take(attr_int(n, "transA", 0), ta));
    // A rows beyond the batch, a transposed A, a non-constant B or C: MatMulOp (+ Mul/Add steps)
    const auto be = input(n, 1);
    const auto ce = has_input(n, 2) ? input(n, 2) : be;
    if ((as0.size() == 2 && as0[0] > 1) || ta != 0 || (be && !be->is_const()) || (ce && !ce->is_const()))
      return lower_matmul(n, a);
  }
  auto b = const_float(n, 1, "B");
  if (!b) return b.status();
  const Shape& as = a.shape;
  const Shape& bs = (*b)->dims;
  GemvOp op;
  Shape out;
  if (bs.size() != 2) return unsupported(n, "B must be 2-D, got " + shape_str(bs));
  if (matmul) {
    if (as.size() < 2 || count_of(as) != as.back())
      return unsupported(n, "A must be [1,...,1,K], got " + shape_str(as));
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
    if ((op.trans_b ? bs[1] : bs[0]) != op.k)
      return err(n, "A " + shape_str(as) + " and B " + shape_str(bs) + " do not multiply");
    out = {1, op.n};
  }
  std::vector<Arg> args{Arg::value(a.value), Arg::constant(const_id(*b))};
  if (!matmul && has_input(n, 2)) {
    auto c = const_float(n, 2, "C");
    if (!c) return c.status();
    std::vector<float> bias;
    if ((*c)->count() == 1)
      bias.assign(static_cast<std::size_t>(op.n), (*c)->f[0]);
    else if ((*c)->count() == op.n && count_of((*c)->dims) == op.n && (*c)->dims.size() <= 2 &&
             (*c)->dims.back() == op.n)
      bias = (*c)->f;
    else
      return err(n, "C " + shape_str((*c)->dims) + " does not broadcast to [1," + std::to_string(op.n) + "]");
    op.has_bias = true;
    args.push_back(Arg::constant(add_const(std::move(bias))));
  }
  return emit(n, op, std::move(args), out);
}

Status Lowerer::lower_transpose(const Node& n, const Entry& x) {
  const Shape s = shape_of(x);
  const std::size_t r = s.size();
  std::vector<std::int64_t> perm(r);
  for (std::size_t i = 0; i < r; ++i) perm[i] = static_cast<std::int64_t>(r - 1 - i);
  auto p = attr_ints(n, "perm", perm);
  if (!p) return p.status();
  perm = *p;
  if (perm.size() != r)
    return err(
        n, "attribute 'perm' has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(r));
  std::vector<bool> seen(r, false);
  for (auto q : perm) {
    if (q < 0 || q >= static_cast<std::int64_t>(r) || seen[static_cast<std::size_t>(q)])
      return err(n, "attribute 'perm' is not a permutation");
    seen[static_cast<std::size_t>(q)] = true;
  }
  std::vector<std::int64_t> in_strides(r, 1);
  for (std::size_t i = r; i-- > 1;) in_strides[i - 1] = in_strides[i] * s[i];
  if (!x.is_const() && r > 0 && perm[0] != 0) mixes(n, "moves dim 0");
  if (x.is_const()) {  // fold
    Shape dims(r);
    std::vector<std::int64_t> st(r);
    for (std::size_t k = 0; k < r; ++k) {
      dims[k] = s[static_cast<std::size_t>(perm[k])];
      st[k] = in_strides[static_cast<std::size_t>(perm[k])];
    }
    return strided(n, x, dims, st, 0);
  }
  TransposeOp op;
  Shape out(r);
  for (std::size_t k = 0; k < r; ++k) {
    out[k] = s[static_cast<std::size_t>(perm[k])];
    op.dims.push_back(out[k]);
    op.strides.push_back(in_strides[static_cast<std::size_t>(perm[k])]);
  }
  return emit(n, std::move(op), {Arg::value(x.value)}, out);
}

Expected<Lowerer::PoolGeometry> Lowerer::pool_geometry(const Node& n0, const Entry& x) const {
  PoolGeometry g;
  g.one_d = x.shape.size() == 3;  // [N,C,L] as a plane of height 1
  g.n = g.one_d ? widen_1d(n0) : n0;
  const Node& n = g.n;
  g.s = x.shape;
  if (g.one_d) g.s.insert(g.s.begin() + 2, 1);
  const Shape& s = g.s;
  if (s.size() != 4)
    return unsupported(n, "input rank " + std::to_string(s.size()) + " (only 1-D and 2-D pooling)");
  auto win = window(n, {});
  if (!win) return win.status();
  std::int64_t ceil = 0;
  FT_TRY(take(attr_int(n, "ceil_mode", 0), ceil));
  const auto& ks = win->kernel;
  if (ks.size() != 2 || ks[0] <= 0 || ks[1] <= 0)
    return err(n, "attribute 'kernel_shape' must be two positive values");
  if (win->dilations[0] != 1 || win->dilations[1] != 1)
    return unsupported(n, "attribute 'dilations' must be [1,1]");
  FT_TRY(resolve_pads(n, *win, s[2], s[3], ks[0], ks[1]));
  const auto& p = win->pads;
  g.kh = ks[0], g.kw = ks[1], g.sh = win->strides[0], g.sw = win->strides[1];
  if (p[0] >= g.kh || p[2] >= g.kh || p[1] >= g.kw || p[3] >= g.kw)
    return err(n, "attribute 'pads' must be smaller than the kernel");
  if (g.kh > s[2] + p[0] + p[2] || g.kw > s[3] + p[1] + p[3]) return err(n, "kernel larger than the input");
  g.oh = pool_out(s[2], g.kh, g.sh, p[0], p[2], ceil != 0);
  g.ow = pool_out(s[3], g.kw, g.sw, p[1], p[3], ceil != 0);
  if (g.one_d && g.oh != 1)  // 2-D attributes on a 1-D pool: its [N,C,OW] output would be too small
    return err(n, "1-D pooling with 2-D 'kernel_shape', 'pads' or 'strides' (output height " +
                      std::to_string(g.oh) + ")");
  g.pads = p;
  return g;
}

Status Lowerer::lower_maxpool(const Node& n0, const Entry& x) {
  auto g = pool_geometry(n0, x);
  if (!g) return g.status();
  std::int64_t storage_order = 0;
  FT_TRY(take(attr_int(g->n, "storage_order", 0), storage_order));
  const Shape& s = g->s;
  // N·C planes (N > 1 only when lowered whole)
  MaxPoolOp op{s[0] * s[1], s[2], s[3], g->kh, g->kw, g->sh, g->sw, g->oh, g->ow};
  op.pt = g->pads[0];
  op.pl = g->pads[1];
  return emit(g->n, op, {Arg::value(x.value)}, pool_shape(*g));
}

Status Lowerer::lower_resize(const Node& n, const Entry& x) {
  const Shape& s = x.shape;
  if (s.size() != 4) return unsupported(n, "input rank " + std::to_string(s.size()));
  auto mode = attr_string(n, "mode", "nearest");
  auto ctm = attr_string(n, "coordinate_transformation_mode", "half_pixel");
  auto nm = attr_string(n, "nearest_mode", "round_prefer_floor");
  if (!mode) return mode.status();
  if (!ctm) return ctm.status();
  if (!nm) return nm.status();
  const bool opset10 = g_.opset > 0 && g_.opset < 11;
  std::int64_t antialias = 0;  // (exclude_outside affects cubic only, which is refused)
  FT_TRY(take(attr_int(n, "antialias", 0), antialias));
  std::string policy;
  FT_TRY(take(attr_string(n, "keep_aspect_ratio_policy", "stretch"), policy));
  if (antialias != 0) return unsupported(n, "attribute 'antialias' = 1");
  if (policy != "stretch") return unsupported(n, "attribute 'keep_aspect_ratio_policy' = " + policy);
  if (*mode != "nearest" && *mode != "linear")
    return unsupported(n, "attribute 'mode' = " + *mode + " (only nearest and linear)");
  // cubic's parameters (exporters write them for every mode): of no use to nearest and linear
  mark_read(n, "cubic_coeff_a");
  mark_read(n, "exclude_outside");
  std::vector<std::int64_t> axes;
  FT_TRY(take(attr_ints(n, "axes", {}), axes));
  bool swapped = false;  // axes [3,2]: the scales or sizes are given W first
  if (axes == std::vector<std::int64_t>{3, 2} || axes == std::vector<std::int64_t>{-1, -2}) swapped = true;
  if (!axes.empty() && !swapped && axes != std::vector<std::int64_t>{2, 3} &&
      axes != std::vector<std::int64_t>{-2, -1})
    return unsupported(n, "attribute 'axes' other than the two spatial axes");
  // the output size: constant scales, or (opset ≥ 11) constant sizes
  float f[4] = {1, 1, 1, 1};
  std::int64_t oh = 0, ow = 0;
  const std::size_t si = opset10 ? 1 : 2;
  bool have_scales = false;
  if (has_input(n, si)) {
    auto sc = const_float(n, si, "scales");
    if (!sc) return sc.status();
    if ((*sc)->count() != 0) {
      const std::size_t off = axes.empty() ? 0 : 2;
      if ((*sc)->count() != static_cast<std::int64_t>(4 - off)) return err(n, "scales must hold 4 values");
      for (std::size_t i = 0; i < 4 - off; ++i) f[i + off] = (*sc)->f[i];
      if (swapped) std::swap(f[2], f[3]);
      have_scales = true;
    }
  }
  if (!opset10 && has_input(n, 3)) {
    if (have_scales) return err(n, "both scales and sizes are given");
    std::vector<std::int64_t> sz;
    FT_TRY(take(const_ints(n, 3, "sizes"), sz));
    if (!axes.empty() && sz.size() == 2) {
      if (swapped) std::swap(sz[0], sz[1]);
      sz.insert(sz.begin(), {s[0], s[1]});
    }
    if (sz.size() != 4) return err(n, "sizes must hold 4 values");
    if (sz[0] != s[0] && !is_batch_dim(sz[0])) return unsupported(n, "sizes for N must be the input's");
    if (sz[1] != s[1]) return unsupported(n, "sizes for C must be the input's");
    if (sz[2] <= 0 || sz[3] <= 0) return err(n, "sizes " + shape_str(sz));
    oh = sz[2], ow = sz[3];
    f[2] = static_cast<float>(oh) / static_cast<float>(s[2]);
    f[3] = static_cast<float>(ow) / static_cast<float>(s[3]);
  } else if (!have_scales) {
    return err(n, "neither scales nor sizes");
  } else {
    if (f[0] != 1.0f || f[1] != 1.0f) return unsupported(n, "scales for N and C must be 1");
    for (int i = 2; i < 4; ++i)
      if (!(f[i] > 0.0f) || !std::isfinite(f[i]) || static_cast<double>(s[i]) * f[i] > 1e9)
        return err(n, "scale " + std::to_string(f[i]));
    oh = static_cast<std::int64_t>(std::floor(static_cast<double>(s[2]) * f[2]));
    ow = static_cast<std::int64_t>(std::floor(static_cast<double>(s[3]) * f[3]));
    if (oh <= 0 || ow <= 0) return err(n, "empty output");
  }
  // the integer nearest up-scale (docs/design/faces.md §2): for whole-number scales these modes all give
  // out[y] = in[y/s], the fast path and the kResizeBinary fusion
  const bool floor_ok = *ctm == "asymmetric" && *nm == "floor";
  const bool half_ok = (*ctm == "half_pixel" || *ctm == "pytorch_half_pixel") &&
                       (*nm == "round_prefer_floor" || *nm == "round_prefer_ceil");
  const bool whole = f[2] >= 1.0f && f[2] <= 16.0f && f[2] == std::floor(f[2]) && f[3] >= 1.0f &&
                     f[3] <= 16.0f && f[3] == std::floor(f[3]) &&
                     oh == s[2] * static_cast<std::int64_t>(f[2]) &&
                     ow == s[3] * static_cast<std::int64_t>(f[3]);
  if (*mode == "nearest" && whole && (opset10 || floor_ok || half_ok)) {
    ResizeOp op{s[0] * s[1], s[2], s[3], static_cast<std::int64_t>(f[2]), static_cast<std::int64_t>(f[3])};
    op.oh = op.h * op.sy;
    op.ow = op.w * op.sx;
    op.scale_y = f[2];
    op.scale_x = f[3];
    return emit(n, op, {Arg::value(x.value)}, {s[0], s[1], op.h * op.sy, op.w * op.sx});
  }
  ResizeCoord coord = ResizeCoord::kAsymmetric;
  if (opset10 || *ctm == "asymmetric")
    coord = ResizeCoord::kAsymmetric;
  else if (*ctm == "half_pixel")
    coord = ResizeCoord::kHalfPixel;
  else if (*ctm == "pytorch_half_pixel")
    coord = ResizeCoord::kPytorchHalfPixel;
  else if (*ctm == "align_corners")
    coord = ResizeCoord::kAlignCorners;
  else
    return unsupported(n, "attribute 'coordinate_transformation_mode' = " + *ctm);
  ResizeNearest nearest = ResizeNearest::kRoundPreferFloor;
  if (opset10) {
    nearest = ResizeNearest::kFloor;  // opset 10: asymmetric, floor
  } else if (*mode == "nearest") {
    if (*nm == "floor")
      nearest = ResizeNearest::kFloor;
    else if (*nm == "ceil")
      nearest = ResizeNearest::kCeil;
    else if (*nm == "round_prefer_ceil")
      nearest = ResizeNearest::kRoundPreferCeil;
    else if (*nm != "round_prefer_floor")
      return unsupported(n, "attribute 'nearest_mode' = " + *nm);
  }
  return lower_resize_general(n, x, *mode == "nearest" ? ResizeMode::kNearest : ResizeMode::kLinear, coord,
                              nearest, oh, ow, f[2], f[3]);
}

Status Lowerer::lower_gap(const Node& n, const Entry& x) {
  const Shape& s = x.shape;
  if (s.size() != 4) return unsupported(n, "input rank " + std::to_string(s.size()) + " (only 4-D)");
  return emit(n, GlobalAverageOp{s[0] * s[1], s[2] * s[3]}, {Arg::value(x.value)}, {s[0], s[1], 1, 1});
}

}  // namespace facetrace::faces::detail
