/// @file
/// The built-in YuNet on the photos (tests/data) and odd inputs; a generated MobileFaceNet-shaped embedder checked
/// against a naive reference written here; the Embedder API; batches (detect_batch, embed_batch) against single
/// calls; the native input size; alignment, letterbox, SHA-256 and image decode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "compare.h"
#include "facetrace/core/image.h"
#include "facetrace/faces/align.h"
#include "facetrace/faces/detector.h"
#include "facetrace/faces/embedder.h"
#include "facetrace/faces/sha256.h"
#include "log_guard.h"
#include "onnx_builder.h"

namespace facetrace::faces {
namespace {

using testing::OnnxBuilder;
using testing::random_floats;

const char* kPhotos[] = {"astronaut_eileen_collins.png", "obama_portrait_2012.jpg", "obama_congress_2009.jpg",
                         "biden_crop_2010.jpg", "obama_biden_kagan_crop_2010.jpg"};

const Detector& yunet() {
  static const Detector d = [] {
    auto r = Detector::builtin();
    if (!r) throw std::runtime_error(r.status().to_string());
    return std::move(*r);
  }();
  return d;
}

// ---- a generated MobileFaceNet-shaped embedder --------------------------------------------------------------
// The foamliu MobileFaceNet export (docs/design/faces.md §7) is Conv (BatchNorm folded in, depthwise among them, a global
// depthwise at the end), Clip(0, 6) with its bounds from Constant nodes, Relu, Add and one Reshape to [1,128]. The
// model below has each of those forms, with pseudo-random weights, and runs in a few milliseconds.

constexpr int kSide = 112;
constexpr int kDim = 128;

enum class Act { kNone, kRelu6, kRelu };

struct ConvLayer {
  int cin, cout, k, stride, pad, groups;
  Act act;
  std::vector<float> w;  // [cout][cin / groups][k][k]
  std::vector<float> b;  // [cout]
};

/// A convolution with uniform weights of variance gain²/fan_in and small biases, from `seed`.
ConvLayer conv(int cin, int cout, int k, int stride, int pad, int groups, Act act, std::uint32_t seed,
               float gain = 1.0f) {
  const int fan_in = cin / groups * k * k;
  const float a = gain * std::sqrt(3.0f / static_cast<float>(fan_in));
  return {cin,
          cout,
          k,
          stride,
          pad,
          groups,
          act,
          random_floats(static_cast<std::size_t>(cout) * fan_in, seed, -a, a),
          random_floats(static_cast<std::size_t>(cout), seed + 1000, -0.1f, 0.1f)};
}

/// Convs run in order; a residual stage adds its input to its output.
struct Stage {
  std::vector<ConvLayer> convs;
  bool residual = false;
};

std::vector<Stage> mobilefacenet_like() {
  return {
      {{conv(3, 16, 3, 2, 1, 1, Act::kRelu6, 1, 4.0f)}},  // stem 3×3/2 → 56²; gain 4 so ReLU6 also clips at 6
      {{conv(16, 16, 3, 1, 1, 16, Act::kRelu6, 2)}},      // depthwise 3×3
      {{conv(16, 32, 1, 1, 0, 1, Act::kRelu6, 3), conv(32, 32, 3, 1, 1, 32, Act::kRelu6, 4),
        conv(32, 16, 1, 1, 0, 1, Act::kNone, 5)},
       true},  // bottleneck: expand, depthwise, linear projection, + input
      {{conv(16, 32, 1, 1, 0, 1, Act::kRelu6, 6), conv(32, 32, 3, 2, 1, 32, Act::kRelu6, 7),
        conv(32, 24, 1, 1, 0, 1, Act::kNone, 8)}},     // bottleneck with stride 2 → 28²
      {{conv(24, 64, 1, 1, 0, 1, Act::kRelu, 9)}},     // 1×1 + Relu
      {{conv(64, 64, 28, 1, 0, 64, Act::kNone, 10)}},  // global depthwise 28×28 → 1×1
      {{conv(64, kDim, 1, 1, 0, 1, Act::kNone, 11)}},  // linear embedding
  };
}

std::vector<std::uint8_t> build_onnx(const std::vector<Stage>& net) {
  OnnxBuilder m(18);
  m.input("input0", {1, 3, kSide, kSide}).output("output0", {1, kDim});
  int id = 0;
  auto emit = [&](const ConvLayer& c, const std::string& in) {
    const std::string n = std::to_string(id++);
    m.init("w" + n, {c.cout, c.cin / c.groups, c.k, c.k}, c.w).init("b" + n, {c.cout}, c.b);
    auto* node = m.node("Conv", {in, "w" + n, "b" + n}, {"conv" + n});
    OnnxBuilder::ints(node, "kernel_shape", {c.k, c.k});
    OnnxBuilder::ints(node, "strides", {c.stride, c.stride});
    OnnxBuilder::ints(node, "pads", {c.pad, c.pad, c.pad, c.pad});
    OnnxBuilder::int1(node, "group", c.groups);
    if (c.act == Act::kNone) return "conv" + n;
    if (c.act == Act::kRelu) {
      m.node("Relu", {"conv" + n}, {"act" + n});
    } else {
      OnnxBuilder::tensor(m.node("Constant", {}, {"lo" + n}), "value", {}, {0.0f});
      OnnxBuilder::tensor(m.node("Constant", {}, {"hi" + n}), "value", {}, {6.0f});
      m.node("Clip", {"conv" + n, "lo" + n, "hi" + n}, {"act" + n});
    }
    return "act" + n;
  };
  std::string x = "input0";
  for (const Stage& s : net) {
    std::string y = x;
    for (const ConvLayer& c : s.convs) y = emit(c, y);
    if (s.residual) {
      m.node("Add", {y, x}, {"add" + std::to_string(id)});
      y = "add" + std::to_string(id);
    }
    x = y;
  }
  OnnxBuilder::ints(m.node("Constant", {}, {"shape"}), "value_ints", {1, -1});
  m.node("Reshape", {x, "shape"}, {"output0"});
  return m.bytes();
}

// The naive reference: planar double tensors and the plain loops of the ONNX definitions.
struct Planes {
  int c = 0, h = 0, w = 0;
  std::vector<double> v;
  double& at(int ci, int y, int x) { return v[(static_cast<std::size_t>(ci) * h + y) * w + x]; }
  double at(int ci, int y, int x) const { return v[(static_cast<std::size_t>(ci) * h + y) * w + x]; }
};

struct ClipHits {
  long lo = 0, hi = 0;
};

Planes conv_ref(const Planes& x, const ConvLayer& c, ClipHits& hits) {
  Planes y{c.cout, (x.h + 2 * c.pad - c.k) / c.stride + 1, (x.w + 2 * c.pad - c.k) / c.stride + 1, {}};
  y.v.resize(static_cast<std::size_t>(y.c) * y.h * y.w);
  const int in_per_group = c.cin / c.groups, out_per_group = c.cout / c.groups;
  for (int o = 0; o < c.cout; ++o)
    for (int oy = 0; oy < y.h; ++oy)
      for (int ox = 0; ox < y.w; ++ox) {
        double s = c.b[static_cast<std::size_t>(o)];
        for (int i = 0; i < in_per_group; ++i) {
          const int ci = o / out_per_group * in_per_group + i;
          for (int ky = 0; ky < c.k; ++ky)
            for (int kx = 0; kx < c.k; ++kx) {
              const int iy = oy * c.stride - c.pad + ky, ix = ox * c.stride - c.pad + kx;
              if (iy < 0 || iy >= x.h || ix < 0 || ix >= x.w) continue;
              s += static_cast<double>(
                       c.w[((static_cast<std::size_t>(o) * in_per_group + i) * c.k + ky) * c.k + kx]) *
                   x.at(ci, iy, ix);
            }
        }
        if (c.act == Act::kRelu) s = std::max(s, 0.0);
        if (c.act == Act::kRelu6) {
          hits.lo += s<0.0, hits.hi += s> 6.0;
          s = std::min(std::max(s, 0.0), 6.0);
        }
        y.at(o, oy, ox) = s;
      }
  return y;
}

/// The raw (not normalised) 128 outputs for an aligned 112×112 RGB face, preprocessed as the ArcFace default
/// that an unknown model gets: planar RGB, (x − 127.5) / 127.5.
std::vector<double> reference_embedding(const std::vector<Stage>& net, const core::Image& face,
                                        ClipHits& hits) {
  Planes x{3, kSide, kSide, std::vector<double>(3 * kSide * kSide)};
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < kSide; ++y)
      for (int xx = 0; xx < kSide; ++xx)
        x.at(c, y, xx) = (face.rgb[(static_cast<std::size_t>(y) * kSide + xx) * 3 + c] - 127.5) / 127.5;
  for (const Stage& s : net) {
    Planes y = x;
    for (const ConvLayer& c : s.convs) y = conv_ref(y, c, hits);
    if (s.residual)
      for (std::size_t i = 0; i < y.v.size(); ++i) y.v[i] += x.v[i];
    x = std::move(y);
  }
  return x.v;
}

/// A deterministic 112×112 RGB test pattern (gradients and a product term, every byte value present).
core::Image pattern_face(int salt = 0) {
  core::Image im{kSide, kSide, std::vector<std::uint8_t>(static_cast<std::size_t>(kSide) * kSide * 3)};
  for (int y = 0; y < kSide; ++y)
    for (int x = 0; x < kSide; ++x)
      for (int c = 0; c < 3; ++c)
        im.rgb[(static_cast<std::size_t>(y) * kSide + x) * 3 + c] =
            static_cast<std::uint8_t>((x * 7 + y * 13 + c * 50 + (x * y + salt) % 31) % 256);
  return im;
}

const std::vector<Stage>& generated_net() {
  static const std::vector<Stage> net = mobilefacenet_like();
  return net;
}

const std::vector<std::uint8_t>& generated_bytes() {
  static const std::vector<std::uint8_t> bytes = build_onnx(generated_net());
  return bytes;
}

const Embedder& generated_embedder() {
  static const Embedder e = [] {
    auto r = Embedder::create(generated_bytes());
    if (!r) throw std::runtime_error(r.status().to_string());
    return std::move(*r);
  }();
  return e;
}

double norm2(std::span<const float> v) {
  double n2 = 0;
  for (float f : v) n2 += static_cast<double>(f) * f;
  return n2;
}

TEST(FacesSha256, known_vectors) {
  EXPECT_EQ(sha256_hex({}), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string abc = "abc";
  EXPECT_EQ(sha256_hex({reinterpret_cast<const std::uint8_t*>(abc.data()), abc.size()}),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string m(1000, 'a');
  EXPECT_EQ(sha256_hex({reinterpret_cast<const std::uint8_t*>(m.data()), 56}),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
}

TEST(FacesYunet, the_built_in_model_is_the_shipped_yunet_2023mar) {
  const auto bytes = builtin_yunet_onnx();
  EXPECT_EQ(bytes.size(), 232589u);  // models/SOURCES.md
  EXPECT_EQ(sha256_hex(bytes), "8f2383e4dd3cfbb4553ea8718107fc0423210dc964f9f4280604804ed2552fa4");
  EXPECT_EQ(yunet().input_size(), 640);
  EXPECT_EQ(yunet().net().output_names().size(), 12u);
  DetectorConfig other;
  other.expected_sha256 = std::string(64, '0');  // a pin for another file refuses the built-in one, naming it
  auto d = Detector::builtin(other);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::kInvalidArgument);
  EXPECT_NE(d.status().what().find("sha256"), std::string::npos) << d.status().to_string();
}

TEST(FacesYunet, one_face_per_photo_with_landmarks_inside_the_box) {
  FT_REQUIRE_TEST_DATA(dir);
  const Detector& det = yunet();
  for (const char* name : kPhotos) {
    SCOPED_TRACE(name);
    auto im = core::load_image(dir + "/images/" + name);
    ASSERT_TRUE(im.ok()) << im.status().to_string();
    auto faces = det.detect(*im);
    ASSERT_TRUE(faces.ok()) << faces.status().to_string();
    ASSERT_EQ(faces->size(), 1u);
    const Detection& d = (*faces)[0];
    EXPECT_GE(d.score, 0.6f);
    EXPECT_GT(d.x1 - d.x0, 40.0f);
    for (const Point& p : d.landmarks) {
      EXPECT_GE(p.x, d.x0);
      EXPECT_LE(p.x, d.x1);
      EXPECT_GE(p.y, d.y0);
      EXPECT_LE(p.y, d.y1);
    }
    EXPECT_LT(d.landmarks[0].x, d.landmarks[1].x);  // image-left eye first
    EXPECT_LT(d.landmarks[0].y, d.landmarks[3].y);  // eyes above the mouth
    auto again = det.detect(*im);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ((*again)[0].x0, d.x0);  // deterministic
    EXPECT_EQ((*again)[0].score, d.score);
  }
}

TEST(FacesYunet, blank_and_odd_sizes_give_no_faces) {
  const Detector& det = yunet();
  for (auto [w, h] :
       {std::pair{640, 480}, std::pair{100, 700}, std::pair{1, 1}, std::pair{37, 41}, std::pair{1000, 20}}) {
    SCOPED_TRACE(::testing::Message() << w << "x" << h);
    const std::vector<std::uint8_t> grey(static_cast<std::size_t>(w) * h * 3, 128);
    auto faces = det.detect(grey, w, h);
    ASSERT_TRUE(faces.ok()) << faces.status().to_string();
    EXPECT_TRUE(faces->empty());
  }
  const std::vector<std::uint8_t> black(37 * 41 * 3, 0);
  auto faces = det.detect(black, 37, 41);
  ASSERT_TRUE(faces.ok());
  EXPECT_TRUE(faces->empty());
  EXPECT_FALSE(det.detect(black, 41, 41).ok());  // wrong byte count
  EXPECT_FALSE(det.detect(black, 0, 41).ok());
}

TEST(FacesYunet, load_reads_a_file_and_refuses_missing_and_truncated_ones) {
  const auto bytes = builtin_yunet_onnx();
  const std::string path =
      (std::filesystem::temp_directory_path() / "ft_faces_models_test_yunet.onnx").string();
  {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  auto full = Detector::load(path);
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  EXPECT_EQ(full->input_size(), 640);
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size() / 2));
  }
  auto cut = Detector::load(path);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), Code::kInvalidArgument);
  EXPECT_NE(cut.status().what().find(path), std::string::npos) << cut.status().to_string();
  std::filesystem::remove(path);
  auto missing = Detector::load(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kIo);
}

