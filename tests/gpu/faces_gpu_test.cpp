// GPU face program (cuda/faces/gpu_program.h, docs/design/faces.md §8) against two references: a plain
// step-by-step definition written here (double sums, no fusion, every op of program.h) and the CPU interpreter
// (run_program_cpu) wherever it runs the program. ggml-style: every IR op on random shapes (odd sizes, groups,
// strides, pads, dilation, broadcasting) at batch 1 and 7; fused groups against their unfused programs; the
// conv shapes of the spec's "GPU conv" row; the real YuNet against the CPU, run to run bit identity, and batch
// 16 against 16 single runs. In-process CUDA; every test skips without a usable GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "compare.h"
#include "faces/conv.cuh"
#include "faces/gpu_program.h"
#include "facetrace/core/image.h"
#include "facetrace/faces/detector.h"
#include "facetrace/faces/net.h"
#include "facetrace/faces/program.h"
#include "gpu_skip.h"
#include "program_builder.h"

namespace facetrace::faces {
namespace {

using gpu::GpuProgram;
using gpu::PlanOptions;
using Outputs = std::vector<std::vector<std::vector<float>>>;  // per input, per program output

// ---- a Program built by hand: tests/support/program_builder.h ---------------------------------------------

using Builder = ProgramBuilder;

ConvJob conv_job(std::int64_t cin, std::int64_t cout, std::int64_t g, std::int64_t k, std::int64_t s,
                 std::int64_t pad, std::int64_t h, std::int64_t w, std::uint32_t seed, std::int64_t dil = 1,
                 bool bias = true, std::int64_t pad_r = -1) {
  ConvJob j;
  j.cin = cin, j.cout = cout, j.groups = g, j.kh = j.kw = k, j.sh = j.sw = s, j.pt = j.pl = pad, j.h = h,
  j.w = w;
  j.dh = j.dw = dil;
  const std::int64_t pr = pad_r < 0 ? pad : pad_r;  // bottom/right pad (asymmetric when it differs)
  j.oh = (h + pad + pr - dil * (k - 1) - 1) / s + 1;
  j.ow = (w + pad + pr - dil * (k - 1) - 1) / s + 1;
  const float sc = 1.0f / std::sqrt(static_cast<float>(cin / g * k * k));
  j.weights = blob(random_floats(static_cast<std::size_t>(cout * (cin / g) * k * k), seed, -sc, sc));
  if (bias) j.bias = blob(random_floats(static_cast<std::size_t>(cout), seed + 1));
  return j;
}

// ---- the plain definition of every op (per image) -----------------------------------------------------------

struct Naive {
  const Program& p;
  std::vector<std::vector<float>> v;

  const float* arg(const Arg& a) const {
    return a.kind == Arg::Kind::kConst ? p.consts[static_cast<std::size_t>(a.id)]->data()
                                       : v[static_cast<std::size_t>(a.id)].data();
  }

  static float unary(const UnaryOp& u, float x) {
    switch (u.kind) {
      case UnaryKind::kRelu: return x > 0 ? x : 0;
      case UnaryKind::kSigmoid: return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x))));
      case UnaryKind::kClip: return std::min(std::max(x, u.lo), u.hi);
      case UnaryKind::kLeakyRelu: return x >= 0 ? x : u.alpha * x;
      case UnaryKind::kTanh: return static_cast<float>(std::tanh(static_cast<double>(x)));
      case UnaryKind::kHardSigmoid: return std::max(0.0f, std::min(1.0f, u.alpha * x + u.beta));
      case UnaryKind::kHardSwish: return x * std::max(0.0f, std::min(1.0f, x / 6.0f + 0.5f));
      case UnaryKind::kSqrt: return std::sqrt(x);
    }
    return x;
  }

  static float coord(ResizeCoord c, std::int64_t o, float s, std::int64_t in, std::int64_t out) {
    const float xo = static_cast<float>(o);
    switch (c) {
      case ResizeCoord::kAsymmetric: return xo / s;
      case ResizeCoord::kHalfPixel: return (xo + 0.5f) / s - 0.5f;
      case ResizeCoord::kPytorchHalfPixel: return out > 1 ? (xo + 0.5f) / s - 0.5f : 0.0f;
      case ResizeCoord::kAlignCorners:
        return out > 1 ? xo * static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.0f;
    }
    return 0;
  }
  static std::int64_t nearest(ResizeNearest m, float x, std::int64_t in) {
    const float f = std::floor(x);
    float r = m == ResizeNearest::kFloor  ? f
              : m == ResizeNearest::kCeil ? std::ceil(x)
              : x - f == 0.5f             ? (m == ResizeNearest::kRoundPreferFloor ? f : f + 1)
                                          : std::round(x);
    return std::clamp<std::int64_t>(static_cast<std::int64_t>(r), 0, in - 1);
  }

  std::vector<float> step(const Step& s) const {
    const float* x = arg(s.args[0]);
    std::vector<float> y(static_cast<std::size_t>(p.lens[static_cast<std::size_t>(s.out)]));
    if (const auto* j = std::get_if<ConvJob>(&s.op)) {
      const std::int64_t cg = j->cin / j->groups, og = j->cout / j->groups;
      for (std::int64_t co = 0; co < j->cout; ++co)
        for (std::int64_t oy = 0; oy < j->oh; ++oy)
          for (std::int64_t ox = 0; ox < j->ow; ++ox) {
            double acc = j->bias ? (*j->bias)[static_cast<std::size_t>(co)] : 0.0;
            for (std::int64_t ci = 0; ci < cg; ++ci)
              for (std::int64_t ky = 0; ky < j->kh; ++ky)
                for (std::int64_t kx = 0; kx < j->kw; ++kx) {
                  const std::int64_t iy = oy * j->sh + ky * j->dh - j->pt,
                                     ix = ox * j->sw + kx * j->dw - j->pl;
                  if (iy < 0 || iy >= j->h || ix < 0 || ix >= j->w) continue;
                  acc += static_cast<double>(x[((co / og) * cg + ci) * j->h * j->w + iy * j->w + ix]) *
                         (*j->weights)[static_cast<std::size_t>(((co * cg + ci) * j->kh + ky) * j->kw + kx)];
                }
            y[static_cast<std::size_t>((co * j->oh + oy) * j->ow + ox)] = static_cast<float>(acc);
          }
    } else if (const auto* u = std::get_if<UnaryOp>(&s.op)) {
      for (std::size_t i = 0; i < y.size(); ++i) y[i] = unary(*u, x[i]);
    } else if (const auto* a = std::get_if<ChannelAffineOp>(&s.op)) {
      const float *sc = arg(s.args[1]), *sh = arg(s.args[2]);
      for (std::size_t i = 0; i < y.size(); ++i) y[i] = x[i] * sc[i / a->plane] + sh[i / a->plane];
    } else if (const auto* pr = std::get_if<ChannelPreluOp>(&s.op)) {
      const float* sl = arg(s.args[1]);
      for (std::size_t i = 0; i < y.size(); ++i) y[i] = x[i] >= 0 ? x[i] : sl[i / pr->plane] * x[i];
    } else if (const auto* b = std::get_if<BinaryOp>(&s.op)) {
      const float* o = arg(s.args[1]);
      std::size_t k = 0;
      for (std::int64_t i0 = 0; i0 < b->dims[0]; ++i0)
        for (std::int64_t i1 = 0; i1 < b->dims[1]; ++i1)
          for (std::int64_t i2 = 0; i2 < b->dims[2]; ++i2)
            for (std::int64_t i3 = 0; i3 < b->dims[3]; ++i3) {
              const auto& as = b->a_strides;
              const auto& bs = b->b_strides;
              const float u = x[i0 * as[0] + i1 * as[1] + i2 * as[2] + i3 * as[3]];
              const float w = o[i0 * bs[0] + i1 * bs[1] + i2 * bs[2] + i3 * bs[3]];
              y[k++] = b->kind == BinaryKind::kAdd   ? u + w
                       : b->kind == BinaryKind::kSub ? u - w
                       : b->kind == BinaryKind::kMul ? u * w
                                                     : u / w;
            }
    } else if (const auto* t = std::get_if<TransposeOp>(&s.op)) {
      for (std::size_t i = 0; i < y.size(); ++i) {
        std::int64_t r = static_cast<std::int64_t>(i), at = t->offset;
        for (std::size_t ax = t->dims.size(); ax-- > 0;) {
          at += (r % t->dims[ax]) * t->strides[ax];
          r /= t->dims[ax];
        }
        y[i] = x[at];
      }
    } else if (const auto* m = std::get_if<MaxPoolOp>(&s.op)) {
      for (std::int64_t c = 0; c < m->channels; ++c)
        for (std::int64_t oy = 0; oy < m->oh; ++oy)
          for (std::int64_t ox = 0; ox < m->ow; ++ox) {
            float best = -std::numeric_limits<float>::infinity();
            for (std::int64_t ky = 0; ky < m->kh; ++ky)
              for (std::int64_t kx = 0; kx < m->kw; ++kx) {
                const std::int64_t iy = oy * m->sh + ky - m->pt, ix = ox * m->sw + kx - m->pl;
                if (iy >= 0 && iy < m->h && ix >= 0 && ix < m->w)
                  best = std::max(best, x[(c * m->h + iy) * m->w + ix]);
              }
            y[static_cast<std::size_t>((c * m->oh + oy) * m->ow + ox)] = best;
          }
    } else if (const auto* a = std::get_if<AvgPoolOp>(&s.op)) {
      for (std::int64_t c = 0; c < a->channels; ++c)
        for (std::int64_t oy = 0; oy < a->oh; ++oy)
          for (std::int64_t ox = 0; ox < a->ow; ++ox) {
            double sum = 0;
            std::int64_t real = 0, padded = 0;
            for (std::int64_t ky = 0; ky < a->kh; ++ky)
              for (std::int64_t kx = 0; kx < a->kw; ++kx) {
                const std::int64_t iy = oy * a->sh + ky - a->pt, ix = ox * a->sw + kx - a->pl;
                if (iy >= -a->pt && iy < a->h + a->pb && ix >= -a->pl && ix < a->w + a->pr) ++padded;
                if (iy < 0 || iy >= a->h || ix < 0 || ix >= a->w) continue;
                sum += x[(c * a->h + iy) * a->w + ix];
                ++real;
              }
            y[static_cast<std::size_t>((c * a->oh + oy) * a->ow + ox)] =
                static_cast<float>(sum / static_cast<double>(a->count_include_pad ? padded : real));
          }
    } else if (const auto* r = std::get_if<ResizeOp>(&s.op)) {
      const float sy = r->scale_y > 0 ? r->scale_y : static_cast<float>(r->oh) / static_cast<float>(r->h);
      const float sx = r->scale_x > 0 ? r->scale_x : static_cast<float>(r->ow) / static_cast<float>(r->w);
      for (std::int64_t c = 0; c < r->channels; ++c)
        for (std::int64_t oy = 0; oy < r->oh; ++oy)
          for (std::int64_t ox = 0; ox < r->ow; ++ox) {
            const float* in = x + c * r->h * r->w;
            float out;
            if (r->mode == ResizeMode::kNearest) {
              out = in[nearest(r->nearest, coord(r->coord, oy, sy, r->h, r->oh), r->h) * r->w +
                       nearest(r->nearest, coord(r->coord, ox, sx, r->w, r->ow), r->w)];
            } else {
              const double fy =
                  std::clamp(coord(r->coord, oy, sy, r->h, r->oh), 0.0f, static_cast<float>(r->h - 1));
              const double fx =
                  std::clamp(coord(r->coord, ox, sx, r->w, r->ow), 0.0f, static_cast<float>(r->w - 1));
              const auto y0 = static_cast<std::int64_t>(std::floor(fy)),
                         x0 = static_cast<std::int64_t>(std::floor(fx));
              const std::int64_t y1 = std::min(y0 + 1, r->h - 1), x1 = std::min(x0 + 1, r->w - 1);
              const double ly = fy - y0, lx = fx - x0;
              out = static_cast<float>((1 - ly) * ((1 - lx) * in[y0 * r->w + x0] + lx * in[y0 * r->w + x1]) +
                                       ly * ((1 - lx) * in[y1 * r->w + x0] + lx * in[y1 * r->w + x1]));
            }
            y[static_cast<std::size_t>((c * r->oh + oy) * r->ow + ox)] = out;
          }
    } else if (const auto* g = std::get_if<GlobalAverageOp>(&s.op)) {
      for (std::int64_t c = 0; c < g->channels; ++c) {
        double sum = 0;
        for (std::int64_t i = 0; i < g->plane; ++i) sum += x[c * g->plane + i];
        y[static_cast<std::size_t>(c)] = static_cast<float>(sum / static_cast<double>(g->plane));
      }
    } else if (const auto* gm = std::get_if<GemvOp>(&s.op)) {
      const float* w = arg(s.args[1]);
      for (std::int64_t jn = 0; jn < gm->n; ++jn) {
        double acc = 0;
        for (std::int64_t i = 0; i < gm->k; ++i)
          acc += static_cast<double>(x[i]) * (gm->trans_b ? w[jn * gm->k + i] : w[i * gm->n + jn]);
        y[static_cast<std::size_t>(jn)] =
            static_cast<float>(gm->alpha * acc + (gm->has_bias ? gm->beta * arg(s.args[2])[jn] : 0.0));
      }
    } else if (const auto* sm = std::get_if<SoftmaxOp>(&s.op)) {
      for (std::int64_t o = 0; o < sm->outer; ++o)
        for (std::int64_t in = 0; in < sm->inner; ++in) {
          const auto at = [&](std::int64_t k) { return (o * sm->axis + k) * sm->inner + in; };
          double mx = -INFINITY, sum = 0;
          for (std::int64_t k = 0; k < sm->axis; ++k) mx = std::max(mx, static_cast<double>(x[at(k)]));
          for (std::int64_t k = 0; k < sm->axis; ++k) sum += std::exp(x[at(k)] - mx);
          for (std::int64_t k = 0; k < sm->axis; ++k)
            y[static_cast<std::size_t>(at(k))] = static_cast<float>(std::exp(x[at(k)] - mx) / sum);
        }
    } else if (const auto* ct = std::get_if<ConcatOp>(&s.op)) {
      std::int64_t total = 0;
      for (auto q : ct->parts) total += q;
      std::int64_t off = 0;
      for (std::size_t k = 0; k < ct->parts.size(); ++k) {
        const float* src = arg(s.args[k]);
        for (std::int64_t o = 0; o < ct->outer; ++o)
          for (std::int64_t q = 0; q < ct->parts[k] * ct->inner; ++q)
            y[static_cast<std::size_t>((o * total + off) * ct->inner + q)] =
                src[o * ct->parts[k] * ct->inner + q];
        off += ct->parts[k];
      }
    } else if (const auto* mm = std::get_if<MatMulOp>(&s.op)) {
      const float* bm = arg(s.args[1]);
      for (std::int64_t i = 0; i < mm->batch; ++i)
        for (std::int64_t r = 0; r < mm->m; ++r)
          for (std::int64_t c = 0; c < mm->n; ++c) {
            double acc = 0;
            for (std::int64_t k = 0; k < mm->k; ++k)
              acc += static_cast<double>(x[i * mm->a_stride + r * mm->k + k]) *
                     bm[i * mm->b_stride + (mm->trans_b ? c * mm->k + k : k * mm->n + c)];
            y[static_cast<std::size_t>((i * mm->m + r) * mm->n + c)] = static_cast<float>(acc);
          }
    } else if (const auto* rm = std::get_if<ReduceMeanOp>(&s.op)) {
      for (std::int64_t o = 0; o < rm->outer; ++o)
        for (std::int64_t in = 0; in < rm->inner; ++in) {
          double sum = 0;
          for (std::int64_t k = 0; k < rm->len; ++k) sum += x[(o * rm->len + k) * rm->inner + in];
          y[static_cast<std::size_t>(o * rm->inner + in)] =
              static_cast<float>(sum / static_cast<double>(rm->len));
        }
    } else if (const auto* pd = std::get_if<PadOp>(&s.op)) {
      std::array<std::int64_t, 4> od{};
      for (int k = 0; k < 4; ++k) od[k] = pd->in_dims[k] + pd->begin[k] + pd->end[k];
      std::size_t q = 0;
      for (std::int64_t a0 = 0; a0 < od[0]; ++a0)
        for (std::int64_t a1 = 0; a1 < od[1]; ++a1)
          for (std::int64_t a2 = 0; a2 < od[2]; ++a2)
            for (std::int64_t a3 = 0; a3 < od[3]; ++a3) {
              const std::int64_t j[4] = {a0 - pd->begin[0], a1 - pd->begin[1], a2 - pd->begin[2],
                                         a3 - pd->begin[3]};
              bool in = true;
              for (int k = 0; k < 4; ++k) in = in && j[k] >= 0 && j[k] < pd->in_dims[k];
              y[q++] =
                  in ? x[((j[0] * pd->in_dims[1] + j[1]) * pd->in_dims[2] + j[2]) * pd->in_dims[3] + j[3]]
                     : pd->value;
            }
    }
    return y;
  }

  static std::vector<std::vector<float>> run(const Program& p, std::span<const float> input) {
    Naive n{p, std::vector<std::vector<float>>(p.lens.size())};
    n.v[0].assign(input.begin(), input.end());
    for (const auto& s : p.steps) n.v[static_cast<std::size_t>(s.out)] = n.step(s);
    std::vector<std::vector<float>> outs;
    for (const auto& o : p.outputs) outs.push_back(n.v[static_cast<std::size_t>(o.value)]);
    return outs;
  }
};

