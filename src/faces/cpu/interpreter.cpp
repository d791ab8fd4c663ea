/// @file
/// The CPU interpreter of a Program (faces.md §3): dense/grouped convs through im2col + blocked SGEMM, depthwise
/// convs through direct loops, plain loops for the other ops. Threads go across output channels / GEMM blocks
/// (batch 1) or batch items (B > 1). Every element is computed by one thread in a fixed order, so results do not
/// depend on the thread count.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "cpu/gemm.h"
#include "facetrace/core/parallel.h"
#include "facetrace/faces/net.h"

namespace facetrace::faces {
namespace {

using detail::Activation;
using core::parallel_for;

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

// Direct convolution for one-input-channel groups (depthwise and channel multipliers): output channel co reads
// input channel co / (cout/groups). Accumulates bias, then taps in (ky, kx) order, row by row. (Portable path.)
__attribute__((target_clones("avx2", "default"))) void conv_direct_channel(const ConvJob& j,
                                                                           const float* __restrict x,
                                                                           const float* __restrict wt, float bias,
                                                                           float* __restrict y) {
  for (std::int64_t oy = 0; oy < j.oh; ++oy) {
    float* __restrict row = y + oy * j.ow;
    for (std::int64_t ox = 0; ox < j.ow; ++ox) row[ox] = bias;
    for (std::int64_t ky = 0; ky < j.kh; ++ky) {
      const std::int64_t iy = oy * j.sh + ky - j.pt;
      if (iy < 0 || iy >= j.h) continue;
      const float* in = x + iy * j.w;
      for (std::int64_t kx = 0; kx < j.kw; ++kx) {
        const float wv = wt[ky * j.kw + kx];
        // ox range with 0 ≤ ox·sw + kx − pl < w
        const std::int64_t off = kx - j.pl;
        std::int64_t lo = off >= 0 ? 0 : (-off + j.sw - 1) / j.sw;
        std::int64_t hi = (j.w - 1 - off) < 0 ? 0 : (j.w - 1 - off) / j.sw + 1;
        hi = std::min(hi, j.ow);
        if (j.sw == 1) {
          const float* __restrict src = in + off;
          for (std::int64_t ox = lo; ox < hi; ++ox) row[ox] += wv * src[ox];
        } else {
          for (std::int64_t ox = lo; ox < hi; ++ox) row[ox] += wv * in[ox * j.sw + off];
        }
      }
    }
  }
}

// Finiteness check and activation over n values in place; false when some value was not finite.
bool finish_plane(float* y, std::int64_t n, const Activation& act) {
  const bool ok = all_finite(y, n);
  if (act.kind != Activation::Kind::kNone)
    for (std::int64_t i = 0; i < n; ++i) y[i] = detail::apply_activation(act, y[i]);
  return ok;
}

// 8 floats s[0], s[SW], …, s[7·SW] (reads s[0 .. 8·SW − 1]).
template <int SW>
__attribute__((target("avx2,fma"), always_inline)) inline __m256 load_strided(const float* s) {
  if constexpr (SW == 1) {
    return _mm256_loadu_ps(s);
  } else {
    const __m256 a = _mm256_loadu_ps(s), b = _mm256_loadu_ps(s + 8);
    const __m256 ab = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));  // a0 a2 b0 b2 | a4 a6 b4 b6
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ab), 0xd8));
  }
}

// The AVX2 depthwise channel: 8 output columns at a time with every tap in registers (bias first, then taps in
// (ky, kx) order with FMA), scalar FMA at the borders; finiteness check and activation before the store.
// KH = KW = 0: sizes from the job.
template <int KH, int KW, int SW>
__attribute__((target("avx2,fma"))) bool dw_channel_avx2(const ConvJob& j, const float* __restrict x,
                                                         const float* __restrict wt, float bias,
                                                         float* __restrict y, const Activation& act) {
  const std::int64_t kh = KH ? KH : j.kh, kw = KW ? KW : j.kw, sh = j.sh, h = j.h, w = j.w, pt = j.pt, pl = j.pl;
  const std::int64_t ow = j.ow;
  // columns [vlo, vhi) take the vector path: every tap of 8 columns (and the extra float a stride-2 load reads)
  // inside the row
  const std::int64_t vlo = (pl + SW - 1) / SW;
  // need (ox+7)·SW − pl + kw − 1 + (SW − 1) ≤ w − 1
  const std::int64_t lim = w - kw + pl - (SW - 1);  // (ox+7)·SW ≤ lim
  const std::int64_t vhi_plus7 = lim < 0 ? -1 : lim / SW;
  const std::int64_t vend = std::min(ow, vhi_plus7 + 1);  // ox + 7 < vend  ⇔ ox + 8 ≤ vend
  const __m256 vb = _mm256_set1_ps(bias);
  const __m256 z = _mm256_setzero_ps();
  const __m256 lo = _mm256_set1_ps(act.lo), hi = _mm256_set1_ps(act.hi);
  __m256 nf = _mm256_setzero_ps();
  unsigned bad = 0;
  auto scalar = [&](std::int64_t oy, std::int64_t ox, std::int64_t ky0, std::int64_t ky1) {
    float acc = bias;
    for (std::int64_t ky = ky0; ky < ky1; ++ky) {
      const float* in = x + (oy * sh + ky - pt) * w;
      for (std::int64_t kx = 0; kx < kw; ++kx) {
        const std::int64_t ix = ox * SW + kx - pl;
        if (ix >= 0 && ix < w) acc = std::fma(wt[ky * kw + kx], in[ix], acc);
      }
    }
    bad |= static_cast<unsigned>(!(acc - acc == 0.0f));
    y[oy * ow + ox] = detail::apply_activation(act, acc);
  };
  for (std::int64_t oy = 0; oy < j.oh; ++oy) {
    const std::int64_t ky0 = std::max<std::int64_t>(0, pt - oy * sh);
    const std::int64_t ky1 = std::min<std::int64_t>(kh, h + pt - oy * sh);
    std::int64_t ox = 0;
    for (; ox < std::min(vlo, ow); ++ox) scalar(oy, ox, ky0, ky1);
    for (; ox + 8 <= vend; ox += 8) {
      __m256 acc = vb;
      for (std::int64_t ky = ky0; ky < ky1; ++ky) {
        const float* in = x + (oy * sh + ky - pt) * w + ox * SW - pl;
        const float* wr = wt + ky * kw;
        for (std::int64_t kx = 0; kx < kw; ++kx)
          acc = _mm256_fmadd_ps(_mm256_broadcast_ss(wr + kx), load_strided<SW>(in + kx), acc);
      }
      nf = _mm256_or_ps(nf, _mm256_sub_ps(acc, acc));
      if (act.kind == Activation::Kind::kRelu)
        acc = _mm256_max_ps(acc, z);
      else if (act.kind == Activation::Kind::kClip)
        acc = _mm256_min_ps(hi, _mm256_max_ps(lo, acc));
      _mm256_storeu_ps(y + oy * ow + ox, acc);
    }
    for (; ox < ow; ++ox) scalar(oy, ox, ky0, ky1);
  }
  bad |= static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(nf, nf, _CMP_UNORD_Q)));
  return bad == 0;
}

// Epilogue of 8 conv outputs: finiteness into *nf, activation, store.
__attribute__((target("avx2"), always_inline)) inline void finish_vec(__m256 acc, float* dst, Activation::Kind kind,
                                                                     __m256 z, __m256 lo, __m256 hi, __m256* nf) {
  *nf = _mm256_or_ps(*nf, _mm256_sub_ps(acc, acc));
  if (kind == Activation::Kind::kRelu)
    acc = _mm256_max_ps(acc, z);
  else if (kind == Activation::Kind::kClip)
    acc = _mm256_min_ps(hi, _mm256_max_ps(lo, acc));
  _mm256_storeu_ps(dst, acc);
}

// NB consecutive 8-column blocks of one interior output row of a 3×3 depthwise conv (all three input rows
// r0..r2 valid, every tap inside): NB independent FMA chains, so the 4-cycle FMA latency is hidden. Per element
// the sum is bias, then taps in (ky, kx) order.
template <int NB, int SW>
__attribute__((target("avx2,fma"), always_inline)) inline void dw3_blocks(const float* r0, const float* r1,
                                                                          const float* r2, const __m256* wv,
                                                                          __m256 vb, float* d, Activation::Kind kind,
                                                                          __m256 z, __m256 lo, __m256 hi,
                                                                          __m256* nf) {
  __m256 acc[NB];
#pragma GCC unroll 8
  for (int b = 0; b < NB; ++b) acc[b] = vb;
  const float* rows[3] = {r0, r1, r2};
#pragma GCC unroll 3
  for (int ky = 0; ky < 3; ++ky)
#pragma GCC unroll 3
    for (int kx = 0; kx < 3; ++kx)
#pragma GCC unroll 8
      for (int b = 0; b < NB; ++b)
        acc[b] = _mm256_fmadd_ps(wv[3 * ky + kx], load_strided<SW>(rows[ky] + 8 * SW * b + kx), acc[b]);
#pragma GCC unroll 8
  for (int b = 0; b < NB; ++b) finish_vec(acc[b], d + 8 * b, kind, z, lo, hi, nf);
}

