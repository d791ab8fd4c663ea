/// @file
/// Every operator of docs/design/faces.md §2 against a plain reference on random shapes (odd sizes, groups, strides, 4-sided
/// pads, broadcasting), through synthetic ONNX graphs built with onnx_proto.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "compare.h"
#include "onnx_builder.h"
#include "facetrace/faces/net.h"
#include "log_guard.h"

namespace facetrace::faces {
namespace {

using ::facetrace::testing::all_close;
using ::facetrace::testing::bit_identical;
using ::facetrace::testing::Tolerance;
using testing::OnnxBuilder;
using testing::random_floats;

std::int64_t count(const std::vector<std::int64_t>& d) {
  return std::accumulate(d.begin(), d.end(), std::int64_t{1}, std::multiplies<>());
}

std::vector<float> run1(const std::vector<std::uint8_t>& model, const std::vector<float>& x,
                        int threads = 0) {
  NetOptions o;
  o.threads = threads;
  auto net = Net::create(model, o);
  EXPECT_TRUE(net.ok()) << net.status().to_string();
  if (!net) return {};
  auto out = net->run(x);
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  if (!out) return {};
  return (*out)[0].data;
}

// |got − ref| ≤ 1e-5·scale + 1e-6 per element, scale = Σ|terms| (or |ref| for non-sums).
constexpr Tolerance kOpTol{1e-6, 1e-5};
void expect_close(const std::vector<float>& got, const std::vector<double>& ref,
                  const std::vector<double>& scale) {
  EXPECT_TRUE(all_close(got, ref, kOpTol, scale));
}
void expect_close(const std::vector<float>& got, const std::vector<double>& ref) {
  EXPECT_TRUE(all_close(got, ref, kOpTol));
}

struct ConvCase {
  int cin, cout, g, kh, kw, sh, sw, pt, pl, pb, pr, h, w;
  bool bias;
};

void check_conv(const ConvCase& c, std::uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "cin " << c.cin << " cout " << c.cout << " g " << c.g << " k " << c.kh
                                    << "x" << c.kw << " s " << c.sh << "," << c.sw << " pads " << c.pt << ","
                                    << c.pl << "," << c.pb << "," << c.pr << " in " << c.h << "x" << c.w);
  const int cin_g = c.cin / c.g, cout_g = c.cout / c.g;
  const auto x = random_floats(static_cast<std::size_t>(c.cin * c.h * c.w), seed);
  const auto w = random_floats(static_cast<std::size_t>(c.cout * cin_g * c.kh * c.kw), seed + 1);
  const auto b = random_floats(static_cast<std::size_t>(c.cout), seed + 2);
  OnnxBuilder m;
  m.input("x", {1, c.cin, c.h, c.w}).output("y").init("w", {c.cout, cin_g, c.kh, c.kw}, w);
  if (c.bias) m.init("b", {c.cout}, b);
  auto* n = c.bias ? m.node("Conv", {"x", "w", "b"}, {"y"}) : m.node("Conv", {"x", "w"}, {"y"});
  OnnxBuilder::int1(n, "group", c.g);
  OnnxBuilder::ints(n, "strides", {c.sh, c.sw});
  OnnxBuilder::ints(n, "pads", {c.pt, c.pl, c.pb, c.pr});
  OnnxBuilder::ints(n, "kernel_shape", {c.kh, c.kw});
  const int oh = (c.h + c.pt + c.pb - c.kh) / c.sh + 1, ow = (c.w + c.pl + c.pr - c.kw) / c.sw + 1;
  std::vector<double> ref, scale;
  for (int co = 0; co < c.cout; ++co)
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        double s = c.bias ? b[static_cast<std::size_t>(co)] : 0.0, a = std::abs(s);
        const int grp = co / cout_g;
        for (int cl = 0; cl < cin_g; ++cl)
          for (int ky = 0; ky < c.kh; ++ky)
            for (int kx = 0; kx < c.kw; ++kx) {
              const int iy = oy * c.sh + ky - c.pt, ix = ox * c.sw + kx - c.pl;
              if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
              const double t = static_cast<double>(
                                   x[static_cast<std::size_t>(((grp * cin_g + cl) * c.h + iy) * c.w + ix)]) *
                               w[static_cast<std::size_t>(((co * cin_g + cl) * c.kh + ky) * c.kw + kx)];
              s += t, a += std::abs(t);
            }
        ref.push_back(s);
        scale.push_back(a);
      }
  const auto got = run1(m.bytes(), x, 0);
  expect_close(got, ref, scale);
  EXPECT_TRUE(bit_identical(got, run1(m.bytes(), x, 1))) << "results depend on the thread count";
}