TEST(FacesEmbed, generated_mobilefacenet_matches_a_naive_reference) {
  const Embedder& emb = generated_embedder();
  // An unknown model: identified by its own sha256, ArcFace preprocessing, the size and length from the graph.
  EXPECT_EQ(emb.info().name, "unknown (ArcFace-style)");
  EXPECT_EQ(emb.info().sha256, sha256_hex(generated_bytes()));
  EXPECT_EQ(emb.info().bytes, static_cast<std::int64_t>(generated_bytes().size()));
  EXPECT_EQ(emb.info().input, kSide);
  EXPECT_EQ(emb.info().dim, kDim);
  EXPECT_EQ(emb.info().match, 0.0f);
  for (int salt : {0, 17}) {
    SCOPED_TRACE(salt);
    const core::Image face = pattern_face(salt);
    ClipHits hits;
    const std::vector<double> want = reference_embedding(generated_net(), face, hits);
    EXPECT_GT(hits.lo, 0);  // the input drives both ReLU6 bounds
    EXPECT_GT(hits.hi, 0);
    auto x = emb.preprocess(face);
    ASSERT_TRUE(x.ok()) << x.status().to_string();
    auto raw = emb.net().run(*x);
    ASSERT_TRUE(raw.ok()) << raw.status().to_string();
    ASSERT_EQ(raw->size(), 1u);
    EXPECT_EQ((*raw)[0].shape, (Shape{1, kDim}));
    double scale = 0;
    for (double v : want) scale = std::max(scale, std::abs(v));
    ASSERT_GT(scale, 0.1);
    // f32 (FMA, blocked sums) against f64 sums of up to 784 terms: errors near 1e-6 of the largest output
    EXPECT_TRUE(facetrace::testing::all_close((*raw)[0].data, want, {1e-5 * scale, 0.0}));
    // embed = the same outputs divided by their f64 norm
    double n = 0;
    for (double v : want) n += v * v;
    std::vector<double> unit(want.size());
    for (std::size_t i = 0; i < want.size(); ++i) unit[i] = want[i] / std::sqrt(n);
    auto e = emb.embed(face);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    EXPECT_TRUE(facetrace::testing::all_close(*e, unit, {2e-6, 0.0}));
  }
}

