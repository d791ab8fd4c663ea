/// @file
/// The GPU face stack's host side on the simulated executor (docs/design/faces.md §4, §8): the Program codec (round
/// trip, truncation at every length, flipped bytes), the accelerator over a GpuBackend (one ticket per batch,
/// residents within the budget, conv declines below MIN_MACS), Net::attach_checked and the failure table (a wrong
/// accelerator refused, OOM stays attached, another error detaches, a loss mid-batch completes on the CPU and
/// re-attaches after recovery, B = 16 equals 16 singles) and the pace.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "facetrace/core/image.h"
#include "facetrace/faces/accelerator.h"
#include "facetrace/faces/detector.h"
#include "facetrace/faces/net.h"
#include "facetrace/runtime/backend.h"
#include "facetrace/runtime/testing/simulated_executor.h"
#include "gpu/faces_ops.h"
#include "gpu/gpu_accelerator.h"
#include "gpu/pace.h"
#include "gpu/program_codec.h"
#include "gpu/sim_ops.h"
#include "log_guard.h"
#include "onnx_builder.h"

namespace facetrace::faces {
namespace {

using namespace std::chrono_literals;
using gpu::decode_program;
using gpu::encode_program;
using testing::OnnxBuilder;
using testing::random_floats;

constexpr std::int64_t kSide = 16;

/// A small network with conv weights and biases, BatchNormalization (ChannelAffine constants), a residual add,
/// MaxPool, GlobalAveragePool and Gemm (constants), and two outputs.
std::vector<std::uint8_t> small_net_onnx() {
  OnnxBuilder m(13);
  m.input("x", {1, 3, kSide, kSide}).output("feat", {1, 4}).output("map", {1, 8, kSide / 2, kSide / 2});
  m.init("w0", {8, 3, 3, 3}, random_floats(8 * 27, 1, -0.5f, 0.5f)).init("b0", {8}, random_floats(8, 2));
  m.init("w1", {8, 8, 3, 3}, random_floats(8 * 72, 3, -0.2f, 0.2f)).init("b1", {8}, random_floats(8, 4));
  m.init("g", {8}, random_floats(8, 5, 0.5f, 1.5f)).init("be", {8}, random_floats(8, 6));
  m.init("mu", {8}, random_floats(8, 7)).init("var", {8}, random_floats(8, 8, 0.5f, 2.0f));
  m.init("wf", {4, 8}, random_floats(32, 9)).init("bf", {4}, random_floats(4, 10));
  for (auto [in, w, b, out] : {std::array<const char*, 4>{"x", "w0", "b0", "c0"}, {"r0", "w1", "b1", "c1"}}) {
    auto* n = m.node("Conv", {in, w, b}, {out});
    OnnxBuilder::ints(n, "kernel_shape", {3, 3});
    OnnxBuilder::ints(n, "pads", {1, 1, 1, 1});
    if (std::string(in) == "x") m.node("Relu", {"c0"}, {"r0"});
  }
  m.node("BatchNormalization", {"c1", "g", "be", "mu", "var"}, {"bn"});
  m.node("Add", {"bn", "r0"}, {"sum"});
  auto* pool = m.node("MaxPool", {"sum"}, {"map"});
  OnnxBuilder::ints(pool, "kernel_shape", {2, 2});
  OnnxBuilder::ints(pool, "strides", {2, 2});
  m.node("GlobalAveragePool", {"map"}, {"gap"});
  m.node("Flatten", {"gap"}, {"flat"});
  OnnxBuilder::int1(m.node("Gemm", {"flat", "wf", "bf"}, {"feat"}), "transB", 1);
  return m.bytes();
}

Net small_net() {
  auto n = Net::create(small_net_onnx());
  EXPECT_TRUE(n.ok()) << n.status().to_string();
  return std::move(*n);
}

std::vector<float> image(std::uint32_t seed) { return random_floats(3 * kSide * kSide, seed, 0.0f, 255.0f); }

// ---------------------------------------------------------------- codec

/// A hand-built program with one step of every op kind (sizes consistent, so it validates), a fused group,
/// three outputs and six constants besides the conv's weights and bias.
Program every_op_program() {
  auto blob = [](std::size_t n, float base) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = base + 0.25f * static_cast<float>(i);
    return std::make_shared<const std::vector<float>>(std::move(v));
  };
  Program p;
  p.input_shape = {1, 4, 8, 8};
  auto value = [&](Shape s) {
    std::int64_t n = 1;
    for (auto d : s) n *= d;
    p.lens.push_back(n);
    p.shapes.push_back(std::move(s));
    return static_cast<std::int32_t>(p.lens.size() - 1);
  };
  value(p.input_shape);
  p.consts = {blob(4, 1), blob(4, 2), blob(4, 3), blob(12, 4), blob(3, 5), blob(6, 6)};
  auto step = [&](Op op, std::vector<Arg> args, Shape out, std::string node) {
    const std::int32_t v = value(std::move(out));
    p.steps.push_back(Step{std::move(op), std::move(args), v, std::move(node), Fusion{}});
    return v;
  };
  using A = Arg;
  ConvJob cj;
  cj.cin = 4, cj.h = 8, cj.w = 8, cj.cout = 4, cj.kh = 3, cj.kw = 3, cj.pt = 1, cj.pl = 1, cj.oh = 8,
  cj.ow = 8;
  cj.weights = blob(144, -1), cj.bias = blob(4, 0.5f);
  const auto v1 = step(cj, {A::value(0)}, {1, 4, 8, 8}, "conv");
  p.steps.back().fusion = Fusion{FusionKind::kConvAct, 2};
  const auto v2 = step(UnaryOp{UnaryKind::kLeakyRelu, 0, 0, 0.1f, 0}, {A::value(v1)}, {1, 4, 8, 8}, "act");
  const auto v3 =
      step(ChannelAffineOp{4, 64}, {A::value(v2), A::constant(0), A::constant(1)}, {1, 4, 8, 8}, "bn");
  const auto v4 = step(ChannelPreluOp{4, 64}, {A::value(v3), A::constant(2)}, {1, 4, 8, 8}, "prelu");
  const auto v5 = step(BinaryOp{BinaryKind::kDiv, {1, 4, 8, 8}, {256, 64, 8, 1}, {256, 64, 8, 1}},
                       {A::value(v4), A::value(v3)}, {1, 4, 8, 8}, "div");
  const auto v6 = step(TransposeOp{{1, 8, 8, 4}, {256, 8, 1, 64}, 0}, {A::value(v5)}, {1, 8, 8, 4}, "nhwc");
  const auto v7 = step(MaxPoolOp{4, 8, 8, 2, 2, 2, 2, 4, 4, 0, 0}, {A::value(v5)}, {1, 4, 4, 4}, "pool");
  ResizeOp rz{4,
              4,
              4,
              2,
              2,
              8,
              8,
              ResizeMode::kNearest,
              ResizeCoord::kHalfPixel,
              ResizeNearest::kRoundPreferCeil,
              2.0f,
              2.0f};
  const auto v8 = step(rz, {A::value(v7)}, {1, 4, 8, 8}, "up");
  const auto v9 = step(GlobalAverageOp{4, 64}, {A::value(v8)}, {1, 4, 1, 1}, "gap");
  const auto v10 = step(GemvOp{4, 3, true, 1.0f, 0.5f, true}, {A::value(v9), A::constant(3), A::constant(4)},
                        {1, 3}, "fc");
  AvgPoolOp ap{4, 8, 8, 2, 2, 2, 2, 4, 4, 0, 0, 0, 0, true};
  const auto v11 = step(ap, {A::value(v8)}, {1, 4, 4, 4}, "avg");
  const auto v12 = step(SoftmaxOp{1, 3, 1}, {A::value(v10)}, {1, 3}, "softmax");
  const auto v13 = step(ConcatOp{1, 1, {3, 3}}, {A::value(v12), A::value(v10)}, {1, 6}, "cat");
  const auto v14 = step(MatMulOp{1, 2, 3, 2, 0, 0, false}, {A::value(v13), A::constant(5)}, {1, 2, 2}, "mm");
  const auto v15 = step(ReduceMeanOp{2, 2, 1}, {A::value(v14)}, {1, 2}, "mean");
  const auto v16 =
      step(PadOp{{1, 1, 1, 2}, {0, 0, 0, 1}, {0, 0, 0, 1}, -3.0f}, {A::value(v15)}, {1, 4}, "pad");
  p.free.assign(p.steps.size(), {});
  p.free[1] = {v1};
  p.outputs = {{"pad", v16, {1, 4}}, {"avg", v11, {1, 64}}, {"nhwc", v6, {1, 8, 8, 4}}};
  p.conv_count = 1;
  return p;
}

TEST(ProgramCodec, round_trips_every_op_and_binds_the_constants_back) {
  const Program p = every_op_program();
  auto e = encode_program(p);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  ASSERT_EQ(e->blobs.size(), 8u);  // 6 consts, then the conv's weights and bias
  EXPECT_EQ(e->blobs[6], std::get<ConvJob>(p.steps[0].op).weights);
  auto d = decode_program(e->bytes);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  const std::vector<std::uint64_t> sizes{4, 4, 4, 12, 3, 6, 144, 4};
  EXPECT_EQ(d->blob_floats, sizes);
  Program& q = d->program;
  EXPECT_EQ(q.input_shape, p.input_shape);
  EXPECT_EQ(q.lens, p.lens);
  EXPECT_EQ(q.shapes, p.shapes);
  EXPECT_EQ(q.free, p.free);
  EXPECT_EQ(q.conv_count, 1);
  ASSERT_EQ(q.steps.size(), p.steps.size());
  for (std::size_t i = 0; i < p.steps.size(); ++i) {
    EXPECT_EQ(q.steps[i].op.index(), p.steps[i].op.index()) << i;
    EXPECT_EQ(q.steps[i].node, p.steps[i].node);
    EXPECT_EQ(q.steps[i].out, p.steps[i].out);
    ASSERT_EQ(q.steps[i].args.size(), p.steps[i].args.size());
    for (std::size_t k = 0; k < p.steps[i].args.size(); ++k) {
      EXPECT_EQ(q.steps[i].args[k].kind, p.steps[i].args[k].kind);
      EXPECT_EQ(q.steps[i].args[k].id, p.steps[i].args[k].id);
    }
  }
  // Spot checks of fields by hand (a field lost in both directions would not show in a byte comparison).
  EXPECT_EQ(q.steps[0].fusion.kind, FusionKind::kConvAct);
  EXPECT_EQ(q.steps[0].fusion.steps, 2);
  EXPECT_EQ(std::get<UnaryOp>(q.steps[1].op).alpha, 0.1f);
  EXPECT_EQ(std::get<BinaryOp>(q.steps[4].op).kind, BinaryKind::kDiv);
  EXPECT_EQ(std::get<TransposeOp>(q.steps[5].op).strides, (std::vector<std::int64_t>{256, 8, 1, 64}));
  EXPECT_EQ(std::get<ResizeOp>(q.steps[7].op).coord, ResizeCoord::kHalfPixel);
  EXPECT_EQ(std::get<ResizeOp>(q.steps[7].op).nearest, ResizeNearest::kRoundPreferCeil);
  EXPECT_TRUE(std::get<GemvOp>(q.steps[9].op).trans_b);
  EXPECT_EQ(std::get<GemvOp>(q.steps[9].op).beta, 0.5f);
  EXPECT_TRUE(std::get<AvgPoolOp>(q.steps[10].op).count_include_pad);
  EXPECT_EQ(std::get<ConcatOp>(q.steps[12].op).parts, (std::vector<std::int64_t>{3, 3}));
  EXPECT_EQ(std::get<PadOp>(q.steps[15].op).value, -3.0f);
  ASSERT_EQ(q.outputs.size(), 3u);
  EXPECT_EQ(q.outputs[2].name, "nhwc");
  EXPECT_EQ(q.outputs[2].shape, (Shape{1, 8, 8, 4}));
  // Constants: unbound after decoding, the originals after binding.
  EXPECT_EQ(q.consts.size(), 6u);
  EXPECT_EQ(std::get<ConvJob>(q.steps[0].op).weights, nullptr);
  ASSERT_TRUE(gpu::bind_blobs(q, e->blobs).ok());
  EXPECT_EQ(q.consts[3], p.consts[3]);
  EXPECT_EQ(std::get<ConvJob>(q.steps[0].op).bias, std::get<ConvJob>(p.steps[0].op).bias);
  // Re-encoding the decoded program gives the same bytes.
  auto again = encode_program(q);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->bytes, e->bytes);
  // Binding the wrong table is refused.
  std::vector<Blob> short_table(e->blobs.begin(), e->blobs.end() - 1);
  EXPECT_EQ(gpu::bind_blobs(q, short_table).code(), Code::kInvalidArgument);
}