TEST(FacesOps, conv_matches_the_definition) {
  const ConvCase cases[] = {
      // docs/design/faces.md §9 CPU conv cases (pads symmetric)
      {3, 4, 1, 3, 3, 1, 1, 1, 1, 1, 1, 7, 9, true},
      {3, 4, 1, 3, 3, 2, 2, 1, 1, 1, 1, 8, 8, true},
      {4, 4, 4, 3, 3, 1, 1, 1, 1, 1, 1, 6, 5, true},
      {2, 6, 1, 1, 1, 1, 1, 0, 0, 0, 0, 5, 5, true},
      {4, 8, 2, 3, 3, 1, 1, 1, 1, 1, 1, 5, 6, true},
      {1, 1, 1, 3, 3, 1, 1, 0, 0, 0, 0, 3, 3, false},
      // odd sizes, 4-sided pads, unequal strides and kernels, channel multipliers, blocking edges
      {5, 7, 1, 3, 2, 2, 1, 0, 1, 2, 0, 13, 11, true},
      {6, 9, 3, 5, 3, 3, 2, 2, 1, 1, 2, 17, 19, false},
      {3, 6, 3, 3, 3, 2, 2, 1, 1, 1, 1, 21, 23, true},     // depthwise ×2 multiplier
      {16, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 37, 41, true},  // depthwise
      {8, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 9, 83, true},      // depthwise, wide rows (4 AVX-512 blocks + rest)
      {8, 8, 8, 7, 7, 1, 1, 0, 0, 0, 0, 7, 7, true},       // global depthwise
      {40, 13, 1, 3, 3, 1, 1, 1, 1, 1, 1, 30, 31, true},   // K = 360 > KC, N = 930 > NC
      {64, 70, 1, 1, 1, 1, 1, 0, 0, 0, 0, 29, 33, true},   // pointwise
      {300, 5, 1, 1, 1, 1, 1, 0, 0, 0, 0, 3, 3, true},     // deep K, tiny N
      {3, 16, 1, 3, 3, 2, 2, 1, 1, 1, 1, 41, 37, true},
  };
  std::uint32_t seed = 11;
  for (const auto& c : cases) check_conv(c, seed += 7);
}

std::vector<std::uint8_t> unary_model(const std::string& op, const std::vector<std::int64_t>& dims) {
  OnnxBuilder m;
  m.input("x", dims).output("y");
  m.node(op, {"x"}, {"y"});
  return m.bytes();
}

TEST(FacesOps, relu_sigmoid_clip) {
  const std::vector<std::int64_t> d{1, 3, 5, 7};
  const auto x = random_floats(105, 3, -8.0f, 8.0f);
  std::vector<double> relu, sig, clip;
  for (float v : x) {
    relu.push_back(std::max(v, 0.0f));
    sig.push_back(1.0 / (1.0 + std::exp(-static_cast<double>(v))));
    clip.push_back(std::min(std::max(static_cast<double>(v), 0.0), 6.0));
  }
  expect_close(run1(unary_model("Relu", d), x), relu);
  expect_close(run1(unary_model("Sigmoid", d), x), sig);
  EXPECT_EQ(run1(unary_model("Sigmoid", {1, 1}), {0.0f})[0], 0.5f);
  // opset ≥ 11: min/max from Constant nodes (ReLU6, as in MobileFaceNet)
  OnnxBuilder m(18);
  m.input("x", d).output("y");
  OnnxBuilder::tensor(m.node("Constant", {}, {"lo"}), "value", {}, {0.0f});
  OnnxBuilder::tensor(m.node("Constant", {}, {"hi"}), "value", {}, {6.0f});
  m.node("Clip", {"x", "lo", "hi"}, {"y"});
  expect_close(run1(m.bytes(), x), clip);
  // only a max (empty min name)
  OnnxBuilder m2(13);
  m2.input("x", d).output("y").init("hi", {}, {1.5f});
  m2.node("Clip", {"x", "", "hi"}, {"y"});
  std::vector<double> hi_only;
  for (float v : x) hi_only.push_back(std::min(static_cast<double>(v), 1.5));
  expect_close(run1(m2.bytes(), x), hi_only);
  // opset < 11: attributes
  OnnxBuilder m3(9);
  m3.input("x", d).output("y");
  auto* n = m3.node("Clip", {"x"}, {"y"});
  OnnxBuilder::float1(n, "min", 0.0f);
  OnnxBuilder::float1(n, "max", 6.0f);
  expect_close(run1(m3.bytes(), x), clip);
}

