/// @file
/// The fusion pass (docs/design/faces.md §3): can_fuse, the per-kind matchers and the marking of Step::fusion. Each group kind
/// is one the CPU kernels can run with the same arithmetic as the steps apart, so fused and unfused programs give
/// the same values.
#include "ir/fuse.h"

#include <algorithm>
#include <array>
#include <type_traits>
#include <variant>

namespace facetrace::faces::detail {
namespace {

static_assert(std::variant_size_v<Op> == 16, "OpKind lists every op");
template <OpKind K, class T>
inline constexpr bool kAlternativeIs =
    std::is_same_v<std::variant_alternative_t<static_cast<std::size_t>(K), Op>, T>;
static_assert(kAlternativeIs<OpKind::kConv, ConvJob>);
static_assert(kAlternativeIs<OpKind::kUnary, UnaryOp>);
static_assert(kAlternativeIs<OpKind::kBinary, BinaryOp>);
static_assert(kAlternativeIs<OpKind::kMaxPool, MaxPoolOp>);
static_assert(kAlternativeIs<OpKind::kResize, ResizeOp>);
static_assert(kAlternativeIs<OpKind::kGemv, GemvOp>);
static_assert(kAlternativeIs<OpKind::kPad, PadOp>);

// Step b reads step a's output exactly once and is its last reader.
bool feeds_only(const Program& p, std::size_t a, std::size_t b) {
  const std::int32_t v = p.steps[a].out;
  int uses = 0;
  for (const Arg& x : p.steps[b].args) uses += x.kind == Arg::Kind::kValue && x.id == v;
  const auto& fr = p.free[b];
  return uses == 1 && std::find(fr.begin(), fr.end(), v) != fr.end();
}

// A Relu or Clip: an activation the conv epilogues apply.
bool is_epilogue_activation(const Step& s) {
  const auto* u = std::get_if<UnaryOp>(&s.op);
  return u && (u->kind == UnaryKind::kRelu || u->kind == UnaryKind::kClip);
}

// A group under construction from step `first`: each add() appends the next step when it has the given kind,
// passes the kind's own condition and the longer run still passes can_fuse.
class Group {
 public:
  Group(const Program& p, std::size_t first) : p_(p), first_(first) {}

  template <class Pred>
  bool add(OpKind kind, Pred&& ok) {
    const std::size_t at = first_ + n_;
    if (n_ == kinds_.size() || at >= p_.steps.size()) return false;
    kinds_[n_] = kind;
    if (!can_fuse(p_, first_, std::span<const OpKind>(kinds_.data(), n_ + 1)) || !ok(p_.steps[at]))
      return false;
    ++n_;
    return true;
  }
  bool add_activation() { return add(OpKind::kUnary, is_epilogue_activation); }
  // Offset of the step added last.
  std::int8_t last() const { return static_cast<std::int8_t>(n_ - 1); }
  const Step& step(std::int8_t offset) const { return p_.steps[first_ + static_cast<std::size_t>(offset)]; }
  std::int32_t size() const { return static_cast<std::int32_t>(n_); }