TEST(ProgramCodec, a_real_model_round_trips_and_runs_identically) {
  Net net = small_net();
  auto p = net.program({1, 3, kSide, kSide});
  ASSERT_TRUE(p.ok());
  auto e = encode_program(*p);
  ASSERT_TRUE(e.ok());
  auto d = decode_program(e->bytes);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  ASSERT_TRUE(gpu::bind_blobs(d->program, e->blobs).ok());
  const auto in = image(11);
  const std::span<const float> one[1] = {in};
  auto a = run_program_cpu(*p, one, 1);
  auto b = run_program_cpu(d->program, one, 1);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

TEST(ProgramCodec, every_truncation_is_refused) {
  auto e = encode_program(every_op_program());
  ASSERT_TRUE(e.ok());
  for (std::size_t n = 0; n < e->bytes.size(); ++n) {
    auto d = decode_program(std::span(e->bytes).first(n));
    ASSERT_FALSE(d.ok()) << "decoded from " << n << " of " << e->bytes.size() << " bytes";
    EXPECT_EQ(d.status().code(), Code::kInvalidArgument);
  }
  std::vector<std::byte> longer = e->bytes;
  longer.push_back(std::byte{0});
  EXPECT_EQ(decode_program(longer).status().code(), Code::kInvalidArgument);
}

TEST(ProgramCodec, flipped_bytes_never_crash_and_what_decodes_is_valid) {
  auto e = encode_program(every_op_program());
  ASSERT_TRUE(e.ok());
  int refused = 0;
  for (std::size_t i = 0; i < e->bytes.size(); ++i) {
    for (std::uint8_t mask : {0xFF, 0x01, 0x80}) {
      std::vector<std::byte> b = e->bytes;
      b[i] ^= std::byte{mask};
      auto d = decode_program(b);
      if (!d.ok()) {
        EXPECT_EQ(d.status().code(), Code::kInvalidArgument);
        ++refused;
        continue;
      }
      // What decodes has every index in range: binding a table of the advertised sizes and re-encoding work.
      std::uint64_t total = 0;
      for (auto f : d->blob_floats) total += f;
      if (total > (1u << 22))
        continue;  // a flipped size that validates (an unused constant); too big to bind here
      std::vector<Blob> blobs;
      for (auto f : d->blob_floats) blobs.push_back(std::make_shared<const std::vector<float>>(f, 1.0f));
      EXPECT_TRUE(gpu::bind_blobs(d->program, blobs).ok()) << "byte " << i;
      EXPECT_TRUE(encode_program(d->program).ok());
    }
  }
  EXPECT_GT(refused, static_cast<int>(e->bytes.size()));  // most flips are caught
}

TEST(ProgramCodec, hostile_counts_and_indices_are_refused) {
  Program p = every_op_program();
  auto bad = [](Program q) {
    auto e = encode_program(q);
    return e.ok() ? decode_program(e->bytes).status() : e.status();
  };
  {
    Program q = p;
    q.steps[3].args[1].id = 99;  // constant out of range
    EXPECT_EQ(bad(q).code(), Code::kInvalidArgument);
  }
  {
    Program q = p;
    q.steps[2].args[0].id = 7;  // read before written
    EXPECT_EQ(bad(q).code(), Code::kInvalidArgument);
  }
  {
    Program q = p;
    std::get<TransposeOp>(q.steps[5].op).offset = 10;  // reads past its input
    EXPECT_EQ(bad(q).code(), Code::kInvalidArgument);
  }
  {
    Program q = p;
    std::get<ConvJob>(q.steps[0].op).cout = 5;  // weights and output no longer match
    EXPECT_EQ(bad(q).code(), Code::kInvalidArgument);
  }
  {
    Program q = p;
    q.outputs[0].value = 40;
    EXPECT_EQ(bad(q).code(), Code::kInvalidArgument);
  }
  {
    Program q = p;
    q.steps[0].fusion.steps = 40;  // a group past the last step
    EXPECT_EQ(bad(q).code(), Code::kInvalidArgument);
  }
  EXPECT_TRUE(bad(p).ok());
}

// ---------------------------------------------------------------- input region

TEST(FacesOp, the_input_region_layout_is_parsed_back_and_bounds_checked) {
  gpu::FacesRunArgs a;
  a.input_bytes = 100;
  a.inline_count = 2;
  const std::vector<std::uint64_t> sizes{3, 5, 7};
  const std::vector<std::uint64_t> inline_floats{5, 7};  // constants 1 and 2
  const gpu::InputLayout l = gpu::input_layout(a.input_bytes, inline_floats);
  EXPECT_EQ(l.table_offset, 256u);
  EXPECT_EQ(l.blob_offsets, (std::vector<std::uint64_t>{512, 768}));
  EXPECT_EQ(l.total, 1024u);
  std::vector<std::byte> in(l.total);
  const std::uint32_t table[2] = {1, 2};
  std::memcpy(in.data() + l.table_offset, table, sizeof table);
  auto p = gpu::parse_input(a, in, sizes);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_TRUE(p->inline_blobs[0].empty());
  EXPECT_EQ(p->inline_blobs[1].data(), in.data() + 512);
  EXPECT_EQ(p->inline_blobs[2].size(), 28u);
  EXPECT_EQ(gpu::parse_input(a, std::span(in).first(800), sizes).status().code(), Code::kInvalidArgument);
  const std::uint32_t unsorted[2] = {2, 1};
  std::memcpy(in.data() + l.table_offset, unsorted, sizeof unsorted);
  EXPECT_EQ(gpu::parse_input(a, in, sizes).status().code(), Code::kInvalidArgument);
  const std::uint32_t past[2] = {1, 3};
  std::memcpy(in.data() + l.table_offset, past, sizeof past);
  EXPECT_EQ(gpu::parse_input(a, in, sizes).status().code(), Code::kInvalidArgument);
}

// ---------------------------------------------------------------- accelerator on the simulated executor

/// A backend over a simulated executor with the simulated faces op, and switches the op reads.
struct SimRig {
  runtime::SimulatedExecutor* sim = nullptr;
  std::unique_ptr<runtime::GpuBackend> backend;
  std::shared_ptr<Accelerator> acc;
  std::shared_ptr<std::atomic<int>> fail_code = std::make_shared<std::atomic<int>>(0);  // 0: run normally
  std::shared_ptr<std::atomic<bool>> wrong = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<std::atomic<int>> mode = std::make_shared<std::atomic<int>>(0);  // tamper modes, below
  std::shared_ptr<std::atomic<int>> runs = std::make_shared<std::atomic<int>>(0);
  /// Plan choices: every call's carried blob as text ("" for none), in call order; each reply's blob is
  /// "plan<k>" for the k-th call (from 1).
  struct Choices {
    std::mutex mu;
    std::vector<std::string> carried;
  };
  std::shared_ptr<Choices> choices = std::make_shared<Choices>();

  explicit SimRig(std::uint64_t budget = std::uint64_t{768} << 20, std::uint64_t ring = 8ull << 20,
                  std::uint64_t transfer = 32ull << 20, Precision precision = Precision::kFp32) {
    runtime::ExecutorOptions o;
    o.ring_bytes = ring;
    o.transfer_bytes = transfer;
    auto ex = runtime::make_simulated_executor(o);
    sim = ex.get();
    gpu::SimFacesOptions so;
    so.fail = [c = fail_code, r = runs]() -> Status {
      ++*r;
      const int code = c->load();
      if (code == 0) return {};
      return Status(static_cast<Code>(code), "simulated failure");
    };
    so.tamper = [w = wrong, m = mode](std::vector<float>& v) {
      if (*w) v[0] = v[0] * 1.01f + 1.0f;  // 1 % + 1 off: past the fp32 bar at any magnitude
      if (*m == 1)
        for (float& x : v) x *= 1.01f;  // every value 1 % off: past the fp32 bar, cosine exactly 1
      if (*m == 2)
        for (float& x : v) x = -x;  // cosine −1
    };
    so.plan_choices = [c = choices](std::span<const std::byte> carried) {
      std::lock_guard lock(c->mu);
      c->carried.emplace_back(reinterpret_cast<const char*>(carried.data()), carried.size());
      const std::string reply = "plan" + std::to_string(c->carried.size());
      const auto* b = reinterpret_cast<const std::byte*>(reply.data());
      return std::vector<std::byte>(b, b + reply.size());
    };
    gpu::add_faces_sim_op(*sim, so);
    runtime::RecoveryConfig rc;
    rc.cool_down = std::chrono::duration<double>(0.0);
    backend = runtime::GpuBackend::with_executor(std::move(ex), runtime::SteadyClock::instance(), rc);
    GpuAcceleratorOptions opts;
    opts.resident_budget_bytes = budget;
    opts.precision = precision;
    auto a = gpu::make_gpu_accelerator_on(*backend, opts);
    EXPECT_TRUE(a.ok()) << a.status().to_string();
    acc = *a;
  }
};

std::vector<std::vector<NamedTensor>> cpu_batch(const Net& net,
                                                const std::vector<std::vector<float>>& images) {
  std::vector<std::vector<NamedTensor>> out;
  for (const auto& im : images) {
    auto r = run_program_cpu(*net.program(net.input_shape()), std::vector<std::span<const float>>{im}, 1);
    EXPECT_TRUE(r.ok());
    std::vector<NamedTensor> t;
    for (auto& v : (*r)[0]) t.push_back(NamedTensor{"", {}, std::move(v)});
    out.push_back(std::move(t));
  }
  return out;
}

void expect_same(const std::vector<std::vector<NamedTensor>>& got,
                 const std::vector<std::vector<NamedTensor>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t b = 0; b < got.size(); ++b) {
    ASSERT_EQ(got[b].size(), want[b].size());
    for (std::size_t o = 0; o < got[b].size(); ++o)
      EXPECT_EQ(got[b][o].data, want[b][o].data) << b << "/" << o;
  }
}