std::vector<double> broadcast_ref(const std::vector<std::int64_t>& ad, const std::vector<float>& a,
                                  const std::vector<std::int64_t>& bd, const std::vector<float>& b, char op,
                                  std::vector<std::int64_t>* out_dims) {
  const std::size_t r = std::max(ad.size(), bd.size());
  std::vector<std::int64_t> A(r, 1), B(r, 1), O(r);
  std::copy(ad.begin(), ad.end(), A.begin() + static_cast<std::ptrdiff_t>(r - ad.size()));
  std::copy(bd.begin(), bd.end(), B.begin() + static_cast<std::ptrdiff_t>(r - bd.size()));
  for (std::size_t i = 0; i < r; ++i) O[i] = std::max(A[i], B[i]);
  *out_dims = O;
  std::vector<double> out(static_cast<std::size_t>(count(O)));
  for (std::size_t flat = 0; flat < out.size(); ++flat) {
    std::size_t rem = flat, ia = 0, ib = 0, sa = 1, sb = 1;
    std::vector<std::size_t> idx(r);
    for (std::size_t k = r; k-- > 0;)
      idx[k] = rem % static_cast<std::size_t>(O[k]), rem /= static_cast<std::size_t>(O[k]);
    for (std::size_t k = r; k-- > 0;) {
      ia += (A[k] == 1 ? 0 : idx[k]) * sa, sa *= static_cast<std::size_t>(A[k]);
      ib += (B[k] == 1 ? 0 : idx[k]) * sb, sb *= static_cast<std::size_t>(B[k]);
    }
    const double x = a[ia], y = b[ib];
    out[flat] = op == '+' ? x + y : op == '-' ? x - y : x * y;
  }
  return out;
}

TEST(FacesOps, add_sub_mul_broadcast) {
  const std::vector<std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>> shapes = {
      {{1, 3, 5, 7}, {1, 3, 5, 7}}, {{1, 3, 5, 7}, {3, 1, 1}}, {{1, 1, 5, 1}, {1, 3, 1, 7}},
      {{1, 4, 3, 2}, {2}},          {{1, 6}, {1, 6}},          {{1, 2, 9}, {1, 1}},
  };
  const char* ops[3] = {"Add", "Sub", "Mul"};
  const char sym[3] = {'+', '-', '*'};
  std::uint32_t seed = 100;
  for (const auto& [ad, bd] : shapes)
    for (int o = 0; o < 3; ++o)
      for (int const_b = 0; const_b < 2; ++const_b) {
        SCOPED_TRACE(::testing::Message() << ops[o] << " const_b " << const_b);
        const auto a = random_floats(static_cast<std::size_t>(count(ad)), ++seed);
        const auto b = random_floats(static_cast<std::size_t>(count(bd)), ++seed);
        std::vector<std::int64_t> od;
        const auto ref = broadcast_ref(ad, a, bd, b, sym[o], &od);
        if (const_b) {  // value ∘ constant
          OnnxBuilder m;
          m.input("a", ad).output("y").init("b", bd, b);
          m.node(ops[o], {"a", "b"}, {"y"});
          expect_close(run1(m.bytes(), a), ref);
        } else if (bd[0] == 1) {  // constant ∘ value (the value broadcasts too; a graph input has batch 1)
          OnnxBuilder m;
          m.input("b", bd).output("y").init("a", ad, a);
          m.node(ops[o], {"a", "b"}, {"y"});
          expect_close(run1(m.bytes(), b), ref);
        }
      }
  // value ∘ value: x + x·x
  OnnxBuilder m;
  m.input("x", {1, 2, 3, 3}).output("y");
  m.node("Mul", {"x", "x"}, {"sq"});
  m.node("Add", {"x", "sq"}, {"y"});
  const auto x = random_floats(18, 5);
  std::vector<double> ref;
  for (float v : x) ref.push_back(static_cast<double>(v) + static_cast<double>(v * v));
  expect_close(run1(m.bytes(), x), ref);
}