// ---- the GPU side ------------------------------------------------------------------------------------------

#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

// Device copies of a program's constants, a stream, and plan/run helpers.
class FacesGpu : public ::testing::Test {
 public:
  void SetUp() override {
    FT_REQUIRE_GPU();
    ASSERT_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    for (void* p : device_) cudaFree(p);
    if (stream_) cudaStreamDestroy(stream_);
  }
  float* upload(std::span<const float> v) {
    void* d = nullptr;
    if (cudaMalloc(&d, std::max<std::size_t>(4, v.size() * 4)) != cudaSuccess) return nullptr;
    device_.push_back(d);
    // synchronous copy: the plan's stream is non-blocking and does not wait for the legacy stream's DMA
    cudaMemcpy(d, v.data(), v.size() * 4, cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
    return static_cast<float*>(d);
  }
  gpu::ConstTable consts_of(const Program& p) {
    gpu::ConstTable t;
    for (const auto& c : p.consts) t.push_back(upload(*c));
    return t;
  }
  Expected<std::unique_ptr<GpuProgram>> plan(const Program& p, PlanOptions o = {}) {
    return GpuProgram::plan(p, consts_of(p), o, stream_);
  }
  // Runs a planned program on inputs (each lens[0] floats); outputs as run_program_cpu returns them.
  Outputs run(GpuProgram& g, const Program& p, const std::vector<std::vector<float>>& inputs) {
    const std::size_t n0 = static_cast<std::size_t>(p.lens[0]);
    std::vector<float> flat;
    for (const auto& in : inputs) flat.insert(flat.end(), in.begin(), in.end());
    float* din = upload(flat);
    float* dout = nullptr;
    EXPECT_EQ(cudaMalloc(&dout, g.output_floats() * 4), cudaSuccess);
    device_.push_back(dout);
    const Status st = g.run(din, dout);
    EXPECT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    std::vector<float> host(g.output_floats());
    cudaMemcpy(host.data(), dout, host.size() * 4, cudaMemcpyDeviceToHost);
    Outputs out(inputs.size());
    std::size_t at = 0;
    for (const auto& o : p.outputs) {
      const auto len = static_cast<std::size_t>(p.lens[static_cast<std::size_t>(o.value)]);
      for (std::size_t b = 0; b < inputs.size(); ++b) {
        out[b].emplace_back(host.begin() + static_cast<std::ptrdiff_t>(at),
                            host.begin() + static_cast<std::ptrdiff_t>(at + len));
        at += len;
      }
    }
    static_cast<void>(n0);
    return out;
  }
  // Plans at batch inputs.size() and runs.
  Outputs plan_run(const Program& p, const std::vector<std::vector<float>>& inputs, PlanOptions o = {}) {
    o.batch = static_cast<int>(inputs.size());
    auto g = plan(p, o);
    EXPECT_TRUE(g.ok()) << g.status().to_string();
    if (!g) return {};
    return run(**g, p, inputs);
  }

  cudaStream_t stream_ = nullptr;
  std::vector<void*> device_;
};

std::vector<std::vector<float>> inputs_for(const Program& p, int batch, std::uint32_t seed, float lo = -2.0f,
                                           float hi = 2.0f) {
  std::vector<std::vector<float>> in;
  for (int b = 0; b < batch; ++b)
    in.push_back(random_floats(static_cast<std::size_t>(p.lens[0]), seed + 17u * b, lo, hi));
  return in;
}

double max_abs(std::span<const float> v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::abs(x)));
  return m;
}

// GPU vs the plain definition (and vs the CPU interpreter where it runs the program) at batch 1 and 7:
// |gpu − ref| ≤ rel·(|ref| + max|ref|) per output.
void expect_matches(FacesGpu& t, const Program& p, const Outputs& got,
                    const std::vector<std::vector<float>>& in, double rel, const char* what) {
  ASSERT_EQ(got.size(), in.size()) << what;
  std::vector<std::span<const float>> spans(in.begin(), in.end());
  auto cpu = run_program_cpu(p, spans, 1);
  EXPECT_TRUE(cpu.ok()) << what << ": the CPU interpreter: " << cpu.status().to_string();
  for (std::size_t b = 0; b < in.size(); ++b) {
    const auto want = Naive::run(p, in[b]);
    ASSERT_EQ(got[b].size(), want.size());
    for (std::size_t k = 0; k < want.size(); ++k) {
      const double m = max_abs(want[k]);
      EXPECT_TRUE(testing::all_close(std::span<const float>(got[b][k]), std::span<const float>(want[k]),
                                     {rel * m + 1e-7, rel}))
          << what << ": image " << b << " output " << k << " vs the definition";
      if (cpu) {
        EXPECT_TRUE(testing::all_close(std::span<const float>(got[b][k]),
                                       std::span<const float>((*cpu)[b][k]), {rel * m + 1e-7, rel}))
            << what << ": image " << b << " output " << k << " vs the CPU interpreter";
      }
    }
  }
  static_cast<void>(t);
}