/// Constants of the net's program: Program::consts plus each conv's weights and bias.
std::size_t constants_of(const Net& net) {
  auto p = net.program(net.input_shape());
  std::size_t n = p->consts.size();
  for (const auto& s : p->steps)
    if (const auto* j = std::get_if<ConvJob>(&s.op)) n += j->bias ? 2 : 1;
  return n;
}

std::vector<std::vector<float>> images(int n, std::uint32_t seed) {
  std::vector<std::vector<float>> v;
  for (int i = 0; i < n; ++i) v.push_back(image(seed + static_cast<std::uint32_t>(i)));
  return v;
}

std::vector<std::span<const float>> spans(const std::vector<std::vector<float>>& v) {
  return {v.begin(), v.end()};
}

TEST(FacesAccel, attaches_after_the_check_and_runs_a_batch_as_one_submission) {
  SimRig rig;
  Net net = small_net();
  ASSERT_TRUE(net.attach_checked(rig.acc).ok());
  ASSERT_TRUE(net.accelerator().has_value());
  EXPECT_NE(net.accelerator()->find("fp32"), std::string::npos) << *net.accelerator();
  const auto ims = images(16, 100);
  const int before = rig.runs->load();
  auto batch = net.run_batch(spans(ims), net.input_shape());
  ASSERT_TRUE(batch.ok()) << batch.status().to_string();
  EXPECT_EQ(rig.runs->load() - before, 1);  // B = 16 in one submission
  expect_same(*batch, cpu_batch(net, ims));
  // B = 16 equals 16 single runs (each also on the accelerator).
  for (std::size_t i = 0; i < ims.size(); ++i) {
    auto one = net.run(ims[i]);
    ASSERT_TRUE(one.ok());
    ASSERT_EQ(one->size(), 2u);
    EXPECT_EQ((*one)[0].data, (*batch)[i][0].data);
    EXPECT_EQ((*one)[1].data, (*batch)[i][1].data);
    EXPECT_EQ((*one)[1].name, "map");
  }
  EXPECT_EQ(rig.runs->load() - before, 17);
  // Residents: the program and every constant, uploaded once.
  const auto names = rig.sim->resident_names();
  EXPECT_EQ(names.size(), constants_of(net) + 1);
  EXPECT_GT(rig.acc->resident_bytes(), 0u);
  EXPECT_EQ(rig.sim->resident_uploads(), static_cast<int>(names.size()));
}

