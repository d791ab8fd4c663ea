/// @file
/// The channels-last rewrite (nhwc_layout.h, docs/design/faces.md §8.3).
#include "faces/nhwc_layout.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

namespace facetrace::faces::gpu {
namespace {

enum class Layout : std::uint8_t { kNchw, kNhwc };

/// [1, C, H, W] with C a multiple of 8 and more than one pixel: a value that may be stored channels-last.
bool eligible(const Shape& s) { return s.size() == 4 && s[0] == 1 && s[1] % 8 == 0 && s[1] > 0 && s[2] * s[3] > 1; }

bool same_shape(const Program& p, std::int32_t a, std::int32_t b) {
  return p.shapes[static_cast<std::size_t>(a)] == p.shapes[static_cast<std::size_t>(b)];
}

/// Element-wise over one [1, C, H, W] value whatever its element order: the step's arithmetic per element
/// depends only on the element (and on its channel, for the per-channel ops, which the rewrite re-expresses).
bool agnostic(const Program& p, const Step& s) {
  const auto out = static_cast<std::size_t>(s.out);
  const Shape& os = p.shapes[out];
  if (!eligible(os) || s.args.empty() || s.args[0].kind != Arg::Kind::kValue) return false;
  const std::int32_t x = s.args[0].id;
  if (const auto* a = std::get_if<ChannelAffineOp>(&s.op))
    return s.args.size() >= 3 && s.args[1].kind == Arg::Kind::kConst && s.args[2].kind == Arg::Kind::kConst &&
           same_shape(p, x, s.out) && a->channels == os[1] && a->plane == os[2] * os[3];
  if (const auto* r = std::get_if<ChannelPreluOp>(&s.op))
    return s.args.size() >= 2 && s.args[1].kind == Arg::Kind::kConst && same_shape(p, x, s.out) &&
           r->channels == os[1] && r->plane == os[2] * os[3];
  if (std::holds_alternative<UnaryOp>(s.op)) return s.args.size() == 1 && same_shape(p, x, s.out);
  if (const auto* b = std::get_if<BinaryOp>(&s.op)) {
    if (s.args.size() != 2) return false;
    // no broadcasting: both operands values of the output's shape, dense strides (any stride on an axis of size
    // 1: the loader gives the batch axis stride 0)
    const std::array<std::int64_t, 4> dims{os[0], os[1], os[2], os[3]};
    if (b->dims != dims) return false;
    std::int64_t st = 1;
    for (int ax = 3; ax >= 0; --ax) {
      const auto k = static_cast<std::size_t>(ax);
      if (dims[k] != 1 && (b->a_strides[k] != st || b->b_strides[k] != st)) return false;
      st *= dims[k];
    }
    for (const Arg& a : s.args)
      if (a.kind != Arg::Kind::kValue || !same_shape(p, a.id, s.out)) return false;
    return true;
  }
  return false;
}

/// The strided copy that converts a [1, C, H, W] value to `to`.
TransposeOp conversion(const Shape& s, Layout to) {
  const std::int64_t C = s[1], H = s[2], W = s[3];
  TransposeOp t;
  if (to == Layout::kNhwc) {
    t.dims = {H, W, C};  // out[h, w, c] = in[c·H·W + h·W + w]
    t.strides = {W, 1, H * W};
  } else {
    t.dims = {C, H, W};  // out[c, h, w] = in[h·W·C + w·C + c]
    t.strides = {1, W * C, C};
  }
  return t;
}

}  // namespace

bool nhwc_conv_ok(const ConvJob& j, int batch) {
  if (j.groups != 1 || j.cin % 8 != 0 || j.cout % 8 != 0 || j.cin <= 0 || j.cout <= 0) return false;
  if (j.oh * j.ow <= 1) return false;
  const auto out = [](std::int64_t in, std::int64_t pad, std::int64_t k, std::int64_t d, std::int64_t s) {
    return (in + 2 * pad - d * (k - 1) - 1) / s + 1;
  };
  if (out(j.h, j.pt, j.kh, j.dh, j.sh) != j.oh || out(j.w, j.pl, j.kw, j.dw, j.sw) != j.ow) return false;
  const std::int64_t limit = std::numeric_limits<int>::max();
  return j.cin * j.h * j.w * batch < limit && j.cout * j.oh * j.ow * batch < limit;
}

Expected<NhwcProgram> rewrite_nhwc(const Program& p, int batch) {
  const std::size_t n = p.steps.size(), nv = p.lens.size();
  if (p.shapes.size() != nv) return invalid_argument("nhwc: shapes and lens of different lengths");
  for (const auto& s : p.steps) {
    if (s.out <= 0 || static_cast<std::size_t>(s.out) >= nv)
      return invalid_argument("nhwc: node '" + s.node + "' writes a value out of range");
    for (const Arg& a : s.args)
      if (a.kind == Arg::Kind::kValue && (a.id < 0 || static_cast<std::size_t>(a.id) >= nv))
        return invalid_argument("nhwc: node '" + s.node + "' reads a value out of range");
  }
  std::vector<bool> is_output(nv, false);
  for (const auto& o : p.outputs)
    if (o.value >= 0 && static_cast<std::size_t>(o.value) < nv) is_output[static_cast<std::size_t>(o.value)] = true;

  // The groups of the fusion marks: [first, first + len). kConvBand and kResizeBinary stay NCHW (their kernels
  // are NCHW); a lone step or a kConvAct pair takes the layout of its first step.
  struct Group {
    std::size_t first, len;
    Layout layout = Layout::kNchw;
  };
  std::vector<Group> groups;
  for (std::size_t i = 0; i < n;) {
    const Step& s = p.steps[i];
    const auto len = static_cast<std::size_t>(std::max<std::int32_t>(1, s.fusion.steps));
    if (i + len > n) return invalid_argument("nhwc: node '" + s.node + "': fusion past the end");
    groups.push_back({i, len});
    i += len;
  }
  // Values a channels-last conv reads: an element-wise step writing one goes channels-last too and converts its
  // input instead (one conversion before it rather than one after it for every conv reader).
  std::vector<bool> feeds_conv(nv, false);
  for (const Group& g : groups) {
    const Step& s = p.steps[g.first];
    const auto* j = std::get_if<ConvJob>(&s.op);
    if (j && nhwc_conv_ok(*j, batch) && s.args[0].kind == Arg::Kind::kValue &&
        (s.fusion.kind == FusionKind::kNone || s.fusion.kind == FusionKind::kConvAct))
      feeds_conv[static_cast<std::size_t>(s.args[0].id)] = true;
  }
  std::vector<Layout> layout(nv, Layout::kNchw);
  NhwcProgram r;
  for (Group& g : groups) {
    const Step& s = p.steps[g.first];
    const FusionKind k = s.fusion.kind;
    const Step& last = p.steps[g.first + g.len - 1];
    if ((k != FusionKind::kNone && k != FusionKind::kConvAct) || is_output[static_cast<std::size_t>(last.out)] ||
        !eligible(p.shapes[static_cast<std::size_t>(last.out)]))
      continue;
    bool nhwc = false;
    if (const auto* j = std::get_if<ConvJob>(&s.op)) {
      nhwc = nhwc_conv_ok(*j, batch) && s.args[0].kind == Arg::Kind::kValue;
      if (nhwc) ++r.nhwc_convs;
    } else if (g.len == 1 && agnostic(p, s)) {
      nhwc = layout[static_cast<std::size_t>(s.args[0].id)] == Layout::kNhwc ||
             feeds_conv[static_cast<std::size_t>(s.out)];
      if (s.args.size() == 2 && s.args[1].kind == Arg::Kind::kValue)
        nhwc = nhwc || layout[static_cast<std::size_t>(s.args[1].id)] == Layout::kNhwc;
    }
    if (!nhwc) continue;
    g.layout = Layout::kNhwc;
    for (std::size_t i = g.first; i < g.first + g.len; ++i)
      layout[static_cast<std::size_t>(p.steps[i].out)] = Layout::kNhwc;
  }
  if (r.nhwc_convs == 0) {
    r.program = p;
    r.nhwc.assign(nv, false);
    return r;
  }

  // Emit: before each group, the conversions its external operands need (one copy per value and layout, made
  // where it is first needed), then the group's steps reading them.
  Program& q = r.program;
  q.input_shape = p.input_shape;
  q.lens = p.lens;
  q.shapes = p.shapes;
  q.outputs = p.outputs;
  q.consts = p.consts;
  q.conv_count = p.conv_count;
  std::vector<Layout> qlayout = layout;
  std::map<std::pair<std::int32_t, Layout>, std::int32_t> converted;
  for (const Group& g : groups) {
    std::vector<std::int32_t> inside;
    for (std::size_t i = g.first; i < g.first + g.len; ++i) inside.push_back(p.steps[i].out);
    const auto internal = [&](std::int32_t v) { return std::find(inside.begin(), inside.end(), v) != inside.end(); };
    std::vector<Step> body(p.steps.begin() + static_cast<std::ptrdiff_t>(g.first),
                           p.steps.begin() + static_cast<std::ptrdiff_t>(g.first + g.len));
    for (Step& st : body)
      for (Arg& a : st.args) {
        if (a.kind != Arg::Kind::kValue || internal(a.id)) continue;
        const Layout have = layout[static_cast<std::size_t>(a.id)];
        if (have == g.layout) continue;
        const auto key = std::make_pair(a.id, g.layout);
        auto it = converted.find(key);
        if (it == converted.end()) {
          const Shape& sh = p.shapes[static_cast<std::size_t>(a.id)];
          if (!eligible(sh)) return internal_error("nhwc: a conversion of a value of rank " + std::to_string(sh.size()));
          const auto v = static_cast<std::int32_t>(q.lens.size());
          q.lens.push_back(p.lens[static_cast<std::size_t>(a.id)]);
          q.shapes.push_back(sh);
          qlayout.push_back(g.layout);
          q.steps.push_back(Step{conversion(sh, g.layout), {Arg::value(a.id)}, v,
                                 std::string(g.layout == Layout::kNhwc ? "to-nhwc:" : "to-nchw:") + st.node,
                                 Fusion{}});
          ++r.conversions;
          it = converted.emplace(key, v).first;
        }
        a.id = it->second;
      }
    if (g.layout == Layout::kNhwc)  // the per-channel ops on channels-last data: channel = offset mod C
      for (Step& st : body) {
        if (auto* a = std::get_if<ChannelAffineOp>(&st.op)) a->plane = 1;
        if (auto* pr = std::get_if<ChannelPreluOp>(&st.op)) pr->plane = 1;
      }
    for (Step& st : body) q.steps.push_back(std::move(st));
  }

  // Free lists from the last reader of every value (outputs never freed; a value nobody reads at its writer).
  std::vector<std::int64_t> last(q.lens.size(), -1);
  for (std::size_t i = 0; i < q.steps.size(); ++i) {
    last[static_cast<std::size_t>(q.steps[i].out)] =
        std::max<std::int64_t>(last[static_cast<std::size_t>(q.steps[i].out)], static_cast<std::int64_t>(i));
    for (const Arg& a : q.steps[i].args)
      if (a.kind == Arg::Kind::kValue) last[static_cast<std::size_t>(a.id)] = static_cast<std::int64_t>(i);
  }
  q.free.assign(q.steps.size(), {});
  for (std::size_t v = 0; v < last.size(); ++v) {
    const bool out = std::any_of(q.outputs.begin(), q.outputs.end(),
                                 [&](const ProgramOutput& o) { return static_cast<std::size_t>(o.value) == v; });
    if (last[v] >= 0 && !out) q.free[static_cast<std::size_t>(last[v])].push_back(static_cast<std::int32_t>(v));
  }
  r.nhwc.resize(qlayout.size());
  for (std::size_t v = 0; v < qlayout.size(); ++v) r.nhwc[v] = qlayout[v] == Layout::kNhwc;
  return r;
}

}  // namespace facetrace::faces::gpu