void check_op(FacesGpu& t, const Program& p, const char* what, double rel = 1e-5, float lo = -2.0f,
              float hi = 2.0f, PlanOptions o = {}) {
  for (int batch : {1, 7}) {
    const auto in = inputs_for(p, batch, 1234u + static_cast<std::uint32_t>(batch), lo, hi);
    const Outputs got = t.plan_run(p, in, o);
    expect_matches(t, p, got, in, rel, what);
  }
}

// ---- ops ---------------------------------------------------------------------------------------------------

TEST_F(FacesGpu, UnaryEveryKind) {
  const Shape s{1, 5, 7, 9};
  const std::vector<UnaryOp> ops{
      {UnaryKind::kRelu},
      {UnaryKind::kSigmoid},
      {UnaryKind::kClip, -0.5f, 0.75f},
      {UnaryKind::kLeakyRelu, 0, 0, 0.1f},
      {UnaryKind::kTanh},
      {UnaryKind::kHardSigmoid, 0, 0, 0.2f, 0.5f},
      {UnaryKind::kHardSwish},
  };
  for (const auto& u : ops) {
    Builder b(s);
    const auto y = b.step(u, {Arg::value(0)}, s);
    check_op(*this, b.done({y}), "unary");
  }
  Builder b(s);  // Sqrt of a Relu (no negative operand)
  const auto r = b.step(UnaryOp{UnaryKind::kRelu}, {Arg::value(0)}, s);
  const auto q = b.step(UnaryOp{UnaryKind::kSqrt}, {Arg::value(r)}, s);
  check_op(*this, b.done({q}), "sqrt");
}

TEST_F(FacesGpu, ChannelAffineAndPrelu) {
  const Shape s{1, 6, 5, 11};
  Builder b(s);
  const auto sc = b.constant(random_floats(6, 3)), sh = b.constant(random_floats(6, 4)),
             sl = b.constant(random_floats(6, 5));
  const auto a = b.step(ChannelAffineOp{6, 55}, {Arg::value(0), Arg::constant(sc), Arg::constant(sh)}, s);
  const auto p = b.step(ChannelPreluOp{6, 55}, {Arg::value(a), Arg::constant(sl)}, s);
  check_op(*this, b.done({a, p}), "affine+prelu");
}

TEST_F(FacesGpu, BinaryBroadcastEveryKind) {
  for (auto kind : {BinaryKind::kAdd, BinaryKind::kSub, BinaryKind::kMul, BinaryKind::kDiv}) {
    // a: [1,3,5,7] value; b: [1,3,1,7] slice of the input (broadcast over axis 2); c: const [7]
    Builder bl(Shape{1, 3, 5, 7});
    TransposeOp slice{{1, 3, 1, 7}, {105, 35, 0, 1}, 7};
    const auto bv = bl.step(slice, {Arg::value(0)}, {1, 3, 1, 7});
    std::vector<float> cv = random_floats(7, 9, 0.5f, 2.0f);  // away from 0 for Div
    const auto c = bl.constant(cv);
    BinaryOp op{kind, {1, 3, 5, 7}, {105, 35, 7, 1}, {21, 7, 0, 1}};
    const auto y = bl.step(op, {Arg::value(0), Arg::value(bv)}, {1, 3, 5, 7});
    BinaryOp op2{kind, {1, 3, 5, 7}, {105, 35, 7, 1}, {0, 0, 0, 1}};
    const auto z = bl.step(op2, {Arg::value(y), Arg::constant(c)}, {1, 3, 5, 7});
    BinaryOp op3{kind, {1, 3, 5, 7}, {0, 0, 0, 1}, {105, 35, 7, 1}};  // constant first operand
    const auto w = bl.step(op3, {Arg::constant(c), Arg::value(z)}, {1, 3, 5, 7});
    if (kind == BinaryKind::kDiv) {
      check_op(*this, bl.done({z}), "binary div", 1e-5, 0.5f, 2.0f);
    } else {
      check_op(*this, bl.done({y, z, w}), "binary");
    }
  }
}

TEST_F(FacesGpu, StridedCopyTransposeSliceReverseExpand) {
  Builder b(Shape{1, 4, 6, 5});
  const auto t =
      b.step(TransposeOp{{1, 5, 4, 6}, {120, 1, 30, 5}, 0}, {Arg::value(0)}, {1, 5, 4, 6});   // NCHW→NWCH
  const auto s = b.step(TransposeOp{{2, 3, 2}, {30, 5, 2}, 31}, {Arg::value(0)}, {2, 3, 2});  // slice
  const auto r = b.step(TransposeOp{{4, 6, 5}, {30, 5, -1}, 4}, {Arg::value(0)}, {4, 6, 5});  // reverse W
  const auto e = b.step(TransposeOp{{3, 4, 5}, {0, 30, 1}, 0}, {Arg::value(0)}, {3, 4, 5});   // expand
  check_op(*this, b.done({t, s, r, e}), "strided copy");
}

TEST_F(FacesGpu, StridedCopyOfRankFiveIsDeclined) {
  Builder b(Shape{1, 2, 3, 4, 5});
  const auto t =
      b.step(TransposeOp{{1, 2, 3, 5, 4}, {120, 60, 20, 1, 5}, 0}, {Arg::value(0)}, {1, 2, 3, 5, 4});
  const Program p = b.done({t});
  auto g = plan(p);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), Code::kDeclined) << g.status().to_string();
}

TEST_F(FacesGpu, PoolsWithPads) {
  Builder b(Shape{1, 3, 13, 11});
  MaxPoolOp m1{3, 13, 11, 3, 3, 2, 2, 7, 6, 1, 1};
  MaxPoolOp m2{3, 13, 11, 2, 2, 2, 2, 7, 6, 0, 0};  // ceil_mode: the last window hangs past the plane
  AvgPoolOp a1{3, 13, 11, 3, 3, 2, 2, 7, 6, 1, 1, 1, 1, true};
  AvgPoolOp a2{3, 13, 11, 3, 3, 2, 2, 7, 6, 1, 1, 1, 1, false};
  AvgPoolOp a3{3, 13, 11, 2, 2, 2, 2, 7, 6, 0, 0, 0, 0, true};  // ceil_mode tail does not count
  const auto y1 = b.step(m1, {Arg::value(0)}, {1, 3, 7, 6});
  const auto y2 = b.step(m2, {Arg::value(0)}, {1, 3, 7, 6});
  const auto y3 = b.step(a1, {Arg::value(0)}, {1, 3, 7, 6});
  const auto y4 = b.step(a2, {Arg::value(0)}, {1, 3, 7, 6});
  const auto y5 = b.step(a3, {Arg::value(0)}, {1, 3, 7, 6});
  check_op(*this, b.done({y1, y2, y3, y4, y5}), "pools");
}

// The MaxPool forms: 2×2 stride 2 over a width of a multiple of 4 (two outputs per thread from float4 rows),
// fixed 3×3 and a general 5×4 window in 32-bit indices.
TEST_F(FacesGpu, MaxPoolForms) {
  Builder b(Shape{1, 5, 14, 24});
  MaxPoolOp m1{5, 14, 24, 2, 2, 2, 2, 7, 12, 0, 0};
  MaxPoolOp m2{5, 14, 24, 3, 3, 1, 1, 14, 24, 1, 1};
  MaxPoolOp m3{5, 14, 24, 5, 4, 3, 2, 4, 11, 1, 0};
  const auto y1 = b.step(m1, {Arg::value(0)}, {1, 5, 7, 12});
  const auto y2 = b.step(m2, {Arg::value(0)}, {1, 5, 14, 24});
  const auto y3 = b.step(m3, {Arg::value(0)}, {1, 5, 4, 11});
  check_op(*this, b.done({y1, y2, y3}), "maxpool forms");
}

TEST_F(FacesGpu, ResizeModes) {
  std::vector<std::int32_t> outs;
  Builder b(Shape{1, 2, 5, 7});
  ResizeOp up{2, 5, 7, 2, 2, 10, 14};  // integer nearest
  outs.push_back(b.step(up, {Arg::value(0)}, {1, 2, 10, 14}));
  for (auto coord : {ResizeCoord::kAsymmetric, ResizeCoord::kHalfPixel, ResizeCoord::kPytorchHalfPixel,
                     ResizeCoord::kAlignCorners}) {
    ResizeOp lin{2, 5, 7, 0, 0, 9, 12, ResizeMode::kLinear, coord};
    outs.push_back(b.step(lin, {Arg::value(0)}, {1, 2, 9, 12}));
    ResizeOp down{2, 5, 7, 0, 0, 3, 4, ResizeMode::kLinear, coord};
    outs.push_back(b.step(down, {Arg::value(0)}, {1, 2, 3, 4}));
  }
  for (auto nm : {ResizeNearest::kFloor, ResizeNearest::kRoundPreferFloor, ResizeNearest::kRoundPreferCeil,
                  ResizeNearest::kCeil}) {
    ResizeOp near{2, 5, 7, 0, 0, 8, 11, ResizeMode::kNearest, ResizeCoord::kHalfPixel, nm};
    outs.push_back(b.step(near, {Arg::value(0)}, {1, 2, 8, 11}));
    ResizeOp half{2, 5, 7, 0, 0, 10, 14, ResizeMode::kNearest, ResizeCoord::kAsymmetric, nm, 2.0f, 2.0f};
    outs.push_back(b.step(half, {Arg::value(0)}, {1, 2, 10, 14}));
  }
  for (auto& st : b.p.steps) {  // ONNX's scales (out/in from `sizes`), as the lowering records them
    auto& r = std::get<ResizeOp>(st.op);
    if (r.scale_y == 0.0f) r.scale_y = static_cast<float>(r.oh) / static_cast<float>(r.h);
    if (r.scale_x == 0.0f) r.scale_x = static_cast<float>(r.ow) / static_cast<float>(r.w);
  }
  check_op(*this, b.done(outs), "resize");
}

TEST_F(FacesGpu, ReductionsSoftmaxConcatPad) {
  Builder b(Shape{1, 6, 9, 13});
  const auto g = b.step(GlobalAverageOp{6, 117}, {Arg::value(0)}, {1, 6, 1, 1});
  const auto s1 = b.step(SoftmaxOp{6, 9, 13}, {Arg::value(0)}, {1, 6, 9, 13});
  const auto s2 = b.step(SoftmaxOp{54, 13, 1}, {Arg::value(0)}, {1, 6, 9, 13});
  const auto r = b.step(ReduceMeanOp{6, 9, 13}, {Arg::value(0)}, {1, 6, 13});
  const auto c0 = b.constant(random_floats(6 * 2 * 13, 77));
  const auto cc =
      b.step(ConcatOp{6, 13, {9, 2, 9}}, {Arg::value(0), Arg::constant(c0), Arg::value(s1)}, {1, 6, 20, 13});
  PadOp pd{{1, 6, 9, 13}, {0, 1, 2, 0}, {0, 0, 1, 3}, 0.25f};
  const auto p = b.step(pd, {Arg::value(0)}, {1, 7, 12, 16});
  check_op(*this, b.done({g, s1, s2, r, cc, p}), "reductions");
}