TEST(FacesAccel, a_deliberately_wrong_accelerator_is_refused_with_a_reason) {
  SimRig rig;
  rig.wrong->store(true);
  Net net = small_net();
  Status st = net.attach_checked(rig.acc);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.what().find("disagrees with the CPU"), std::string::npos) << st.what();
  EXPECT_NE(st.what().find("fp32 bar"), std::string::npos) << st.what();
  EXPECT_FALSE(net.accelerator().has_value());
  // The net runs on the CPU: no further submissions.
  const int before = rig.runs->load();
  ASSERT_TRUE(net.run(image(3)).ok());
  EXPECT_EQ(rig.runs->load(), before);
}

TEST(FacesAccel, tf32_and_bf16_attach_on_the_cosine_bar_which_fp32_does_not_use) {
  const std::uint64_t budget = std::uint64_t{768} << 20, ring = 8ull << 20, transfer = 32ull << 20;
  Net net = small_net();
  SimRig fp32(budget, ring, transfer, Precision::kFp32);
  fp32.mode->store(1);  // 1 % off everywhere
  EXPECT_EQ(net.attach_checked(fp32.acc).code(), Code::kInvalidArgument);
  SimRig tf32(budget, ring, transfer, Precision::kTf32);
  tf32.mode->store(1);
  ASSERT_TRUE(net.attach_checked(tf32.acc).ok());
  EXPECT_NE(net.accelerator()->find("tf32"), std::string::npos) << *net.accelerator();
  SimRig bf16(budget, ring, transfer, Precision::kBf16);
  bf16.mode->store(2);  // negated: cosine −1
  Status st = net.attach_checked(bf16.acc);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.what().find("cosine"), std::string::npos) << st.what();
  EXPECT_FALSE(net.accelerator().has_value());  // a failed check leaves the net CPU-only
}