TEST(FacesOps, prelu_per_channel_and_scalar) {
  const auto x = random_floats(3 * 4 * 5, 8);
  const std::vector<float> slope{0.1f, -0.5f, 2.0f};
  for (int scalar = 0; scalar < 2; ++scalar) {
    OnnxBuilder m;
    m.input("x", {1, 3, 4, 5}).output("y");
    if (scalar)
      m.init("s", {1}, {0.25f});
    else
      m.init("s", {3, 1, 1}, slope);
    m.node("PRelu", {"x", "s"}, {"y"});
    std::vector<double> ref;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double s = scalar ? 0.25 : slope[i / 20];
      ref.push_back(x[i] >= 0 ? x[i] : s * x[i]);
    }
    expect_close(run1(m.bytes(), x), ref);
  }
}

TEST(FacesOps, batchnorm_folds_to_channel_affine) {
  const auto x = random_floats(4 * 3 * 3, 9);
  const std::vector<float> sc{1.5f, -0.5f, 2.0f, 0.1f}, bb{0.1f, 0.2f, -0.3f, 0.0f},
      mean{0.5f, -1.0f, 0.0f, 2.0f}, var{0.25f, 1.0f, 4.0f, 0.01f};
  OnnxBuilder m;
  m.input("x", {1, 4, 3, 3})
      .output("y")
      .init("s", {4}, sc)
      .init("b", {4}, bb)
      .init("m", {4}, mean)
      .init("v", {4}, var);
  OnnxBuilder::float1(m.node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y"}), "epsilon", 1e-3f);
  std::vector<double> ref;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t c = i / 9;
    ref.push_back((x[i] - static_cast<double>(mean[c])) /
                      std::sqrt(static_cast<double>(var[c]) + static_cast<double>(1e-3f)) * sc[c] +
                  bb[c]);
  }
  expect_close(run1(m.bytes(), x), ref);
}

TEST(FacesOps, gemm_and_matmul) {
  const int k = 37, n = 11;
  const auto x = random_floats(k, 10);
  const auto w = random_floats(static_cast<std::size_t>(k * n), 11);
  const auto c = random_floats(n, 12);
  // The f64 reference of output j: Σ x_i·w_ij and Σ |x_i·w_ij| (the tolerance's scale).
  const auto dot_and_magnitude = [&](int j) {
    double s = 0, a = 0;
    for (int i = 0; i < k; ++i) {
      const double t =
          static_cast<double>(x[static_cast<std::size_t>(i)]) * w[static_cast<std::size_t>(i * n + j)];
      s += t;
      a += std::abs(t);
    }
    return std::pair<double, double>{s, a};
  };
  for (int tb = 0; tb < 2; ++tb)
    for (int with_c = 0; with_c < 2; ++with_c) {
      SCOPED_TRACE(::testing::Message() << "transB " << tb << " C " << with_c);
      OnnxBuilder m;
      m.input("x", {1, k}).output("y");
      std::vector<float> wb(w.size());  // B as stored: [n,k] when transB else [k,n]
      for (int i = 0; i < k; ++i)
        for (int j = 0; j < n; ++j)
          wb[static_cast<std::size_t>(tb ? j * k + i : i * n + j)] = w[static_cast<std::size_t>(i * n + j)];
      m.init("w", tb ? std::vector<std::int64_t>{n, k} : std::vector<std::int64_t>{k, n}, wb);
      if (with_c) m.init("c", {n}, c);
      auto* node = with_c ? m.node("Gemm", {"x", "w", "c"}, {"y"}) : m.node("Gemm", {"x", "w"}, {"y"});
      OnnxBuilder::int1(node, "transB", tb);
      OnnxBuilder::float1(node, "alpha", 0.5f);
      OnnxBuilder::float1(node, "beta", 2.0f);
      std::vector<double> ref, scale;
      for (int j = 0; j < n; ++j) {
        const auto [s, a] = dot_and_magnitude(j);
        ref.push_back(0.5 * s + (with_c ? 2.0 * c[static_cast<std::size_t>(j)] : 0.0));
        scale.push_back(0.5 * a + 2.0 * std::abs(c[static_cast<std::size_t>(j)]));
      }
      expect_close(run1(m.bytes(), x), ref, scale);
    }
  OnnxBuilder mm;
  mm.input("x", {1, 1, k}).output("y").init("w", {k, n}, w);
  mm.node("MatMul", {"x", "w"}, {"y"});
  std::vector<double> ref, scale;
  for (int j = 0; j < n; ++j) {
    const auto [s, a] = dot_and_magnitude(j);
    ref.push_back(s), scale.push_back(a);
  }
  expect_close(run1(mm.bytes(), x), ref, scale);
}

