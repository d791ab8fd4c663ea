/// @file
/// Element-wise, pooling, resize, transpose and GEMV kernels (docs/design/faces.md §2, §3): plain loops compiled for AVX2 and
/// portable targets, AVX2 forms of the 2×2/2 MaxPool and of a ×2 Resize fused with a Binary.
#include "cpu/eltwise.h"

#include <immintrin.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/ops.h"

namespace facetrace::faces::detail {
namespace {

// Even / odd lanes of the 16 floats u:v.
__attribute__((target("avx2"), always_inline)) inline __m256 evens(__m256 u, __m256 v) {
  return _mm256_castpd_ps(
      _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(u, v, _MM_SHUFFLE(2, 0, 2, 0))), 0xd8));
}
__attribute__((target("avx2"), always_inline)) inline __m256 odds(__m256 u, __m256 v) {
  return _mm256_castpd_ps(
      _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(u, v, _MM_SHUFFLE(3, 1, 3, 1))), 0xd8));
}

// One channel of a MaxPool. Running max in window order with best = (v > best ? v : best), i.e. std::max(best, v).
__attribute__((target("avx2"))) void maxpool2x2s2_avx2(const MaxPoolOp& m, const float* in, float* out) {
  for (std::int64_t oy = 0; oy < m.oh; ++oy) {
    const float* r0 = in + 2 * oy * m.w;
    const float* r1 = r0 + m.w;
    float* o = out + oy * m.ow;
    std::int64_t ox = 0;
    for (; ox + 8 <= m.ow && 2 * ox + 16 <= m.w; ox += 8) {
      const __m256 a0 = _mm256_loadu_ps(r0 + 2 * ox), a1 = _mm256_loadu_ps(r0 + 2 * ox + 8);
      const __m256 b0 = _mm256_loadu_ps(r1 + 2 * ox), b1 = _mm256_loadu_ps(r1 + 2 * ox + 8);
      __m256 best = evens(a0, a1);
      best = _mm256_max_ps(odds(a0, a1), best);
      best = _mm256_max_ps(evens(b0, b1), best);
      best = _mm256_max_ps(odds(b0, b1), best);
      _mm256_storeu_ps(o + ox, best);
    }
    for (; ox < m.ow; ++ox) {
      float best = r0[2 * ox];
      best = std::max(best, r0[2 * ox + 1]);
      best = std::max(best, r1[2 * ox]);
      best = std::max(best, r1[2 * ox + 1]);
      o[ox] = best;
    }
  }
}

// One output row of a nearest Resize (factor sx, input row `in` of w floats) combined with the other operand row
// `o` of the Binary that reads it: y = up ∘ o (side 0) or o ∘ up (side 1), exactly the separate steps' values.
// Returns false when some output is not finite.
template <BinaryKind K>
inline float bin(float a, float b) {
  return K == BinaryKind::kAdd ? a + b : K == BinaryKind::kSub ? a - b : K == BinaryKind::kMul ? a * b : a / b;
}
template <BinaryKind K>
bool resize_bin_row(const float* in, std::int64_t w, std::int64_t sx, const float* o, float* y, int side) {
  const std::int64_t ow = w * sx;
  std::uint32_t bad = 0;
  for (std::int64_t ox = 0; ox < ow; ++ox) {
    const float u = in[ox / sx];
    const float v = side == 0 ? bin<K>(u, o[ox]) : bin<K>(o[ox], u);
    bad |= static_cast<std::uint32_t>(!(v - v == 0.0f));
    y[ox] = v;
  }
  return bad == 0;
}
template <BinaryKind K>
__attribute__((target("avx2"))) bool resize2_bin_row_avx2(const float* in, std::int64_t w, const float* o,
                                                          float* y, int side) {
  __m256 nf = _mm256_setzero_ps();
  auto op = [&](__m256 u, __m256 v) __attribute__((target("avx2"))) {
    const __m256 a = side == 0 ? u : v, b = side == 0 ? v : u;
    return K == BinaryKind::kAdd   ? _mm256_add_ps(a, b)
           : K == BinaryKind::kSub ? _mm256_sub_ps(a, b)
           : K == BinaryKind::kMul ? _mm256_mul_ps(a, b)
                                   : _mm256_div_ps(a, b);
  };
  std::int64_t ix = 0;
  for (; ix + 8 <= w; ix += 8) {
    const __m256 v = _mm256_loadu_ps(in + ix);
    const __m256 lo = _mm256_unpacklo_ps(v, v), hi = _mm256_unpackhi_ps(v, v);  // v0 v0 v1 v1 | v4 v4 v5 v5 …
    const __m256 u0 = _mm256_permute2f128_ps(lo, hi, 0x20), u1 = _mm256_permute2f128_ps(lo, hi, 0x31);
    const __m256 r0 = op(u0, _mm256_loadu_ps(o + 2 * ix)), r1 = op(u1, _mm256_loadu_ps(o + 2 * ix + 8));
    nf = _mm256_or_ps(nf, _mm256_or_ps(_mm256_sub_ps(r0, r0), _mm256_sub_ps(r1, r1)));
    _mm256_storeu_ps(y + 2 * ix, r0);
    _mm256_storeu_ps(y + 2 * ix + 8, r1);
  }
  bool ok = _mm256_movemask_ps(_mm256_cmp_ps(nf, nf, _CMP_UNORD_Q)) == 0;
  if (ix < w) ok &= resize_bin_row<K>(in + ix, w - ix, 2, o + 2 * ix, y + 2 * ix, side);
  return ok;
}

}  // namespace