TEST(FacesEmbed, embeddings_are_unit_norm_deterministic_and_independent_of_threads) {
  const core::Image face = pattern_face();
  auto a = generated_embedder().embed(face);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_NEAR(norm2(*a), 1.0, 1e-6);
  auto b = generated_embedder().embed(face);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(facetrace::testing::bit_identical(*a, *b));
  auto one = Embedder::create(generated_bytes(), 1);
  ASSERT_TRUE(one.ok());
  auto c = one->embed(face);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(facetrace::testing::bit_identical(*c, *a));  // 1 thread and all threads: the same bits
  std::vector<std::vector<float>> par(4);
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i)
    ts.emplace_back([&, i] { par[static_cast<std::size_t>(i)] = generated_embedder().embed(face).value(); });
  for (auto& t : ts) t.join();
  for (const auto& p : par) EXPECT_TRUE(facetrace::testing::bit_identical(p, *a));
  auto other = generated_embedder().embed(pattern_face(17));
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *a);
}

TEST(FacesEmbed, embed_face_aligns_the_detection_then_embeds) {
  FT_REQUIRE_TEST_DATA(dir);
  const Embedder& emb = generated_embedder();
  std::vector<std::vector<float>> vs;
  for (const char* name : {kPhotos[0], kPhotos[1]}) {
    SCOPED_TRACE(name);
    auto im = core::load_image(dir + "/images/" + name);
    ASSERT_TRUE(im.ok());
    auto faces = yunet().detect(*im);
    ASSERT_TRUE(faces.ok());
    ASSERT_FALSE(faces->empty());
    auto al = align_face(*im, (*faces)[0].landmarks, kSide, kSide);
    ASSERT_TRUE(al.ok());
    auto direct = emb.embed(*al);
    auto via = emb.embed_face(*im, (*faces)[0]);
    ASSERT_TRUE(direct.ok()) << direct.status().to_string();
    ASSERT_TRUE(via.ok()) << via.status().to_string();
    EXPECT_TRUE(facetrace::testing::bit_identical(*via, *direct));
    EXPECT_NEAR(norm2(*via), 1.0, 1e-6);
    vs.push_back(*via);
  }
  EXPECT_NE(vs[0], vs[1]);  // two people, two photos: the input reaches the embedding
}