TEST_F(FacesGpu, GemvAndMatMul) {
  Builder b(Shape{1, 37});
  const auto w1 = b.constant(random_floats(37 * 19, 5)), w2 = b.constant(random_floats(19 * 37, 6)),
             bias = b.constant(random_floats(19, 7));
  const auto g1 = b.step(GemvOp{37, 19, false, 1.0f, 1.0f, true},
                         {Arg::value(0), Arg::constant(w1), Arg::constant(bias)}, {1, 19});
  const auto g2 = b.step(GemvOp{37, 19, true, 0.5f, 2.0f, true},
                         {Arg::value(0), Arg::constant(w2), Arg::constant(bias)}, {1, 19});
  const auto g3 =
      b.step(GemvOp{37, 19, true, 1.0f, 1.0f, false}, {Arg::value(0), Arg::constant(w2)}, {1, 19});
  check_op(*this, b.done({g1, g2, g3}), "gemv");

  Builder m(Shape{1, 3, 5, 8});  // batched MatMul: [3,5,8]·[8,6] shared const, [3,5,8]·[3,8,5]ᵀ value
  const auto bc = m.constant(random_floats(8 * 6, 8));
  const auto y1 =
      m.step(MatMulOp{3, 5, 8, 6, 40, 0, false}, {Arg::value(0), Arg::constant(bc)}, {1, 3, 5, 6});
  const auto y2 = m.step(MatMulOp{3, 5, 8, 5, 40, 40, true}, {Arg::value(0), Arg::value(0)}, {1, 3, 5, 5});
  const auto y3 = m.step(MatMulOp{1, 15, 8, 6, 0, 0, false}, {Arg::value(0), Arg::constant(bc)}, {1, 15, 6});
  check_op(*this, m.done({y1, y2, y3}), "matmul");
}

// The spec's "GPU conv" shapes (cin, cout, g, k, s, p, h, w), dilation, asymmetric pads, m < 8, no bias.
TEST_F(FacesGpu, ConvShapes) {
  struct C {
    std::int64_t cin, cout, g, k, s, p, h, w, dil = 1, pad_r = -1;
    bool bias = true;
  };
  const std::vector<C> cases{{3, 16, 1, 3, 2, 1, 41, 37},     {64, 64, 1, 3, 1, 1, 28, 28},
                             {32, 32, 32, 3, 1, 1, 30, 31},   {16, 32, 4, 3, 2, 1, 33, 20},
                             {48, 72, 1, 1, 1, 0, 50, 45},    {8, 130, 1, 5, 1, 2, 23, 19},
                             {12, 20, 1, 3, 1, 2, 17, 15, 2}, {6, 6, 1, 3, 2, 0, 16, 16, 1, 1},
                             {24, 12, 6, 3, 1, 1, 9, 13},     {10, 5, 1, 3, 1, 1, 11, 7, 1, -1, false},
                             {40, 40, 40, 5, 2, 2, 19, 21}};
  std::uint32_t seed = 100;
  for (const auto& c : cases) {
    const ConvJob j = conv_job(c.cin, c.cout, c.g, c.k, c.s, c.p, c.h, c.w, seed++, c.dil, c.bias, c.pad_r);
    Builder b(Shape{1, c.cin, c.h, c.w});
    const auto y = b.step(j, {Arg::value(0)}, {1, c.cout, j.oh, j.ow});
    const Program p = b.done({y});
    check_op(*this, p, "conv");
    PlanOptions own;
    own.autotune = false;  // cuDNN's choice alone (the autotuned run may have kept the own kernel)
    check_op(*this, p, "conv (no autotune)", 1e-5, -2.0f, 2.0f, own);
  }
}

// The own implicit GEMM with forced K splits (autotune may not pick it for these shapes) vs the definition.
TEST_F(FacesGpu, OwnImplicitGemmSplitKMatchesDefinition) {
  struct C {
    std::int64_t cin, cout, g, k, s, p, h, w, dil;
  };
  for (const C& c :
       {C{64, 64, 1, 3, 1, 1, 14, 14, 1}, C{16, 32, 4, 3, 2, 1, 33, 20, 1}, C{8, 130, 1, 5, 1, 2, 23, 19, 1},
        C{12, 20, 1, 3, 1, 2, 17, 15, 2}, C{48, 72, 1, 1, 1, 0, 9, 7, 1}, C{24, 3, 1, 3, 1, 1, 20, 21, 1}}) {
    const ConvJob j = conv_job(c.cin, c.cout, c.g, c.k, c.s, c.p, c.h, c.w, 900, c.dil);
    Builder b(Shape{1, c.cin, c.h, c.w});
    const auto y = b.step(j, {Arg::value(0)}, {1, c.cout, j.oh, j.ow});
    const Program p = b.done({y});
    const int batch = 3;
    const auto in = inputs_for(p, batch, 901);
    std::vector<float> flat;
    for (const auto& v : in) flat.insert(flat.end(), v.begin(), v.end());
    const float* dx = upload(flat);
    const float* dw = upload(*j.weights);
    const float* db = upload(*j.bias);
    const std::size_t out = static_cast<std::size_t>(c.cout * j.oh * j.ow);
    std::vector<std::vector<float>> by_splits(3);  // the 64-row tile's result per split count
    for (int v = 0; v < 18; ++v) {
      const int splits = v % 3 == 0 ? 1 : v % 3 == 1 ? 3 : 7;
      const bool pipelined = v % 6 >= 3;
      const int tile_m = v < 6 ? 64 : v < 12 ? 16 : 128;
      float* dy = upload(std::vector<float>(out * batch, NAN));
      float* part = upload(std::vector<float>(out * batch * splits, 0.0f));
      const gpu::EpilogueAct relu{gpu::EpilogueAct::Kind::kRelu};
      const Status st =
          gpu::launch_conv_igemm(j, batch, splits, dx, dw, db, relu, dy, part, stream_, pipelined, tile_m);
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_CUDA(cudaStreamSynchronize(stream_));
      std::vector<float> got(out * batch);
      ASSERT_CUDA(cudaMemcpy(got.data(), dy, got.size() * 4, cudaMemcpyDeviceToHost));
      // every tile shape and both loop forms sum in the same K order: the same bits for the same splits
      auto& ref = by_splits[static_cast<std::size_t>(v % 3)];
      if (ref.empty())
        ref = got;
      else
        EXPECT_EQ(std::memcmp(ref.data(), got.data(), got.size() * 4), 0)
            << "igemm cin " << c.cin << " tile_m " << tile_m << " splits " << splits << " pipelined "
            << pipelined << ": other bits than the 64-row tile";
      for (int i = 0; i < batch; ++i) {
        auto want = Naive::run(p, in[static_cast<std::size_t>(i)])[0];
        for (auto& v : want) v = v > 0 ? v : 0;
        const std::span<const float> g(got.data() + out * static_cast<std::size_t>(i), out);
        EXPECT_TRUE(testing::all_close(g, std::span<const float>(want), {1e-5 * max_abs(want) + 1e-7, 1e-5}))
            << "igemm cin " << c.cin << " cout " << c.cout << " tile_m " << tile_m << " splits " << splits
            << " pipelined " << pipelined << " image " << i;
      }
    }
  }
}

// The depthwise 3×3 kernel of four outputs per thread: the definition, and the same bits as the direct kernel.
TEST_F(FacesGpu, Depthwise3x3FourWideMatchesDirectKernel) {
  struct C {
    std::int64_t c, s, p, h, w;
  };
  // widths of a multiple of 4 take the float4 row loads
  for (const C& c :
       {C{32, 1, 1, 30, 31}, C{40, 2, 1, 19, 21}, C{24, 2, 0, 17, 13}, C{5, 1, 1, 7, 3}, C{32, 1, 1, 30, 32},
        C{40, 2, 1, 19, 24}, C{6, 2, 1, 9, 8}, C{5, 2, 1, 7, 12}, C{3, 1, 1, 5, 4}}) {
    const ConvJob j = conv_job(c.c, c.c, c.c, 3, c.s, c.p, c.h, c.w, 950);
    ASSERT_TRUE(gpu::dw3x3_x4_fits(j, 3));
    Builder b(Shape{1, c.c, c.h, c.w});
    const auto y = b.step(j, {Arg::value(0)}, {1, c.c, j.oh, j.ow});
    const Program p = b.done({y});
    const int batch = 3;
    const auto in = inputs_for(p, batch, 951);
    std::vector<float> flat;
    for (const auto& v : in) flat.insert(flat.end(), v.begin(), v.end());
    const float* dx = upload(flat);
    const float* dw = upload(*j.weights);
    const float* db = upload(*j.bias);
    const std::size_t out = static_cast<std::size_t>(c.c * j.oh * j.ow);
    float* d4 = upload(std::vector<float>(out * batch, NAN));
    float* d1 = upload(std::vector<float>(out * batch, NAN));
    const gpu::EpilogueAct clip{gpu::EpilogueAct::Kind::kClip, -0.5f, 0.5f};
    ASSERT_TRUE(gpu::launch_dw3x3_x4(j, batch, dx, dw, db, clip, d4, stream_).ok());
    ASSERT_TRUE(gpu::launch_conv_direct(j, batch, dx, dw, db, clip, d1, stream_).ok());
    ASSERT_CUDA(cudaStreamSynchronize(stream_));
    std::vector<float> g4(out * batch), g1(out * batch);
    ASSERT_CUDA(cudaMemcpy(g4.data(), d4, g4.size() * 4, cudaMemcpyDeviceToHost));
    ASSERT_CUDA(cudaMemcpy(g1.data(), d1, g1.size() * 4, cudaMemcpyDeviceToHost));
    EXPECT_TRUE(testing::bit_identical(g4, g1)) << "channels " << c.c << " stride " << c.s;
    for (int i = 0; i < batch; ++i) {
      auto want = Naive::run(p, in[static_cast<std::size_t>(i)])[0];
      for (auto& v : want) v = std::min(std::max(v, -0.5f), 0.5f);
      const std::span<const float> g(g4.data() + out * static_cast<std::size_t>(i), out);
      EXPECT_TRUE(testing::all_close(g, std::span<const float>(want), {1e-6, 1e-5})) << "image " << i;
    }
  }
}