TEST(FacesAccel, out_of_memory_runs_that_call_on_the_cpu_and_stays_attached) {
  SimRig rig;
  Net net = small_net();
  ASSERT_TRUE(net.attach_checked(rig.acc).ok());
  rig.fail_code->store(static_cast<int>(Code::kOutOfMemory));
  const auto ims = images(3, 7);
  auto r = net.run_batch(spans(ims), net.input_shape());
  ASSERT_TRUE(r.ok());
  expect_same(*r, cpu_batch(net, ims));
  EXPECT_TRUE(net.accelerator().has_value());
  EXPECT_FALSE(net.detach_reason().has_value());
  rig.fail_code->store(0);
  const int before = rig.runs->load();
  ASSERT_TRUE(net.run(ims[0]).ok());
  EXPECT_EQ(rig.runs->load() - before, 1);  // still used
}

TEST(FacesAccel, a_non_oom_error_detaches_for_good_with_its_reason_and_the_call_completes) {
  SimRig rig;
  Net net = small_net();
  ASSERT_TRUE(net.attach_checked(rig.acc).ok());
  rig.fail_code->store(static_cast<int>(Code::kInternal));
  const auto ims = images(4, 20);
  facetrace::testing::ExpectLogs logs;
  auto r = net.run_batch(spans(ims), net.input_shape());
  ASSERT_TRUE(r.ok()) << r.status().to_string();  // the caller never sees the error
  expect_same(*r, cpu_batch(net, ims));
  EXPECT_FALSE(net.accelerator().has_value());
  ASSERT_TRUE(net.detach_reason().has_value());
  EXPECT_NE(net.detach_reason()->find("simulated failure"), std::string::npos) << *net.detach_reason();
  EXPECT_TRUE(logs.contains("detached"));
  EXPECT_EQ(logs.messages().size(), 1u);  // one log line
  rig.fail_code->store(0);
  const int before = rig.runs->load();
  ASSERT_TRUE(net.run(ims[0]).ok());
  EXPECT_EQ(rig.runs->load(), before);  // for good
}

TEST(FacesAccel, a_loss_mid_batch_completes_on_the_cpu_and_the_net_reattaches_after_recovery) {
  SimRig rig;
  Net net = small_net();
  ASSERT_TRUE(net.attach_checked(rig.acc).ok());
  const std::uint64_t gen0 = rig.acc->generation();
  const int uploads0 = rig.sim->resident_uploads();
  const auto ims = images(8, 40);
  facetrace::testing::ExpectLogs logs;  // the backend warns about the loss
  gpu::arm_fault(*rig.acc, runtime::FaultKind::kSimulatedLoss);
  const int before = rig.runs->load();
  auto r = net.run_batch(spans(ims), net.input_shape());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_same(*r, cpu_batch(net, ims));
  EXPECT_EQ(rig.runs->load(), before);  // the op never ran: the loss came inside the turn, before it
  EXPECT_TRUE(rig.backend->is_lost());
  EXPECT_TRUE(net.accelerator().has_value());  // a loss the backend declined: still attached
  // The next call: the backend recovers (cool-down 0), the generation moves, the net re-checks and re-attaches.
  auto r2 = net.run_batch(spans(ims), net.input_shape());
  ASSERT_TRUE(r2.ok());
  expect_same(*r2, cpu_batch(net, ims));
  EXPECT_EQ(rig.acc->generation(), gen0 + 1);
  EXPECT_EQ(rig.sim->restarts(), 1);
  EXPECT_GT(rig.sim->resident_uploads(), uploads0);  // the executor re-uploaded the residents
  EXPECT_EQ(rig.runs->load() - before, 2);           // the re-check and the batch, both on the new device
  EXPECT_TRUE(net.accelerator().has_value());
  EXPECT_FALSE(net.detach_reason().has_value());
}

// docs/design/faces.md §8.2 "Plan choices": the first reply's choices per batch are kept and go with every later
// run of that batch, the replacement child's first runs included; a batch of its own starts without.
TEST(FacesAccel, plan_choices_are_kept_per_batch_and_sent_again_to_a_replacement_child) {
  SimRig rig;
  Net net = small_net();
  ASSERT_TRUE(net.attach_checked(rig.acc).ok());  // call 1: the check at batch 1
  const auto ims = images(8, 60);
  ASSERT_TRUE(net.run_batch(spans(ims), net.input_shape()).ok());  // call 2: batch 8
  ASSERT_TRUE(net.run_batch(spans(ims), net.input_shape()).ok());  // call 3: batch 8 again
  {
    facetrace::testing::ExpectLogs logs;  // the backend warns about the loss
    gpu::arm_fault(*rig.acc, runtime::FaultKind::kSimulatedLoss);
    ASSERT_TRUE(net.run_batch(spans(ims), net.input_shape()).ok());  // on the CPU: no call
    auto r = net.run_batch(spans(ims), net.input_shape());           // calls 4 and 5: re-check at 1, batch 8
    ASSERT_TRUE(r.ok());
    expect_same(*r, cpu_batch(net, ims));
  }
  EXPECT_EQ(rig.sim->restarts(), 1);
  std::lock_guard lock(rig.choices->mu);
  EXPECT_EQ(rig.choices->carried, (std::vector<std::string>{"", "", "plan2", "plan1", "plan2"}));
}