TEST(FacesOps, transpose_random_perms) {
  const std::vector<std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>> cases = {
      {{1, 3, 4, 5}, {0, 2, 3, 1}},
      {{1, 3, 4, 5}, {3, 1, 0, 2}},
      {{1, 3, 5}, {2, 0, 1}},
      {{1, 2, 3, 2, 3}, {4, 2, 0, 3, 1}},
      {{1, 7}, {1, 0}}};
  for (const auto& [dims, perm] : cases) {
    OnnxBuilder m;
    m.input("x", dims).output("y");
    OnnxBuilder::ints(m.node("Transpose", {"x"}, {"y"}), "perm", perm);
    const auto x = random_floats(static_cast<std::size_t>(count(dims)), 13);
    const std::size_t r = dims.size();
    std::vector<std::int64_t> od(r), strides(r, 1);
    for (std::size_t i = r - 1; i > 0; --i) strides[i - 1] = strides[i] * dims[i];
    for (std::size_t k = 0; k < r; ++k) od[k] = dims[static_cast<std::size_t>(perm[k])];
    std::vector<double> ref(x.size());
    for (std::size_t j = 0; j < x.size(); ++j) {
      std::size_t rem = j, src = 0;
      for (std::size_t k = r; k-- > 0;) {
        const std::size_t ik = rem % static_cast<std::size_t>(od[k]);
        rem /= static_cast<std::size_t>(od[k]);
        src += ik * static_cast<std::size_t>(strides[static_cast<std::size_t>(perm[k])]);
      }
      ref[j] = x[src];
    }
    expect_close(run1(m.bytes(), x), ref);
  }
}

TEST(FacesOps, reshape_flatten_identity_dropout_are_aliases) {
  OnnxBuilder m;
  m.input("x", {1, 3, 4, 2}).output("y").output("f").init_i64("shape", {3}, {1, -1, 2});
  m.node("Reshape", {"x", "shape"}, {"r"});
  m.node("Identity", {"r"}, {"i"});
  m.node("Dropout", {"i"}, {"y"});
  m.node("Flatten", {"x"}, {"f"});
  auto net = Net::create(m.bytes());
  ASSERT_TRUE(net.ok()) << net.status().to_string();
  auto p = net->program({1, 3, 4, 2});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->steps.empty());
  EXPECT_EQ(p->outputs[0].shape, (Shape{1, 12, 2}));
  EXPECT_EQ(p->outputs[1].shape, (Shape{1, 24}));
  const auto x = random_floats(24, 14);
  auto out = net->run(x);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].data, x);
  EXPECT_EQ((*out)[1].data, x);
  // 0 copies a dim
  OnnxBuilder m2;
  m2.input("x", {1, 3, 4, 2}).output("y").init_i64("shape", {2}, {0, -1});
  m2.node("Reshape", {"x", "shape"}, {"y"});
  auto net2 = Net::create(m2.bytes());
  ASSERT_TRUE(net2.ok());
  EXPECT_EQ(net2->program({1, 3, 4, 2})->outputs[0].shape, (Shape{1, 24}));
}