// The vector columns of one interior output row of a 3×3 depthwise conv: blocks of 8 columns from vlo (four at a
// time), plus the overlapping tail block ending at vend. A function of its own so that the nine weights, four
// accumulators and the finiteness mask all stay in registers.
template <int SW>
__attribute__((target("avx2,fma"), noinline)) void dw3_row(const float* r0, const float* r1, const float* r2,
                                                           const float* wt, float bias, float* d, std::int64_t vlo,
                                                           std::int64_t nvec, std::int64_t vend,
                                                           const Activation& act, __m256* nf_out) {
  __m256 wv[9];
  for (int i = 0; i < 9; ++i) wv[i] = _mm256_set1_ps(wt[i]);
  const __m256 vb = _mm256_set1_ps(bias), z = _mm256_setzero_ps();
  const __m256 lo = _mm256_set1_ps(act.lo), hi = _mm256_set1_ps(act.hi);
  const Activation::Kind kind = act.kind;
  __m256 nf = _mm256_setzero_ps();
  std::int64_t blk = 0;
  for (; blk + 4 <= nvec; blk += 4) {
    const std::int64_t ox = vlo + 8 * blk, c = ox * SW;
    dw3_blocks<4, SW>(r0 + c, r1 + c, r2 + c, wv, vb, d + ox, kind, z, lo, hi, &nf);
  }
  for (; blk < nvec; ++blk) {
    const std::int64_t ox = vlo + 8 * blk, c = ox * SW;
    dw3_blocks<1, SW>(r0 + c, r1 + c, r2 + c, wv, vb, d + ox, kind, z, lo, hi, &nf);
  }
  if (vlo + 8 * nvec < vend) {
    const std::int64_t ox = vend - 8, c = ox * SW;
    dw3_blocks<1, SW>(r0 + c, r1 + c, r2 + c, wv, vb, d + ox, kind, z, lo, hi, &nf);
  }
  *nf_out = _mm256_or_ps(*nf_out, nf);
}

// NB 8-column blocks of two adjacent interior output rows (stride 1): input rows r0..r3, each loaded vector feeds
// both rows (row 0 uses r0..r2, row 1 uses r1..r3). Per element the order is bias, then (ky, kx) ascending.
template <int NB>
__attribute__((target("avx2,fma"), always_inline)) inline void dw3_blocks2(const float* const* r, const __m256* wv,
                                                                           __m256 vb, float* d0, float* d1,
                                                                           Activation::Kind kind, __m256 z,
                                                                           __m256 lo, __m256 hi, __m256* nf) {
  __m256 a0[NB], a1[NB];
#pragma GCC unroll 4
  for (int b = 0; b < NB; ++b) a0[b] = a1[b] = vb;
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k)
#pragma GCC unroll 3
    for (int kx = 0; kx < 3; ++kx)
#pragma GCC unroll 4
      for (int b = 0; b < NB; ++b) {
        const __m256 t = _mm256_loadu_ps(r[k] + 8 * b + kx);
        if (k <= 2) a0[b] = _mm256_fmadd_ps(wv[3 * k + kx], t, a0[b]);
        if (k >= 1) a1[b] = _mm256_fmadd_ps(wv[3 * (k - 1) + kx], t, a1[b]);
      }
#pragma GCC unroll 4
  for (int b = 0; b < NB; ++b) {
    finish_vec(a0[b], d0 + 8 * b, kind, z, lo, hi, nf);
    finish_vec(a1[b], d1 + 8 * b, kind, z, lo, hi, nf);
  }
}

// Two adjacent interior output rows of a 3×3 stride-1 depthwise conv (the vector columns, as dw3_row).
__attribute__((target("avx2,fma"), noinline)) void dw3_row2(const float* r0, const float* wt, std::int64_t w,
                                                            float bias, float* d0, std::int64_t ow, std::int64_t vlo,
                                                            std::int64_t nvec, std::int64_t vend,
                                                            const Activation& act, __m256* nf_out) {
  __m256 wv[9];
  for (int i = 0; i < 9; ++i) wv[i] = _mm256_set1_ps(wt[i]);
  const __m256 vb = _mm256_set1_ps(bias), z = _mm256_setzero_ps();
  const __m256 lo = _mm256_set1_ps(act.lo), hi = _mm256_set1_ps(act.hi);
  const Activation::Kind kind = act.kind;
  __m256 nf = _mm256_setzero_ps();
  float* d1 = d0 + ow;
  auto rows_at = [&](std::int64_t c, const float** r) {
    for (int k = 0; k < 4; ++k) r[k] = r0 + k * w + c;
  };
  const float* r[4];
  std::int64_t blk = 0;
  for (; blk + 3 <= nvec; blk += 3) {
    const std::int64_t ox = vlo + 8 * blk;
    rows_at(ox, r);
    dw3_blocks2<3>(r, wv, vb, d0 + ox, d1 + ox, kind, z, lo, hi, &nf);
  }
  for (; blk < nvec; ++blk) {
    const std::int64_t ox = vlo + 8 * blk;
    rows_at(ox, r);
    dw3_blocks2<1>(r, wv, vb, d0 + ox, d1 + ox, kind, z, lo, hi, &nf);
  }
  if (vlo + 8 * nvec < vend) {
    const std::int64_t ox = vend - 8;
    rows_at(ox, r);
    dw3_blocks2<1>(r, wv, vb, d0 + ox, d1 + ox, kind, z, lo, hi, &nf);
  }
  *nf_out = _mm256_or_ps(*nf_out, nf);
}

// The edge columns of one output row of a 3×3 stride-1 depthwise conv as two 8-column vector blocks (columns
// 0..7 and ow−8..ow−1): taps outside the input are masked out of the loads and skipped by a blend, so every lane
// gets exactly the sum of the scalar path (bias, then the valid taps in (ky, kx) order). Needs ow ≥ 8.
__attribute__((target("avx2,fma"))) void dw3_edges_s1(const float* x, std::int64_t w, std::int64_t iy0,
                                                      std::int64_t ky0, std::int64_t ky1, std::int64_t pl,
                                                      std::int64_t ow, bool left, bool right, const __m256* wv,
                                                      const __m256* pvb, float* yrow, Activation::Kind kind,
                                                      const __m256* pz, const __m256* plo, const __m256* phi,
                                                      __m256* nf) {
  // (vectors by pointer: the caller is compiled without AVX)
  const __m256 vb = *pvb, z = *pz, lo = *plo, hi = *phi;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i wlim = _mm256_set1_epi32(static_cast<int>(w));
  const __m256i neg1 = _mm256_set1_epi32(-1);
  for (int side = 0; side < 2; ++side) {
    if (side == 0 ? !left : !right) continue;
    const std::int64_t ox = side == 0 ? 0 : ow - 8;
    __m256i m[3];
    for (int kx = 0; kx < 3; ++kx) {
      const __m256i ix = _mm256_add_epi32(lane, _mm256_set1_epi32(static_cast<int>(ox + kx - pl)));
      m[kx] = _mm256_and_si256(_mm256_cmpgt_epi32(ix, neg1), _mm256_cmpgt_epi32(wlim, ix));
    }
    bool full[3];
    for (int kx = 0; kx < 3; ++kx) full[kx] = _mm256_movemask_ps(_mm256_castsi256_ps(m[kx])) == 0xff;
    __m256 acc = vb;
    for (std::int64_t ky = ky0; ky < ky1; ++ky) {
      const float* r = x + (iy0 + ky) * w + ox - pl;
      for (int kx = 0; kx < 3; ++kx) {
        if (full[kx]) {  // every lane's tap inside: a plain load and FMA
          acc = _mm256_fmadd_ps(wv[3 * ky + kx], _mm256_loadu_ps(r + kx), acc);
          continue;
        }
        const __m256 v = _mm256_maskload_ps(r + kx, m[kx]);
        const __m256 t = _mm256_fmadd_ps(wv[3 * ky + kx], v, acc);
        acc = _mm256_blendv_ps(acc, t, _mm256_castsi256_ps(m[kx]));
      }
    }
    finish_vec(acc, yrow + ox, kind, z, lo, hi, nf);
  }
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12: _mm512_undefined_*() in the intrinsics
#pragma GCC diagnostic ignored "-Wuninitialized"
// AVX-512 form of dw3_blocks2: NB 16-column blocks of two adjacent interior output rows, the same sums per lane.
template <int NB>
__attribute__((target("avx512f"), always_inline)) inline void dw3_blocks2_512(const float* const* r,
                                                                              const __m512* wv, __m512 vb,
                                                                              float* d0, float* d1,
                                                                              Activation::Kind kind, __m512 lo,
                                                                              __m512 hi, __m512* nf) {
  __m512 a0[NB], a1[NB];
#pragma GCC unroll 4
  for (int b = 0; b < NB; ++b) a0[b] = a1[b] = vb;
  // Per input row: NB + 1 loads at the kx = 0 offsets (64-byte aligned when the row is, as for widths that are
  // multiples of 16) and the kx = 1, 2 vectors built with valignd, instead of 3·NB unaligned loads that mostly
  // split cache lines. The trailing vector only needs its first two lanes: a masked load, which never reads
  // past them.
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    __m512 v[NB + 1];
#pragma GCC unroll 4
    for (int b = 0; b < NB; ++b) v[b] = _mm512_loadu_ps(r[k] + 16 * b);
    v[NB] = _mm512_maskz_loadu_ps(0x3, r[k] + 16 * NB);
#pragma GCC unroll 3
    for (int kx = 0; kx < 3; ++kx)
#pragma GCC unroll 4
      for (int b = 0; b < NB; ++b) {
        const __m512 t =
            kx == 0 ? v[b]
                    : _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v[b + 1]),
                                                              _mm512_castps_si512(v[b]), kx == 1 ? 1 : 2));
        if (k <= 2) a0[b] = _mm512_fmadd_ps(wv[3 * k + kx], t, a0[b]);
        if (k >= 1) a1[b] = _mm512_fmadd_ps(wv[3 * (k - 1) + kx], t, a1[b]);
      }
  }
  const __m512 z = _mm512_setzero_ps();