 private:
  const Program& p_;
  std::size_t first_;
  std::array<OpKind, 8> kinds_{};
  std::size_t n_ = 0;
};

// The member at offset o of group g exists and holds an op of type T.
template <class T>
bool member_is(std::span<const Step> g, std::int8_t o) {
  return o >= 0 && static_cast<std::size_t>(o) < g.size() &&
         std::holds_alternative<T>(g[static_cast<std::size_t>(o)].op);
}
// The activation member at offset o is absent (−1) or a Relu/Clip.
bool is_activation_member(std::span<const Step> g, std::int8_t o) {
  return o < 0 || (member_is<UnaryOp>(g, o) && is_epilogue_activation(g[static_cast<std::size_t>(o)]));
}

const ConvJob& conv_of(const Step& s) { return std::get<ConvJob>(s.op); }

// [dense Conv [→ act] →] 1×1 Conv [→ act] → depthwise Conv [→ act [→ MaxPool]] from `first`; with_pre: the group
// starts with the dense conv. kNone when no depthwise conv follows the 1×1 conv.
Fusion match_band(const Program& p, std::size_t first, bool with_pre) {
  Fusion f;
  f.kind = FusionKind::kConvBand;
  Group g(p, first);
  const ConvJob* pre = nullptr;
  if (with_pre) {
    if (!g.add(OpKind::kConv, [](const Step& s) {
          return conv_of(s).groups == 1 && !conv_of(s).is_pointwise() && conv_of(s).dh == 1 && conv_of(s).dw == 1;
        }))
      return {};
    f.pre = g.last();
    pre = &conv_of(g.step(f.pre));
    if (g.add_activation()) f.pre_act = g.last();
  }
  // the 1×1 conv reads the whole output plane of the dense conv (no reshape between them)
  if (!g.add(OpKind::kConv, [&](const Step& s) {
        const ConvJob& c = conv_of(s);
        return c.is_pointwise() && (!pre || (c.cin == pre->cout && c.h == pre->oh && c.w == pre->ow));
      }))
    return {};
  f.pw = g.last();
  const ConvJob& pw = conv_of(g.step(f.pw));
  if (g.add_activation()) f.pw_act = g.last();
  if (!g.add(OpKind::kConv, [&](const Step& s) {
        const ConvJob& d = conv_of(s);
        return d.is_depthwise() && d.cin == pw.cout && d.h == pw.oh && d.w == pw.ow && d.dh == 1 && d.dw == 1;
      }))
    return {};
  f.dw = g.last();
  const ConvJob& dw = conv_of(g.step(f.dw));
  if (g.add_activation()) {
    f.dw_act = g.last();
    // a non-overlapping MaxPool after a Relu (values ≥ +0, so the max is order-free) pools each band
    const bool relu = std::get<UnaryOp>(g.step(f.dw_act).op).kind == UnaryKind::kRelu;
    if (relu && g.add(OpKind::kMaxPool, [&](const Step& s) {
          const MaxPoolOp& m = std::get<MaxPoolOp>(s.op);
          return m.kh == m.sh && m.kw == m.sw && m.channels == dw.cout && m.h == dw.oh && m.w == dw.ow &&
                 m.pt == 0 && m.pl == 0 && m.oh == m.h / m.kh && m.ow == m.w / m.kw;
        }))
      f.pool = g.last();
  }
  f.steps = g.size();
  return f;
}

// Conv → Relu/Clip.
Fusion match_conv_act(const Program& p, std::size_t first) {
  Group g(p, first);
  if (!g.add(OpKind::kConv, [](const Step&) { return true; }) || !g.add_activation()) return {};
  Fusion f;
  f.kind = FusionKind::kConvAct;
  f.steps = g.size();
  return f;
}

// A nearest Resize → an element-wise Binary over exactly the Resize's output shape (dense operands, no
// broadcasting).
Fusion match_resize_binary(const Program& p, std::size_t first) {
  Group g(p, first);
  if (!g.add(OpKind::kResize, [](const Step&) { return true; })) return {};
  const ResizeOp& rs = std::get<ResizeOp>(g.step(0).op);
  if (rs.sy <= 0 || rs.sx <= 0) return {};  // only the integer nearest up-scale fuses
  const std::int64_t oh = rs.h * rs.sy, ow = rs.w * rs.sx;
  auto dense = [&](const std::array<std::int64_t, 4>& st) {
    return st[1] == oh * ow && st[2] == ow && st[3] == 1;
  };
  if (!g.add(OpKind::kBinary, [&](const Step& s) {
        const BinaryOp& b = std::get<BinaryOp>(s.op);
        return b.dims[0] == 1 && b.dims[1] == rs.channels && b.dims[2] == oh && b.dims[3] == ow &&
               dense(b.a_strides) && dense(b.b_strides);
      }))
    return {};
  Fusion f;
  f.kind = FusionKind::kResizeBinary;
  f.steps = g.size();
  const Arg& a0 = g.step(1).args[0];
  f.side = a0.kind == Arg::Kind::kValue && a0.id == g.step(0).out ? 0 : 1;
  return f;
}

}  // namespace

OpKind op_kind(const Op& op) { return static_cast<OpKind>(op.index()); }

bool can_fuse(const Program& p, std::size_t first, std::span<const OpKind> ops) {
  if (ops.empty() || p.free.size() != p.steps.size() || first >= p.steps.size() ||
      ops.size() > p.steps.size() - first)
    return false;
  for (std::size_t k = 0; k < ops.size(); ++k)
    if (op_kind(p.steps[first + k].op) != ops[k]) return false;
  for (std::size_t k = 1; k < ops.size(); ++k)
    if (!feeds_only(p, first + k - 1, first + k)) return false;
  return true;
}

Fusion match_fusion(const Program& p, std::size_t first) {
  for (bool with_pre : {false, true})
    if (Fusion f = match_band(p, first, with_pre); f.kind != FusionKind::kNone) return f;
  if (Fusion f = match_conv_act(p, first); f.kind != FusionKind::kNone) return f;
  return match_resize_binary(p, first);
}

void fuse(Program& p) {
  unfuse(p);
  for (std::size_t i = 0; i < p.steps.size();) {
    const Fusion f = match_fusion(p, i);
    p.steps[i].fusion = f;
    i += static_cast<std::size_t>(f.steps);
  }
}

bool fusion_well_formed(const Program& p, std::size_t first) {
  const Fusion& f = p.steps[first].fusion;
  if (f.steps < 1 || static_cast<std::size_t>(f.steps) > p.steps.size() - first) return false;
  const std::span<const Step> g(p.steps.data() + first, static_cast<std::size_t>(f.steps));
  switch (f.kind) {
    case FusionKind::kNone: return f.steps == 1;
    case FusionKind::kConvAct: return f.steps == 2 && member_is<ConvJob>(g, 0) && is_activation_member(g, 1);
    case FusionKind::kConvBand:
      return (f.pre < 0 || member_is<ConvJob>(g, f.pre)) && is_activation_member(g, f.pre_act) &&
             member_is<ConvJob>(g, f.pw) && is_activation_member(g, f.pw_act) &&
             member_is<ConvJob>(g, f.dw) && is_activation_member(g, f.dw_act) &&
             (f.pool < 0 || member_is<MaxPoolOp>(g, f.pool)) && g[0].args.size() == 1;
    case FusionKind::kResizeBinary:
      return f.steps == 2 && member_is<ResizeOp>(g, 0) && member_is<BinaryOp>(g, 1) &&
             (f.side == 0 || f.side == 1) && g[1].args.size() == 2;
  }
  return false;
}

void unfuse(Program& p) {
  for (Step& s : p.steps) s.fusion = Fusion{};
}

}  // namespace facetrace::faces::detail