TEST(FacesOps, maxpool_resize_global_average) {
  const std::int64_t c = 3, h = 9, w = 7;
  const auto x = random_floats(static_cast<std::size_t>(c * h * w), 15);
  for (auto [k, s] : {std::pair{2, 2}, std::pair{3, 2}, std::pair{2, 1}}) {
    OnnxBuilder m;
    m.input("x", {1, c, h, w}).output("y");
    auto* n = m.node("MaxPool", {"x"}, {"y"});
    OnnxBuilder::ints(n, "kernel_shape", {k, k});
    OnnxBuilder::ints(n, "strides", {s, s});
    const std::int64_t oh = (h - k) / s + 1, ow = (w - k) / s + 1;
    std::vector<double> ref;
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t oy = 0; oy < oh; ++oy)
        for (std::int64_t ox = 0; ox < ow; ++ox) {
          float best = -1e30f;
          for (int ky = 0; ky < k; ++ky)
            for (int kx = 0; kx < k; ++kx)
              best = std::max(best, x[static_cast<std::size_t>((ch * h + oy * s + ky) * w + ox * s + kx)]);
          ref.push_back(best);
        }
    expect_close(run1(m.bytes(), x), ref);
  }
  for (auto [sy, sx] : {std::pair{2, 2}, std::pair{3, 1}}) {
    OnnxBuilder m(11);
    m.input("x", {1, c, h, w})
        .output("y")
        .init("roi", {0}, {})
        .init("scales", {4}, {1, 1, static_cast<float>(sy), static_cast<float>(sx)});
    auto* n = m.node("Resize", {"x", "roi", "scales"}, {"y"});
    OnnxBuilder::str(n, "mode", "nearest");
    OnnxBuilder::str(n, "coordinate_transformation_mode", "asymmetric");
    OnnxBuilder::str(n, "nearest_mode", "floor");
    std::vector<double> ref;
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t y = 0; y < h * sy; ++y)
        for (std::int64_t xx = 0; xx < w * sx; ++xx)
          ref.push_back(x[static_cast<std::size_t>((ch * h + y / sy) * w + xx / sx)]);
    expect_close(run1(m.bytes(), x), ref);
  }
  OnnxBuilder m;
  m.input("x", {1, c, h, w}).output("y");
  m.node("GlobalAveragePool", {"x"}, {"y"});
  std::vector<double> ref;
  for (std::int64_t ch = 0; ch < c; ++ch) {
    double s = 0;
    for (std::int64_t i = 0; i < h * w; ++i) s += x[static_cast<std::size_t>(ch * h * w + i)];
    ref.push_back(s / static_cast<double>(h * w));
  }
  expect_close(run1(m.bytes(), x), ref);
}