#pragma GCC unroll 4
  for (int b = 0; b < NB; ++b) {
    *nf = _mm512_add_ps(*nf, _mm512_add_ps(_mm512_sub_ps(a0[b], a0[b]), _mm512_sub_ps(a1[b], a1[b])));
    if (kind == Activation::Kind::kRelu) {
      a0[b] = _mm512_max_ps(a0[b], z), a1[b] = _mm512_max_ps(a1[b], z);
    } else if (kind == Activation::Kind::kClip) {
      a0[b] = _mm512_min_ps(hi, _mm512_max_ps(lo, a0[b])), a1[b] = _mm512_min_ps(hi, _mm512_max_ps(lo, a1[b]));
    }
    _mm512_storeu_ps(d0 + 16 * b, a0[b]);
    _mm512_storeu_ps(d1 + 16 * b, a1[b]);
  }
}

// dw3_row2 with 16-column AVX-512 blocks from vlo; the columns left (fewer than 16) go through dw3_row2.
__attribute__((target("avx512f"), noinline)) void dw3_row2_512(const float* r0, const float* wt, std::int64_t w,
                                                               float bias, float* d0, std::int64_t ow,
                                                               std::int64_t vlo, std::int64_t vend,
                                                               const Activation& act, __m256* nf_out) {
  __m512 wv[9];
  for (int i = 0; i < 9; ++i) wv[i] = _mm512_set1_ps(wt[i]);
  const __m512 vb = _mm512_set1_ps(bias);
  const __m512 lo = _mm512_set1_ps(act.lo), hi = _mm512_set1_ps(act.hi);
  const Activation::Kind kind = act.kind;
  __m512 nf = _mm512_setzero_ps();
  float* d1 = d0 + ow;
  const std::int64_t n16 = (vend - vlo) / 16;
  const float* r[4];
  std::int64_t blk = 0;
  for (; blk + 4 <= n16; blk += 4) {
    const std::int64_t ox = vlo + 16 * blk;
    for (int k = 0; k < 4; ++k) r[k] = r0 + k * w + ox;
    dw3_blocks2_512<4>(r, wv, vb, d0 + ox, d1 + ox, kind, lo, hi, &nf);
  }
  for (; blk < n16; ++blk) {
    const std::int64_t ox = vlo + 16 * blk;
    for (int k = 0; k < 4; ++k) r[k] = r0 + k * w + ox;
    dw3_blocks2_512<1>(r, wv, vb, d0 + ox, d1 + ox, kind, lo, hi, &nf);
  }
  const __m256 nf8 = _mm256_add_ps(_mm512_castps512_ps256(nf),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(nf), 1)));
  *nf_out = _mm256_or_ps(*nf_out, nf8);
  const std::int64_t rest = vlo + 16 * n16;
  if (rest < vend) dw3_row2(r0, wt, w, bias, d0, ow, rest, (vend - rest) / 8, vend, act, nf_out);
}
#pragma GCC diagnostic pop

bool cpu_has_avx512f() {
  static const bool v = [] {
    __builtin_cpu_init();
    const char* cap = std::getenv("FACETRACE_FACES_KERNEL");
    return __builtin_cpu_supports("avx512f") && detail::cpu_has_avx2_fma() && !(cap && std::strcmp(cap, "avx2") == 0);
  }();
  return v;
}

// The edge columns [0, vlo) and [vend, ow) of one interior output row (all three input rows r0..r2 valid, r_k
// pointing at input column 0) of a 3×3 depthwise conv, scalar: bias, then the taps inside in (ky, kx) order with
// FMA, then the finiteness check and the activation with the comparisons of the vector epilogue, so each value
// equals what a masked vector block gives.
template <int SW>
__attribute__((target("avx2,fma"))) void dw3_edge_cols(const float* r0, const float* r1, const float* r2,
                                                       const float* wt, float bias, float* d, std::int64_t w,
                                                       std::int64_t pl, std::int64_t ow, std::int64_t vlo,
                                                       std::int64_t vend, const Activation& act, unsigned* bad) {
  const float* rows[3] = {r0, r1, r2};
  auto one = [&](std::int64_t ox) __attribute__((target("avx2,fma"))) {
    __m128 acc = _mm_set_ss(bias);
    for (int ky = 0; ky < 3; ++ky)
      for (int kx = 0; kx < 3; ++kx) {
        const std::int64_t ix = ox * SW + kx - pl;
        if (ix >= 0 && ix < w)
          acc = _mm_fmadd_ss(_mm_set_ss(wt[3 * ky + kx]), _mm_set_ss(rows[ky][ix]), acc);
      }
    const float v = _mm_cvtss_f32(acc);
    *bad |= static_cast<unsigned>(!(v - v == 0.0f));
    d[ox] = detail::apply_activation(act, v);
  };
  for (std::int64_t ox = 0; ox < std::min(vlo, ow); ++ox) one(ox);
  for (std::int64_t ox = std::max(vend, vlo); ox < ow; ++ox) one(ox);
}

// dw3_edge_cols for the common case stride 1, pad 1 each side (ow = w, edge columns 0 and w − 1), two adjacent
// output rows (input rows r0..r3 at column 0): straight-line scalar FMAs, the same order and epilogue.
__attribute__((target("avx2,fma"))) void dw3_edge_cols_p1x2(const float* r0, const float* wt, float bias,
                                                            float* d0, std::int64_t w, const Activation& act,
                                                            unsigned* bad) {
  const float* r[4] = {r0, r0 + w, r0 + 2 * w, r0 + 3 * w};
  __m128 wv[9];
  for (int i = 0; i < 9; ++i) wv[i] = _mm_set_ss(wt[i]);
  const __m128 b = _mm_set_ss(bias);
  __m128 l0 = b, l1 = b, q0 = b, q1 = b;  // left / right column, output rows 0 / 1
  const std::int64_t e = w - 2;
  for (int ky = 0; ky < 3; ++ky) {
    l0 = _mm_fmadd_ss(wv[3 * ky + 1], _mm_load_ss(r[ky]), l0);
    l1 = _mm_fmadd_ss(wv[3 * ky + 1], _mm_load_ss(r[ky + 1]), l1);
    q0 = _mm_fmadd_ss(wv[3 * ky], _mm_load_ss(r[ky] + e), q0);
    q1 = _mm_fmadd_ss(wv[3 * ky], _mm_load_ss(r[ky + 1] + e), q1);
    l0 = _mm_fmadd_ss(wv[3 * ky + 2], _mm_load_ss(r[ky] + 1), l0);
    l1 = _mm_fmadd_ss(wv[3 * ky + 2], _mm_load_ss(r[ky + 1] + 1), l1);
    q0 = _mm_fmadd_ss(wv[3 * ky + 1], _mm_load_ss(r[ky] + e + 1), q0);
    q1 = _mm_fmadd_ss(wv[3 * ky + 1], _mm_load_ss(r[ky + 1] + e + 1), q1);
  }
  // lanes: l0 q0 l1 q1
  __m128 v = _mm_movelh_ps(_mm_unpacklo_ps(l0, q0), _mm_unpacklo_ps(l1, q1));
  const __m128 nf = _mm_sub_ps(v, v);
  *bad |= static_cast<unsigned>(_mm_movemask_ps(_mm_cmpunord_ps(nf, nf)));
  if (act.kind == Activation::Kind::kRelu)
    v = _mm_max_ps(v, _mm_setzero_ps());
  else if (act.kind == Activation::Kind::kClip)
    v = _mm_min_ps(_mm_set1_ps(act.hi), _mm_max_ps(_mm_set1_ps(act.lo), v));
  float* d1 = d0 + w;
  _mm_store_ss(d0, v);
  _mm_store_ss(d0 + w - 1, _mm_shuffle_ps(v, v, 1));
  _mm_store_ss(d1, _mm_shuffle_ps(v, v, 2));
  _mm_store_ss(d1 + w - 1, _mm_shuffle_ps(v, v, 3));
}

