// The channels-last rewrite of the GPU face program (cuda/faces/nhwc_layout.h, docs/design/faces.md §8.3), on the
// CPU: which values go channels-last and where conversions sit, on a hand-built IResNet-style program; and that
// the rewritten program computes the original's bits. The oracle is the CPU interpreter on a "reference form"
// of the rewrite: each channels-last conv wrapped in strided copies written here (NHWC → NCHW before it, back
// after it), so the interpreter, which knows only NCHW convs, can run the rest of the rewritten program as is.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "faces/nhwc_layout.h"
#include "facetrace/faces/net.h"
#include "facetrace/faces/program.h"
#include "program_builder.h"

namespace facetrace::faces {
namespace {

// The hand-built program with the IResNet pieces this test needs (tests/support/program_builder.h).
struct Builder : ProgramBuilder {
  std::uint32_t seed = 1;
  using ProgramBuilder::ProgramBuilder;
  std::int32_t conv(std::int32_t x, std::int64_t cin, std::int64_t cout, std::int64_t k, std::int64_t s,
                    std::int64_t h, Fusion f = {}) {
    ConvJob j;
    j.cin = cin, j.cout = cout, j.h = j.w = h, j.kh = j.kw = k, j.sh = j.sw = s, j.pt = j.pl = k / 2;
    j.oh = j.ow = (h + 2 * (k / 2) - k) / s + 1;
    j.layer = static_cast<std::int32_t>(p.conv_count);
    j.weights = blob(random_floats(static_cast<std::size_t>(cout * cin * k * k), seed++, -0.3f, 0.3f));
    j.bias = blob(random_floats(static_cast<std::size_t>(cout), seed++, -0.1f, 0.1f));
    return step(j, {Arg::value(x)}, {1, cout, j.oh, j.ow}, f);
  }
  std::int32_t affine(std::int32_t x, std::int64_t c, std::int64_t plane) {
    const auto sc = constant(random_floats(static_cast<std::size_t>(c), seed++, 0.5f, 1.5f));
    const auto sh = constant(random_floats(static_cast<std::size_t>(c), seed++, -0.1f, 0.1f));
    return step(ChannelAffineOp{c, plane}, {Arg::value(x), Arg::constant(sc), Arg::constant(sh)},
                p.shapes[static_cast<std::size_t>(x)]);
  }
  std::int32_t prelu(std::int32_t x, std::int64_t c, std::int64_t plane) {
    const auto sl = constant(random_floats(static_cast<std::size_t>(c), seed++, 0.1f, 0.3f));
    return step(ChannelPreluOp{c, plane}, {Arg::value(x), Arg::constant(sl)}, p.shapes[static_cast<std::size_t>(x)]);
  }
  std::int32_t add(std::int32_t a, std::int32_t b) {
    const Shape s = p.shapes[static_cast<std::size_t>(a)];
    // the batch axis (size 1) with stride 0, as the ONNX loader lowers an Add
    BinaryOp op{BinaryKind::kAdd, {s[0], s[1], s[2], s[3]}, {0, s[2] * s[3], s[3], 1}, {0, s[2] * s[3], s[3], 1}};
    return step(op, {Arg::value(a), Arg::value(b)}, s);
  }
};

// stem (3 → 16, NCHW: 3 channels), block 1 (BN → conv → PReLU → conv + identity), block 2 (conv → ReLU (fused
// pair) → conv stride 2 + 1×1 stride-2 shortcut), BN, a Gemv on the flattened result and a second output read
// straight from a channels-last candidate.
Program iresnet_like(std::int64_t hw) {
  Builder b({1, 3, hw, hw});
  const std::int64_t c = 16, oh = (hw + 1) / 2;
  const auto x0 = b.prelu(b.conv(kInputValue, 3, c, 3, 1, hw), c, hw * hw);
  const auto a1 = b.affine(x0, c, hw * hw);
  const auto p1 = b.prelu(b.conv(a1, c, c, 3, 1, hw), c, hw * hw);
  const auto x1 = b.add(b.conv(p1, c, c, 3, 1, hw), x0);
  Fusion pair;
  pair.kind = FusionKind::kConvAct, pair.steps = 2;
  const auto c3 = b.conv(x1, c, 2 * c, 3, 1, hw, pair);
  const auto r3 = b.step(UnaryOp{UnaryKind::kRelu}, {Arg::value(c3)}, {1, 2 * c, hw, hw});
  const auto c4 = b.conv(r3, 2 * c, 2 * c, 3, 2, hw);
  const auto sc = b.conv(x1, c, 2 * c, 1, 2, hw);
  const auto x2 = b.add(c4, sc);
  const auto bn = b.affine(x2, 2 * c, oh * oh);
  const std::int64_t k = 2 * c * oh * oh, e = 8;
  GemvOp g;
  g.k = k, g.n = e, g.has_bias = true;
  const auto w = b.constant(random_floats(static_cast<std::size_t>(k * e), 91, -0.05f, 0.05f));
  const auto bias = b.constant(random_floats(static_cast<std::size_t>(e), 92));
  const auto y = b.step(g, {Arg::value(bn), Arg::constant(w), Arg::constant(bias)}, {1, e});
  return b.done({y, x2});
}

// NCHW ↔ NHWC of [1, C, H, W], written from the definitions (not taken from the rewrite).
TransposeOp to_nchw(const Shape& s) {
  TransposeOp t;
  t.dims = {s[1], s[2], s[3]};
  t.strides = {1, s[3] * s[1], s[1]};  // NHWC element (h, w, c) sits at (h·W + w)·C + c
  return t;
}
TransposeOp to_nhwc(const Shape& s) {
  TransposeOp t;
  t.dims = {s[2], s[3], s[1]};
  t.strides = {s[3], 1, s[2] * s[3]};  // NCHW element (c, h, w) sits at (c·H + h)·W + w
  return t;
}

// The reference form: every channels-last conv, ChannelAffine and ChannelPrelu (plane 1 in the rewrite: the GPU
// runs it over B·H·W rows of C) runs on an NCHW copy of its input, with its NCHW plane, and its output is copied
// back; no fusion marks, no frees.
Program reference_form(const gpu::NhwcProgram& r) {
  Program q = r.program;
  q.steps.clear();
  for (const Step& s : r.program.steps) {
    const bool wrap = r.nhwc[static_cast<std::size_t>(s.out)] &&
                      (std::holds_alternative<ConvJob>(s.op) || std::holds_alternative<ChannelAffineOp>(s.op) ||
                       std::holds_alternative<ChannelPreluOp>(s.op));
    if (!wrap) {
      q.steps.push_back(s);
      q.steps.back().fusion = Fusion{};
      continue;
    }
    const Shape in = r.program.shapes[static_cast<std::size_t>(s.args[0].id)];
    const Shape out = r.program.shapes[static_cast<std::size_t>(s.out)];
    const auto a = static_cast<std::int32_t>(q.lens.size());
    q.lens.push_back(count_of(in));
    q.shapes.push_back(in);
    const auto c = static_cast<std::int32_t>(q.lens.size());
    q.lens.push_back(count_of(out));
    q.shapes.push_back(out);
    q.steps.push_back(Step{to_nchw(in), {s.args[0]}, a, "ref-in", Fusion{}});
    Step nchw{s.op, s.args, c, s.node, Fusion{}};
    nchw.args[0] = Arg::value(a);
    if (auto* f = std::get_if<ChannelAffineOp>(&nchw.op)) f->plane = out[2] * out[3];
    if (auto* f = std::get_if<ChannelPreluOp>(&nchw.op)) f->plane = out[2] * out[3];
    q.steps.push_back(std::move(nchw));
    q.steps.push_back(Step{to_nhwc(out), {Arg::value(c)}, s.out, "ref-out", Fusion{}});
  }
  q.free.assign(q.steps.size(), {});
  return q;
}

Program unfused(Program p) {
  for (auto& s : p.steps) s.fusion = Fusion{};
  return p;
}

TEST(FacesNhwc, IresnetLikeProgramGoesChannelsLastBetweenItsConvsWithConversionsOnlyAtTheEdges) {
  const Program p = iresnet_like(9);
  auto r = gpu::rewrite_nhwc(p, 4);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  // every conv but the 3-channel stem
  EXPECT_EQ(r->nhwc_convs, 5);
  // into NHWC once: x0, which block 1's BN (its output feeds a conv, so it goes channels-last) and the identity
  // add both read; back to NCHW: c4 and sc, since the add writing x2 (a program output) stays NCHW, as does the
  // BN reading x2.
  EXPECT_EQ(r->conversions, 3);
  const Program& q = r->program;
  ASSERT_EQ(r->nhwc.size(), q.lens.size());
  for (const auto& o : q.outputs) EXPECT_FALSE(r->nhwc[static_cast<std::size_t>(o.value)]) << o.name;
  EXPECT_FALSE(r->nhwc[kInputValue]);
  int per_channel_nhwc = 0;
  for (const Step& s : q.steps) {
    if (const auto* a = std::get_if<ChannelAffineOp>(&s.op); a && r->nhwc[static_cast<std::size_t>(s.out)]) {
      EXPECT_EQ(a->plane, 1) << s.node;
      ++per_channel_nhwc;
    }
    if (const auto* pr = std::get_if<ChannelPreluOp>(&s.op); pr && r->nhwc[static_cast<std::size_t>(s.out)]) {
      EXPECT_EQ(pr->plane, 1) << s.node;
      ++per_channel_nhwc;
    }
    // a step reads its operands in its own layout, except a conversion, which reads the other one
    const bool conversion = s.node.rfind("to-n", 0) == 0;
    for (const Arg& a : s.args) {
      if (a.kind != Arg::Kind::kValue || a.id == kInputValue) continue;
      EXPECT_EQ(r->nhwc[static_cast<std::size_t>(a.id)] != r->nhwc[static_cast<std::size_t>(s.out)], conversion)
          << s.node;
    }
  }
  EXPECT_EQ(per_channel_nhwc, 2);  // block 1's BN and PReLU (the stem's PReLU is NCHW: its conv is)
}

TEST(FacesNhwc, RewrittenProgramComputesTheOriginalsBitsOnTheCpuInterpreter) {
  for (std::int64_t hw : {9, 12}) {
    const Program p = iresnet_like(hw);
    auto r = gpu::rewrite_nhwc(p, 3);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_GT(r->nhwc_convs, 0);
    const Program ref = reference_form(*r);
    std::vector<std::vector<float>> in;
    for (std::uint32_t k = 0; k < 3; ++k) in.push_back(random_floats(static_cast<std::size_t>(p.lens[0]), 500 + k));
    std::vector<std::span<const float>> spans(in.begin(), in.end());
    auto want = run_program_cpu(unfused(p), spans, 1);
    auto got = run_program_cpu(ref, spans, 1);
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_EQ(got->size(), want->size());
    for (std::size_t b = 0; b < want->size(); ++b)
      for (std::size_t o = 0; o < (*want)[b].size(); ++o) {
        const auto& x = (*got)[b][o];
        const auto& y = (*want)[b][o];
        ASSERT_EQ(x.size(), y.size());
        EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0)
            << "hw " << hw << " image " << b << " output " << o;
      }
  }
}

TEST(FacesNhwc, ProgramWithoutChannelsLastConvsComesBackUnchanged) {
  Builder b({1, 3, 8, 8});
  const auto c = b.conv(kInputValue, 3, 4, 3, 1, 8);  // 4 output channels: not a multiple of 8
  const Program p = b.done({b.prelu(c, 4, 64)});
  auto r = gpu::rewrite_nhwc(p, 1);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->nhwc_convs, 0);
  EXPECT_EQ(r->conversions, 0);
  EXPECT_EQ(r->program.steps.size(), p.steps.size());
}

TEST(FacesNhwc, ConvShapesCudnnCannotRunChannelsLastStayNchw) {
  ConvJob j;
  j.cin = 16, j.cout = 16, j.h = j.w = 10, j.kh = j.kw = 3, j.pt = j.pl = 1, j.oh = j.ow = 10;
  EXPECT_TRUE(gpu::nhwc_conv_ok(j, 2));
  ConvJob g = j;
  g.groups = 2;
  EXPECT_FALSE(gpu::nhwc_conv_ok(g, 2));
  ConvJob odd = j;
  odd.cin = 12;
  EXPECT_FALSE(gpu::nhwc_conv_ok(odd, 2));
  ConvJob asym = j;
  asym.oh = 9;  // the IR's pads are not symmetric
  EXPECT_FALSE(gpu::nhwc_conv_ok(asym, 2));
  EXPECT_FALSE(gpu::nhwc_conv_ok(j, 1 << 21));  // past 32-bit element counts
}

}  // namespace
}  // namespace facetrace::faces