// The interpreter's 1×1 → Relu → depthwise 3×3 → Relu [→ MaxPool] band group (rows and channel groups split
// across threads): against a double reference, and the same bits for any thread count (16 threads split the
// channels here even on a small machine).
TEST(FacesOps, pointwise_depthwise_group_matches_and_is_thread_count_independent) {
  const std::int64_t cin = 64, c = 48, h = 40, w = 44;  // ~6 M MACs: up to 11 threads
  const auto x = random_floats(static_cast<std::size_t>(cin * h * w), 31);
  const auto wp = random_floats(static_cast<std::size_t>(c * cin), 32),
             bp = random_floats(static_cast<std::size_t>(c), 33);
  const auto wd = random_floats(static_cast<std::size_t>(c * 9), 34),
             bd = random_floats(static_cast<std::size_t>(c), 35);
  for (bool pool : {false, true}) {
    OnnxBuilder m;
    m.input("x", {1, cin, h, w}).output("y").init("wp", {c, cin, 1, 1}, wp).init("bp", {c}, bp);
    m.init("wd", {c, 1, 3, 3}, wd).init("bd", {c}, bd);
    auto* p = m.node("Conv", {"x", "wp", "bp"}, {"p"});
    OnnxBuilder::ints(p, "kernel_shape", {1, 1});
    m.node("Relu", {"p"}, {"pr"});
    auto* d = m.node("Conv", {"pr", "wd", "bd"}, {pool ? "d" : "dd"});
    OnnxBuilder::int1(d, "group", c);
    OnnxBuilder::ints(d, "kernel_shape", {3, 3});
    OnnxBuilder::ints(d, "pads", {1, 1, 1, 1});
    if (pool) {
      m.node("Relu", {"d"}, {"dr"});
      auto* mp = m.node("MaxPool", {"dr"}, {"y"});
      OnnxBuilder::ints(mp, "kernel_shape", {2, 2});
      OnnxBuilder::ints(mp, "strides", {2, 2});
    } else {
      m.node("Relu", {"dd"}, {"y"});
    }
    const auto got = run1(m.bytes(), x, 1);
    for (int t : {0, 2, 3, 16})
      EXPECT_TRUE(bit_identical(got, run1(m.bytes(), x, t))) << "pool " << pool << ", threads " << t;
    if (pool) continue;
    std::vector<double> pw(static_cast<std::size_t>(c * h * w)), ps(pw.size()), ref, scale;
    for (std::int64_t co = 0; co < c; ++co)
      for (std::int64_t i = 0; i < h * w; ++i) {
        double s = bp[static_cast<std::size_t>(co)], a = std::abs(s);
        for (std::int64_t ci = 0; ci < cin; ++ci) {
          const double t = static_cast<double>(wp[static_cast<std::size_t>(co * cin + ci)]) *
                           x[static_cast<std::size_t>(ci * h * w + i)];
          s += t, a += std::abs(t);
        }
        pw[static_cast<std::size_t>(co * h * w + i)] = std::max(s, 0.0);
        ps[static_cast<std::size_t>(co * h * w + i)] = a;
      }
    for (std::int64_t co = 0; co < c; ++co)
      for (std::int64_t oy = 0; oy < h; ++oy)
        for (std::int64_t ox = 0; ox < w; ++ox) {
          double s = bd[static_cast<std::size_t>(co)], a = std::abs(s);
          for (int ky = 0; ky < 3; ++ky)
            for (int kx = 0; kx < 3; ++kx) {
              const std::int64_t iy = oy + ky - 1, ix = ox + kx - 1;
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
              const auto wi = static_cast<std::size_t>(co * 9 + ky * 3 + kx);
              const auto xi = static_cast<std::size_t>((co * h + iy) * w + ix);
              s += wd[wi] * pw[xi], a += std::abs(wd[wi]) * ps[xi];
            }
          ref.push_back(std::max(s, 0.0));
          scale.push_back(a);
        }
    expect_close(got, ref, scale);
  }
}

// A nearest Resize read only by an element-wise Add/Sub/Mul is fused (the up-scaled tensor is never stored): the
// same values as the separate steps, with the Resize output on either side and odd widths (vector tails).
TEST(FacesOps, resize_then_binary_fused) {
  const std::int64_t c = 3, h = 5, w = 11;
  const auto x = random_floats(static_cast<std::size_t>(c * h * w), 41);
  for (int sx : {2, 3}) {
    const std::int64_t oh = h * 2, ow = w * sx;
    const auto o = random_floats(static_cast<std::size_t>(c * oh * ow), 42);
    for (const char* kind : {"Add", "Sub", "Mul"})
      for (bool resize_first : {true, false}) {
        OnnxBuilder m(11);
        m.input("x", {1, c, h, w}).output("y").init("roi", {0}, {});
        m.init("scales", {4}, {1, 1, 2, static_cast<float>(sx)}).init("o", {1, c, oh, ow}, o);
        auto* n = m.node("Resize", {"x", "roi", "scales"}, {"r"});
        OnnxBuilder::str(n, "mode", "nearest");
        OnnxBuilder::str(n, "coordinate_transformation_mode", "asymmetric");
        OnnxBuilder::str(n, "nearest_mode", "floor");
        if (resize_first)
          m.node(kind, {"r", "o"}, {"y"});
        else
          m.node(kind, {"o", "r"}, {"y"});
        std::vector<float> want;
        for (std::int64_t ch = 0; ch < c; ++ch)
          for (std::int64_t yy = 0; yy < oh; ++yy)
            for (std::int64_t xx = 0; xx < ow; ++xx) {
              const float u = x[static_cast<std::size_t>((ch * h + yy / 2) * w + xx / sx)];
              const float v = o[static_cast<std::size_t>((ch * oh + yy) * ow + xx)];
              const float a = resize_first ? u : v, b = resize_first ? v : u;
              want.push_back(kind[0] == 'A' ? a + b : kind[0] == 'S' ? a - b : a * b);
            }
        EXPECT_TRUE(bit_identical(run1(m.bytes(), x, 1), want))
            << kind << " sx " << sx << " resize first " << resize_first;
        EXPECT_TRUE(bit_identical(run1(m.bytes(), x, 0), want));
      }
  }
}