// True when every value is finite (exponent bits not all ones); integer ops so it vectorises (AVX2 / AVX-512
// clones picked at load: the 4.9 MB YuNet input is scanned on every run).
__attribute__((target_clones("avx512f", "avx2", "default"))) bool all_finite(const float* x, std::int64_t n) {
  std::uint32_t bad = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t b;
    std::memcpy(&b, x + i, 4);
    bad |= static_cast<std::uint32_t>((b & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

void maxpool_channel(const MaxPoolOp& m, const float* in, float* out) {
  if (m.kh == 2 && m.kw == 2 && m.sh == 2 && m.sw == 2 && detail::cpu_has_avx2_fma()) {
    maxpool2x2s2_avx2(m, in, out);
    return;
  }
  for (std::int64_t oy = 0; oy < m.oh; ++oy)
    for (std::int64_t ox = 0; ox < m.ow; ++ox) {
      float best = in[(oy * m.sh) * m.w + ox * m.sw];
      for (std::int64_t ky = 0; ky < m.kh; ++ky)
        for (std::int64_t kx = 0; kx < m.kw; ++kx)
          best = std::max(best, in[(oy * m.sh + ky) * m.w + ox * m.sw + kx]);
      out[oy * m.ow + ox] = best;
    }
}

__attribute__((target_clones("avx2", "default"))) void binary(const BinaryOp& op, const float* a,
                                                              const float* b, float* y) {
  const auto& d = op.dims;
  const std::int64_t as3 = op.a_strides[3], bs3 = op.b_strides[3];
  for (std::int64_t i0 = 0; i0 < d[0]; ++i0)
    for (std::int64_t i1 = 0; i1 < d[1]; ++i1)
      for (std::int64_t i2 = 0; i2 < d[2]; ++i2) {
        const float* pa = a + i0 * op.a_strides[0] + i1 * op.a_strides[1] + i2 * op.a_strides[2];
        const float* pb = b + i0 * op.b_strides[0] + i1 * op.b_strides[1] + i2 * op.b_strides[2];
        float* py = y + ((i0 * d[1] + i1) * d[2] + i2) * d[3];
        const std::int64_t n = d[3];
        switch (op.kind) {
          case BinaryKind::kAdd:
            if (as3 == 1 && bs3 == 1) {
              for (std::int64_t i = 0; i < n; ++i) py[i] = pa[i] + pb[i];
            } else {
              for (std::int64_t i = 0; i < n; ++i) py[i] = pa[i * as3] + pb[i * bs3];
            }
            break;
          case BinaryKind::kSub:
            if (as3 == 1 && bs3 == 1) {
              for (std::int64_t i = 0; i < n; ++i) py[i] = pa[i] - pb[i];
            } else {
              for (std::int64_t i = 0; i < n; ++i) py[i] = pa[i * as3] - pb[i * bs3];
            }
            break;
          case BinaryKind::kMul:
            if (as3 == 1 && bs3 == 1) {
              for (std::int64_t i = 0; i < n; ++i) py[i] = pa[i] * pb[i];
            } else {
              for (std::int64_t i = 0; i < n; ++i) py[i] = pa[i * as3] * pb[i * bs3];
            }
            break;
          case BinaryKind::kDiv:
            for (std::int64_t i = 0; i < n; ++i) py[i] = pa[i * as3] / pb[i * bs3];
            break;
        }
      }
}

void transpose(const TransposeOp& op, const float* x, float* y) {
  x += op.offset;  // a strided copy (Slice, Split, Gather, Expand): docs/design/faces.md §3
  const std::size_t r = op.dims.size();
  if (r == 0) {
    y[0] = x[0];
    return;
  }
  std::vector<std::int64_t> idx(r, 0);
  const std::int64_t inner = op.dims[r - 1], inner_stride = op.strides[r - 1];
  std::int64_t outer = 1;
  for (std::size_t i = 0; i + 1 < r; ++i) outer *= op.dims[i];
  for (std::int64_t o = 0; o < outer; ++o) {
    std::int64_t base = 0;
    for (std::size_t i = 0; i + 1 < r; ++i) base += idx[i] * op.strides[i];
    for (std::int64_t i = 0; i < inner; ++i) y[i] = x[base + i * inner_stride];
    y += inner;
    for (std::size_t i = r - 1; i-- > 0;) {
      if (++idx[i] < op.dims[i]) break;
      idx[i] = 0;
    }
  }
}

void gemv(const GemvOp& op, const float* x, const float* w, const float* bias, float* y, int threads) {
  if (op.trans_b) {  // W [n,k]: a dot product per output, threads over outputs
    const std::int64_t chunk = 16;
    core::parallel_for((op.n + chunk - 1) / chunk, threads, [&](std::int64_t c) {
      for (std::int64_t j = c * chunk; j < std::min(op.n, (c + 1) * chunk); ++j) {
        const float* row = w + j * op.k;
        double s = 0.0;
        for (std::int64_t i = 0; i < op.k; ++i) s += static_cast<double>(x[i]) * row[i];
        y[j] = op.alpha * static_cast<float>(s) + (bias ? op.beta * bias[j] : 0.0f);
      }
    });
  } else {  // W [k,n]: rows accumulated in ascending i
    std::vector<double> acc(static_cast<std::size_t>(op.n), 0.0);
    for (std::int64_t i = 0; i < op.k; ++i) {
      const double xi = x[i];
      const float* row = w + i * op.n;
      for (std::int64_t j = 0; j < op.n; ++j) acc[static_cast<std::size_t>(j)] += xi * row[j];
    }
    for (std::int64_t j = 0; j < op.n; ++j)
      y[j] =
          op.alpha * static_cast<float>(acc[static_cast<std::size_t>(j)]) + (bias ? op.beta * bias[j] : 0.0f);
  }
}

// A nearest Resize fused with the element-wise Binary (no broadcasting) that is its only reader: the up-scaled
// tensor is never stored. x: the Resize input, o: the Binary's other operand. False when an output is not finite.
bool resize_binary(const ResizeOp& r, BinaryKind kind, int side, const float* x, const float* o, float* y,
                   int threads) {
  const std::int64_t oh = r.h * r.sy, ow = r.w * r.sx;
  std::atomic<bool> ok{true};
  const bool v2 = r.sx == 2 && detail::cpu_has_avx2_fma();
  per_index(r.channels, oh * ow, threads, [&](std::int64_t c) {
    bool good = true;
    for (std::int64_t oy = 0; oy < oh; ++oy) {
      const float* in = x + (c * r.h + oy / r.sy) * r.w;
      const std::int64_t at = (c * oh + oy) * ow;
      switch (kind) {
        case BinaryKind::kAdd:
          good &= v2 ? resize2_bin_row_avx2<BinaryKind::kAdd>(in, r.w, o + at, y + at, side)
                     : resize_bin_row<BinaryKind::kAdd>(in, r.w, r.sx, o + at, y + at, side);
          break;
        case BinaryKind::kSub:
          good &= v2 ? resize2_bin_row_avx2<BinaryKind::kSub>(in, r.w, o + at, y + at, side)
                     : resize_bin_row<BinaryKind::kSub>(in, r.w, r.sx, o + at, y + at, side);
          break;
        case BinaryKind::kMul:
          good &= v2 ? resize2_bin_row_avx2<BinaryKind::kMul>(in, r.w, o + at, y + at, side)
                     : resize_bin_row<BinaryKind::kMul>(in, r.w, r.sx, o + at, y + at, side);
          break;
        case BinaryKind::kDiv:
          good &= v2 ? resize2_bin_row_avx2<BinaryKind::kDiv>(in, r.w, o + at, y + at, side)
                     : resize_bin_row<BinaryKind::kDiv>(in, r.w, r.sx, o + at, y + at, side);
          break;
      }
    }
    if (!good) ok.store(false, std::memory_order_relaxed);
  });
  return ok.load();
}

__attribute__((target_clones("avx2", "default"))) void relu_range(const float* __restrict x,
                                                                  float* __restrict y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
__attribute__((target_clones("avx2", "default"))) void clip_range(const float* __restrict x,
                                                                  float* __restrict y, std::int64_t n,
                                                                  float lo, float hi) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = std::min(std::max(x[i], lo), hi);
}

void unary(const UnaryOp& u, const float* x, float* y, std::int64_t len, int threads) {
  switch (u.kind) {
    case UnaryKind::kRelu:
      chunked(len, threads, [&](std::int64_t b, std::int64_t e) { relu_range(x + b, y + b, e - b); });
      break;
    case UnaryKind::kSigmoid:
      chunked(len, threads, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
      });
      break;
    case UnaryKind::kClip:
      chunked(len, threads,
              [&](std::int64_t b, std::int64_t e) { clip_range(x + b, y + b, e - b, u.lo, u.hi); });
      break;
    case UnaryKind::kLeakyRelu:
      chunked(len, threads, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) y[i] = x[i] >= 0.0f ? x[i] : u.alpha * x[i];
      });
      break;
    case UnaryKind::kTanh:
      chunked(len, threads, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) y[i] = std::tanh(x[i]);
      });
      break;
    case UnaryKind::kHardSigmoid:
      chunked(len, threads, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) y[i] = std::max(0.0f, std::min(1.0f, u.alpha * x[i] + u.beta));
      });
      break;
    case UnaryKind::kHardSwish:
      chunked(len, threads, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) y[i] = x[i] * std::max(0.0f, std::min(1.0f, x[i] / 6.0f + 0.5f));
      });
      break;
    case UnaryKind::kSqrt:
      chunked(len, threads, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) y[i] = std::sqrt(x[i]);
      });
      break;
  }
}