// The 3×3 kernel of every output channel per thread (a stem conv: YuNet's 3 → 16 of stride 2) gives the direct
// kernel's bits and the definition's values, with a Relu, a residual-free epilogue, odd sides and both widths.
TEST_F(FacesGpu, AllChannels3x3MatchesDirectKernel) {
  struct C {
    std::int64_t cin, cout, s, p, h, w;
  };
  for (const C& c : {C{3, 16, 2, 1, 33, 47}, C{3, 16, 1, 1, 9, 8}, C{2, 27, 2, 0, 17, 13},
                     C{7, 32, 1, 1, 5, 6}, C{1, 5, 2, 1, 11, 12}, C{3, 16, 2, 1, 80, 96}}) {
    const ConvJob j = conv_job(c.cin, c.cout, 1, 3, c.s, c.p, c.h, c.w, 960);
    const int batch = 3;
    ASSERT_TRUE(gpu::allco3x3_fits(j, batch));
    Builder b(Shape{1, c.cin, c.h, c.w});
    const auto y = b.step(j, {Arg::value(0)}, {1, c.cout, j.oh, j.ow});
    const Program p = b.done({y});
    const auto in = inputs_for(p, batch, 961);
    std::vector<float> flat;
    for (const auto& v : in) flat.insert(flat.end(), v.begin(), v.end());
    const float* dx = upload(flat);
    const float* dw = upload(*j.weights);
    const float* db = upload(*j.bias);
    const std::size_t out = static_cast<std::size_t>(c.cout * j.oh * j.ow);
    float* da = upload(std::vector<float>(out * batch, NAN));
    float* d1 = upload(std::vector<float>(out * batch, NAN));
    const gpu::EpilogueAct relu{gpu::EpilogueAct::Kind::kRelu};
    ASSERT_TRUE(gpu::launch_allco3x3(j, batch, dx, dw, db, relu, da, stream_).ok());
    ASSERT_TRUE(gpu::launch_conv_direct(j, batch, dx, dw, db, relu, d1, stream_).ok());
    ASSERT_CUDA(cudaStreamSynchronize(stream_));
    std::vector<float> ga(out * batch), g1(out * batch);
    ASSERT_CUDA(cudaMemcpy(ga.data(), da, ga.size() * 4, cudaMemcpyDeviceToHost));
    ASSERT_CUDA(cudaMemcpy(g1.data(), d1, g1.size() * 4, cudaMemcpyDeviceToHost));
    EXPECT_TRUE(testing::bit_identical(ga, g1)) << "cin " << c.cin << " cout " << c.cout << " stride " << c.s;
    {  // a deferred input bias: added inside the input, not to the zero pads, as the direct kernel does
      std::vector<float> ib(static_cast<std::size_t>(c.cin));
      for (std::size_t i = 0; i < ib.size(); ++i) ib[i] = 0.3f - 0.1f * static_cast<float>(i);
      gpu::EpilogueAct biased = relu;
      biased.in_bias = upload(ib);
      float* db1 = upload(std::vector<float>(out * batch, NAN));
      float* db2 = upload(std::vector<float>(out * batch, NAN));
      ASSERT_TRUE(gpu::launch_allco3x3(j, batch, dx, dw, db, biased, db1, stream_).ok());
      ASSERT_TRUE(gpu::launch_conv_direct(j, batch, dx, dw, db, biased, db2, stream_).ok());
      ASSERT_CUDA(cudaStreamSynchronize(stream_));
      std::vector<float> h1(out * batch), h2(out * batch);
      ASSERT_CUDA(cudaMemcpy(h1.data(), db1, h1.size() * 4, cudaMemcpyDeviceToHost));
      ASSERT_CUDA(cudaMemcpy(h2.data(), db2, h2.size() * 4, cudaMemcpyDeviceToHost));
      EXPECT_TRUE(testing::bit_identical(h1, h2)) << "input bias: cin " << c.cin << " stride " << c.s;
    }
    for (int i = 0; i < batch; ++i) {
      auto want = Naive::run(p, in[static_cast<std::size_t>(i)])[0];
      for (auto& v : want) v = std::max(v, 0.0f);
      const std::span<const float> g(ga.data() + out * static_cast<std::size_t>(i), out);
      EXPECT_TRUE(testing::all_close(g, std::span<const float>(want), {1e-6, 1e-5})) << "image " << i;
    }
  }
}

// The 1×1 kernel (four pixels × 4, 8 or 16, or one pixel × 1, 2, 4 or 8 output channels per thread): the direct
// kernel's bits and the definition's values, with channel counts that leave a partial group, a plane of 15,
// batch 3, a PReLU epilogue, and with a deferred input bias (bits against the direct kernel, which adds it the
// same way).
TEST_F(FacesGpu, Pointwise1x1MatchesDirectKernel) {
  struct C {
    std::int64_t cin, cout, h, w;
  };
  for (const C& c : {C{16, 16, 20, 20}, C{64, 64, 8, 12}, C{3, 37, 5, 4}, C{24, 6, 7, 4}, C{130, 20, 2, 2},
                     C{19, 11, 3, 5}}) {
    const ConvJob j = conv_job(c.cin, c.cout, 1, 1, 1, 0, c.h, c.w, 970);
    const int batch = 3;
    Builder b(Shape{1, c.cin, c.h, c.w});
    const auto y = b.step(j, {Arg::value(0)}, {1, c.cout, j.oh, j.ow});
    const Program p = b.done({y});
    const auto in = inputs_for(p, batch, 971);
    std::vector<float> flat;
    for (const auto& v : in) flat.insert(flat.end(), v.begin(), v.end());
    const float* dx = upload(flat);
    const float* dw = upload(*j.weights);
    const float* db = upload(*j.bias);
    std::vector<float> slope(static_cast<std::size_t>(c.cout)), ib(static_cast<std::size_t>(c.cin));
    for (std::size_t i = 0; i < slope.size(); ++i) slope[i] = 0.05f * static_cast<float>(i % 7) - 0.1f;
    for (std::size_t i = 0; i < ib.size(); ++i) ib[i] = 0.25f - 0.03f * static_cast<float>(i % 11);
    const float* dslope = upload(slope);
    const float* dib = upload(ib);
    const std::size_t out = static_cast<std::size_t>(c.cout * j.oh * j.ow);
    for (int ct : {4, 8, 16, -1, -2, -4, -8}) {
      if (ct > 0 && (c.h * c.w) % 4 != 0) continue;
      ASSERT_TRUE(gpu::pw1x1_fits(j, batch, ct));
      for (bool with_ib : {false, true}) {
        gpu::EpilogueAct act{gpu::EpilogueAct::Kind::kPrelu};
        act.slope = dslope;
        if (with_ib) act.in_bias = dib;
        float* dp = upload(std::vector<float>(out * batch, NAN));
        float* d1 = upload(std::vector<float>(out * batch, NAN));
        ASSERT_TRUE(gpu::launch_pw1x1(j, batch, ct, dx, dw, db, act, dp, stream_).ok());
        ASSERT_TRUE(gpu::launch_conv_direct(j, batch, dx, dw, db, act, d1, stream_).ok());
        ASSERT_CUDA(cudaStreamSynchronize(stream_));
        std::vector<float> gp(out * batch), g1(out * batch);
        ASSERT_CUDA(cudaMemcpy(gp.data(), dp, gp.size() * 4, cudaMemcpyDeviceToHost));
        ASSERT_CUDA(cudaMemcpy(g1.data(), d1, g1.size() * 4, cudaMemcpyDeviceToHost));
        EXPECT_TRUE(testing::bit_identical(gp, g1))
            << "cin " << c.cin << " cout " << c.cout << " ct " << ct << " input bias " << with_ib;
        if (with_ib) continue;
        const std::size_t plane = static_cast<std::size_t>(j.oh * j.ow);
        for (int i = 0; i < batch; ++i) {
          auto want = Naive::run(p, in[static_cast<std::size_t>(i)])[0];
          for (std::size_t k = 0; k < want.size(); ++k)
            if (want[k] < 0.0f) want[k] *= slope[k / plane];
          const std::span<const float> g(gp.data() + out * static_cast<std::size_t>(i), out);
          EXPECT_TRUE(
              testing::all_close(g, std::span<const float>(want), {1e-5 * max_abs(want) + 1e-7, 1e-5}))
              << "cin " << c.cin << " cout " << c.cout << " ct " << ct << " image " << i;
        }
      }
    }
  }
  // a plane that is not a multiple of 4 is taken by the one-pixel forms only
  EXPECT_FALSE(gpu::pw1x1_fits(conv_job(8, 8, 1, 1, 1, 0, 5, 5, 972), 1, 8));
  EXPECT_TRUE(gpu::pw1x1_fits(conv_job(8, 8, 1, 1, 1, 0, 5, 5, 972), 1, -2));
  EXPECT_FALSE(gpu::pw1x1_fits(conv_job(8, 8, 1, 1, 1, 0, 8, 8, 972), 1, 3));
  EXPECT_FALSE(gpu::pw1x1_fits(conv_job(8, 8, 1, 3, 1, 1, 8, 8, 973), 1, 8));
}

TEST_F(FacesGpu, ConvTf32IsCloseAndMarked) {
  const ConvJob j = conv_job(64, 64, 1, 3, 1, 1, 28, 28, 9);
  Builder b(Shape{1, 64, 28, 28});
  const auto y = b.step(j, {Arg::value(0)}, {1, 64, 28, 28});
  const Program p = b.done({y});
  PlanOptions o;
  o.precision = Precision::kTf32;
  check_op(*this, p, "conv tf32", 5e-3, -2.0f, 2.0f, o);
}

// cos(a, b) in double.
double cosine(std::span<const float> a, std::span<const float> b) {
  double ab = 0.0, aa = 0.0, bb = 0.0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
    ab += static_cast<double>(a[i]) * b[i], aa += static_cast<double>(a[i]) * a[i],
        bb += static_cast<double>(b[i]) * b[i];
  return aa > 0.0 && bb > 0.0 ? ab / std::sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
}

// Every output of every image of `got` against the CPU interpreter: cosine >= 0.999 and the same size.
void expect_cosine_to_cpu(const Program& p, const std::vector<std::vector<float>>& in, const Outputs& got,
                          const char* what) {
  std::vector<std::span<const float>> spans(in.begin(), in.end());
  auto cpu = run_program_cpu(p, spans, 0);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  ASSERT_EQ(got.size(), cpu->size());
  for (std::size_t i = 0; i < got.size(); ++i)
    for (std::size_t k = 0; k < p.outputs.size(); ++k) {
      ASSERT_EQ(got[i][k].size(), (*cpu)[i][k].size());
      const double c = cosine(got[i][k], (*cpu)[i][k]);
      EXPECT_GE(c, 0.999) << what << ": image " << i << " output " << p.outputs[k].name;
    }
}