TEST(FacesOp, op_args_carry_plan_choices_only_under_their_flag) {
  gpu::FacesRunArgs a;
  a.batch = 3;
  std::vector<std::byte> args(sizeof a);
  std::memcpy(args.data(), &a, sizeof a);
  gpu::FacesRunArgs got;
  std::span<const std::byte> choices;
  ASSERT_TRUE(gpu::read_op_args(args, got, choices).ok());
  EXPECT_EQ(got.batch, 3u);
  EXPECT_TRUE(choices.empty());
  args.push_back(std::byte{7});  // a byte past the struct without the flag
  EXPECT_EQ(gpu::read_op_args(args, got, choices).code(), Code::kInvalidArgument);
  a.flags = gpu::kRunFlagPlanChoices;
  std::memcpy(args.data(), &a, sizeof a);
  ASSERT_TRUE(gpu::read_op_args(args, got, choices).ok());
  ASSERT_EQ(choices.size(), 1u);
  EXPECT_EQ(choices[0], std::byte{7});
  args.resize(sizeof a + gpu::kMaxPlanChoiceBytes + 1);  // past the blob limit
  EXPECT_EQ(gpu::read_op_args(args, got, choices).code(), Code::kInvalidArgument);
  a.flags = 2;  // a flag this build does not know
  std::memcpy(args.data(), &a, sizeof a);
  args.resize(sizeof a);
  EXPECT_EQ(gpu::read_op_args(args, got, choices).code(), Code::kInvalidArgument);
  gpu::FacesDetectArgs d;
  EXPECT_EQ(gpu::read_op_args(std::span(args).first(sizeof a - 1), d, choices).code(),
            Code::kInvalidArgument);
}

TEST(FacesAccel, a_failed_recheck_after_recovery_detaches_with_the_reason) {
  SimRig rig;
  Net net = small_net();
  ASSERT_TRUE(net.attach_checked(rig.acc).ok());
  facetrace::testing::ExpectLogs logs;  // the loss and the detach warn
  rig.sim->arm_loss_on_invoke(1);
  ASSERT_TRUE(net.run(image(5)).ok());  // the loss: this call on the CPU
  EXPECT_TRUE(rig.backend->is_lost());
  rig.wrong->store(true);  // the replacement device computes wrong results
  auto r = net.run(image(6));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(net.accelerator().has_value());
  ASSERT_TRUE(net.detach_reason().has_value());
  EXPECT_NE(net.detach_reason()->find("re-check"), std::string::npos) << *net.detach_reason();
}

TEST(FacesAccel, constants_past_the_resident_budget_travel_with_each_run_and_agree) {
  SimRig rig(/*budget=*/600);  // the first conv's weights (216 floats = 864 B) do not fit; small ones do
  Net net = small_net();
  ASSERT_TRUE(net.attach_checked(rig.acc).ok());
  EXPECT_LE(rig.acc->resident_bytes(), 600u);
  const auto names = rig.sim->resident_names();
  EXPECT_LT(names.size(), constants_of(net) + 1);  // some constants are not residents
  EXPECT_GT(names.size(), 1u);
  const auto ims = images(5, 60);
  auto r = net.run_batch(spans(ims), net.input_shape());
  ASSERT_TRUE(r.ok());
  expect_same(*r, cpu_batch(net, ims));
  SimRig none(/*budget=*/0);
  Net net2 = small_net();
  ASSERT_TRUE(net2.attach_checked(none.acc).ok());
  EXPECT_EQ(none.acc->resident_bytes(), 0u);
  EXPECT_EQ(none.sim->resident_names().size(), 1u);  // only the program
  auto r2 = net2.run_batch(spans(ims), net2.input_shape());
  ASSERT_TRUE(r2.ok());
  expect_same(*r2, cpu_batch(net2, ims));
}

TEST(FacesAccel, a_batch_past_the_transfer_region_runs_as_sub_batches_with_the_same_results) {
  // 2 MiB ring: a quarter holds 254 images' outputs (516 floats each); 2 MiB transfer: half holds 341 inputs.
  SimRig rig(std::uint64_t{768} << 20, 2ull << 20, 2ull << 20);
  Net net = small_net();
  ASSERT_TRUE(net.attach_checked(rig.acc).ok());
  const auto ims = images(300, 500);
  const int before = rig.runs->load();
  auto r = net.run_batch(spans(ims), net.input_shape());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(rig.runs->load() - before, 2);  // 254 + 46
  expect_same(*r, cpu_batch(net, ims));
  EXPECT_TRUE(net.accelerator().has_value());
}

TEST(FacesAccel, conv_declines_below_min_macs_and_matches_the_cpu_above) {
  SimRig rig;
  ConvJob small;
  small.cin = 1, small.h = 8, small.w = 8, small.cout = 1, small.kh = 3, small.kw = 3, small.oh = 6,
  small.ow = 6;
  small.weights = std::make_shared<const std::vector<float>>(9, 0.5f);
  const std::vector<float> x(64, 1.0f);
  const int before = rig.runs->load();
  EXPECT_FALSE(rig.acc->conv(small, x).has_value());
  EXPECT_EQ(rig.runs->load(), before);
  ConvJob big;  // 16·32·32·16·9 = 2 359 296 ≥ 2²⁰
  big.cin = 16, big.h = 32, big.w = 32, big.cout = 16, big.kh = 3, big.kw = 3, big.pt = 1, big.pl = 1;
  big.oh = 32, big.ow = 32;
  big.weights = std::make_shared<const std::vector<float>>(random_floats(16 * 16 * 9, 70));
  big.bias = std::make_shared<const std::vector<float>>(random_floats(16, 71));
  ASSERT_GE(big.macs(), gpu::kMinMacs);
  const auto in = random_floats(16 * 32 * 32, 72);
  auto got = rig.acc->conv(big, in);
  ASSERT_TRUE(got.has_value());
  ASSERT_TRUE(got->ok()) << got->status().to_string();
  auto want = conv_cpu(big, in, 1);
  ASSERT_TRUE(want.ok());
  ASSERT_EQ((*got)->size(), want->size());
  for (std::size_t i = 0; i < want->size(); ++i) EXPECT_NEAR((**got)[i], (*want)[i], 1e-4) << i;
}

TEST(FacesAccel, declines_a_wrong_input_length_and_a_backend_without_gpu) {
  SimRig rig;
  Net net = small_net();
  auto p = net.program(net.input_shape());
  const std::vector<float> wrong(10, 0.0f);
  const std::span<const float> one[1] = {wrong};
  EXPECT_FALSE(rig.acc->run_program(*p, one).has_value());
  auto disabled = runtime::GpuBackend::disabled("no GPU in this test");
  auto a = gpu::make_gpu_accelerator_on(*disabled, {});
  EXPECT_EQ(a.status().code(), Code::kNotSupported);
  EXPECT_NE(a.status().what().find("no GPU in this test"), std::string::npos);
}