// A one-conv model: Conv 1×1 3→8 → GlobalAveragePool (8 values), input `dims`; optional second output.
std::vector<std::uint8_t> tiny_embedder(const std::vector<std::int64_t>& dims, bool zero = false,
                                        bool two_outputs = false) {
  OnnxBuilder m(13);
  m.input("x", dims).output("y");
  if (two_outputs) m.output("z");
  m.init("w", {8, dims[1], 1, 1},
         zero ? std::vector<float>(static_cast<std::size_t>(8 * dims[1]), 0.0f)
              : random_floats(static_cast<std::size_t>(8 * dims[1]), 5));
  m.init("b", {8}, std::vector<float>(8, 0.0f));
  m.node("Conv", {"x", "w", "b"}, {"c"});
  m.node("GlobalAveragePool", {"c"}, {"y"});
  if (two_outputs) m.node("Relu", {"y"}, {"z"});
  return m.bytes();
}

TEST(FacesEmbed, create_refuses_wrong_shapes_and_embed_refuses_wrong_faces) {
  auto ok = Embedder::create(tiny_embedder({1, 3, 32, 32}));
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->info().input, 32);
  EXPECT_EQ(ok->info().dim, 8);
  auto refused = [](const std::vector<std::uint8_t>& bytes, const std::string& needle) {
    auto e = Embedder::create(bytes);
    ASSERT_FALSE(e.ok()) << "accepted; expected '" << needle << "'";
    EXPECT_EQ(e.status().code(), Code::kInvalidArgument);
    EXPECT_NE(e.status().what().find(needle), std::string::npos) << e.status().to_string();
  };
  refused(tiny_embedder({1, 1, 32, 32}), "[1,3,S,S]");
  refused(tiny_embedder({1, 3, 32, 24}), "[1,3,S,S]");
  refused(tiny_embedder({1, 3, 8, 8}), "16..4096");
  refused(tiny_embedder({1, 3, 32, 32}, false, true), "exactly one expected");
  // a face of the wrong size, and a model whose output is all zero
  auto wrong = ok->embed(core::Image{100, 100, std::vector<std::uint8_t>(30000)});
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), Code::kInvalidArgument);
  EXPECT_NE(wrong.status().what().find("32x32"), std::string::npos) << wrong.status().to_string();
  auto zero = Embedder::create(tiny_embedder({1, 3, 32, 32}, true));
  ASSERT_TRUE(zero.ok());
  auto z = zero->embed(core::Image{32, 32, std::vector<std::uint8_t>(32 * 32 * 3, 200)});
  ASSERT_FALSE(z.ok());
  EXPECT_NE(z.status().what().find("all-zero face"), std::string::npos) << z.status().to_string();
  auto missing = Embedder::load("/nonexistent/ft_embedder.onnx");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kIo);
}

