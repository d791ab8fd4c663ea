/// @file
/// Depthwise / channel-multiplier conv kernels (docs/design/faces.md §3): a portable direct loop, an AVX2 path with every tap
/// in registers, and register-blocked 3×3 paths (two output rows per pass at stride 1, AVX-512 row pairs). Every
/// path sums bias first, then the taps in (ky, kx) order with FMA, so all give the same bits.
#include "cpu/depthwise.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "cpu/cpu_features.h"
#include "cpu/eltwise.h"

namespace facetrace::faces::detail {
namespace {

// Direct convolution for one-input-channel groups (depthwise and channel multipliers): output channel co reads
// input channel co / (cout/groups). Accumulates bias, then taps in (ky, kx) order, row by row. (Portable path.)
__attribute__((target_clones("avx2", "default"))) void conv_direct_channel(const ConvJob& j,
                                                                           const float* __restrict x,
                                                                           const float* __restrict wt,
                                                                           float bias, float* __restrict y) {
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
  const std::int64_t kh = KH ? KH : j.kh, kw = KW ? KW : j.kw, sh = j.sh, h = j.h, w = j.w, pt = j.pt,
                     pl = j.pl;
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
__attribute__((target("avx2"), always_inline)) inline void finish_vec(__m256 acc, float* dst,
                                                                      Activation::Kind kind, __m256 z,
                                                                      __m256 lo, __m256 hi, __m256* nf) {
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
                                                                          __m256 vb, float* d,
                                                                          Activation::Kind kind, __m256 z,
                                                                          __m256 lo, __m256 hi, __m256* nf) {
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

// NB 8-column blocks of two adjacent interior output rows (stride 1): input rows r0..r3, each loaded vector feeds
// both rows (row 0 uses r0..r2, row 1 uses r1..r3). Per element the order is bias, then (ky, kx) ascending.
template <int NB>
__attribute__((target("avx2,fma"), always_inline)) inline void dw3_blocks2(const float* const* r,
                                                                           const __m256* wv, __m256 vb,
                                                                           float* d0, float* d1,
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

// NB 8-column blocks at output column ox of ROWS (1, or 2 at stride 1) interior output rows of a 3×3 depthwise
// conv whose first input row is r0 (rows w floats apart).
template <int NB, int SW, int ROWS>
__attribute__((target("avx2,fma"), always_inline)) inline void dw3_pass(const float* r0, std::int64_t w,
                                                                        std::int64_t ox, const __m256* wv,
                                                                        __m256 vb, float* d0, std::int64_t ow,
                                                                        Activation::Kind kind, __m256 z,
                                                                        __m256 lo, __m256 hi, __m256* nf) {
  const std::int64_t c = ox * SW;
  if constexpr (ROWS == 1) {
    dw3_blocks<NB, SW>(r0 + c, r0 + w + c, r0 + 2 * w + c, wv, vb, d0 + ox, kind, z, lo, hi, nf);
  } else {
    static_assert(SW == 1, "row pairs share input rows only at stride 1");
    const float* r[4] = {r0 + c, r0 + w + c, r0 + 2 * w + c, r0 + 3 * w + c};
    dw3_blocks2<NB>(r, wv, vb, d0 + ox, d0 + ow + ox, kind, z, lo, hi, nf);
  }
}

// The vector columns of ROWS interior output rows of a 3×3 depthwise conv (output row 0 at d0, input row 0 at r0):
// blocks of 8 columns from vlo (four at a time for one row, three for a pair: as many accumulators as stay in
// registers), plus the overlapping tail block ending at vend (it recomputes the same values). A function of its
// own so that the nine weights, the accumulators and the finiteness mask all stay in registers.
template <int SW, int ROWS>
__attribute__((target("avx2,fma"), noinline)) void dw3_rows(const float* r0, std::int64_t w, const float* wt,
                                                            float bias, float* d0, std::int64_t ow,
                                                            std::int64_t vlo, std::int64_t nvec,
                                                            std::int64_t vend, const Activation& act,
                                                            __m256* nf_out) {
  constexpr int kGroup = ROWS == 1 ? 4 : 3;
  __m256 wv[9];
  for (int i = 0; i < 9; ++i) wv[i] = _mm256_set1_ps(wt[i]);
  const __m256 vb = _mm256_set1_ps(bias), z = _mm256_setzero_ps();
  const __m256 lo = _mm256_set1_ps(act.lo), hi = _mm256_set1_ps(act.hi);
  const Activation::Kind kind = act.kind;
  __m256 nf = _mm256_setzero_ps();
  std::int64_t blk = 0;
  for (; blk + kGroup <= nvec; blk += kGroup)
    dw3_pass<kGroup, SW, ROWS>(r0, w, vlo + 8 * blk, wv, vb, d0, ow, kind, z, lo, hi, &nf);
  for (; blk < nvec; ++blk) dw3_pass<1, SW, ROWS>(r0, w, vlo + 8 * blk, wv, vb, d0, ow, kind, z, lo, hi, &nf);
  if (vlo + 8 * nvec < vend) dw3_pass<1, SW, ROWS>(r0, w, vend - 8, wv, vb, d0, ow, kind, z, lo, hi, &nf);
  *nf_out = _mm256_or_ps(*nf_out, nf);
}

// The edge columns of one output row of a 3×3 stride-1 depthwise conv as two 8-column vector blocks (columns
// 0..7 and ow−8..ow−1): taps outside the input are masked out of the loads and skipped by a blend, so every lane
// gets exactly the sum of the scalar path (bias, then the valid taps in (ky, kx) order). Needs ow ≥ 8.
__attribute__((target("avx2,fma"))) void dw3_edges_s1(const float* x, std::int64_t w, std::int64_t iy0,
                                                      std::int64_t ky0, std::int64_t ky1, std::int64_t pl,
                                                      std::int64_t ow, bool left, bool right,
                                                      const __m256* wv, const __m256* pvb, float* yrow,
                                                      Activation::Kind kind, const __m256* pz,
                                                      const __m256* plo, const __m256* phi, __m256* nf) {
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
__attribute__((target("avx512f"), always_inline)) inline void dw3_blocks2_512(
    const float* const* r, const __m512* wv, __m512 vb, float* d0, float* d1, Activation::Kind kind,
    __m512 lo, __m512 hi, __m512* nf) {
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
        // Each valignd with a literal shift: the immediate is then a constant without the unrolling, which
        // -O0 and -O1 builds (Debug, the sanitizer presets) do not do; clang insists on it too.
        const __m512i hi = _mm512_castps_si512(v[b + 1]), lo = _mm512_castps_si512(v[b]);
        const __m512 t = kx == 0   ? v[b]
                         : kx == 1 ? _mm512_castsi512_ps(_mm512_alignr_epi32(hi, lo, 1))
                                   : _mm512_castsi512_ps(_mm512_alignr_epi32(hi, lo, 2));
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
      a0[b] = _mm512_min_ps(hi, _mm512_max_ps(lo, a0[b])),
      a1[b] = _mm512_min_ps(hi, _mm512_max_ps(lo, a1[b]));
    }
    _mm512_storeu_ps(d0 + 16 * b, a0[b]);
    _mm512_storeu_ps(d1 + 16 * b, a1[b]);
  }
}

// dw3_rows<1, 2> with 16-column AVX-512 blocks from vlo; the columns left (fewer than 16) go through dw3_rows.
__attribute__((target("avx512f"), noinline)) void dw3_row2_512(const float* r0, const float* wt,
                                                               std::int64_t w, float bias, float* d0,
                                                               std::int64_t ow, std::int64_t vlo,
                                                               std::int64_t vend, const Activation& act,
                                                               __m256* nf_out) {
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
  if (rest < vend) dw3_rows<1, 2>(r0, w, wt, bias, d0, ow, rest, (vend - rest) / 8, vend, act, nf_out);
}
#pragma GCC diagnostic pop

// The edge columns [0, vlo) and [vend, ow) of one interior output row (all three input rows r0..r2 valid, r_k
// pointing at input column 0) of a 3×3 depthwise conv, scalar: bias, then the taps inside in (ky, kx) order with
// FMA, then the finiteness check and the activation with the comparisons of the vector epilogue, so each value
// equals what a masked vector block gives.
template <int SW>
__attribute__((target("avx2,fma"))) void dw3_edge_cols(const float* r0, const float* r1, const float* r2,
                                                       const float* wt, float bias, float* d, std::int64_t w,
                                                       std::int64_t pl, std::int64_t ow, std::int64_t vlo,
                                                       std::int64_t vend, const Activation& act,
                                                       unsigned* bad) {
  const float* rows[3] = {r0, r1, r2};
  auto one = [&](std::int64_t ox) __attribute__((target("avx2,fma"))) {
    __m128 acc = _mm_set_ss(bias);
    for (int ky = 0; ky < 3; ++ky)
      for (int kx = 0; kx < 3; ++kx) {
        const std::int64_t ix = ox * SW + kx - pl;
        if (ix >= 0 && ix < w) acc = _mm_fmadd_ss(_mm_set_ss(wt[3 * ky + kx]), _mm_set_ss(rows[ky][ix]), acc);
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
                                                    const float* __restrict wt, float bias,
                                                    float* __restrict y, const Activation& act) {
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
  __m256 nf_edges =
      _mm256_setzero_ps();  // separate: its address goes to dw3_edges_s1, nf stays in a register
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
      dw3_edges_s1(x, w, oy * sh - pt, ky0, ky1, pl, ow, vlo > 0, vend < ow, wv, &vb, y + oy * ow, kind, &z,
                   &lo, &hi, &nf_edges);
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
    float* d0 = y + oy * ow;
    const float* c0 = r0 + pl;                  // column 0 of the three input rows
    if (SW == 1 && sh == 1 && oy + 1 < yend) {  // two rows per pass, sharing the loaded input rows
      if (cpu_has_avx512f() && vend - vlo >= 16)
        dw3_row2_512(r0, wt, w, bias, d0, ow, vlo, vend, act, &nf_edges);
      else
        dw3_rows<1, 2>(r0, w, wt, bias, d0, ow, vlo, nvec, vend, act, &nf_edges);
      if (pl == 1 && ow == w && vlo == 1 && vend == ow - 1) {
        dw3_edge_cols_p1x2(c0, wt, bias, d0, w, act, &bad);
      } else {
        dw3_edge_cols<SW>(c0, c0 + w, c0 + 2 * w, wt, bias, d0, w, pl, ow, vlo, vend, act, &bad);
        dw3_edge_cols<SW>(c0 + w, c0 + 2 * w, c0 + 3 * w, wt, bias, d0 + ow, w, pl, ow, vlo, vend, act, &bad);
      }
      ++oy;
      continue;
    }
    dw3_rows<SW, 1>(r0, w, wt, bias, d0, ow, vlo, nvec, vend, act, &nf_edges);
    dw3_edge_cols<SW>(c0, c0 + w, c0 + 2 * w, wt, bias, d0, w, pl, ow, vlo, vend, act, &bad);
  }
  nf = _mm256_or_ps(nf, nf_edges);
  bad |= static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(nf, nf, _CMP_UNORD_Q)));
  return bad == 0;
}

}  // namespace

bool dw_channel(const ConvJob& j, const float* x, const float* wt, float bias, float* y,
                const Activation& act) {
  if (detail::cpu_has_avx2_fma()) {
    if (j.kh == 3 && j.kw == 3 && j.sw == 1) return dw3x3_avx2<1>(j, x, wt, bias, y, act);
    if (j.kh == 3 && j.kw == 3 && j.sw == 2) return dw3x3_avx2<2>(j, x, wt, bias, y, act);
    if (j.sw == 1) return dw_channel_avx2<0, 0, 1>(j, x, wt, bias, y, act);
    if (j.sw == 2) return dw_channel_avx2<0, 0, 2>(j, x, wt, bias, y, act);
  }
  conv_direct_channel(j, x, wt, bias, y);
  return finish_plane(y, j.oh * j.ow, act);
}

}  // namespace facetrace::faces::detail