// The bf16 form of a conv cuDNN takes (no autotune: bf16 whenever it applies) is marked and close to the CPU.
TEST_F(FacesGpu, ConvBf16IsCloseAndMarked) {
  const ConvJob j = conv_job(64, 64, 1, 3, 1, 1, 28, 28, 9);
  Builder b(Shape{1, 64, 28, 28});
  const auto c = b.step(j, {Arg::value(0)}, {1, 64, 28, 28});
  const auto y = b.step(UnaryOp{UnaryKind::kRelu}, {Arg::value(c)}, {1, 64, 28, 28});
  Program p = b.done({y});
  p.steps[0].fusion = Fusion{FusionKind::kConvAct, 2};
  PlanOptions o;
  o.precision = Precision::kBf16;
  o.autotune = false;
  for (int batch : {1, 7}) {
    o.batch = batch;
    auto g = plan(p, o);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    EXPECT_EQ((*g)->precision(), Precision::kBf16);
    ASSERT_FALSE((*g)->steps().empty());
    EXPECT_EQ((*g)->steps()[0].kernel.rfind("cudnn-bf16:", 0), 0u) << (*g)->steps()[0].kernel;
    const auto in = inputs_for(p, batch, 77u);
    const Outputs a = run(**g, p, in), a2 = run(**g, p, in);
    expect_cosine_to_cpu(p, in, a, "conv bf16");
    for (std::size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(testing::bit_identical(a[i][0], a2[i][0])) << "bf16 run to run, image " << i;
    // not the fp32 bits: the products are bf16 (an fp32 result would mean the bf16 form did not run)
    PlanOptions f = o;
    f.precision = Precision::kFp32;
    const Outputs r = plan_run(p, in, f);
    EXPECT_FALSE(testing::bit_identical(a[0][0], r[0][0]));
  }
}

// An IResNet-like program: stem conv (3 input channels: stays fp32), BN (ChannelAffine), PReLU, two residual
// blocks (the first with a BN before its conv, the second downsampling, with a 1x1 shortcut conv), then the
// embedding Gemm. tf32 and bf16 (with and
// without autotune) against the CPU per output, batch 1 and 5.
TEST_F(FacesGpu, IresnetLikeTf32AndBf16CloseToCpu) {
  constexpr std::int64_t c = 64, hw = 28, oh = 14, e = 128;
  Builder b(Shape{1, 3, hw, hw});
  const auto stem = b.step(conv_job(3, c, 1, 3, 1, 1, hw, hw, 81), {Arg::value(0)}, {1, c, hw, hw});
  const auto bs = b.constant(random_floats(c, 82, 0.5f, 1.5f));
  const auto bh = b.constant(random_floats(c, 83, -0.2f, 0.2f));
  const auto bn = b.step(ChannelAffineOp{c, hw * hw},
                         {Arg::value(stem), Arg::constant(bs), Arg::constant(bh)}, {1, c, hw, hw});
  const auto sl = b.constant(random_floats(c, 84, 0.1f, 0.3f));
  const auto x0 = b.step(ChannelPreluOp{c, hw * hw}, {Arg::value(bn), Arg::constant(sl)}, {1, c, hw, hw});
  // block 1: BN, conv, PReLU, conv, + x0 (bf16 runs the BN in the conv's input conversion)
  const auto b1s = b.constant(random_floats(c, 94, 0.5f, 1.5f));
  const auto b1h = b.constant(random_floats(c, 95, -0.2f, 0.2f));
  const auto bn1 = b.step(ChannelAffineOp{c, hw * hw},
                          {Arg::value(x0), Arg::constant(b1s), Arg::constant(b1h)}, {1, c, hw, hw});
  const auto c1 = b.step(conv_job(c, c, 1, 3, 1, 1, hw, hw, 85), {Arg::value(bn1)}, {1, c, hw, hw});
  const auto p1 = b.step(ChannelPreluOp{c, hw * hw}, {Arg::value(c1), Arg::constant(sl)}, {1, c, hw, hw});
  const auto c2 = b.step(conv_job(c, c, 1, 3, 1, 1, hw, hw, 86), {Arg::value(p1)}, {1, c, hw, hw});
  const std::int64_t n1 = c * hw * hw;
  BinaryOp add1{BinaryKind::kAdd, {1, c, hw, hw}, {n1, hw * hw, hw, 1}, {n1, hw * hw, hw, 1}};
  const auto x1 = b.step(add1, {Arg::value(c2), Arg::value(x0)}, {1, c, hw, hw});
  // block 2: conv, PReLU, conv stride 2, + 1x1 stride-2 shortcut conv
  const auto sl2 = b.constant(random_floats(2 * c, 87, 0.1f, 0.3f));
  const auto c3 = b.step(conv_job(c, 2 * c, 1, 3, 1, 1, hw, hw, 88), {Arg::value(x1)}, {1, 2 * c, hw, hw});
  const auto p3 =
      b.step(ChannelPreluOp{2 * c, hw * hw}, {Arg::value(c3), Arg::constant(sl2)}, {1, 2 * c, hw, hw});
  const auto c4 =
      b.step(conv_job(2 * c, 2 * c, 1, 3, 2, 1, hw, hw, 89), {Arg::value(p3)}, {1, 2 * c, oh, oh});
  const auto sc = b.step(conv_job(c, 2 * c, 1, 1, 2, 0, hw, hw, 90), {Arg::value(x1)}, {1, 2 * c, oh, oh});
  const std::int64_t n2 = 2 * c * oh * oh;
  BinaryOp add2{BinaryKind::kAdd, {1, 2 * c, oh, oh}, {n2, oh * oh, oh, 1}, {n2, oh * oh, oh, 1}};
  const auto x2 = b.step(add2, {Arg::value(c4), Arg::value(sc)}, {1, 2 * c, oh, oh});
  // embedding: Y[1,e] = X[1,n2]·W(n2,e) + bias
  const float ws = 1.0f / std::sqrt(static_cast<float>(n2));
  const auto w = b.constant(random_floats(static_cast<std::size_t>(n2 * e), 91, -ws, ws));
  const auto bias = b.constant(random_floats(e, 92));
  GemvOp g;
  g.k = n2, g.n = e, g.has_bias = true;
  const auto y = b.step(g, {Arg::value(x2), Arg::constant(w), Arg::constant(bias)}, {1, e});
  const Program p = b.done({y, x2});
  for (int batch : {1, 5}) {
    const auto in = inputs_for(p, batch, 93u, 0.0f, 1.0f);
    for (const auto& [prec, tune] : {std::pair{Precision::kTf32, true}, std::pair{Precision::kBf16, true},
                                     std::pair{Precision::kBf16, false}}) {
      PlanOptions o;
      o.batch = batch;
      o.precision = prec;
      o.autotune = tune;
      auto gp = plan(p, o);
      ASSERT_TRUE(gp.ok()) << gp.status().to_string();
      std::string kernels;
      for (const auto& st : (*gp)->steps()) kernels += st.kernel + " ";
      if (prec == Precision::kBf16 && !tune) {
        // the bf16 form through the legacy API or, channels-last, the graph API (docs/design/faces.md §8.3)
        EXPECT_TRUE(kernels.find("cudnn-bf16:") != std::string::npos ||
                    kernels.find("cudnn-graph-bf16:") != std::string::npos)
            << kernels;
        EXPECT_NE(kernels.find("cublas:gemm_ex/bf16"), std::string::npos) << kernels;
        EXPECT_NE(kernels.find("+in-affine"), std::string::npos) << kernels;
        EXPECT_NE(kernels.find("fused:affine-into-bf16-conv"), std::string::npos) << kernels;
      }
      const Outputs a = run(**gp, p, in);
      expect_cosine_to_cpu(p, in, a, prec == Precision::kTf32 ? "iresnet-like tf32" : "iresnet-like bf16");
    }
  }
}

// ---- fusion: each fused group against the same program with its marks cleared --------------------------

Program unfused(Program p) {
  for (auto& s : p.steps) s.fusion = Fusion{};
  return p;
}

void check_fused(FacesGpu& t, const Program& fused, const char* what) {
  for (int batch : {1, 7}) {
    const auto in = inputs_for(fused, batch, 55u);
    const Outputs a = t.plan_run(fused, in), b = t.plan_run(unfused(fused), in);
    expect_matches(t, unfused(fused), a, in, 1e-5, what);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i)
      for (std::size_t k = 0; k < a[i].size(); ++k)
        // plans choose their conv algorithms by timing, so two plans agree closely, not bit for bit
        EXPECT_TRUE(testing::all_close(std::span<const float>(a[i][k]), std::span<const float>(b[i][k]),
                                       {1e-5 * max_abs(b[i][k]) + 1e-7, 1e-5}))
            << what << ": fused vs unfused";
  }
}

TEST_F(FacesGpu, FusedConvActEqualsUnfused) {
  for (const auto& act : {UnaryOp{UnaryKind::kRelu}, UnaryOp{UnaryKind::kClip, 0.0f, 6.0f},
                          UnaryOp{UnaryKind::kClip, -0.5f, 0.5f}}) {
    Builder b(Shape{1, 16, 19, 17});
    const auto c = b.step(conv_job(16, 24, 1, 3, 1, 1, 19, 17, 31), {Arg::value(0)}, {1, 24, 19, 17});
    const auto y = b.step(act, {Arg::value(c)}, {1, 24, 19, 17});
    Program p = b.done({y});
    p.steps[0].fusion = Fusion{FusionKind::kConvAct, 2};
    // the unfused program runs Conv and Relu apart: cuDNN's fused epilogue must give the same bits
    for (int batch : {1, 7}) {
      const auto in = inputs_for(p, batch, 56u);
      const Outputs a = plan_run(p, in);
      expect_matches(*this, unfused(p), a, in, 1e-5, "conv+act");
    }
  }
}

// Convs whose one reader is a PReLU or a residual Add (the planner runs those in the conv epilogue; the
// shortcut conv after the main conv takes the Add, as in an IResNet downsampling block), with batch 1 and 7.
TEST_F(FacesGpu, ConvEpiloguePreluAndResidualAdd) {
  for (bool big : {false, true}) {  // small: own kernels likely; big: cuDNN likely
    const std::int64_t c = big ? 64 : 12, hw = big ? 28 : 9;
    Builder b(Shape{1, c, hw, hw});
    const auto sl = b.constant(random_floats(static_cast<std::size_t>(2 * c), 61));
    const auto c1 = b.step(conv_job(c, 2 * c, 1, 3, 1, 1, hw, hw, 62), {Arg::value(0)}, {1, 2 * c, hw, hw});
    const auto p1 =
        b.step(ChannelPreluOp{2 * c, hw * hw}, {Arg::value(c1), Arg::constant(sl)}, {1, 2 * c, hw, hw});
    const std::int64_t oh = (hw - 1) / 2 + 1, n = 2 * c * oh * oh;
    const auto c2 =
        b.step(conv_job(2 * c, 2 * c, 1, 3, 2, 1, hw, hw, 63), {Arg::value(p1)}, {1, 2 * c, oh, oh});
    const auto sc = b.step(conv_job(c, 2 * c, 1, 1, 2, 0, hw, hw, 64), {Arg::value(0)}, {1, 2 * c, oh, oh});
    BinaryOp add{BinaryKind::kAdd, {1, 2 * c, oh, oh}, {n, oh * oh, oh, 1}, {n, oh * oh, oh, 1}};
    const auto y = b.step(add, {Arg::value(c2), Arg::value(sc)}, {1, 2 * c, oh, oh});
    const auto c3 =
        b.step(conv_job(2 * c, 2 * c, 1, 3, 1, 1, oh, oh, 65), {Arg::value(y)}, {1, 2 * c, oh, oh});
    const auto r3 = b.step(UnaryOp{UnaryKind::kRelu}, {Arg::value(c3)}, {1, 2 * c, oh, oh});
    const auto z = b.step(add, {Arg::value(y), Arg::value(r3)}, {1, 2 * c, oh, oh});
    Program p = b.done({z});
    p.steps[static_cast<std::size_t>(c3 - 1)].fusion = Fusion{FusionKind::kConvAct, 2};
    check_op(*this, p, "conv epilogue");
    auto g = plan(p);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    std::string kernels;
    for (const auto& s : (*g)->steps()) kernels += s.kernel + " ";
    EXPECT_NE(kernels.find("+prelu"), std::string::npos) << kernels;
    EXPECT_NE(kernels.find("+add"), std::string::npos) << kernels;
  }
}

// A 1×1 conv with a bias and no activation feeding a padded depthwise conv (YuNet's blocks): when the depthwise
// runs an own kernel the planner moves the bias into its input taps, which must leave the padding at zero.
TEST_F(FacesGpu, ConvBiasIntoNextConvKeepsPaddingZero) {
  Builder b(Shape{1, 8, 17, 13});
  const auto pw = b.step(conv_job(8, 24, 1, 1, 1, 0, 17, 13, 71), {Arg::value(0)}, {1, 24, 17, 13});
  ConvJob dwj = conv_job(24, 24, 24, 3, 1, 1, 17, 13, 72);
  const auto dw = b.step(dwj, {Arg::value(pw)}, {1, 24, 17, 13});
  const auto dw2 = b.step(conv_job(24, 24, 24, 3, 2, 1, 17, 13, 73), {Arg::value(dw)}, {1, 24, 9, 7});
  const Program p = b.done({dw2});
  check_op(*this, p, "conv bias into the next conv");
  auto g = plan(p);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  for (const auto& s : (*g)->steps()) std::printf("  %s %s\n", s.node.c_str(), s.kernel.c_str());
}