TEST(FacesEmbed, known_models_are_identified_by_sha256) {
  const auto sface = known::lookup("0ba9fbfa01b5270c96627c4ef784da859931e02f04419c829e83484087c34e79");
  ASSERT_TRUE(sface.has_value());
  EXPECT_EQ(sface->name, "SFace 2021dec");
  EXPECT_EQ(sface->dim, 128);
  EXPECT_EQ(sface->match, 0.55f);
  EXPECT_EQ(sface->mean[0], 0.0f);
  const auto mfn = known::lookup("b7120c095d60094f28a4a54ba6a8bf51b297a6273fb40ef6350dfec1f63d9507");
  ASSERT_TRUE(mfn.has_value());
  EXPECT_EQ(mfn->std[0], 128.0f);
  EXPECT_FALSE(known::lookup(sha256_hex(generated_bytes())).has_value());
  const ModelInfo d = known::arcface_default();
  EXPECT_EQ(d.input, 112);
  EXPECT_EQ(d.mean[1], 127.5f);
  EXPECT_EQ(d.std[2], 127.5f);
}

TEST(FacesEmbed, cosine_similarity_of_unit_vectors) {
  const std::vector<float> a = {1.0f, 0.0f}, b = {0.6f, 0.8f};
  ASSERT_TRUE(cosine_similarity(a, b).has_value());
  EXPECT_FLOAT_EQ(*cosine_similarity(a, b), 0.6f);
  EXPECT_FLOAT_EQ(*cosine_similarity(b, b), 1.0f);
  EXPECT_FALSE(cosine_similarity(a, std::vector<float>{1.0f}).has_value());
  EXPECT_FALSE(cosine_similarity(std::vector<float>{}, std::vector<float>{}).has_value());
  EXPECT_FALSE(cosine_similarity(a, std::vector<float>{NAN, 0.0f}).has_value());
}

TEST(FacesLetterbox, shrink_averages_area_and_writes_bgr_top_left) {
  // 4×2 RGB → n = 2: scale 0.5, 2×1 output; each output averages a 2×2 block.
  std::vector<std::uint8_t> rgb(4 * 2 * 3);
  for (int i = 0; i < 8; ++i)
    rgb[static_cast<std::size_t>(i) * 3] = static_cast<std::uint8_t>(i * 10),
                                      rgb[static_cast<std::size_t>(i) * 3 + 2] = 200;
  std::vector<float> out(3 * 2 * 2, -1.0f);
  EXPECT_FLOAT_EQ(letterbox_bgr(rgb, 4, 2, 2, out), 0.5f);
  // channel 0 is B (200), channel 2 is R
  EXPECT_FLOAT_EQ(out[0], 200.0f);
  EXPECT_FLOAT_EQ(out[8], (0 + 10 + 40 + 50) / 4.0f);
  EXPECT_FLOAT_EQ(out[9], (20 + 30 + 60 + 70) / 4.0f);
  EXPECT_FLOAT_EQ(out[10], 0.0f);  // padding row
  EXPECT_FLOAT_EQ(out[11], 0.0f);
}