TEST(FacesAccel, make_gpu_accelerator_says_why_not_without_a_gpu) {
  auto a = make_gpu_accelerator();
#ifdef FT_FACES_TEST_NO_CUDA
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), Code::kNotSupported);
  EXPECT_NE(a.status().what().find("built without CUDA"), std::string::npos) << a.status().what();
#else
  if (!a.ok()) {
    EXPECT_EQ(a.status().code(), Code::kNotSupported);
    EXPECT_NE(a.status().what().find("no usable GPU"), std::string::npos) << a.status().what();
  }
#endif
}

TEST(FacesAccel, options_read_the_resident_budget_from_the_environment) {
  ::setenv("FACETRACE_FACES_RESIDENT_MB", "12", 1);
  EXPECT_EQ(GpuAcceleratorOptions::from_env().resident_budget_bytes, std::uint64_t{12} << 20);
  ::unsetenv("FACETRACE_FACES_RESIDENT_MB");
  EXPECT_EQ(GpuAcceleratorOptions::from_env().resident_budget_bytes, std::uint64_t{768} << 20);
  Precision p = Precision::kFp32;
  EXPECT_TRUE(parse_precision("bf16", p));
  EXPECT_EQ(p, Precision::kBf16);
  EXPECT_FALSE(parse_precision("fp16", p));
  EXPECT_EQ(precision_name(Precision::kTf32), "tf32");
}

// ---------------------------------------------------------------- YuNet end to end (kOpFacesDetect)

/// A rig whose simulated ops also count their calls per op.
struct DetectRig : SimRig {
  std::shared_ptr<std::atomic<int>> run_calls = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<int>> detect_calls = std::make_shared<std::atomic<int>>(0);
  explicit DetectRig(std::uint64_t ring = 8ull << 20) : SimRig(std::uint64_t{768} << 20, ring) {
    gpu::SimFacesOptions so;
    so.fail = [c = fail_code, r = runs]() -> Status {
      ++*r;
      const int code = c->load();
      return code == 0 ? Status{} : Status(static_cast<Code>(code), "simulated failure");
    };
    so.seen = [rc = run_calls, dc = detect_calls](runtime::OpId op) {
      if (op == gpu::kOpFacesRun) ++*rc;
      if (op == gpu::kOpFacesDetect) ++*dc;
    };
    gpu::add_faces_sim_op(*sim, so);
  }
};

Detector yunet_detector() {
  auto d = Detector::builtin();
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  return std::move(*d);
}

/// The photos of tests/data/images plus small synthetic frames (odd sizes, one enlarged by the letterbox).
std::vector<core::Image> detect_frames(const std::string& data, int photos) {
  std::vector<core::Image> v;
  for (const char* name :
       {"obama_portrait_2012.jpg", "obama_biden_kagan_crop_2010.jpg", "biden_crop_2010.jpg"}) {
    if (static_cast<int>(v.size()) >= photos) break;
    auto im = core::load_image(data + "/images/" + name);
    EXPECT_TRUE(im.ok()) << name << ": " << im.status().to_string();
    if (im) v.push_back(std::move(*im));
  }
  for (auto [w, h] : {std::pair{97, 61}, std::pair{13, 300}}) {
    core::Image im;
    im.width = w, im.height = h;
    im.rgb.resize(static_cast<std::size_t>(w) * h * 3);
    std::uint32_t x = 12345u + static_cast<std::uint32_t>(w);
    for (auto& b : im.rgb) {
      x ^= x << 13, x ^= x >> 17, x ^= x << 5;
      b = static_cast<std::uint8_t>(x >> 24);
    }
    v.push_back(std::move(im));
  }
  return v;
}

/// Field by field, bit for bit (the expected side is the CPU detector, never the accelerator).
void expect_same_detections(const std::vector<Detection>& got, const std::vector<Detection>& want,
                            const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const Detection &a = got[i], &b = want[i];
    EXPECT_EQ(a.score, b.score) << what << " #" << i;
    EXPECT_EQ(a.x0, b.x0) << what << " #" << i;
    EXPECT_EQ(a.y0, b.y0) << what << " #" << i;
    EXPECT_EQ(a.x1, b.x1) << what << " #" << i;
    EXPECT_EQ(a.y1, b.y1) << what << " #" << i;
    for (std::size_t l = 0; l < 5; ++l) {
      EXPECT_EQ(a.landmarks[l].x, b.landmarks[l].x) << what << " #" << i << " landmark " << l;
      EXPECT_EQ(a.landmarks[l].y, b.landmarks[l].y) << what << " #" << i << " landmark " << l;
    }
  }
}

/// Per image: the accelerated detector's result equals the CPU-only detector's detect of that image alone.
void expect_cpu_results(const std::vector<Expected<std::vector<Detection>>>& got, const Detector& cpu,
                        const std::vector<core::Image>& frames, const DetectOptions& o) {
  ASSERT_EQ(got.size(), frames.size());
  for (std::size_t i = 0; i < frames.size(); ++i) {
    auto want = cpu.detect(frames[i], o);
    ASSERT_EQ(got[i].ok(), want.ok()) << "image " << i;
    if (!want) {
      EXPECT_EQ(got[i].status().to_string(), want.status().to_string());
      continue;
    }
    expect_same_detections(*got[i], *want, "image " + std::to_string(i));
  }
}

TEST(FacesDetectAccel, a_batch_runs_letterbox_network_and_nms_in_one_submission_equal_to_the_cpu) {
  FT_REQUIRE_TEST_DATA(data);
  DetectRig rig;
  Detector det = yunet_detector();
  const Detector cpu = yunet_detector();                     // its own Net: never attached
  ASSERT_TRUE(Net(det.net()).attach_checked(rig.acc).ok());  // copies share the attachment
  auto frames = detect_frames(data, 2);
  core::Image bad;  // a wrong byte count: its own error, the others still run
  bad.width = 10, bad.height = 10;
  bad.rgb.resize(7);
  frames.insert(frames.begin() + 1, bad);
  DetectOptions o;
  o.score = 0.5f;
  const int runs0 = rig.run_calls->load(), det0 = rig.detect_calls->load();
  const auto got = det.detect_batch(frames, o);
  EXPECT_EQ(rig.detect_calls->load() - det0, 1);  // the whole batch: one kOpFacesDetect
  EXPECT_EQ(rig.run_calls->load() - runs0, 0);    // and no program run with a host decode
  expect_cpu_results(got, cpu, frames, o);
  EXPECT_FALSE(got[1].ok());
  ASSERT_TRUE(got[0].ok());
  EXPECT_GE(got[0]->size(), 1u);  // the portrait has a face: the comparison is not of empty lists
  // detect of one photo: the same op, the same result.
  auto one = det.detect(frames[2], o);
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_EQ(rig.detect_calls->load() - det0, 2);
  expect_same_detections(*one, *got[2], "single");
  EXPECT_TRUE(det.net().accelerator().has_value());
}