// The 3×3 depthwise channel: rows whose three taps are all inside the input take a register-blocked path (nine
// weight vectors in registers; two output rows per pass at stride 1, sharing the loaded input rows); the summation
// order per element is that of dw_channel_avx2 (bias, then (ky, kx) ascending), so both give the same bits.
template <int SW>
__attribute__((target("avx2,fma"))) bool dw3x3_avx2(const ConvJob& j, const float* __restrict x,
                                                    const float* __restrict wt, float bias, float* __restrict y,
                                                    const Activation& act) {
  const std::int64_t sh = j.sh, h = j.h, w = j.w, pt = j.pt, pl = j.pl, ow = j.ow, oh = j.oh;
  const std::int64_t vlo = (pl + SW - 1) / SW;
  const std::int64_t lim = w - 3 + pl - (SW - 1);
  const std::int64_t vend = std::min(ow, (lim < 0 ? -1 : lim / SW) + 1);
  // output rows whose taps ky = 0..2 are all inside: oy·sh − pt ≥ 0 and oy·sh − pt + 2 ≤ h − 1
  const std::int64_t ylo = (pt + sh - 1) / sh;
  const std::int64_t yend = std::min(oh, (h - 3 + pt) < 0 ? 0 : (h - 3 + pt) / sh + 1);
  if (vend - vlo < 8) return dw_channel_avx2<3, 3, SW>(j, x, wt, bias, y, act);
  __m256 wv[9];
  for (int i = 0; i < 9; ++i) wv[i] = _mm256_set1_ps(wt[i]);
  const __m256 vb = _mm256_set1_ps(bias), z = _mm256_setzero_ps();
  const __m256 lo = _mm256_set1_ps(act.lo), hi = _mm256_set1_ps(act.hi);
  const auto kind = act.kind;
  __m256 nf = _mm256_setzero_ps();
  __m256 nf_edges = _mm256_setzero_ps();  // separate: its address goes to dw3_edges_s1, nf stays in a register
  unsigned bad = 0;
  auto scalar = [&](std::int64_t oy, std::int64_t ox) {
    const std::int64_t ky0 = std::max<std::int64_t>(0, pt - oy * sh);
    const std::int64_t ky1 = std::min<std::int64_t>(3, h + pt - oy * sh);
    float acc = bias;
    for (std::int64_t ky = ky0; ky < ky1; ++ky) {
      const float* in = x + (oy * sh + ky - pt) * w;
      for (std::int64_t kx = 0; kx < 3; ++kx) {
        const std::int64_t ix = ox * SW + kx - pl;
        if (ix >= 0 && ix < w) acc = std::fma(wt[ky * 3 + kx], in[ix], acc);
      }
    }
    bad |= static_cast<unsigned>(!(acc - acc == 0.0f));
    y[oy * ow + ox] = detail::apply_activation(act, acc);
  };
  // vector columns: blocks of 8 from vlo, plus one block ending at vend that may overlap the last one (it
  // recomputes the same values); scalar only for the columns outside [vlo, vend)
  const std::int64_t nvec = (vend - vlo) / 8;
  const std::int64_t vstop = vlo + nvec * 8;
  const bool tail = vstop < vend;
  auto row_edges = [&](std::int64_t oy) {
    if (SW == 1 && ow >= 8) {
      const std::int64_t ky0 = std::max<std::int64_t>(0, pt - oy * sh);
      const std::int64_t ky1 = std::min<std::int64_t>(3, h + pt - oy * sh);
      dw3_edges_s1(x, w, oy * sh - pt, ky0, ky1, pl, ow, vlo > 0, vend < ow, wv, &vb, y + oy * ow, kind, &z, &lo,
                   &hi, &nf_edges);
      return;
    }
    for (std::int64_t ox = 0; ox < std::min(vlo, ow); ++ox) scalar(oy, ox);
    for (std::int64_t ox = vend; ox < ow; ++ox) scalar(oy, ox);
  };
  for (std::int64_t oy = 0; oy < oh; ++oy) {
    if (oy < ylo || oy >= yend) {  // a border row: some ky taps outside the input
      const std::int64_t ky0 = std::max<std::int64_t>(0, pt - oy * sh);
      const std::int64_t ky1 = std::min<std::int64_t>(3, h + pt - oy * sh);
      const float* base = x + (oy * sh - pt) * w - pl;
      for (std::int64_t b = 0; b <= nvec; ++b) {
        if (b == nvec && !tail) break;
        const std::int64_t ox = b < nvec ? vlo + 8 * b : vend - 8;
        const std::int64_t c = ox * SW;
        __m256 a0 = vb;
        for (std::int64_t ky = ky0; ky < ky1; ++ky) {
          const float* r = base + ky * w + c;
          a0 = _mm256_fmadd_ps(wv[3 * ky], load_strided<SW>(r), a0);
          a0 = _mm256_fmadd_ps(wv[3 * ky + 1], load_strided<SW>(r + 1), a0);
          a0 = _mm256_fmadd_ps(wv[3 * ky + 2], load_strided<SW>(r + 2), a0);
        }
        finish_vec(a0, y + oy * ow + ox, kind, z, lo, hi, &nf);
      }
      row_edges(oy);
      continue;
    }
    const float* r0 = x + (oy * sh - pt) * w - pl;
    const float* r1 = r0 + w;
    const float* r2 = r1 + w;
    float* d0 = y + oy * ow;
    const float* c0 = r0 + pl;  // column 0 of the three input rows
    if (SW == 1 && sh == 1 && oy + 1 < yend) {  // two rows per pass, sharing the loaded input rows
      if (cpu_has_avx512f() && vend - vlo >= 16)
        dw3_row2_512(r0, wt, w, bias, d0, ow, vlo, vend, act, &nf_edges);
      else
        dw3_row2(r0, wt, w, bias, d0, ow, vlo, nvec, vend, act, &nf_edges);
      if (pl == 1 && ow == w && vlo == 1 && vend == ow - 1) {
        dw3_edge_cols_p1x2(c0, wt, bias, d0, w, act, &bad);
      } else {
        dw3_edge_cols<SW>(c0, c0 + w, c0 + 2 * w, wt, bias, d0, w, pl, ow, vlo, vend, act, &bad);
        dw3_edge_cols<SW>(c0 + w, c0 + 2 * w, c0 + 3 * w, wt, bias, d0 + ow, w, pl, ow, vlo, vend, act, &bad);
      }
      ++oy;
      continue;
    }
    dw3_row<SW>(r0, r1, r2, wt, bias, d0, vlo, nvec, vend, act, &nf_edges);
    dw3_edge_cols<SW>(c0, c0 + w, c0 + 2 * w, wt, bias, d0, w, pl, ow, vlo, vend, act, &bad);
  }
  nf = _mm256_or_ps(nf, nf_edges);
  bad |= static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(nf, nf, _CMP_UNORD_Q)));
  return bad == 0;
}

// One output channel of a one-input-channel-per-group conv, with the epilogue. False when a value was not finite.
bool dw_channel(const ConvJob& j, const float* x, const float* wt, float bias, float* y, const Activation& act) {
  if (detail::cpu_has_avx2_fma()) {
    if (j.kh == 3 && j.kw == 3 && j.sw == 1) return dw3x3_avx2<1>(j, x, wt, bias, y, act);
    if (j.kh == 3 && j.kw == 3 && j.sw == 2) return dw3x3_avx2<2>(j, x, wt, bias, y, act);
    if (j.sw == 1) return dw_channel_avx2<0, 0, 1>(j, x, wt, bias, y, act);
    if (j.sw == 2) return dw_channel_avx2<0, 0, 2>(j, x, wt, bias, y, act);
  }
  conv_direct_channel(j, x, wt, bias, y);
  return finish_plane(y, j.oh * j.ow, act);
}

// y = act(conv(x)); false when a value before the activation was not finite.
// Threads worth waking for `macs` multiply-adds: at least ~0.5 M per thread, so small layers (MobileFaceNet's
// 14×14 and 7×7 stages) do not pay a wake-up per op for microseconds of work. The split never changes results.
int threads_for(std::int64_t macs, int threads) {
  constexpr std::int64_t kMacsPerThread = std::int64_t{1} << 19;
  const int t = threads <= 0 ? core::hardware_threads() : threads;
  return static_cast<int>(std::clamp<std::int64_t>(macs / kMacsPerThread, 1, t));
}