TEST_F(FacesGpu, FusedBandAndResizeBinaryEqualUnfused) {
  {  // 1×1 conv → ReLU → depthwise 3×3 → ReLU → MaxPool (kConvBand)
    Builder b(Shape{1, 8, 21, 19});
    const auto pw = b.step(conv_job(8, 16, 1, 1, 1, 0, 21, 19, 41), {Arg::value(0)}, {1, 16, 21, 19});
    const auto pa = b.step(UnaryOp{UnaryKind::kRelu}, {Arg::value(pw)}, {1, 16, 21, 19});
    const auto dw = b.step(conv_job(16, 16, 16, 3, 1, 1, 21, 19, 42), {Arg::value(pa)}, {1, 16, 21, 19});
    const auto da = b.step(UnaryOp{UnaryKind::kRelu}, {Arg::value(dw)}, {1, 16, 21, 19});
    const auto mp = b.step(MaxPoolOp{16, 21, 19, 2, 2, 2, 2, 10, 9}, {Arg::value(da)}, {1, 16, 10, 9});
    Program p = b.done({mp});
    Fusion f{FusionKind::kConvBand, 5};
    f.pw = 0, f.pw_act = 1, f.dw = 2, f.dw_act = 3, f.pool = 4;
    p.steps[0].fusion = f;
    check_fused(*this, p, "conv band");
  }
  {  // nearest ×2 Resize → Add (kResizeBinary), both sides
    for (std::int8_t side : {0, 1}) {
      Builder b(Shape{1, 3, 8, 10});
      const auto sm = b.step(MaxPoolOp{3, 8, 10, 2, 2, 2, 2, 4, 5}, {Arg::value(0)}, {1, 3, 4, 5});
      const auto up = b.step(ResizeOp{3, 4, 5, 2, 2, 8, 10}, {Arg::value(sm)}, {1, 3, 8, 10});
      BinaryOp add{BinaryKind::kSub, {1, 3, 8, 10}, {240, 80, 10, 1}, {240, 80, 10, 1}};
      const auto y = b.step(add,
                            side == 0 ? std::vector<Arg>{Arg::value(up), Arg::value(0)}
                                      : std::vector<Arg>{Arg::value(0), Arg::value(up)},
                            {1, 3, 8, 10});
      Program p = b.done({y});
      Fusion f{FusionKind::kResizeBinary, 2};
      f.side = side;
      p.steps[1].fusion = f;
      check_fused(*this, p, "resize+binary");
    }
  }
}

// ---- fused detection heads (docs/design/faces.md §8.1 "head fusion") ---------------------------------------

// Appends one YuNet-style head reading x [1, c, h, w]: 1×1 conv c → n, depthwise 3×3 (pad 1), the channels-last
// Transpose (perm 0,2,3,1: dims [1, h, w, n], input strides [n·h·w, w, 1, h·w]) and, with `sigmoid`, a Sigmoid.
std::int32_t add_head(Builder& b, std::int32_t x, std::int64_t c, std::int64_t n, std::int64_t h,
                      std::int64_t w, bool sigmoid, bool bias, std::uint32_t seed) {
  const auto pw = b.step(conv_job(c, n, 1, 1, 1, 0, h, w, seed, 1, bias), {Arg::value(x)}, {1, n, h, w});
  const auto dw = b.step(conv_job(n, n, n, 3, 1, 1, h, w, seed + 7, 1, bias), {Arg::value(pw)}, {1, n, h, w});
  TransposeOp t;
  t.dims = {1, h, w, n};
  t.strides = {n * h * w, w, 1, h * w};
  const auto tr = b.step(t, {Arg::value(dw)}, {1, h, w, n});
  return sigmoid ? b.step(UnaryOp{UnaryKind::kSigmoid}, {Arg::value(tr)}, {1, h * w, n}) : tr;
}

std::string kernels_of(const GpuProgram& g) {
  std::string k;
  for (const auto& s : g.steps()) k += s.kernel + " ";
  return k;
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// YuNet's four heads (1, 4, 1 and 10 channels, the cls/obj pair with a Sigmoid) over a feature map of odd sides
// that several tiles cover partly, at batch 1 and 7: the fused kernel against the plain definition and the CPU
// interpreter, run to run bit identity, and the plan without fusion agreeing. The map has a reader after the
// heads, and one head has no biases.
TEST_F(FacesGpu, FusedHeadsMatchDefinitionAndUnfused) {
  const std::int64_t c = 24, h = 13, w = 37;
  Builder b(Shape{1, 5, h, w});
  const auto x = b.step(conv_job(5, c, 1, 3, 1, 1, h, w, 80), {Arg::value(0)}, {1, c, h, w});
  const auto cls = add_head(b, x, c, 1, h, w, true, true, 81);
  const auto box = add_head(b, x, c, 4, h, w, false, false, 82);
  const auto obj = add_head(b, x, c, 1, h, w, true, true, 83);
  const auto kps = add_head(b, x, c, 10, h, w, false, true, 84);
  const auto after = b.step(UnaryOp{UnaryKind::kRelu}, {Arg::value(x)}, {1, c, h, w});
  const Program p = b.done({cls, box, obj, kps, after});
  check_op(*this, p, "fused heads");
  auto g = plan(p);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(count_of(kernels_of(**g), "own:heads(4)"), 1u) << kernels_of(**g);
  const auto in = inputs_for(p, 3, 91);
  PlanOptions on;
  on.batch = 3;
  auto g3 = plan(p, on);
  ASSERT_TRUE(g3.ok()) << g3.status().to_string();
  const Outputs a3 = run(**g3, p, in), b3 = run(**g3, p, in);
  PlanOptions off = on;
  off.fuse_heads = false;
  auto gu = plan(p, off);
  ASSERT_TRUE(gu.ok()) << gu.status().to_string();
  EXPECT_EQ(count_of(kernels_of(**gu), "own:heads"), 0u) << kernels_of(**gu);
  const Outputs u3 = run(**gu, p, in);
  ASSERT_EQ(a3.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t k = 0; k < p.outputs.size(); ++k) {
      EXPECT_TRUE(testing::bit_identical(a3[i][k], b3[i][k])) << "run to run, image " << i << " output " << k;
      EXPECT_TRUE(testing::all_close(std::span<const float>(a3[i][k]), std::span<const float>(u3[i][k]),
                                     {1e-5 * max_abs(u3[i][k]) + 1e-7, 1e-5}))
          << "fused vs unfused, image " << i << " output " << k;
    }
}

// Heads the kernel cannot take in one launch are split (more than kMaxHeadChannels channels in all); a head whose
// output another step reads before the group's last step keeps its group from fusing; both still compute right.
TEST_F(FacesGpu, FusedHeadsSplitAndRefused) {
  const std::int64_t c = 16, h = 9, w = 11;
  {
    Builder b(Shape{1, c, h, w});
    std::vector<std::int32_t> outs;
    for (int k = 0; k < 3; ++k) outs.push_back(add_head(b, 0, c, 12, h, w, k == 1, true, 100u + 10u * k));
    const Program p = b.done(outs);
    check_op(*this, p, "three heads of 12 channels");
    auto g = plan(p);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    const std::string k = kernels_of(**g);
    EXPECT_EQ(count_of(k, "own:heads(2)"), 1u) << k;
    EXPECT_EQ(count_of(k, "own:heads(1)"), 1u) << k;
  }
  {
    Builder b(Shape{1, c, h, w});
    const auto first = add_head(b, 0, c, 2, h, w, true, true, 120);
    const auto early = b.step(UnaryOp{UnaryKind::kRelu}, {Arg::value(first)}, {1, h * w, 2});
    const auto second = add_head(b, 0, c, 3, h, w, false, true, 130);
    const Program p = b.done({early, second});
    check_op(*this, p, "a head read before the group's end");
    auto g = plan(p);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    EXPECT_EQ(count_of(kernels_of(**g), "own:heads"), 0u) << kernels_of(**g);
  }
}

// ---- the band kernel (docs/design/faces.md §8.1 "band kernel") ----------------------------------------------

// 1×1 conv [→ Clip] → depthwise 3×3 → Relu [→ MaxPool 2×2], marked kConvBand, planned with the band kernel
// wherever it applies (Bands::kAlways) at batch 1 and 7 against the definition and the CPU interpreter: both tile
// widths (cin ≤ 16 and above), channel counts that leave a partial 16-channel chunk, sides the tiles cover
// partly, with and without the pool; and the plan without the kernel agreeing.
TEST_F(FacesGpu, BandKernelMatchesDefinition) {
  struct Case {
    std::int64_t cin, c, h, w;
    bool pool, clip;
  };
  std::uint32_t seed = 140;
  for (const Case& k : {Case{8, 16, 21, 19, false, false}, Case{16, 24, 20, 34, true, true},
                        Case{64, 40, 10, 18, true, false}, Case{24, 64, 7, 9, false, true}}) {
    SCOPED_TRACE(::testing::Message() << "cin " << k.cin << " c " << k.c << " " << k.h << "x" << k.w
                                      << (k.pool ? " pool" : "") << (k.clip ? " clip" : ""));
    Builder b(Shape{1, k.cin, k.h, k.w});
    const Shape cs{1, k.c, k.h, k.w};
    const auto pw = b.step(conv_job(k.cin, k.c, 1, 1, 1, 0, k.h, k.w, seed++), {Arg::value(0)}, cs);
    const auto pa = k.clip ? b.step(UnaryOp{UnaryKind::kClip, -0.5f, 0.75f}, {Arg::value(pw)}, cs) : pw;
    const auto dw = b.step(conv_job(k.c, k.c, k.c, 3, 1, 1, k.h, k.w, seed++), {Arg::value(pa)}, cs);
    const auto da = b.step(UnaryOp{UnaryKind::kRelu}, {Arg::value(dw)}, cs);
    const auto out = k.pool ? b.step(MaxPoolOp{k.c, k.h, k.w, 2, 2, 2, 2, k.h / 2, k.w / 2}, {Arg::value(da)},
                                     {1, k.c, k.h / 2, k.w / 2})
                            : da;
    Program p = b.done({out});
    Fusion f{FusionKind::kConvBand, static_cast<std::int32_t>(p.steps.size())};
    std::int8_t at = 0;
    f.pw = at++;
    if (k.clip) f.pw_act = at++;
    f.dw = at++;
    f.dw_act = at++;
    if (k.pool) f.pool = at++;
    p.steps[0].fusion = f;
    PlanOptions always;
    always.bands = PlanOptions::Bands::kAlways;
    check_op(*this, p, "band kernel", 1e-5, -2.0f, 2.0f, always);
    auto g = plan(p, always);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    EXPECT_EQ(count_of(kernels_of(**g), k.pool ? "own:band+pool" : "own:band"), 1u) << kernels_of(**g);
    EXPECT_EQ((*g)->steps().size(), 1u) << kernels_of(**g);
    PlanOptions off;
    off.bands = PlanOptions::Bands::kOff;
    for (int batch : {1, 7}) {
      const auto in = inputs_for(p, batch, 150u);
      always.batch = off.batch = batch;
      const Outputs a = plan_run(p, in, always), u = plan_run(p, in, off);
      ASSERT_EQ(a.size(), u.size());
      for (std::size_t i = 0; i < a.size(); ++i)
        EXPECT_TRUE(testing::all_close(std::span<const float>(a[i][0]), std::span<const float>(u[i][0]),
                                       {1e-5 * max_abs(u[i][0]) + 1e-7, 1e-5}))
            << "band kernel vs the separate steps, image " << i;
    }
  }
}

// ---- whole programs ---------------------------------------------------------------------------------------

TEST_F(FacesGpu, BadConstTableAndBatchAreInvalid) {
  Builder b(Shape{1, 2, 3, 3});
  const auto c = b.constant({1.0f, 2.0f});
  const auto y = b.step(ChannelPreluOp{2, 9}, {Arg::value(0), Arg::constant(c)}, {1, 2, 3, 3});
  const Program p = b.done({y});
  auto g = GpuProgram::plan(p, {}, {}, stream_);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), Code::kInvalidArgument);
  PlanOptions o;
  o.batch = 0;
  auto g0 = plan(p, o);
  ASSERT_FALSE(g0.ok());
  EXPECT_EQ(g0.status().code(), Code::kInvalidArgument);
}