TEST(FacesAlign, recovers_a_known_similarity_and_rejects_degenerate_points) {
  const auto t = arcface_template();
  Similarity truth;
  truth.a_re = 0.8 * std::cos(0.3), truth.a_im = 0.8 * std::sin(0.3), truth.tx = 5, truth.ty = -7;
  std::array<Point, 5> p;
  for (std::size_t i = 0; i < 5; ++i) p[i] = truth.apply(t[i]);
  auto s = fit_similarity(t, p);
  ASSERT_TRUE(s.ok());
  EXPECT_NEAR(s->a_re, truth.a_re, 1e-6);
  EXPECT_NEAR(s->a_im, truth.a_im, 1e-6);
  EXPECT_NEAR(s->tx, 5, 1e-4);
  EXPECT_NEAR(s->ty, -7, 1e-4);
  std::array<Point, 5> same;
  same.fill({10, 10});
  EXPECT_FALSE(fit_similarity(same, t).ok());
  same[0].x = std::nanf("");
  EXPECT_FALSE(fit_similarity(same, t).ok());
}

TEST(FacesAlign, aligned_landmarks_land_on_the_template_and_off_edge_faces_work) {
  FT_REQUIRE_TEST_DATA(dir);
  auto im = core::load_image(dir + "/images/astronaut_eileen_collins.png");
  ASSERT_TRUE(im.ok());
  auto faces = yunet().detect(*im);
  ASSERT_TRUE(faces.ok());
  ASSERT_EQ(faces->size(), 1u);
  auto s = fit_similarity((*faces)[0].landmarks, arcface_template());
  ASSERT_TRUE(s.ok());
  const auto t = arcface_template();
  double err = 0;
  for (std::size_t i = 0; i < 5; ++i) {
    const Point q = s->apply((*faces)[0].landmarks[i]);
    err = std::max(err, std::hypot(static_cast<double>(q.x - t[i].x), static_cast<double>(q.y - t[i].y)));
  }
  EXPECT_LT(err, 6.0);  // least-squares residual of a real face against the template
  auto al = align_face(*im, (*faces)[0].landmarks);
  ASSERT_TRUE(al.ok());
  EXPECT_EQ(al->width, 112);
  // the aligned face, re-detected on a 112×112 image, has its eyes near the template's
  auto crop = crop_box(*im, -50, -50, 30, 30);  // mostly off the photo: clamp-to-edge, no crash
  ASSERT_TRUE(crop.ok());
}

TEST(FacesImage, exif_orientation_is_applied) {
  core::Image im{3, 2, {}};
  for (int i = 0; i < 6; ++i) im.rgb.insert(im.rgb.end(), {static_cast<std::uint8_t>(i), 0, 0});
  const core::Image r = core::apply_orientation(im, 6);  // rotate 90° clockwise
  ASSERT_EQ(r.width, 2);
  ASSERT_EQ(r.height, 3);
  // top row of the upright image is the left column of the stored image, bottom-up
  EXPECT_EQ(r.rgb[0], 3);
  EXPECT_EQ(r.rgb[3], 0);
  EXPECT_EQ(core::apply_orientation(core::apply_orientation(im, 3), 3).rgb, im.rgb);
  // a minimal JPEG APP1 header carrying orientation 8 (big-endian TIFF)
  const std::vector<std::uint8_t> jpeg = {
      0xFF, 0xD8, 0xFF, 0xE1, 0x00, 0x22, 'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 42, 0, 0,    0,
      8,    0,    1,    0x01, 0x12, 0,    3,   0,   0,   0,   1, 0, 8,   0,   0, 0,  0, 0xFF, 0xD9};
  EXPECT_EQ(core::exif_orientation(jpeg), 8);
  EXPECT_EQ(core::exif_orientation(std::vector<std::uint8_t>{1, 2, 3}), 1);
  EXPECT_FALSE(core::decode_image(std::vector<std::uint8_t>{1, 2, 3}).ok());
}

// ---- batches and the native input size ----------------------------------------------------------------

/// Every field of two detection lists bit-identical.
void expect_same_detections(const std::vector<Detection>& a, const std::vector<Detection>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a[i], &b[i], sizeof(Detection)), 0)
        << "detection " << i << ": score " << a[i].score << " vs " << b[i].score;
  }
}

float iou(const Detection& a, const Detection& b) {
  const float ix = std::max(0.0f, std::min(a.x1, b.x1) - std::max(a.x0, b.x0));
  const float iy = std::max(0.0f, std::min(a.y1, b.y1) - std::max(a.y0, b.y0));
  const float inter = ix * iy;
  return inter / ((a.x1 - a.x0) * (a.y1 - a.y0) + (b.x1 - b.x0) * (b.y1 - b.y0) - inter);
}