bool conv(const ConvJob& j, const float* x, float* y, const Activation& act, int threads) {
  threads = threads_for(j.macs(), threads);
  const std::int64_t cin_g = j.cin / j.groups, cout_g = j.cout / j.groups;
  const std::int64_t plane_in = j.h * j.w, plane_out = j.oh * j.ow;
  const float* w = j.weights->data();
  const float* b = j.bias ? j.bias->data() : nullptr;
  std::atomic<bool> finite{true};
  if (cin_g == 1) {
    const std::int64_t taps = j.kh * j.kw;
    if (!parallel_for(j.cout, threads, [&](std::int64_t co) {
          if (!dw_channel(j, x + (co / cout_g) * plane_in, w + co * taps, b ? b[co] : 0.0f, y + co * plane_out,
                          act))
            finite.store(false, std::memory_order_relaxed);
        }))
      throw std::bad_alloc();
    return finite.load();
  }
  const std::int64_t k = cin_g * j.kh * j.kw;
  const bool pointwise = j.kh == 1 && j.kw == 1 && j.sh == 1 && j.sw == 1 && j.pt == 0 && j.pl == 0 &&
                         j.oh == j.h && j.ow == j.w;
  bool ok = true;
  for (std::int64_t g = 0; g < j.groups; ++g) {
    const float* xg = x + g * cin_g * plane_in;
    const float* wg = w + g * cout_g * k;
    const float* bg = b ? b + g * cout_g : nullptr;
    float* yg = y + g * cout_g * plane_out;
    if (pointwise) {
      ok &= detail::sgemm_bias_act(cout_g, plane_out, k, wg, k, bg, detail::MatrixB(xg, plane_out, plane_in), yg,
                                   plane_out, act, threads);
    } else {
      ok &= detail::sgemm_bias_act(cout_g, plane_out, k, wg, k, bg,
                                   detail::Im2colB(xg, j.h, j.w, j.kh, j.kw, j.sh, j.sw, j.pt, j.pl, j.oh, j.ow), yg,
                                   plane_out, act, threads);
    }
  }
  return ok;
}

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

void maxpool_channel(const MaxPoolOp& m, const float* in, float* out) {
  if (m.kh == 2 && m.kw == 2 && m.sh == 2 && m.sw == 2 && detail::cpu_has_avx2_fma()) {
    maxpool2x2s2_avx2(m, in, out);
    return;
  }
  for (std::int64_t oy = 0; oy < m.oh; ++oy)
    for (std::int64_t ox = 0; ox < m.ow; ++ox) {
      float best = in[(oy * m.sh) * m.w + ox * m.sw];
      for (std::int64_t ky = 0; ky < m.kh; ++ky)
        for (std::int64_t kx = 0; kx < m.kw; ++kx) best = std::max(best, in[(oy * m.sh + ky) * m.w + ox * m.sw + kx]);
      out[oy * m.ow + ox] = best;
    }
}

// B columns [off, off + n) of another source.
class OffsetB final : public detail::BSource {
 public:
  OffsetB(const detail::BSource& b, std::int64_t off) : b_(b), off_(off) {}
  void pack(std::int64_t k0, std::int64_t kc, std::int64_t n0, std::int64_t nc, float* dst, int nr) const override {
    b_.pack(k0, kc, n0 + off_, nc, dst, nr);
  }

 private:
  const detail::BSource& b_;
  std::int64_t off_;
};

bool is_pointwise(const ConvJob& j) {
  return j.groups == 1 && j.kh == 1 && j.kw == 1 && j.sh == 1 && j.sw == 1 && j.pt == 0 && j.pl == 0 && j.oh == j.h &&
         j.ow == j.w;
}
bool is_depthwise(const ConvJob& j) { return j.groups == j.cin && j.cout == j.cin; }

// Target size of a band group's 1×1-output scratch: ~30 % of the per-core L2 (at most 384 KiB), so that it, the
// stem scratch of the first group and the packed B block stay in L2 together (the band height never changes
// results).
std::int64_t band_scratch_bytes() {
  static const std::int64_t v =
      std::clamp<std::int64_t>(detail::l2_cache_bytes() * 3 / 10, std::int64_t{96} << 10, std::int64_t{384} << 10);
  return v;
}

// A 1×1 conv (pw, activation pact) feeding a depthwise conv (dw, activation dact) in row bands: the 1×1 output
// rows a band of dw output rows needs are computed into a per-thread scratch that stays in L2 (rows the previous
// band already computed are moved, not recomputed), then the depthwise kernel reads them. Every value is computed
// by the same kernels in the same order as the unfused pair, so the results are the same bits. Threads take
// contiguous ranges of output rows (each range computes its own leading halo rows once).
// *pw_ok / *dw_ok: the finiteness of the 1×1 output (before pact) and of the dw output (before dact).
// With `pool` (a non-overlapping MaxPool, kh = sh and kw = sw, after a Relu), each band of dw output goes to a
// second scratch and is pooled from there into y.
// With `pre` (a dense conv [+ preact] whose output is the 1×1 conv's input), x is pre's input and the rows of
// pre's output each band needs are computed per band too (into a third scratch), so that output is never stored.
void conv_pw_dw(const ConvJob* pre, const Activation& preact, const ConvJob& pw, const Activation& pact,
                const ConvJob& dw, const Activation& dact, const MaxPoolOp* pool, const float* x, float* y,
                int threads, bool* pre_ok, bool* pw_ok, bool* dw_ok) {
  const std::int64_t c = pw.cout, h = pw.h, w = pw.w, plane = h * w;
  const std::int64_t oh = dw.oh, ow = dw.ow;
  const float* wpw = pw.weights->data();
  const float* bpw = pw.bias ? pw.bias->data() : nullptr;
  const float* wdw = dw.weights->data();
  const float* bdw = dw.bias ? dw.bias->data() : nullptr;
  const std::int64_t taps = dw.kh * dw.kw;
  // band height: the scratch (c × rows × w floats) near band_scratch_bytes()
  const std::int64_t row_bytes = c * w * 4;
  const std::int64_t ps = pool ? pool->sh : 1;  // bands and chunks start at multiples of the pool stride
  std::int64_t band = std::max<std::int64_t>(1, band_scratch_bytes() / std::max<std::int64_t>(1, row_bytes * dw.sh));
  band = (band + ps - 1) / ps * ps;
  const int t = threads_for(pw.macs() + dw.macs() + (pre ? pre->macs() : 0), threads);
  const std::int64_t kpre = pre ? pre->cin * pre->kh * pre->kw : 0;
  const std::int64_t chunks0 = std::max<std::int64_t>(1, std::min<std::int64_t>(t, (oh + band - 1) / band));
  // Too few row chunks for the threads (small planes): split the channels too, in groups of a multiple of 8
  // (each channel's 1×1 row and depthwise plane are computed the same way in any group, so the bits do not
  // change), and take as many row chunks as fill t tasks (chunks × groups ≤ t: 9 chunks × 2 groups on 16
  // threads would leave a second round of 2 tasks). Not with `pre`: every group would recompute pre's channels.
  std::int64_t cgroups = 1, chunks = chunks0, cper = c;
  if (!pre && chunks0 < t) {
    cgroups = std::clamp<std::int64_t>((t + chunks0 - 1) / chunks0, 1, std::max<std::int64_t>(1, c / 8));
    cper = (c + cgroups - 1) / cgroups <= 8 ? 8 : ((c + cgroups - 1) / cgroups + 7) / 8 * 8;
    cgroups = (c + cper - 1) / cper;
    chunks = std::clamp<std::int64_t>(t / cgroups, 1, chunks0);
  }
  const std::int64_t per = ((oh + chunks - 1) / chunks + ps - 1) / ps * ps;
  std::atomic<bool> rok{true}, pok{true}, dok{true};
  const bool ok = parallel_for(chunks * cgroups, t, [&](std::int64_t task) {
    const std::int64_t ch = task / cgroups, cg = task % cgroups;
    const std::int64_t c_begin = cgroups == 1 ? 0 : cg * cper, c_end = cgroups == 1 ? c : std::min(c, c_begin + cper);
    const std::int64_t cn = c_end - c_begin;
    const std::int64_t o_begin = ch * per, o_end = std::min(oh, o_begin + per);
    if (o_begin >= o_end || cn <= 0) return;
    const std::int64_t cap = std::min(h, band * dw.sh + dw.kh);  // input rows held per band
    float* s = detail::thread_scratch(1, cn * cap * w);  // channel c_begin + i at s + i·cap·w
    std::int64_t have0 = 0, have1 = 0;  // rows [have0, have1) of the 1×1 output are in s (row r at r − have0)
    for (std::int64_t a = o_begin; a < o_end; a += band) {
      const std::int64_t b = std::min(o_end, a + band);
      const std::int64_t r0 = std::clamp<std::int64_t>(a * dw.sh - dw.pt, 0, h);
      const std::int64_t r1 = std::clamp<std::int64_t>((b - 1) * dw.sh - dw.pt + dw.kh, r0, h);
      // keep the rows [r0, have1) already computed: move them to the front
      std::int64_t from = r0;
      if (have1 > r0 && have0 <= r0 && have0 < have1) {
        if (have0 < r0)
          for (std::int64_t co = 0; co < cn; ++co)
            std::memmove(s + co * cap * w, s + (co * cap + (r0 - have0)) * w,
                         static_cast<std::size_t>((have1 - r0) * w) * sizeof(float));
        from = have1;
      }
      if (r1 > from) {
        const std::int64_t nn = (r1 - from) * w;
        const float* src = x + from * w;  // the 1×1 conv's input rows [from, r1)
        std::int64_t ld = plane;
        if (pre) {  // compute them: rows [from, r1) of pre's output, row-major per channel with stride nn
          float* s3 = detail::thread_scratch(3, pw.cin * nn);
          const detail::Im2colB im(x, pre->h, pre->w, pre->kh, pre->kw, pre->sh, pre->sw, pre->pt, pre->pl, pre->oh,
                                   pre->ow);
          if (!detail::sgemm_bias_act(pre->cout, nn, kpre, pre->weights->data(), kpre,
                                      pre->bias ? pre->bias->data() : nullptr, OffsetB(im, from * w), s3, nn, preact,
                                      1))
            rok.store(false, std::memory_order_relaxed);
          src = s3;
          ld = nn;
        }
        if (!detail::sgemm_bias_act(cn, nn, pw.cin, wpw + c_begin * pw.cin, pw.cin, bpw ? bpw + c_begin : nullptr,
                                    detail::MatrixB(src, nn, ld), s + (from - r0) * w, cap * w, pact, 1))
          pok.store(false, std::memory_order_relaxed);
      }
      have0 = r0;
      have1 = std::max(r1, from);
      // the depthwise conv on the band: input rows [r0, r1) as a plane of r1 − r0 rows
      ConvJob v = dw;
      v.h = r1 - r0;
      v.pt = dw.pt + r0 - a * dw.sh;
      v.oh = b - a;
      if (!pool) {
        for (std::int64_t co = c_begin; co < c_end; ++co)
          if (!dw_channel(v, s + (co - c_begin) * cap * w, wdw + co * taps, bdw ? bdw[co] : 0.0f,
                          y + co * oh * ow + a * ow, dact))
            dok.store(false, std::memory_order_relaxed);
        continue;
      }
      float* d = detail::thread_scratch(2, (b - a) * ow);
      MaxPoolOp mp = *pool;
      mp.channels = 1;
      mp.h = b - a;
      mp.oh = std::min(pool->oh, b / ps) - a / ps;
      for (std::int64_t co = c_begin; co < c_end; ++co) {
        if (!dw_channel(v, s + (co - c_begin) * cap * w, wdw + co * taps, bdw ? bdw[co] : 0.0f, d, dact))
          dok.store(false, std::memory_order_relaxed);
        if (mp.oh > 0) maxpool_channel(mp, d, y + (co * pool->oh + a / ps) * pool->ow);
      }
    }
  });
  if (!ok) throw std::bad_alloc();
  *pre_ok = rok.load();
  *pw_ok = pok.load();
  *dw_ok = dok.load();
}