Expected<Program> yunet_program(int size) {
  auto net = Net::create(builtin_yunet_onnx());
  if (!net) return net.status();
  return net->program({1, 3, size, size});
}

TEST_F(FacesGpu, YunetMatchesCpuAndIsBitIdenticalRunToRun) {
  auto p = yunet_program(640);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const auto in = inputs_for(*p, 1, 7, 0.0f, 1.0f);
  std::vector<std::span<const float>> spans(in.begin(), in.end());
  auto cpu = run_program_cpu(*p, spans, 0);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  for (int mode : {0, 1, 2}) {  // graph; eager; graph with the band kernel wherever it applies
    PlanOptions o;
    o.use_graph = mode != 1;
    if (mode == 2) o.bands = PlanOptions::Bands::kAlways;
    auto g = plan(*p, o);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    // the cls/obj/bbox/kps heads of each of the three strides run fused (docs/design/faces.md §8.1)
    EXPECT_EQ(count_of(kernels_of(**g), "own:heads(4)"), 3u) << kernels_of(**g);
    // of the 14 1×1 → depthwise bands of the backbone and the neck, those whose input and output places in the
    // arena do not overlap (the band reads its input while it writes): the first (320², pooled) and three at 160²
    if (mode == 2) {
      EXPECT_EQ(count_of(kernels_of(**g), "own:band"), 4u) << kernels_of(**g);
    }
    const Outputs a = run(**g, *p, in), b = run(**g, *p, in);
    ASSERT_EQ(a.size(), 1u);
    for (std::size_t k = 0; k < p->outputs.size(); ++k) {
      const double m = max_abs((*cpu)[0][k]);
      EXPECT_TRUE(testing::all_close(std::span<const float>(a[0][k]), std::span<const float>((*cpu)[0][k]),
                                     {1e-4 + 1e-3 * m, 1e-3}))
          << "YuNet output " << p->outputs[k].name;
      EXPECT_TRUE(testing::bit_identical(a[0][k], b[0][k])) << "run to run, output " << p->outputs[k].name;
    }
  }
}

// YuNet in tf32 and bf16 on a real photo: every output close to the CPU (cosine), and the faces at score >= 0.6
// the same (decode_yunet on each).
// docs/design/faces.md §8.2 "Plan choices": a plan given an earlier plan's conv choices takes every one of them,
// runs the same kernels and gives the same bits without timing; choices that fit no conv are searched again.
TEST_F(FacesGpu, CarriedConvChoicesPlanTheSameKernelsAndBits) {
  auto p = yunet_program(640);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const auto in = inputs_for(*p, 4, 11, 0.0f, 1.0f);
  PlanOptions o;
  o.batch = 4;
  auto g1 = plan(*p, o);
  ASSERT_TRUE(g1.ok()) << g1.status().to_string();
  const std::vector<gpu::ConvChoice> chosen = (*g1)->conv_choices();
  ASSERT_FALSE(chosen.empty());
  EXPECT_EQ((*g1)->carried_choices(), 0);
  auto back = gpu::decode_conv_choices(gpu::encode_conv_choices(chosen));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  o.conv_choices = *back;
  auto g2 = plan(*p, o);
  ASSERT_TRUE(g2.ok()) << g2.status().to_string();
  EXPECT_EQ((*g2)->carried_choices(), static_cast<int>(chosen.size()));
  EXPECT_EQ(kernels_of(**g2), kernels_of(**g1));
  const auto again = (*g2)->conv_choices();
  ASSERT_EQ(again.size(), chosen.size());
  EXPECT_EQ(std::memcmp(again.data(), chosen.data(), chosen.size() * sizeof(gpu::ConvChoice)), 0);
  const Outputs a = run(**g1, *p, in), b = run(**g2, *p, in);
  for (std::size_t k = 0; k < p->outputs.size(); ++k)
    for (std::size_t i = 0; i < in.size(); ++i)
      EXPECT_TRUE(testing::bit_identical(a[i][k], b[i][k]))
          << "image " << i << ", output " << p->outputs[k].name;
  // Choices that fit nothing (an algorithm past cuDNN's, an own form that does not exist): searched, still right.
  auto bad = chosen;
  for (std::size_t i = 0; i < bad.size(); ++i) {
    bad[i].own = static_cast<std::uint8_t>(i % 2);
    bad[i].algo = 999;
    bad[i].splits = -7;
  }
  o.conv_choices = bad;
  auto g3 = plan(*p, o);
  ASSERT_TRUE(g3.ok()) << g3.status().to_string();
  EXPECT_EQ((*g3)->carried_choices(), 0);
  const Outputs c = run(**g3, *p, in);
  for (std::size_t k = 0; k < p->outputs.size(); ++k)
    for (std::size_t i = 0; i < in.size(); ++i) {
      const double m = max_abs(a[i][k]);
      EXPECT_TRUE(testing::all_close(std::span<const float>(c[i][k]), std::span<const float>(a[i][k]),
                                     {1e-4 + 1e-3 * m, 1e-3}));
    }
  // tf32 plans by timing whatever it is given.
  o.precision = Precision::kTf32;
  o.conv_choices = chosen;
  auto g4 = plan(*p, o);
  ASSERT_TRUE(g4.ok()) << g4.status().to_string();
  EXPECT_EQ((*g4)->carried_choices(), 0);
  EXPECT_TRUE((*g4)->conv_choices().empty());
}

// The blob of faces_ops.h round-trips; anything else is refused with the reason (host code: runs without a GPU).
TEST(FacesPlanChoices, the_blob_round_trips_and_refuses_what_is_not_one) {
  std::vector<gpu::ConvChoice> c(3);
  c[1].own = 1;
  c[1].splits = 4;
  c[1].tile_m = 16;
  c[2].algo = 6;
  const auto blob = gpu::encode_conv_choices(c);
  ASSERT_EQ(blob.size(), 8u + 3 * sizeof(gpu::ConvChoice));
  auto back = gpu::decode_conv_choices(blob);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_EQ(back->size(), 3u);
  EXPECT_EQ(std::memcmp(back->data(), c.data(), c.size() * sizeof(gpu::ConvChoice)), 0);
  EXPECT_TRUE(gpu::encode_conv_choices({}).empty());
  EXPECT_TRUE(gpu::encode_conv_choices(std::vector<gpu::ConvChoice>(2000)).empty());  // past 16 KB
  for (std::size_t cut = 0; cut < blob.size(); ++cut)
    EXPECT_EQ(gpu::decode_conv_choices(std::span(blob).first(cut)).status().code(), Code::kInvalidArgument)
        << cut;
  auto wrong = blob;
  wrong[0] = std::byte{0};  // the magic
  EXPECT_NE(gpu::decode_conv_choices(wrong).status().to_string().find("magic"), std::string::npos);
  auto longer = blob;
  longer.push_back(std::byte{0});
  EXPECT_EQ(gpu::decode_conv_choices(longer).status().code(), Code::kInvalidArgument);
}

TEST_F(FacesGpu, YunetTf32AndBf16CloseToCpuWithTheSameFaces) {
  constexpr int n = 640;
  auto p = yunet_program(n);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const char* dir = std::getenv("FT_TEST_DATA_DIR");
  const std::string path =
      std::string(dir ? dir : FT_FACES_GPU_TEST_DATA_DIR) + "/images/obama_biden_kagan_crop_2010.jpg";
  auto img = core::load_image(path);
  ASSERT_TRUE(img.ok()) << path << ": " << img.status().to_string();
  std::vector<std::vector<float>> in(1, std::vector<float>(static_cast<std::size_t>(3 * n * n)));
  const float scale = letterbox_bgr(img->rgb, img->width, img->height, n, in[0]);
  std::vector<std::span<const float>> spans(in.begin(), in.end());
  auto cpu = run_program_cpu(*p, spans, 0);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  const auto faces_of = [&](const std::vector<std::vector<float>>& outs) {
    std::vector<NamedTensor> named;
    for (std::size_t k = 0; k < p->outputs.size(); ++k)
      named.push_back(NamedTensor{p->outputs[k].name, p->outputs[k].shape, outs[k]});
    return decode_yunet(named, n, scale, img->width, img->height, DetectOptions{});
  };
  const auto want = faces_of((*cpu)[0]);
  EXPECT_GE(want.size(), 1u) << "the photo holds faces";
  for (Precision prec : {Precision::kTf32, Precision::kBf16}) {
    const char* name = prec == Precision::kTf32 ? "tf32" : "bf16";
    PlanOptions o;
    o.precision = prec;
    const Outputs a = plan_run(*p, in, o);
    expect_cosine_to_cpu(*p, in, a, name);
    const auto got = faces_of(a[0]);
    ASSERT_EQ(got.size(), want.size()) << name;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const float side = std::max(want[i].x1 - want[i].x0, want[i].y1 - want[i].y0);
      EXPECT_NEAR(got[i].x0, want[i].x0, 0.05f * side) << name << " face " << i;
      EXPECT_NEAR(got[i].y0, want[i].y0, 0.05f * side) << name << " face " << i;
      EXPECT_NEAR(got[i].x1, want[i].x1, 0.05f * side) << name << " face " << i;
      EXPECT_NEAR(got[i].y1, want[i].y1, 0.05f * side) << name << " face " << i;
      EXPECT_NEAR(got[i].score, want[i].score, 0.05f) << name << " face " << i;
    }
  }
}

TEST_F(FacesGpu, YunetBatch16EqualsSixteenSingleRuns) {
  auto p = yunet_program(640);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const auto in = inputs_for(*p, 16, 21, 0.0f, 1.0f);
  const Outputs batched = plan_run(*p, in);
  PlanOptions one;
  auto g = plan(*p, one);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  ASSERT_EQ(batched.size(), 16u);
  for (std::size_t b = 0; b < 16; ++b) {
    const Outputs single = run(**g, *p, {in[b]});
    for (std::size_t k = 0; k < p->outputs.size(); ++k) {
      const double m = max_abs(single[0][k]);
      // the same kernels per image; cuDNN may pick another algorithm at batch 16, so close rather than equal
      EXPECT_TRUE(testing::all_close(std::span<const float>(batched[b][k]),
                                     std::span<const float>(single[0][k]), {1e-5 * m + 1e-6, 1e-5}))
          << "image " << b << " output " << k;
    }
  }
}

}  // namespace
}  // namespace facetrace::faces