TEST(FacesOps, constants_fold_away) {
  OnnxBuilder m(18);
  m.input("x", {1, 4}).output("y");
  OnnxBuilder::tensor(m.node("Constant", {}, {"a"}), "value", {4}, {1, 2, 3, 4});
  OnnxBuilder::tensor(m.node("Constant", {}, {"b"}), "value", {1}, {10});
  m.node("Mul", {"a", "b"}, {"ab"});  // constant ∘ constant folds at load
  m.node("Relu", {"ab"}, {"r"});
  m.node("Add", {"x", "r"}, {"y"});
  auto net = Net::create(m.bytes());
  ASSERT_TRUE(net.ok()) << net.status().to_string();
  EXPECT_EQ(net->program({1, 4})->steps.size(), 1u);
  expect_close(run1(m.bytes(), {1, 1, 1, 1}), {11, 21, 31, 41});
}

TEST(FacesOps, batch_equals_single_runs_and_free_lists_are_complete) {
  OnnxBuilder m;
  const auto w = random_floats(8 * 3 * 3 * 3, 21);
  m.input("x", {1, 3, 10, 10}).output("y").init("w", {8, 3, 3, 3}, w);
  OnnxBuilder::ints(m.node("Conv", {"x", "w"}, {"c"}), "pads", {1, 1, 1, 1});
  m.node("Relu", {"c"}, {"r"});
  OnnxBuilder::ints(m.node("MaxPool", {"r"}, {"y"}), "kernel_shape", {2, 2});
  auto net = Net::create(m.bytes());
  ASSERT_TRUE(net.ok());
  auto p = net->program({1, 3, 10, 10});
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->free.size(), p->steps.size());
  std::vector<std::vector<float>> xs;
  for (std::uint32_t s = 0; s < 5; ++s) xs.push_back(random_floats(300, 40 + s));
  std::vector<std::span<const float>> spans(xs.begin(), xs.end());
  auto batch = net->run_batch(spans, {1, 3, 10, 10});
  ASSERT_TRUE(batch.ok());
  for (std::size_t b = 0; b < xs.size(); ++b)
    EXPECT_TRUE(bit_identical((*batch)[b][0].data, (*net->run(xs[b]))[0].data));
}

// An activation buffer that cannot be allocated is a kOutOfMemory Status naming the node, on one input and in a
// batch (where the runs are tasks of the parallel loop): nothing throws.
TEST(FacesOps, an_activation_buffer_that_cannot_be_allocated_is_out_of_memory) {
  Program p;
  p.input_shape = {1, 1};
  const std::int64_t huge = std::int64_t{1} << 60;  // floats: no allocator gives 4 EiB
  p.lens = {1, huge, 1};
  p.shapes = {{1, 1}, {1, huge}, {1, 1}};
  p.steps.push_back(Step{UnaryOp{}, {Arg::value(0)}, 1, "relu", Fusion{}});
  p.steps.push_back(Step{GlobalAverageOp{1, 1}, {Arg::value(1)}, 2, "gap", Fusion{}});
  p.free = {{}, {1}};
  p.outputs = {ProgramOutput{"y", 2, {1, 1}}};
  const std::vector<float> x{1.0f};
  const std::span<const float> in(x);
  const std::vector<std::span<const float>> one{in}, two{in, in};
  for (const auto* inputs : {&one, &two}) {
    auto r = run_program_cpu(p, *inputs, 2);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kOutOfMemory) << r.status().to_string();
    EXPECT_NE(r.status().what().find("'relu'"), std::string::npos) << r.status().to_string();
  }
}

}  // namespace
}  // namespace facetrace::faces