void channel_affine(const ChannelAffineOp& a, const float* x, const float* sc, const float* sh, float* y,
                    int threads) {
  per_index(a.channels, a.plane, threads, [&](std::int64_t c) {
    for (std::int64_t i = 0; i < a.plane; ++i) y[c * a.plane + i] = x[c * a.plane + i] * sc[c] + sh[c];
  });
}

void channel_prelu(const ChannelPreluOp& pr, const float* x, const float* sl, float* y, int threads) {
  per_index(pr.channels, pr.plane, threads, [&](std::int64_t c) {
    for (std::int64_t i = 0; i < pr.plane; ++i) {
      const float v = x[c * pr.plane + i];
      y[c * pr.plane + i] = v >= 0.0f ? v : sl[c] * v;
    }
  });
}

void maxpool(const MaxPoolOp& m, const float* x, float* y, int threads) {
  if (!maxpool_inside(m)) return maxpool_padded(m, x, y, threads);  // pads or ceil_mode (cpu/ops.cpp)
  per_index(m.channels, m.h * m.w, threads,
            [&](std::int64_t c) { maxpool_channel(m, x + c * m.h * m.w, y + c * m.oh * m.ow); });
}

void resize_nearest(const ResizeOp& r, const float* x, float* y, int threads) {
  if (r.sy <= 0 || r.sx <= 0) return resize_general(r, x, y, threads);  // not the integer up-scale (cpu/ops.cpp)
  const std::int64_t ow = r.w * r.sx;
  per_index(r.channels, r.h * r.sy * ow, threads, [&](std::int64_t c) {
    for (std::int64_t iy = 0; iy < r.h; ++iy) {
      const float* in = x + (c * r.h + iy) * r.w;
      float* out = y + (c * r.h + iy) * r.sy * ow;
      for (std::int64_t ix = 0; ix < r.w; ++ix)
        for (std::int64_t q = 0; q < r.sx; ++q) out[ix * r.sx + q] = in[ix];
      for (std::int64_t q = 1; q < r.sy; ++q)
        std::memcpy(out + q * ow, out, static_cast<std::size_t>(ow) * 4);
    }
  });
}

void global_average(const GlobalAverageOp& g, const float* x, float* y) {
  for (std::int64_t c = 0; c < g.channels; ++c) {
    double sum = 0.0;
    for (std::int64_t i = 0; i < g.plane; ++i) sum += x[c * g.plane + i];
    y[c] = static_cast<float>(sum / static_cast<double>(g.plane));
  }
}

}  // namespace facetrace::faces::detail