std::vector<core::Image> load_photos(const std::string& dir) {
  std::vector<core::Image> photos;
  for (const char* name : kPhotos) {
    auto im = core::load_image(dir + "/images/" + name);
    EXPECT_TRUE(im.ok()) << im.status().to_string();
    if (im) photos.push_back(std::move(*im));
  }
  return photos;
}

TEST(FacesBatch, detect_batch_equals_single_calls_exactly_and_isolates_a_bad_image) {
  FT_REQUIRE_TEST_DATA(dir);
  std::vector<core::Image> photos = load_photos(dir);
  ASSERT_EQ(photos.size(), 5u);
  core::Image bad{10, 10, std::vector<std::uint8_t>(7)};  // wrong byte count
  photos.insert(photos.begin() + 2, bad);
  const auto batch = yunet().detect_batch(photos);
  ASSERT_EQ(batch.size(), photos.size());
  for (std::size_t i = 0; i < photos.size(); ++i) {
    SCOPED_TRACE(i);
    auto single = yunet().detect(photos[i]);
    ASSERT_EQ(batch[i].ok(), single.ok());
    if (!single) {
      EXPECT_EQ(i, 2u);
      EXPECT_EQ(batch[i].status().code(), Code::kInvalidArgument);
      EXPECT_EQ(batch[i].status().what(), single.status().what());
      continue;
    }
    EXPECT_EQ(batch[i]->size(), 1u);
    expect_same_detections(*batch[i], *single);
  }
  EXPECT_TRUE(yunet().detect_batch({}).empty());
}

TEST(FacesNative, pads_right_and_bottom_with_zeros_and_never_resizes) {
  // 33×2 → [3, 32, 64]: pixel (x, y) = (x + 100·y, 7, 200) lands unscaled at [c][y][x], BGR, the rest 0.
  const int w = 33, h = 2;
  std::vector<std::uint8_t> rgb;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) rgb.insert(rgb.end(), {static_cast<std::uint8_t>(x + 100 * y), 7, 200});
  std::vector<float> out(3 * 32 * 64, -1.0f);
  native_bgr(rgb, w, h, out);
  const std::size_t plane = 32 * 64;
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 64; ++x) {
      const std::size_t o = static_cast<std::size_t>(y) * 64 + x;
      const bool in = x < w && y < h;
      ASSERT_EQ(out[o], in ? 200.0f : 0.0f) << x << "," << y;  // B
      ASSERT_EQ(out[plane + o], in ? 7.0f : 0.0f) << x << "," << y;
      ASSERT_EQ(out[2 * plane + o], in ? static_cast<float>(x + 100 * y) : 0.0f) << x << "," << y;  // R
    }
}

TEST(FacesNative, the_program_is_lowered_for_the_padded_size_with_its_own_grids) {
  // 626×1200 pads to 640×1216: grids 1216/s × 640/s at strides 8, 16, 32 (152·80, 76·40, 38·20 cells).
  auto prog = yunet().net().program({1, 3, 1216, 640});
  ASSERT_TRUE(prog.ok()) << prog.status().to_string();
  const std::pair<const char*, std::int64_t> want[] = {{"cls_8", 152 * 80},      {"cls_16", 76 * 40},
                                                       {"cls_32", 38 * 20},      {"bbox_8", 4 * 152 * 80},
                                                       {"kps_32", 10 * 38 * 20}, {"obj_16", 76 * 40}};
  for (const auto& [name, len] : want) {
    auto it = std::find_if(prog->outputs.begin(), prog->outputs.end(),
                           [&](const ProgramOutput& o) { return o.name == name; });
    ASSERT_NE(it, prog->outputs.end()) << name;
    EXPECT_EQ(prog->lens[static_cast<std::size_t>(it->value)], len) << name;
  }
}

TEST(FacesNative, finds_the_letterbox_faces_on_the_photos_and_batches_mixed_sizes_exactly) {
  FT_REQUIRE_TEST_DATA(dir);
  const std::vector<core::Image> photos = load_photos(dir);
  ASSERT_EQ(photos.size(), 5u);
  DetectOptions native;
  native.input = DetectInput::kNative;
  const auto batch = yunet().detect_batch(photos, native);  // five sizes: five runs of one image each
  ASSERT_EQ(batch.size(), photos.size());
  for (std::size_t i = 0; i < photos.size(); ++i) {
    SCOPED_TRACE(kPhotos[i]);
    auto boxed = yunet().detect(photos[i]);
    auto own = yunet().detect(photos[i], native);
    ASSERT_TRUE(boxed.ok() && own.ok()) << own.status().to_string();
    ASSERT_EQ(own->size(), boxed->size());
    for (std::size_t k = 0; k < own->size(); ++k) {
      EXPECT_GT(iou((*own)[k], (*boxed)[k]), 0.5f);
      EXPECT_GE((*own)[k].score, 0.6f);
      EXPECT_LT((*own)[k].landmarks[0].x, (*own)[k].landmarks[1].x);
    }
    ASSERT_TRUE(batch[i].ok()) << batch[i].status().to_string();
    expect_same_detections(*batch[i], *own);
  }
  // two copies of one photo share a shape: one run of two, each equal to the single call
  const std::vector<core::Image> twice = {photos[0], photos[3], photos[0]};
  const auto pair = yunet().detect_batch(twice, native);
  ASSERT_TRUE(pair[0].ok() && pair[1].ok() && pair[2].ok());
  expect_same_detections(*pair[0], *batch[0]);
  expect_same_detections(*pair[1], *batch[3]);
  expect_same_detections(*pair[2], *batch[0]);
}

