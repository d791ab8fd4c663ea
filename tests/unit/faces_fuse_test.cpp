/// @file
/// The fusion pass (src/faces/ir/fuse.h): for each group kind a small program (ggml's fusion_test_nodes idea) in
/// which can_fuse holds, the pass marks the group, and the fused and unfused programs give the same bits (every
/// fused kernel does the same arithmetic as the steps apart); and the cases where it must not fuse.
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "compare.h"
#include "facetrace/faces/net.h"
#include "ir/fuse.h"
#include "log_guard.h"
#include "onnx_builder.h"

namespace facetrace::faces {
namespace {

using detail::can_fuse;
using detail::OpKind;
using ::facetrace::testing::bit_identical;
using testing::OnnxBuilder;
using testing::random_floats;

Program lowered(const OnnxBuilder& m, const Shape& shape) {
  auto net = Net::create(m.bytes());
  EXPECT_TRUE(net.ok()) << net.status().to_string();
  if (!net) return {};
  auto p = net->program(shape);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p ? std::move(*p) : Program{};
}

std::vector<std::vector<float>> run(const Program& p, const std::vector<float>& x, int threads) {
  const std::span<const float> in(x);
  auto r = run_program_cpu(p, std::span<const std::span<const float>>(&in, 1), threads);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r ? (*r)[0] : std::vector<std::vector<float>>{};
}

// The fused program and the same program with every mark cleared give the same bits, at 1 thread and at several.
void expect_fused_equals_unfused(const Program& fused, const std::vector<float>& x) {
  Program unfused = fused;
  detail::unfuse(unfused);
  for (int threads : {1, 3}) {
    const auto a = run(fused, x, threads), b = run(unfused, x, threads);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t o = 0; o < a.size(); ++o)
      EXPECT_TRUE(bit_identical(a[o], b[o])) << "output " << o << ", threads " << threads;
  }
}

void add_conv(OnnxBuilder& m, const std::string& x, const std::string& y, std::int64_t cin, std::int64_t cout,
              std::int64_t k, std::int64_t group, std::int64_t stride, std::uint32_t seed) {
  m.init(y + "_w", {cout, cin / group, k, k},
         random_floats(static_cast<std::size_t>(cout * (cin / group) * k * k), seed));
  m.init(y + "_b", {cout}, random_floats(static_cast<std::size_t>(cout), seed + 1));
  auto* n = m.node("Conv", {x, y + "_w", y + "_b"}, {y});
  OnnxBuilder::int1(n, "group", group);
  OnnxBuilder::ints(n, "kernel_shape", {k, k});
  OnnxBuilder::ints(n, "strides", {stride, stride});
  const std::int64_t pad = k / 2;
  OnnxBuilder::ints(n, "pads", {pad, pad, pad, pad});
}

// A 2× nearest Resize (asymmetric, floor: YuNet's) of x into y; "roi" and "scales" must be initialisers of m.
void add_nearest_resize(OnnxBuilder& m, const std::string& x, const std::string& y, bool set_mode) {
  auto* n = m.node("Resize", {x, "roi", "scales"}, {y});
  if (set_mode) OnnxBuilder::str(n, "mode", "nearest");
  OnnxBuilder::str(n, "coordinate_transformation_mode", "asymmetric");
  OnnxBuilder::str(n, "nearest_mode", "floor");
}

void add_clip(OnnxBuilder& m, const std::string& x, const std::string& y) {
  auto* n = m.node("Clip", {x}, {y});
  auto* lo = n->add_attribute();
  lo->set_name("min");
  lo->set_type(onnx::AttributeProto_AttributeType_FLOAT);
  lo->set_f(0.0f);
  auto* hi = n->add_attribute();
  hi->set_name("max");
  hi->set_type(onnx::AttributeProto_AttributeType_FLOAT);
  hi->set_f(0.5f);
}

TEST(FacesFuse, conv_then_relu_or_clip_runs_in_the_conv_epilogue) {
  for (bool clip : {false, true}) {
    SCOPED_TRACE(clip ? "clip" : "relu");
    OnnxBuilder m(clip ? 6 : 13);  // opset 6: Clip bounds as attributes
    m.input("x", {1, 5, 17, 19}).output("y");
    add_conv(m, "x", "c", 5, 12, 3, 1, 1, 3);
    if (clip)
      add_clip(m, "c", "y");
    else
      m.node("Relu", {"c"}, {"y"});
    const Program p = lowered(m, {1, 5, 17, 19});
    ASSERT_EQ(p.steps.size(), 2u);
    const std::array<OpKind, 2> seq{OpKind::kConv, OpKind::kUnary};
    EXPECT_TRUE(can_fuse(p, 0, seq));
    EXPECT_EQ(p.steps[0].fusion.kind, FusionKind::kConvAct);
    EXPECT_EQ(p.steps[0].fusion.steps, 2);
    expect_fused_equals_unfused(p, random_floats(5 * 17 * 19, 4, -2.0f, 2.0f));
  }
}

// 1×1 [→ act] → depthwise 3×3 [→ act [→ MaxPool]], optionally after a dense 3×3/2 conv [→ act]. Tall enough
// (c·w floats a row, about a hundred rows a band) that the rows split into several bands.
struct BandCase {
  bool pre, pre_act, pw_act, dw_act, pool;
};

TEST(FacesFuse, pointwise_depthwise_chains_run_in_row_bands) {
  const BandCase cases[] = {
      {false, false, false, false, false}, {false, true, true, true, false},
      {false, false, true, true, true},    {true, false, true, true, false},
      {true, true, true, true, true},      {true, true, false, false, false},
  };
  const std::int64_t cin = 3, c = 16, h = 260, w = 64;
  for (const auto& bc : cases) {
    SCOPED_TRACE(::testing::Message() << "pre " << bc.pre << bc.pre_act << " pw_act " << bc.pw_act
                                      << " dw_act " << bc.dw_act << " pool " << bc.pool);
    OnnxBuilder m(6);  // opset 6: Clip bounds as attributes
    m.input("x", {1, cin, h, w}).output("y");
    std::string cur = "x";
    std::int64_t ch = cin;
    std::vector<OpKind> seq;
    auto step = [&](const std::string& name, OpKind kind) {
      cur = name;
      seq.push_back(kind);
    };
    if (bc.pre) {
      add_conv(m, cur, "pre", cin, 8, 3, 1, 2, 10);
      step("pre", OpKind::kConv);
      ch = 8;
      if (bc.pre_act) {
        m.node("Relu", {cur}, {"pre_r"});
        step("pre_r", OpKind::kUnary);
      }
    }
    add_conv(m, cur, "pw", ch, c, 1, 1, 1, 20);
    step("pw", OpKind::kConv);
    if (bc.pw_act) {
      add_clip(m, cur, "pw_r");
      step("pw_r", OpKind::kUnary);
    }
    add_conv(m, cur, "dw", c, c, 3, c, 1, 30);
    step("dw", OpKind::kConv);
    if (bc.dw_act) {
      m.node("Relu", {cur}, {"dw_r"});
      step("dw_r", OpKind::kUnary);
    }
    if (bc.pool) {
      auto* mp = m.node("MaxPool", {cur}, {"mp"});
      OnnxBuilder::ints(mp, "kernel_shape", {2, 2});
      OnnxBuilder::ints(mp, "strides", {2, 2});
      step("mp", OpKind::kMaxPool);
    }
    m.node("Sigmoid", {cur}, {"y"});  // a step after the group: the group's output is a plain value
    const Program p = lowered(m, {1, cin, h, w});
    ASSERT_EQ(p.steps.size(), seq.size() + 1);
    EXPECT_TRUE(can_fuse(p, 0, seq));
    const Fusion& f = p.steps[0].fusion;
    EXPECT_EQ(f.kind, FusionKind::kConvBand);
    EXPECT_EQ(f.steps, static_cast<std::int32_t>(seq.size()));
    EXPECT_EQ(f.pre >= 0, bc.pre);
    EXPECT_EQ(f.pool >= 0, bc.pool);
    EXPECT_EQ(f.dw_act >= 0, bc.dw_act);
    EXPECT_EQ(p.steps.back().fusion.kind, FusionKind::kNone);
    expect_fused_equals_unfused(p, random_floats(static_cast<std::size_t>(cin * h * w), 5, -1.0f, 1.0f));
  }
}

TEST(FacesFuse, nearest_resize_then_binary_never_stores_the_upscaled_tensor) {
  const std::int64_t c = 4, h = 7, w = 13;
  for (int side : {0, 1}) {
    SCOPED_TRACE(::testing::Message() << "resize feeds operand " << side);
    OnnxBuilder m(11);
    m.input("x", {1, c, h, w}).output("y").init("roi", {0}, {});
    m.init("scales", {4}, {1, 1, 2, 2}).init("o", {1, c, 2 * h, 2 * w}, random_floats(c * 4 * h * w, 6));
    add_nearest_resize(m, "x", "r", true);
    if (side == 0)
      m.node("Sub", {"r", "o"}, {"y"});
    else
      m.node("Sub", {"o", "r"}, {"y"});
    const Program p = lowered(m, {1, c, h, w});
    ASSERT_EQ(p.steps.size(), 2u);
    const std::array<OpKind, 2> seq{OpKind::kResize, OpKind::kBinary};
    EXPECT_TRUE(can_fuse(p, 0, seq));
    EXPECT_EQ(p.steps[0].fusion.kind, FusionKind::kResizeBinary);
    EXPECT_EQ(p.steps[0].fusion.side, side);
    expect_fused_equals_unfused(p, random_floats(c * h * w, 7));
  }
}

TEST(FacesFuse, an_intermediate_read_twice_or_kept_as_an_output_is_not_fused) {
  {  // the conv's output is also a graph output
    OnnxBuilder m;
    m.input("x", {1, 3, 9, 9}).output("y").output("c");
    add_conv(m, "x", "c", 3, 4, 3, 1, 1, 8);
    m.node("Relu", {"c"}, {"y"});
    const Program p = lowered(m, {1, 3, 9, 9});
    const std::array<OpKind, 2> seq{OpKind::kConv, OpKind::kUnary};
    EXPECT_FALSE(can_fuse(p, 0, seq));
    EXPECT_EQ(p.steps[0].fusion.kind, FusionKind::kNone);
    expect_fused_equals_unfused(p, random_floats(3 * 81, 9));
  }
  {  // the conv's output is read again after the Relu
    OnnxBuilder m;
    m.input("x", {1, 3, 9, 9}).output("y");
    add_conv(m, "x", "c", 3, 4, 3, 1, 1, 8);
    m.node("Relu", {"c"}, {"r"});
    m.node("Add", {"r", "c"}, {"y"});
    const Program p = lowered(m, {1, 3, 9, 9});
    ASSERT_EQ(p.steps.size(), 3u);
    const std::array<OpKind, 2> seq{OpKind::kConv, OpKind::kUnary};
    EXPECT_FALSE(can_fuse(p, 0, seq));
    EXPECT_EQ(p.steps[0].fusion.kind, FusionKind::kNone);
  }
  {  // a Binary that reads the Resize output on both sides
    OnnxBuilder m(11);
    m.input("x", {1, 2, 3, 5}).output("y").init("roi", {0}, {}).init("scales", {4}, {1, 1, 2, 2});
    add_nearest_resize(m, "x", "r", false);
    m.node("Mul", {"r", "r"}, {"y"});
    const Program p = lowered(m, {1, 2, 3, 5});
    const std::array<OpKind, 2> seq{OpKind::kResize, OpKind::kBinary};
    EXPECT_FALSE(can_fuse(p, 0, seq));
    EXPECT_EQ(p.steps[0].fusion.kind, FusionKind::kNone);
  }
}

TEST(FacesFuse, a_sequence_in_the_wrong_order_or_past_the_end_is_refused) {
  OnnxBuilder m;
  m.input("x", {1, 3, 9, 9}).output("y");
  add_conv(m, "x", "c", 3, 4, 3, 1, 1, 8);
  m.node("Relu", {"c"}, {"y"});
  const Program p = lowered(m, {1, 3, 9, 9});
  const std::array<OpKind, 2> wrong{OpKind::kUnary, OpKind::kConv};
  const std::array<OpKind, 3> too_long{OpKind::kConv, OpKind::kUnary, OpKind::kUnary};
  const std::array<OpKind, 1> one{OpKind::kUnary};
  EXPECT_FALSE(can_fuse(p, 0, wrong));
  EXPECT_FALSE(can_fuse(p, 0, too_long));
  EXPECT_FALSE(can_fuse(p, 2, one));
  EXPECT_TRUE(can_fuse(p, 1, one));
  EXPECT_FALSE(can_fuse(p, 0, std::span<const OpKind>{}));
}

TEST(FacesFuse, kind_conditions_beyond_the_op_sequence_are_checked) {
  {  // Sigmoid is not an epilogue activation: the op sequence fuses, the group kind does not
    OnnxBuilder m;
    m.input("x", {1, 3, 9, 9}).output("y");
    add_conv(m, "x", "c", 3, 4, 3, 1, 1, 8);
    m.node("Sigmoid", {"c"}, {"y"});
    const Program p = lowered(m, {1, 3, 9, 9});
    const std::array<OpKind, 2> seq{OpKind::kConv, OpKind::kUnary};
    EXPECT_TRUE(can_fuse(p, 0, seq));
    EXPECT_EQ(p.steps[0].fusion.kind, FusionKind::kNone);
  }
  {  // a MaxPool after a Clip (not a Relu) stays out of the band; an overlapping MaxPool too
    for (bool overlapping : {false, true}) {
      OnnxBuilder m(6);
      m.input("x", {1, 8, 20, 20}).output("y");
      add_conv(m, "x", "pw", 8, 8, 1, 1, 1, 40);
      add_conv(m, "pw", "dw", 8, 8, 3, 8, 1, 50);
      if (overlapping)
        m.node("Relu", {"dw"}, {"a"});
      else
        add_clip(m, "dw", "a");
      auto* mp = m.node("MaxPool", {"a"}, {"y"});
      OnnxBuilder::ints(mp, "kernel_shape", {3, 3});
      OnnxBuilder::ints(mp, "strides", {overlapping ? 1 : 3, overlapping ? 1 : 3});
      const Program p = lowered(m, {1, 8, 20, 20});
      ASSERT_EQ(p.steps.size(), 4u);
      EXPECT_EQ(p.steps[0].fusion.kind, FusionKind::kConvBand);
      EXPECT_EQ(p.steps[0].fusion.steps, 3);
      EXPECT_EQ(p.steps[0].fusion.pool, -1);
      EXPECT_EQ(p.steps[3].fusion.kind, FusionKind::kNone);
      expect_fused_equals_unfused(p, random_floats(8 * 400, 11));
    }
  }
  {  // a broadcasting Binary after a Resize
    OnnxBuilder m(11);
    m.input("x", {1, 2, 3, 5}).output("y").init("roi", {0}, {}).init("scales", {4}, {1, 1, 2, 2});
    m.init("o", {1, 2, 1, 10}, random_floats(20, 12));
    add_nearest_resize(m, "x", "r", false);
    m.node("Add", {"r", "o"}, {"y"});
    const Program p = lowered(m, {1, 2, 3, 5});
    const std::array<OpKind, 2> seq{OpKind::kResize, OpKind::kBinary};
    EXPECT_TRUE(can_fuse(p, 0, seq));
    EXPECT_EQ(p.steps[0].fusion.kind, FusionKind::kNone);
  }
}

TEST(FacesFuse, the_pass_is_idempotent_and_a_malformed_mark_is_refused) {
  OnnxBuilder m;
  m.input("x", {1, 3, 9, 9}).output("y");
  add_conv(m, "x", "c", 3, 4, 3, 1, 1, 8);
  m.node("Relu", {"c"}, {"y"});
  Program p = lowered(m, {1, 3, 9, 9});
  Program again = p;
  detail::fuse(again);
  ASSERT_EQ(again.steps.size(), p.steps.size());
  for (std::size_t i = 0; i < p.steps.size(); ++i) {
    EXPECT_EQ(again.steps[i].fusion.kind, p.steps[i].fusion.kind);
    EXPECT_EQ(again.steps[i].fusion.steps, p.steps[i].fusion.steps);
  }
  p.steps[0].fusion.steps = 3;  // past the end
  const std::vector<float> x = random_floats(3 * 81, 13);
  const std::span<const float> in(x);
  auto r = run_program_cpu(p, std::span<const std::span<const float>>(&in, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  p.steps[0].fusion = Fusion{FusionKind::kResizeBinary, 2};  // members of the wrong ops
  EXPECT_FALSE(run_program_cpu(p, std::span<const std::span<const float>>(&in, 1)).ok());
}

// The exporter's forms the band and resize kernels cannot run stay unfused: a dilated depthwise conv after a 1×1
// conv, a padded / ceil-mode MaxPool after the band's Relu, a fractional nearest Resize before an Add; a dilated
// conv still takes its activation in the epilogue. Fused and unfused give the same bits.
TEST(FacesFuse, dilated_convs_padded_pools_and_fractional_resizes_stay_out_of_groups) {
  {
    OnnxBuilder m;
    m.input("x", {1, 8, 12, 12}).output("y");
    add_conv(m, "x", "p", 8, 8, 1, 1, 1, 1);
    add_conv(m, "p", "d", 8, 8, 3, 8, 1, 3);
    m.model().mutable_graph()->mutable_node(1)->clear_attribute();
    auto* d = m.model().mutable_graph()->mutable_node(1);
    OnnxBuilder::int1(d, "group", 8);
    OnnxBuilder::ints(d, "dilations", {2, 2});
    OnnxBuilder::ints(d, "pads", {2, 2, 2, 2});
    m.node("Relu", {"d"}, {"y"});
    const Program p = lowered(m, {1, 8, 12, 12});
    ASSERT_EQ(p.steps.size(), 3u);
    EXPECT_NE(p.steps[0].fusion.kind, FusionKind::kConvBand);
    EXPECT_EQ(p.steps[1].fusion.kind, FusionKind::kConvAct);  // the dilated conv + Relu
    expect_fused_equals_unfused(p, random_floats(8 * 144, 4));
  }
  {
    OnnxBuilder m;
    m.input("x", {1, 8, 12, 12}).output("y");
    add_conv(m, "x", "p", 8, 8, 1, 1, 1, 5);
    add_conv(m, "p", "d", 8, 8, 3, 8, 1, 7);
    m.node("Relu", {"d"}, {"r"});
    auto* mp = m.node("MaxPool", {"r"}, {"y"});
    OnnxBuilder::ints(mp, "kernel_shape", {2, 2});
    OnnxBuilder::ints(mp, "strides", {2, 2});
    OnnxBuilder::ints(mp, "pads", {1, 1, 1, 1});
    const Program p = lowered(m, {1, 8, 12, 12});
    ASSERT_EQ(p.steps[0].fusion.kind, FusionKind::kConvBand);
    EXPECT_LT(p.steps[0].fusion.pool, 0) << "a padded MaxPool joined the band";
    expect_fused_equals_unfused(p, random_floats(8 * 144, 8));
  }
  {
    OnnxBuilder m(13);
    m.input("x", {1, 2, 4, 4}).output("y").init("roi", {0}, {}).init("scales", {4}, {1, 1, 1.5f, 1.5f});
    m.node("Relu", {"x"}, {"a"});
    add_nearest_resize(m, "a", "u", true);
    m.init("k", {1, 2, 6, 6}, random_floats(72, 9));
    m.node("Add", {"u", "k"}, {"y"});
    const Program p = lowered(m, {1, 2, 4, 4});
    for (const Step& st : p.steps) EXPECT_NE(st.fusion.kind, FusionKind::kResizeBinary);
    expect_fused_equals_unfused(p, random_floats(32, 10));
  }
}

}  // namespace
}  // namespace facetrace::faces
