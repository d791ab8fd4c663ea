/// @file
/// The CPU kernels of the exporter's other IR ops (docs/design/faces.md §3); see ops.h.
#include "cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <vector>

#include "cpu/eltwise.h"
#include "facetrace/core/parallel.h"

namespace facetrace::faces::detail {

KernelResult conv_direct(const ConvJob& j, const float* x, float* y, const Activation& act, int threads) {
  const std::int64_t cin_g = j.cin / j.groups, cout_g = j.cout / j.groups;
  const float* w = j.weights->data();
  const float* b = j.bias ? j.bias->data() : nullptr;
  ResultFlags res;
  per_index(j.cout, j.oh * j.ow * cin_g * j.kh * j.kw, threads, [&](std::int64_t co) {
    const std::int64_t g = co / cout_g;
    bool bad = false;
    for (std::int64_t oy = 0; oy < j.oh; ++oy)
      for (std::int64_t ox = 0; ox < j.ow; ++ox) {
        float s = b ? b[co] : 0.0f;
        for (std::int64_t cl = 0; cl < cin_g; ++cl) {
          const float* xc = x + (g * cin_g + cl) * j.h * j.w;
          const float* wc = w + (co * cin_g + cl) * j.kh * j.kw;
          for (std::int64_t ky = 0; ky < j.kh; ++ky) {
            const std::int64_t iy = oy * j.sh + ky * j.dh - j.pt;
            if (iy < 0 || iy >= j.h) continue;
            for (std::int64_t kx = 0; kx < j.kw; ++kx) {
              const std::int64_t ix = ox * j.sw + kx * j.dw - j.pl;
              if (ix < 0 || ix >= j.w) continue;
              s += xc[iy * j.w + ix] * wc[ky * j.kw + kx];
            }
          }
        }
        bad |= !std::isfinite(s);
        y[(co * j.oh + oy) * j.ow + ox] = apply_activation(act, s);
      }
    if (bad) res.add(KernelResult::kNonFinite);
  });
  return res.get();
}

bool maxpool_inside(const MaxPoolOp& m) {
  return m.pt == 0 && m.pl == 0 && (m.oh - 1) * m.sh + m.kh <= m.h && (m.ow - 1) * m.sw + m.kw <= m.w;
}

void maxpool_padded(const MaxPoolOp& m, const float* x, float* y, int threads) {
  per_index(m.channels, m.h * m.w, threads, [&](std::int64_t c) {
    const float* in = x + c * m.h * m.w;
    float* out = y + c * m.oh * m.ow;
    for (std::int64_t oy = 0; oy < m.oh; ++oy) {
      const std::int64_t y0 = std::max<std::int64_t>(0, oy * m.sh - m.pt),
                         y1 = std::min(m.h, oy * m.sh - m.pt + m.kh);
      for (std::int64_t ox = 0; ox < m.ow; ++ox) {
        const std::int64_t x0 = std::max<std::int64_t>(0, ox * m.sw - m.pl),
                           x1 = std::min(m.w, ox * m.sw - m.pl + m.kw);
        float best = in[y0 * m.w + x0];
        for (std::int64_t iy = y0; iy < y1; ++iy)
          for (std::int64_t ix = x0; ix < x1; ++ix) best = std::max(best, in[iy * m.w + ix]);
        out[oy * m.ow + ox] = best;
      }
    }
  });
}

void avgpool(const AvgPoolOp& a, const float* x, float* y, int threads) {
  per_index(a.channels, a.h * a.w, threads, [&](std::int64_t c) {
    const float* in = x + c * a.h * a.w;
    float* out = y + c * a.oh * a.ow;
    for (std::int64_t oy = 0; oy < a.oh; ++oy) {
      const std::int64_t ys = oy * a.sh - a.pt;
      const std::int64_t y0 = std::max<std::int64_t>(0, ys), y1 = std::min(a.h, ys + a.kh);
      const std::int64_t py1 = std::min(a.h + a.pb, ys + a.kh);  // the window within the explicit pads
      for (std::int64_t ox = 0; ox < a.ow; ++ox) {
        const std::int64_t xs = ox * a.sw - a.pl;
        const std::int64_t x0 = std::max<std::int64_t>(0, xs), x1 = std::min(a.w, xs + a.kw);
        const std::int64_t px1 = std::min(a.w + a.pr, xs + a.kw);
        double s = 0.0;
        for (std::int64_t iy = y0; iy < y1; ++iy)
          for (std::int64_t ix = x0; ix < x1; ++ix) s += in[iy * a.w + ix];
        const std::int64_t div = a.count_include_pad ? (py1 - ys) * (px1 - xs) : (y1 - y0) * (x1 - x0);
        out[oy * a.ow + ox] = static_cast<float>(s / static_cast<double>(div));
      }
    }
  });
}

namespace {

// The source coordinate of output index o of an axis (docs/design/faces.md §3), in float as onnxruntime.
float source_coord(ResizeCoord c, std::int64_t o, std::int64_t in, std::int64_t out, float scale) {
  const auto of = static_cast<float>(o);
  switch (c) {
    case ResizeCoord::kAsymmetric: return of / scale;
    case ResizeCoord::kHalfPixel: return (of + 0.5f) / scale - 0.5f;
    case ResizeCoord::kPytorchHalfPixel: return out > 1 ? (of + 0.5f) / scale - 0.5f : 0.0f;
    case ResizeCoord::kAlignCorners:
      return out > 1 ? of * static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.0f;
  }
  return 0.0f;
}

std::int64_t nearest_index(ResizeNearest m, float v, std::int64_t in) {
  float r = 0.0f;
  switch (m) {
    case ResizeNearest::kFloor: r = std::floor(v); break;
    case ResizeNearest::kCeil: r = std::ceil(v); break;
    case ResizeNearest::kRoundPreferFloor: r = v - std::floor(v) == 0.5f ? std::floor(v) : std::round(v); break;
    case ResizeNearest::kRoundPreferCeil: r = v - std::floor(v) == 0.5f ? std::ceil(v) : std::round(v); break;
  }
  return std::clamp<std::int64_t>(static_cast<std::int64_t>(r), 0, in - 1);
}

// One axis of a linear resize: the two source indices and the weight of the second.
struct Tap {
  std::int64_t i0 = 0, i1 = 0;
  float l = 0.0f;
};
std::vector<Tap> linear_taps(ResizeCoord c, std::int64_t in, std::int64_t out, float scale) {
  std::vector<Tap> t(static_cast<std::size_t>(out));
  for (std::int64_t o = 0; o < out; ++o) {
    const float v = std::clamp(source_coord(c, o, in, out, scale), 0.0f, static_cast<float>(in - 1));
    Tap& p = t[static_cast<std::size_t>(o)];
    p.i0 = std::min<std::int64_t>(static_cast<std::int64_t>(v), in - 1);
    p.i1 = std::min<std::int64_t>(p.i0 + 1, in - 1);
    p.l = v - static_cast<float>(p.i0);
  }
  return t;
}

}  // namespace

void resize_general(const ResizeOp& r, const float* x, float* y, int threads) {
  if (r.mode == ResizeMode::kNearest) {
    std::vector<std::int64_t> iy(static_cast<std::size_t>(r.oh)), ix(static_cast<std::size_t>(r.ow));
    for (std::int64_t o = 0; o < r.oh; ++o)
      iy[static_cast<std::size_t>(o)] = nearest_index(r.nearest, source_coord(r.coord, o, r.h, r.oh, r.scale_y), r.h);
    for (std::int64_t o = 0; o < r.ow; ++o)
      ix[static_cast<std::size_t>(o)] = nearest_index(r.nearest, source_coord(r.coord, o, r.w, r.ow, r.scale_x), r.w);
    per_index(r.channels, r.oh * r.ow, threads, [&](std::int64_t c) {
      const float* in = x + c * r.h * r.w;
      float* out = y + c * r.oh * r.ow;
      for (std::int64_t oy = 0; oy < r.oh; ++oy)
        for (std::int64_t ox = 0; ox < r.ow; ++ox)
          out[oy * r.ow + ox] = in[iy[static_cast<std::size_t>(oy)] * r.w + ix[static_cast<std::size_t>(ox)]];
    });
    return;
  }
  const auto ty = linear_taps(r.coord, r.h, r.oh, r.scale_y), tx = linear_taps(r.coord, r.w, r.ow, r.scale_x);
  per_index(r.channels, r.oh * r.ow, threads, [&](std::int64_t c) {
    const float* in = x + c * r.h * r.w;
    float* out = y + c * r.oh * r.ow;
    for (std::int64_t oy = 0; oy < r.oh; ++oy) {
      const Tap& a = ty[static_cast<std::size_t>(oy)];
      for (std::int64_t ox = 0; ox < r.ow; ++ox) {
        const Tap& b = tx[static_cast<std::size_t>(ox)];
        const float v00 = in[a.i0 * r.w + b.i0], v01 = in[a.i0 * r.w + b.i1];
        const float v10 = in[a.i1 * r.w + b.i0], v11 = in[a.i1 * r.w + b.i1];
        const float top = v00 + (v01 - v00) * b.l, bot = v10 + (v11 - v10) * b.l;
        out[oy * r.ow + ox] = top + (bot - top) * a.l;
      }
    }
  });
}

void softmax(const SoftmaxOp& s, const float* x, float* y, int threads) {
  per_index(s.outer, s.axis * s.inner, threads, [&](std::int64_t o) {
    for (std::int64_t i = 0; i < s.inner; ++i) {
      const float* in = x + o * s.axis * s.inner + i;
      float* out = y + o * s.axis * s.inner + i;
      float mx = in[0];
      for (std::int64_t a = 1; a < s.axis; ++a) mx = std::max(mx, in[a * s.inner]);
      double sum = 0.0;
      for (std::int64_t a = 0; a < s.axis; ++a) {
        const float e = std::exp(in[a * s.inner] - mx);
        out[a * s.inner] = e;
        sum += e;
      }
      const auto inv = static_cast<float>(sum);
      for (std::int64_t a = 0; a < s.axis; ++a) out[a * s.inner] /= inv;
    }
  });
}

void concat(const ConcatOp& c, std::span<const float* const> parts, float* y) {
  for (std::int64_t o = 0; o < c.outer; ++o)
    for (std::size_t i = 0; i < c.parts.size(); ++i) {
      const std::int64_t len = c.parts[i] * c.inner;
      std::memcpy(y, parts[i] + o * len, static_cast<std::size_t>(len) * sizeof(float));
      y += len;
    }
}

KernelResult matmul(const MatMulOp& m, const float* a, const float* b, float* y, int threads) {
  std::vector<float> bt;
  KernelResult r = KernelResult::kOk;
  for (std::int64_t i = 0; i < m.batch; ++i) {
    const float* ai = a + i * m.a_stride;
    const float* bi = b + i * m.b_stride;
    if (m.trans_b) {  // b is [n,k]: transposed to [k,n] first
      if (bt.empty() || i == 0 || m.b_stride != 0) {
        try {
          bt.resize(static_cast<std::size_t>(m.k * m.n));
        } catch (const std::bad_alloc&) {
          return KernelResult::kOutOfMemory;
        }
        for (std::int64_t kk = 0; kk < m.k; ++kk)
          for (std::int64_t j = 0; j < m.n; ++j) bt[static_cast<std::size_t>(kk * m.n + j)] = bi[j * m.k + kk];
      }
      bi = bt.data();
    }
    r = worst(r, sgemm_bias_act(m.m, m.n, m.k, ai, m.k, nullptr, MatrixB(bi, m.n, m.n), y + i * m.m * m.n, m.n,
                                Activation{}, threads));
  }
  return r;
}

void reduce_mean(const ReduceMeanOp& r, const float* x, float* y, int threads) {
  per_index(r.outer, r.len * r.inner, threads, [&](std::int64_t o) {
    for (std::int64_t i = 0; i < r.inner; ++i) {
      double s = 0.0;
      for (std::int64_t l = 0; l < r.len; ++l) s += x[(o * r.len + l) * r.inner + i];
      y[o * r.inner + i] = static_cast<float>(s / static_cast<double>(r.len));
    }
  });
}

void pad(const PadOp& p, const float* x, float* y) {
  std::array<std::int64_t, 4> od{};
  for (int k = 0; k < 4; ++k) od[k] = p.in_dims[k] + p.begin[k] + p.end[k];
  const auto& id = p.in_dims;
  for (std::int64_t i0 = 0; i0 < od[0]; ++i0)
    for (std::int64_t i1 = 0; i1 < od[1]; ++i1)
      for (std::int64_t i2 = 0; i2 < od[2]; ++i2) {
        const std::int64_t s0 = i0 - p.begin[0], s1 = i1 - p.begin[1], s2 = i2 - p.begin[2];
        const bool row = s0 >= 0 && s0 < id[0] && s1 >= 0 && s1 < id[1] && s2 >= 0 && s2 < id[2];
        for (std::int64_t i3 = 0; i3 < od[3]; ++i3) {
          const std::int64_t s3 = i3 - p.begin[3];
          *y++ = row && s3 >= 0 && s3 < id[3] ? x[((s0 * id[1] + s1) * id[2] + s2) * id[3] + s3] : p.value;
        }
      }
}

}  // namespace facetrace::faces::detail