__attribute__((target_clones("avx2", "default"))) void binary(const BinaryOp& op, const float* a, const float* b,
                                                              float* y) {
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
        }
      }
}

void transpose(const TransposeOp& op, const float* x, float* y) {
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
    parallel_for((op.n + chunk - 1) / chunk, threads, [&](std::int64_t c) {
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
      y[j] = op.alpha * static_cast<float>(acc[static_cast<std::size_t>(j)]) + (bias ? op.beta * bias[j] : 0.0f);
  }
}

// A 64-byte aligned activation buffer (no zero fill).
// Buffers start at 64-byte offsets that differ between buffers modulo 4 KiB (planes are often whole multiples of
// 4 KiB, and a kernel reading one buffer while writing another at the same offset stalls on 4K aliasing).
struct Buf {
  float* p = nullptr;
  std::int64_t cap = 0;
  std::int64_t skew = 0;
  Buf() = default;
  explicit Buf(std::int64_t n) : cap(n) {
    thread_local std::uint32_t serial = 0;
    skew = 16 * static_cast<std::int64_t>(1 + (serial++ * 5) % 31);  // floats, 64-byte steps
    p = static_cast<float*>(::operator new(static_cast<std::size_t>(n + skew) * sizeof(float), std::align_val_t{64})) +
        skew;
  }
  Buf(Buf&& o) noexcept
      : p(std::exchange(o.p, nullptr)), cap(std::exchange(o.cap, 0)), skew(std::exchange(o.skew, 0)) {}
  Buf& operator=(Buf&& o) noexcept {
    if (this != &o) {
      release();
      p = std::exchange(o.p, nullptr);
      cap = std::exchange(o.cap, 0);
      skew = std::exchange(o.skew, 0);
    }
    return *this;
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  ~Buf() { release(); }
  void release() {
    if (p) ::operator delete(p - skew, std::align_val_t{64});
    p = nullptr;
    cap = 0;
    skew = 0;
  }
};

// Released activation buffers of finished runs on this thread, reused by the next run (no page faults, no zero
// fill). Only buffers a run used are kept, so the cache stays at one run's footprint.
constexpr std::int64_t kCacheFloats = std::int64_t{16} << 20;  // 64 MiB

std::vector<Buf>& buffer_cache() {
  thread_local std::vector<Buf> cache;
  return cache;
}

// Element-wise work above this many floats is split across threads.
constexpr std::int64_t kParallelGrain = 1 << 15;

// Runs fn(begin, end) over [0, n) in chunks (threads across chunks when n is large).
template <class F>
void chunked(std::int64_t n, int threads, F&& fn) {
  if (threads == 1 || n < 2 * kParallelGrain) {
    fn(std::int64_t{0}, n);
    return;
  }
  const std::int64_t chunks = (n + kParallelGrain - 1) / kParallelGrain;
  if (!parallel_for(chunks, threads,
                    [&](std::int64_t c) { fn(c * kParallelGrain, std::min(n, (c + 1) * kParallelGrain)); }))
    throw std::bad_alloc();
}

// Runs fn(i) for i in [0, n) where each index covers `work` floats; threads only when the total is large.
template <class F>
void per_index(std::int64_t n, std::int64_t work, int threads, F&& fn) {
  if (threads == 1 || n * work < 2 * kParallelGrain || n < 2) {
    for (std::int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  if (!parallel_for(n, threads, fn)) throw std::bad_alloc();
}

// One output row of a nearest Resize (factor sx, input row `in` of w floats) combined with the other operand row
// `o` of the Binary that reads it: y = up ∘ o (side 0) or o ∘ up (side 1), exactly the separate steps' values.
// Returns false when some output is not finite.
template <BinaryKind K>
inline float bin(float a, float b) {
  return K == BinaryKind::kAdd ? a + b : K == BinaryKind::kSub ? a - b : a * b;
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
__attribute__((target("avx2"))) bool resize2_bin_row_avx2(const float* in, std::int64_t w, const float* o, float* y,
                                                          int side) {
  __m256 nf = _mm256_setzero_ps();
  auto op = [&](__m256 u, __m256 v) __attribute__((target("avx2"))) {
    const __m256 a = side == 0 ? u : v, b = side == 0 ? v : u;
    return K == BinaryKind::kAdd ? _mm256_add_ps(a, b) : K == BinaryKind::kSub ? _mm256_sub_ps(a, b) : _mm256_mul_ps(a, b);
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
      }
    }
    if (!good) ok.store(false, std::memory_order_relaxed);
  });
  return ok.load();
}

__attribute__((target_clones("avx2", "default"))) void relu_range(const float* __restrict x, float* __restrict y,
                                                                  std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
__attribute__((target_clones("avx2", "default"))) void clip_range(const float* __restrict x, float* __restrict y,
                                                                  std::int64_t n, float lo, float hi) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = std::min(std::max(x[i], lo), hi);
}

// The activation a Unary step applies, when it can be fused into a conv epilogue.
bool fusable(const Op& op, Activation* act) {
  const auto* u = std::get_if<UnaryOp>(&op);
  if (!u) return false;
  if (u->kind == UnaryKind::kRelu) {
    *act = Activation{Activation::Kind::kRelu, 0.0f, 0.0f};
    return true;
  }
  if (u->kind == UnaryKind::kClip) {
    *act = Activation{Activation::Kind::kClip, u->lo, u->hi};
    return true;
  }
  return false;
}

// Ops whose output is finite whenever their (finite) inputs are: no separate check needed.
bool keeps_finite(const Op& op) {
  return std::holds_alternative<UnaryOp>(op) || std::holds_alternative<TransposeOp>(op) ||
         std::holds_alternative<MaxPoolOp>(op) || std::holds_alternative<ResizeOp>(op) ||
         std::holds_alternative<GlobalAverageOp>(op);
}

// FACETRACE_FACES_PROFILE=1: wall time per step group (a fused group counts as one), summed over runs and printed
// to stderr at exit, largest first, with the MACs and GFLOP/s of its convs. Off: one relaxed load per step group.
struct Profile {
  struct Entry {
    std::string what;
    double ms = 0;
    std::int64_t macs = 0, calls = 0;
  };
  std::mutex mu;
  std::map<std::pair<const Program*, std::size_t>, Entry> entries;
  static bool on() {
    static const bool v = [] {
      const char* e = std::getenv("FACETRACE_FACES_PROFILE");
      return e && *e && std::strcmp(e, "0") != 0;
    }();
    return v;
  }
  static Profile& get() {
    static Profile pr;
    return pr;
  }
  void add(const Program* p, std::size_t i, const Program& prog, std::size_t n, double ms) {
    std::lock_guard<std::mutex> lock(mu);
    Entry& e = entries[{p, i}];
    if (e.calls++ == 0) {
      for (std::size_t d = 0; d < n; ++d) {
        const Step& st = prog.steps[i + d];
        if (const auto* c = std::get_if<ConvJob>(&st.op)) {
          e.macs += c->macs();
          e.what += "conv" + std::to_string(c->kh) + "x" + std::to_string(c->kw) + (c->groups > 1 ? "dw" : "") +
                    "/" + std::to_string(c->sh) + " " + std::to_string(c->cin) + "->" + std::to_string(c->cout) +
                    "@" + std::to_string(c->h) + "x" + std::to_string(c->w) + " ";
        } else {
          e.what += "op" + std::to_string(st.op.index()) + " ";
        }
      }
    }
    e.ms += ms;
  }
  ~Profile() {
    std::vector<Entry> v;
    double total = 0;
    for (auto& [k, e] : entries) v.push_back(e), total += e.ms;
    std::sort(v.begin(), v.end(), [](const Entry& a, const Entry& b) { return a.ms > b.ms; });
    std::fprintf(stderr, "faces profile: %.1f ms in %zu step groups\n", total, v.size());
    for (const auto& e : v)
      std::fprintf(stderr, "%9.3f ms %5.1f%% %6lld calls %7.1f GFLOP/s  %s\n", e.ms, 100 * e.ms / total,
                   static_cast<long long>(e.calls),
                   e.macs ? 2e-6 * static_cast<double>(e.macs) * static_cast<double>(e.calls) / e.ms : 0.0,
                   e.what.c_str());
  }
};

struct Exec {
  const Program& p;
  int threads;

  const float* arg(const std::vector<Buf>& vals, const float* input, const Arg& a) const {
    if (a.kind == Arg::Kind::kConst) return p.consts[static_cast<std::size_t>(a.id)]->data();
    return a.id == kInputValue ? input : vals[static_cast<std::size_t>(a.id)].p;
  }

  // Runs one step into y. Sets *finite to false when the step's own check found a non-finite value.
  Status step(const Step& s, const std::vector<Buf>& vals, const float* input, float* y, const Activation& act,
              bool* finite) const {
    const float* x = arg(vals, input, s.args[0]);
    const std::int64_t len = p.lens[static_cast<std::size_t>(s.out)];
    const int t = threads;
    if (const auto* j = std::get_if<ConvJob>(&s.op)) {
      *finite = conv(*j, x, y, act, t);
    } else if (const auto* u = std::get_if<UnaryOp>(&s.op)) {
      switch (u->kind) {
        case UnaryKind::kRelu:
          chunked(len, t, [&](std::int64_t b, std::int64_t e) { relu_range(x + b, y + b, e - b); });
          break;
        case UnaryKind::kSigmoid:
          chunked(len, t, [&](std::int64_t b, std::int64_t e) {
            for (std::int64_t i = b; i < e; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
          });
          break;
        case UnaryKind::kClip:
          chunked(len, t, [&](std::int64_t b, std::int64_t e) { clip_range(x + b, y + b, e - b, u->lo, u->hi); });
          break;
      }
    } else if (const auto* a = std::get_if<ChannelAffineOp>(&s.op)) {
      const float* sc = arg(vals, input, s.args[1]);
      const float* sh = arg(vals, input, s.args[2]);
      per_index(a->channels, a->plane, t, [&](std::int64_t c) {
        for (std::int64_t i = 0; i < a->plane; ++i) y[c * a->plane + i] = x[c * a->plane + i] * sc[c] + sh[c];
      });
    } else if (const auto* pr = std::get_if<ChannelPreluOp>(&s.op)) {
      const float* sl = arg(vals, input, s.args[1]);
      per_index(pr->channels, pr->plane, t, [&](std::int64_t c) {
        for (std::int64_t i = 0; i < pr->plane; ++i) {
          const float v = x[c * pr->plane + i];
          y[c * pr->plane + i] = v >= 0.0f ? v : sl[c] * v;
        }
      });
    } else if (const auto* b = std::get_if<BinaryOp>(&s.op)) {
      binary(*b, x, arg(vals, input, s.args[1]), y);
    } else if (const auto* tr = std::get_if<TransposeOp>(&s.op)) {
      transpose(*tr, x, y);
    } else if (const auto* m = std::get_if<MaxPoolOp>(&s.op)) {
      per_index(m->channels, m->h * m->w, t, [&](std::int64_t c) {
        maxpool_channel(*m, x + c * m->h * m->w, y + c * m->oh * m->ow);
      });
    } else if (const auto* r = std::get_if<ResizeOp>(&s.op)) {
      const std::int64_t ow = r->w * r->sx;
      per_index(r->channels, r->h * r->sy * ow, t, [&](std::int64_t c) {
        for (std::int64_t iy = 0; iy < r->h; ++iy) {
          const float* in = x + (c * r->h + iy) * r->w;
          float* out = y + (c * r->h + iy) * r->sy * ow;
          for (std::int64_t ix = 0; ix < r->w; ++ix)
            for (std::int64_t q = 0; q < r->sx; ++q) out[ix * r->sx + q] = in[ix];
          for (std::int64_t q = 1; q < r->sy; ++q) std::memcpy(out + q * ow, out, static_cast<std::size_t>(ow) * 4);
        }
      });
    } else if (const auto* g = std::get_if<GlobalAverageOp>(&s.op)) {
      for (std::int64_t c = 0; c < g->channels; ++c) {
        double sum = 0.0;
        for (std::int64_t i = 0; i < g->plane; ++i) sum += x[c * g->plane + i];
        y[c] = static_cast<float>(sum / static_cast<double>(g->plane));
      }
    } else if (const auto* gm = std::get_if<GemvOp>(&s.op)) {
      gemv(*gm, x, arg(vals, input, s.args[1]), gm->has_bias ? arg(vals, input, s.args[2]) : nullptr, y, threads);
    } else {
      return internal_error("unknown op at node '" + s.node + "'");
    }
    return {};
  }

  Expected<std::vector<std::vector<float>>> run(std::span<const float> input) const {
    if (static_cast<std::int64_t>(input.size()) != p.lens[0])
      return invalid_argument("input holds " + std::to_string(input.size()) + " values, the program expects " +
                              std::to_string(p.lens[0]));
    std::atomic<bool> input_ok{true};  // (YuNet: 4.9 MB, split across threads like the element-wise ops)
    chunked(p.lens[0], threads, [&](std::int64_t b, std::int64_t e) {
      if (!all_finite(input.data() + b, e - b)) input_ok.store(false, std::memory_order_relaxed);
    });
    if (!input_ok.load()) return invalid_argument("input holds a non-finite value");
    std::vector<Buf> vals(p.lens.size());
    // released buffers, reused best-fit within [len, 2·len]; starts with this thread's cache of earlier runs
    std::vector<Buf> pool = std::exchange(buffer_cache(), {});
    std::vector<const float*> acquired;  // buffers this run used: back to the cache at the end
    auto acquire = [&](std::int64_t len) {
      std::size_t best = pool.size();
      for (std::size_t q = 0; q < pool.size(); ++q)
        if (pool[q].cap >= len && pool[q].cap <= 2 * len &&
            (best == pool.size() || pool[q].cap < pool[best].cap))
          best = q;
      Buf b;
      if (best < pool.size()) {
        b = std::move(pool[best]);
        pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(best));
      } else {
        b = Buf(std::max<std::int64_t>(len, 1));
      }
      acquired.push_back(b.p);
      return b;
    };
    auto finish = [&] {
      std::vector<Buf> keep;
      for (auto& v : vals)
        if (v.p) keep.push_back(std::move(v));
      for (auto& b : pool)
        if (std::find(acquired.begin(), acquired.end(), b.p) != acquired.end()) keep.push_back(std::move(b));
      // at most kCacheFloats per thread (batch runs keep one cache per worker)
      std::int64_t total = 0;
      std::vector<Buf> kept;
      for (auto& b : keep)
        if (total + b.cap <= kCacheFloats) {
          total += b.cap;
          kept.push_back(std::move(b));
        }
      buffer_cache() = std::move(kept);
    };
    for (std::size_t i = 0; i < p.steps.size(); ++i) {
      const Step& s = p.steps[i];
      // Fused groups: Conv → its only reader, a Relu/Clip (the activation in the conv's epilogue); and a 1×1 Conv
      // [→ Relu/Clip] → its only reader, a depthwise Conv [→ Relu/Clip], run in row bands (conv_pw_dw).
      auto only_reader = [&](std::size_t r, std::int32_t v) {
        const Step& n = p.steps[r];
        const auto& fr = p.free[r];
        return n.args.size() == 1 && n.args[0].kind == Arg::Kind::kValue && n.args[0].id == v &&
               std::find(fr.begin(), fr.end(), v) != fr.end();
      };
      // match a 1×1 Conv at step q [→ Relu/Clip] → depthwise Conv [→ Relu/Clip [→ MaxPool]]; returns the step
      // after the group, or 0 when no depthwise conv follows
      Activation act, dact, preact;
      const Step* dws = nullptr;
      const Step* pws = nullptr;
      const Step* pres = nullptr;  // a dense conv feeding the 1×1 conv, computed per band too
      const MaxPoolOp* mpool = nullptr;
      auto match_pw_dw = [&](std::size_t q) -> std::size_t {
        const auto* cj = std::get_if<ConvJob>(&p.steps[q].op);
        if (!cj || !is_pointwise(*cj)) return 0;
        std::size_t k = q + 1;
        Activation pa;
        if (k < p.steps.size() && fusable(p.steps[k].op, &pa) && only_reader(k, p.steps[q].out))
          ++k;
        else
          pa = Activation{};
        if (k >= p.steps.size()) return 0;
        const auto* dj = std::get_if<ConvJob>(&p.steps[k].op);
        if (!dj || !is_depthwise(*dj) || dj->cin != cj->cout || dj->h != cj->oh || dj->w != cj->ow ||
            !only_reader(k, p.steps[k - 1].out))
          return 0;
        act = pa;
        pws = &p.steps[q];
        dws = &p.steps[k];
        ++k;
        if (k < p.steps.size() && fusable(p.steps[k].op, &dact) && only_reader(k, dws->out)) {
          ++k;
          // a non-overlapping MaxPool after a Relu (values ≥ +0, so the max is order-free) pools each band
          const auto* mp = k < p.steps.size() ? std::get_if<MaxPoolOp>(&p.steps[k].op) : nullptr;
          if (mp && dact.kind == Activation::Kind::kRelu && mp->kh == mp->sh && mp->kw == mp->sw &&
              mp->channels == dj->cout && mp->h == dj->oh && mp->w == dj->ow && only_reader(k, p.steps[k - 1].out)) {
            mpool = mp;
            ++k;
          }
        } else {
          dact = Activation{};
        }
        return k;
      };
      std::size_t nx = i + 1;
      if (const auto* cj = std::get_if<ConvJob>(&s.op)) {
        std::size_t g = match_pw_dw(i);
        if (!g && cj->groups == 1 && !is_pointwise(*cj)) {  // dense conv [→ act] → 1×1 → depthwise …
          std::size_t q = i + 1;
          Activation a0;
          if (q < p.steps.size() && fusable(p.steps[q].op, &a0) && only_reader(q, s.out))
            ++q;
          else
            a0 = Activation{};
          const auto* pj = q < p.steps.size() ? std::get_if<ConvJob>(&p.steps[q].op) : nullptr;
          if (pj && pj->cin == cj->cout && pj->h == cj->oh && pj->w == cj->ow && only_reader(q, p.steps[q - 1].out)) {
            g = match_pw_dw(q);
            if (g) {
              pres = &s;
              preact = a0;
            }
          }
        }
        if (g) {
          nx = g;
        } else {
          if (nx < p.steps.size() && fusable(p.steps[nx].op, &act) && only_reader(nx, s.out))
            ++nx;
          else
            act = Activation{};
        }
      }
      // a nearest Resize whose only reader is the next step, an element-wise Binary without broadcasting
      const BinaryOp* rbin = nullptr;
      int rside = -1;
      if (const auto* rs = std::get_if<ResizeOp>(&s.op); rs && nx < p.steps.size()) {
        const Step& n = p.steps[nx];
        const auto* bo = std::get_if<BinaryOp>(&n.op);
        const auto& fr = p.free[nx];
        if (bo && n.args.size() == 2 && std::find(fr.begin(), fr.end(), s.out) != fr.end()) {
          const std::int64_t oh = rs->h * rs->sy, ow = rs->w * rs->sx;
          auto dense = [&](const std::array<std::int64_t, 4>& st) {
            return st[1] == oh * ow && st[2] == ow && st[3] == 1;
          };
          int side = -1;
          for (int q = 0; q < 2; ++q)
            if (n.args[static_cast<std::size_t>(q)].kind == Arg::Kind::kValue &&
                n.args[static_cast<std::size_t>(q)].id == s.out)
              side = side == -1 ? q : 2;
          if ((side == 0 || side == 1) && bo->dims[0] == 1 && bo->dims[1] == rs->channels && bo->dims[2] == oh &&
              bo->dims[3] == ow && dense(bo->a_strides) && dense(bo->b_strides)) {
            rbin = bo;
            rside = side;
            ++nx;
          }
        }
      }
      const std::size_t steps_done = nx - i;
      const bool prof = Profile::on();
      const auto t_start = prof ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
      const Step& last = p.steps[nx - 1];
      const auto len = p.lens[static_cast<std::size_t>(last.out)];
      Buf out = acquire(len);
      if (dws) {
        bool pre_ok = true, pw_ok = true, dw_ok = true;
        conv_pw_dw(pres ? &std::get<ConvJob>(pres->op) : nullptr, preact, std::get<ConvJob>(pws->op), act,
                   std::get<ConvJob>(dws->op), dact, mpool, arg(vals, input.data(), s.args[0]), out.p, threads,
                   &pre_ok, &pw_ok, &dw_ok);
        if (!pre_ok || !pw_ok || !dw_ok) {
          finish();
          const std::string& bad = !pre_ok ? pres->node : !pw_ok ? pws->node : dws->node;
          return invalid_argument("node '" + bad + "' produced a non-finite value");
        }
      } else if (rbin) {
        const Step& bs = p.steps[nx - 1];
        if (!resize_binary(std::get<ResizeOp>(s.op), rbin->kind, rside, arg(vals, input.data(), s.args[0]),
                           arg(vals, input.data(), bs.args[static_cast<std::size_t>(1 - rside)]), out.p, threads)) {
          finish();
          return invalid_argument("node '" + bs.node + "' produced a non-finite value");
        }
      } else {
        bool finite = true;
        FT_TRY(step(s, vals, input.data(), out.p, act, &finite));
        if (!finite ||
            (!std::holds_alternative<ConvJob>(s.op) && !keeps_finite(s.op) && !all_finite(out.p, len))) {
          finish();
          return invalid_argument("node '" + s.node + "' produced a non-finite value");
        }
      }
      vals[static_cast<std::size_t>(last.out)] = std::move(out);
      if (prof)
        Profile::get().add(&p, i, p, steps_done,
                           std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count());
      for (std::size_t d = 0; d < steps_done; ++d)
        for (auto v : p.free[i + d])
          if (v != kInputValue && vals[static_cast<std::size_t>(v)].p)
            pool.push_back(std::move(vals[static_cast<std::size_t>(v)]));
      i += steps_done - 1;
    }
    std::vector<std::vector<float>> outs;
    outs.reserve(p.outputs.size());
    for (const auto& o : p.outputs) {
      if (o.value == kInputValue) {
        outs.emplace_back(input.begin(), input.end());
      } else {
        const float* d = vals[static_cast<std::size_t>(o.value)].p;
        outs.emplace_back(d, d + p.lens[static_cast<std::size_t>(o.value)]);
      }
    }
    finish();
    return outs;
  }
};

}  // namespace

Expected<std::vector<std::vector<std::vector<float>>>> run_program_cpu(const Program& program,
                                                                      std::span<const std::span<const float>> inputs,
                                                                      int threads) {
  using Result = std::vector<std::vector<std::vector<float>>>;
  if (program.lens.empty()) return invalid_argument("empty program");
  try {
    Result result(inputs.size());
    if (inputs.size() <= 1) {
      for (std::size_t b = 0; b < inputs.size(); ++b) {
        auto r = Exec{program, threads}.run(inputs[b]);
        if (!r) return r.status();
        result[b] = std::move(*r);
      }
      return result;
    }
    std::vector<Status> st(inputs.size());
    const bool ok = parallel_for(static_cast<std::int64_t>(inputs.size()), threads, [&](std::int64_t b) {
      auto r = Exec{program, 1}.run(inputs[static_cast<std::size_t>(b)]);
      if (!r)
        st[static_cast<std::size_t>(b)] = r.status().with_context("batch item " + std::to_string(b));
      else
        result[static_cast<std::size_t>(b)] = std::move(*r);
    });
    if (!ok) return Status(Code::kOutOfMemory, "out of memory running the program");
    for (auto& s : st)
      if (!s.ok()) return s;
    return result;
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "out of memory running the program");
  }
}

std::string cpu_kernel_info() {
  std::string s = detail::cpu_dispatch_info();
  const std::string dw = "depthwise 3x3 avx2-fma";
  if (const auto at = s.find(dw); at != std::string::npos && cpu_has_avx512f())
    s.insert(at + dw.size(), " (stride-1 row pairs avx512f)");
  return s + ", band scratch " + std::to_string(band_scratch_bytes() >> 10) + "K";
}

Expected<std::vector<float>> conv_cpu(const ConvJob& job, std::span<const float> input, int threads) {
  if (!job.weights || job.groups < 1 || job.cin % job.groups != 0 || job.cout % job.groups != 0)
    return invalid_argument("malformed ConvJob");
  if (static_cast<std::int64_t>(input.size()) != job.cin * job.h * job.w)
    return invalid_argument("conv input holds " + std::to_string(input.size()) + " values, expected " +
                            std::to_string(job.cin * job.h * job.w));
  try {
    std::vector<float> y(static_cast<std::size_t>(job.cout * job.oh * job.ow));
    conv(job, input.data(), y.data(), Activation{}, threads);
    return y;
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "out of memory in conv");
  }
}

}  // namespace facetrace::faces