TEST(FacesDetectAccel, sub_batches_past_the_ring_keep_the_images_in_order) {
  FT_REQUIRE_TEST_DATA(data);
  // 4 MiB ring: a quarter holds the replies of 4 images at max_faces 4000 (256 + 4·4000·60 bytes ≤ 1 MiB).
  DetectRig rig(4ull << 20);
  Detector det = yunet_detector();
  const Detector cpu = yunet_detector();
  ASSERT_TRUE(Net(det.net()).attach_checked(rig.acc).ok());  // copies share the attachment
  const auto frames = detect_frames(data, 3);                // 3 photos + 2 synthetic
  ASSERT_EQ(frames.size(), 5u);
  DetectOptions o;
  o.max_faces = 4000;
  o.score = 0.3f;
  const int det0 = rig.detect_calls->load();
  const auto got = det.detect_batch(frames, o);
  EXPECT_EQ(rig.detect_calls->load() - det0, 2);  // 4 + 1
  expect_cpu_results(got, cpu, frames, o);
}

TEST(FacesDetectAccel, oom_runs_the_call_on_the_cpu_attached_and_another_error_detaches) {
  FT_REQUIRE_TEST_DATA(data);
  DetectRig rig;
  Detector det = yunet_detector();
  const Detector cpu = yunet_detector();
  ASSERT_TRUE(Net(det.net()).attach_checked(rig.acc).ok());  // copies share the attachment
  const auto frames = detect_frames(data, 1);
  DetectOptions o;
  rig.fail_code->store(static_cast<int>(Code::kOutOfMemory));
  expect_cpu_results(det.detect_batch(frames, o), cpu, frames, o);
  EXPECT_TRUE(det.net().accelerator().has_value());
  EXPECT_FALSE(det.net().detach_reason().has_value());

  rig.fail_code->store(static_cast<int>(Code::kInternal));
  facetrace::testing::ExpectLogs logs;
  const int det0 = rig.detect_calls->load(), runs0 = rig.run_calls->load();
  expect_cpu_results(det.detect_batch(frames, o), cpu, frames, o);  // the caller never sees the error
  EXPECT_EQ(rig.detect_calls->load() - det0, 1);
  EXPECT_EQ(rig.run_calls->load() - runs0, 0);  // detached by the detect op's error: the rest is the CPU
  EXPECT_FALSE(det.net().accelerator().has_value());
  ASSERT_TRUE(det.net().detach_reason().has_value());
  EXPECT_NE(det.net().detach_reason()->find("simulated failure"), std::string::npos)
      << *det.net().detach_reason();
  EXPECT_TRUE(logs.contains("detached"));
}

TEST(FacesDetectAccel, native_input_and_a_detector_without_accelerator_keep_their_paths) {
  DetectRig rig;
  Detector det = yunet_detector();
  const auto frames = detect_frames("", 0);  // the synthetic frames only
  DetectOptions o;
  o.score = 0.05f;
  const int det0 = rig.detect_calls->load();
  auto plain = det.detect_batch(frames, o);  // not attached: the CPU, no submission
  EXPECT_EQ(rig.runs->load(), 0);
  ASSERT_TRUE(Net(det.net()).attach_checked(rig.acc).ok());  // copies share the attachment
  const int runs0 = rig.run_calls->load();
  o.input = DetectInput::kNative;  // the native pad runs the program on the device and decodes on the host
  auto native = det.detect_batch(frames, o);
  EXPECT_EQ(rig.detect_calls->load() - det0, 0);
  EXPECT_GE(rig.run_calls->load() - runs0, 1);
  const Detector cpu = yunet_detector();
  expect_cpu_results(native, cpu, frames, o);
  o.input = DetectInput::kLetterbox;
  ASSERT_EQ(plain.size(), frames.size());
  for (std::size_t i = 0; i < frames.size(); ++i) {
    ASSERT_TRUE(plain[i].ok());
    auto accel = det.detect(frames[i], o);
    ASSERT_TRUE(accel.ok());
    expect_same_detections(*accel, *plain[i], "letterbox " + std::to_string(i));
  }
  EXPECT_EQ(rig.detect_calls->load() - det0, static_cast<int>(frames.size()));
}

// ---------------------------------------------------------------- pace

TEST(FacesPace, idles_a_slot_for_t_times_one_minus_share_over_share_capped_at_two_seconds) {
  gpu::Pace pace;
  pace.set(1, 0.25);
  EXPECT_EQ(pace.idle_after(20ms), std::chrono::duration_cast<gpu::Pace::Clock::duration>(60ms));
  EXPECT_EQ(pace.idle_after(10s), std::chrono::duration_cast<gpu::Pace::Clock::duration>(2s));
  const auto t0 = gpu::Pace::Clock::now();
  {
    gpu::Pace::Slot s(pace);
    std::this_thread::sleep_for(20ms);
  }
  { gpu::Pace::Slot s(pace); }  // waits for the first slot's idle time (≈ 60 ms)
  const auto ms = std::chrono::duration<double, std::milli>(gpu::Pace::Clock::now() - t0).count();
  EXPECT_GE(ms, 78.0);
  pace.set(0, std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(pace.concurrent(), 1);
  EXPECT_EQ(pace.share(), 1.0);
  pace.set(3, 0.001);
  EXPECT_EQ(pace.share(), 0.05);
}

TEST(FacesPace, allows_concurrent_runs_up_to_the_limit) {
  gpu::Pace pace;
  pace.set(2, 1.0);
  std::atomic<int> inside{0}, peak{0};
  auto work = [&] {
    gpu::Pace::Slot s(pace);
    const int n = ++inside;
    int p = peak.load();
    while (n > p && !peak.compare_exchange_weak(p, n)) {
    }
    std::this_thread::sleep_for(30ms);
    --inside;
  };
  std::vector<std::thread> t;
  for (int i = 0; i < 4; ++i) t.emplace_back(work);
  for (auto& x : t) x.join();
  EXPECT_EQ(peak.load(), 2);
}

}  // namespace
}  // namespace facetrace::faces