TEST(FacesNative, keeps_a_small_face_in_a_big_photo_that_the_letterbox_loses) {
  // The astronaut photo halved (her face ~45 pixels wide) in a 4000×3000 grey frame: the letterbox shrinks the
  // frame 6.25× (the face to ~7 pixels, below what YuNet finds); native sees it at 45 pixels.
  FT_REQUIRE_TEST_DATA(dir);
  auto photo = core::load_image(dir + "/images/astronaut_eileen_collins.png");
  ASSERT_TRUE(photo.ok());
  Similarity half;
  half.a_re = 0.5;
  auto small = warp_similarity(*photo, half, 256, 256);
  ASSERT_TRUE(small.ok()) << small.status().to_string();
  core::Image frame{4000, 3000, std::vector<std::uint8_t>(std::size_t{4000} * 3000 * 3, 110)};
  const int ox = 2400, oy = 1700;
  for (int y = 0; y < 256; ++y)
    std::memcpy(&frame.rgb[(static_cast<std::size_t>(oy + y) * 4000 + ox) * 3],
                &small->rgb[static_cast<std::size_t>(y) * 256 * 3], 256 * 3);
  auto boxed = yunet().detect(frame);
  ASSERT_TRUE(boxed.ok());
  EXPECT_TRUE(boxed->empty()) << "letterbox found " << boxed->size() << ", score " << (*boxed)[0].score;
  DetectOptions native;
  native.input = DetectInput::kNative;
  auto own = yunet().detect(frame, native);
  ASSERT_TRUE(own.ok()) << own.status().to_string();
  ASSERT_EQ(own->size(), 1u);
  // where the full-size photo's face lands after halving and the offset
  auto full = yunet().detect(*photo);
  ASSERT_TRUE(full.ok() && full->size() == 1u);
  Detection want = (*full)[0];
  want.x0 = ox + want.x0 / 2, want.x1 = ox + want.x1 / 2, want.y0 = oy + want.y0 / 2,
  want.y1 = oy + want.y1 / 2;
  EXPECT_GT(iou((*own)[0], want), 0.5f);
}

TEST(FacesEmbed, embed_batch_equals_single_embeds_exactly_and_isolates_a_wrong_face) {
  const Embedder& emb = generated_embedder();
  std::vector<core::Image> faces = {pattern_face(1), pattern_face(2),
                                    core::Image{5, 5, std::vector<std::uint8_t>(75)}, pattern_face(3)};
  const auto batch = emb.embed_batch(faces);
  ASSERT_EQ(batch.size(), faces.size());
  for (std::size_t i = 0; i < faces.size(); ++i) {
    SCOPED_TRACE(i);
    auto single = emb.embed(faces[i]);
    ASSERT_EQ(batch[i].ok(), single.ok());
    if (!single) {
      EXPECT_EQ(i, 2u);
      EXPECT_EQ(batch[i].status().what(), single.status().what());
      continue;
    }
    EXPECT_TRUE(facetrace::testing::bit_identical(*batch[i], *single));
  }
  EXPECT_TRUE(emb.embed_batch({}).empty());
}

TEST(FacesEmbed, embed_faces_equals_embed_face_for_every_detection) {
  FT_REQUIRE_TEST_DATA(dir);
  const Embedder& emb = generated_embedder();
  auto im = core::load_image(dir + "/images/" + kPhotos[1]);
  ASSERT_TRUE(im.ok());
  auto found = yunet().detect(*im);
  ASSERT_TRUE(found.ok());
  ASSERT_EQ(found->size(), 1u);
  std::vector<Detection> faces = {(*found)[0], (*found)[0], (*found)[0]};
  for (Point& p : faces[1].landmarks) p.x += 3.0f;       // a second, shifted alignment
  for (Point& p : faces[2].landmarks) p = {5.0f, 5.0f};  // degenerate: alignment fails for this one only
  const auto vs = emb.embed_faces(*im, faces);
  ASSERT_EQ(vs.size(), 3u);
  for (std::size_t k = 0; k < 2; ++k) {
    auto one = emb.embed_face(*im, faces[k]);
    ASSERT_TRUE(vs[k].ok() && one.ok());
    EXPECT_TRUE(facetrace::testing::bit_identical(*vs[k], *one));
  }
  EXPECT_NE(*vs[0], *vs[1]);  // the shifted landmarks reach the embedding
  ASSERT_FALSE(vs[2].ok());
  EXPECT_EQ(vs[2].status().what(), emb.embed_face(*im, faces[2]).status().what());
}

}  // namespace
}  // namespace facetrace::faces
