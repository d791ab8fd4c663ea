/// @file
/// Cache-blocked SGEMM for convolutions, C = act(bias + A·B): A read in place (row-major weights), B read in place
/// (1×1 convs) or packed per (KC × NC) block into NR-column panels (im2col), an MR × NR register-tile micro-kernel
/// (AVX2+FMA 6×16 when the CPU has it, chosen at run time; SSE2 4×8 otherwise) that starts from the bias and
/// finishes with the finiteness check and the fused activation. Portable build flags: the AVX2 code is compiled
/// through function target attributes.
#include "cpu/gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "cpu/buffers.h"
#include "cpu/cpu_features.h"
#include "facetrace/core/parallel.h"

namespace facetrace::faces::detail {
namespace {

constexpr std::int64_t kKc =
    kMaxPackRows;                  // K block: the A rows of a panel (MR·KC floats) and a B panel stay in L1
constexpr std::int64_t kNc = 512;  // N block: the packed B block (KC·NC floats) stays in L2

// Kernel contract: rows R ≤ MR, a full NR-column tile. a[r·lda + kk], b[kk·ldb + j], c[r·ldc + j].
// init: start from bias[r] (0 when bias is null) instead of c. last (act != null): check finiteness into *bad and
// apply the activation before storing. Sums run in ascending kk.
using Kernel = void (*)(std::int64_t kc, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                        float* c, std::int64_t ldc, const float* bias, bool init, const Activation* act,
                        unsigned* bad);

// The vector operations of the micro-kernel at one width: 8 lanes (AVX2 + FMA) or 16 (AVX-512F). Each is
// compiled for its own target; kernel_body is written once over them and flattened into each target's kernel.
struct Avx2Ops {
  using V = __m256;
  static constexpr int kLanes = 8;
  __attribute__((target("avx2,fma"))) static V zero() { return _mm256_setzero_ps(); }
  __attribute__((target("avx2,fma"))) static V bcast(const float* p) { return _mm256_broadcast_ss(p); }
  __attribute__((target("avx2,fma"))) static V set1(float v) { return _mm256_set1_ps(v); }
  __attribute__((target("avx2,fma"))) static V start(const float* bias, int r) {
    return bias ? _mm256_broadcast_ss(bias + r) : _mm256_setzero_ps();
  }
  __attribute__((target("avx2,fma"))) static V load(const float* p) { return _mm256_loadu_ps(p); }
  __attribute__((target("avx2,fma"))) static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  __attribute__((target("avx2,fma"))) static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  __attribute__((target("avx2,fma"))) static V max(V a, V b) { return _mm256_max_ps(a, b); }
  __attribute__((target("avx2,fma"))) static V min(V a, V b) { return _mm256_min_ps(a, b); }
  // nf accumulates x − x (+0 for finite x, NaN otherwise)
  __attribute__((target("avx2,fma"))) static V add_nonfinite(V nf, V x) {
    return _mm256_or_ps(nf, _mm256_sub_ps(x, x));
  }
  __attribute__((target("avx2,fma"))) static unsigned any_nan(V nf) {
    return static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(nf, nf, _CMP_UNORD_Q)));
  }
};
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12: _mm512_max_ps's _mm512_undefined_ps()
// kernel_body is compiled without a vector target and only ever flattened into kernel_avx2 / kernel_avx512, so the
// vector-return ABI note about its calls to the ops never applies
#pragma GCC diagnostic ignored "-Wpsabi"
struct Avx512Ops {
  using V = __m512;
  static constexpr int kLanes = 16;
  __attribute__((target("avx512f"))) static V zero() { return _mm512_setzero_ps(); }
  __attribute__((target("avx512f"))) static V bcast(const float* p) { return _mm512_set1_ps(*p); }
  __attribute__((target("avx512f"))) static V set1(float v) { return _mm512_set1_ps(v); }
  __attribute__((target("avx512f"))) static V start(const float* bias, int r) {
    return bias ? _mm512_set1_ps(bias[r]) : _mm512_setzero_ps();
  }
  __attribute__((target("avx512f"))) static V load(const float* p) { return _mm512_loadu_ps(p); }
  __attribute__((target("avx512f"))) static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  __attribute__((target("avx512f"))) static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  __attribute__((target("avx512f"))) static V max(V a, V b) { return _mm512_max_ps(a, b); }
  __attribute__((target("avx512f"))) static V min(V a, V b) { return _mm512_min_ps(a, b); }
  // AVX-512F has no float OR: a sum of the x − x terms is NaN exactly when one of them is
  __attribute__((target("avx512f"))) static V add_nonfinite(V nf, V x) {
    return _mm512_add_ps(nf, _mm512_sub_ps(x, x));
  }
  __attribute__((target("avx512f"))) static unsigned any_nan(V nf) {
    return static_cast<unsigned>(_mm512_cmp_ps_mask(nf, nf, _CMP_UNORD_Q));
  }
};

// R rows × 2·kLanes columns, the Kernel contract. Written once for both widths: the same sums in the same
// order, so the AVX2 and AVX-512 kernels give the same bits.
template <class O, int R>
inline void kernel_body(std::int64_t kc, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                        float* c, std::int64_t ldc, const float* bias, bool init, const Activation* act,
                        unsigned* bad) {
  using V = typename O::V;
  constexpr int L = O::kLanes;
  V c0[R], c1[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if (init) {
      c0[r] = c1[r] = O::start(bias, r);
    } else {
      c0[r] = O::load(c + r * ldc);
      c1[r] = O::load(c + r * ldc + L);
    }
  }
  const float* ar[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) ar[r] = a + r * lda;
  for (std::int64_t kk = 0; kk < kc; ++kk) {
    const V b0 = O::load(b), b1 = O::load(b + L);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const V av = O::bcast(ar[r] + kk);
      c0[r] = O::fma(av, b0, c0[r]);
      c1[r] = O::fma(av, b1, c1[r]);
    }
    b += ldb;
  }
  if (act) {
    V nf = O::zero();
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) nf = O::add_nonfinite(O::add_nonfinite(nf, c0[r]), c1[r]);
    *bad |= O::any_nan(nf);
    if (act->kind == Activation::Kind::kRelu) {
      const V z = O::zero();
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) c0[r] = O::max(c0[r], z), c1[r] = O::max(c1[r], z);
    } else if (act->kind == Activation::Kind::kClip) {
      const V lo = O::set1(act->lo), hi = O::set1(act->hi);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        c0[r] = O::min(hi, O::max(lo, c0[r]));
        c1[r] = O::min(hi, O::max(lo, c1[r]));
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    O::store(c + r * ldc, c0[r]);
    O::store(c + r * ldc + L, c1[r]);
  }
}

template <int R>
__attribute__((target("avx2,fma"), flatten)) void kernel_avx2(std::int64_t kc, const float* a,
                                                              std::int64_t lda, const float* b,
                                                              std::int64_t ldb, float* c, std::int64_t ldc,
                                                              const float* bias, bool init,
                                                              const Activation* act, unsigned* bad) {
  kernel_body<Avx2Ops, R>(kc, a, lda, b, ldb, c, ldc, bias, init, act, bad);
}
template <int R>
__attribute__((target("avx512f"), flatten)) void kernel_avx512(std::int64_t kc, const float* a,
                                                               std::int64_t lda, const float* b,
                                                               std::int64_t ldb, float* c, std::int64_t ldc,
                                                               const float* bias, bool init,
                                                               const Activation* act, unsigned* bad) {
  kernel_body<Avx512Ops, R>(kc, a, lda, b, ldb, c, ldc, bias, init, act, bad);
}
#pragma GCC diagnostic pop

template <int R>
void kernel_sse2(std::int64_t kc, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                 float* c, std::int64_t ldc, const float* bias, bool init, const Activation* act,
                 unsigned* bad) {
  __m128 c0[R], c1[R];
  for (int r = 0; r < R; ++r) {
    if (init) {
      c0[r] = c1[r] = _mm_set1_ps(bias ? bias[r] : 0.0f);
    } else {
      c0[r] = _mm_loadu_ps(c + r * ldc);
      c1[r] = _mm_loadu_ps(c + r * ldc + 4);
    }
  }
  for (std::int64_t kk = 0; kk < kc; ++kk) {
    const __m128 b0 = _mm_loadu_ps(b), b1 = _mm_loadu_ps(b + 4);
    for (int r = 0; r < R; ++r) {
      const __m128 av = _mm_set1_ps(a[r * lda + kk]);
      c0[r] = _mm_add_ps(c0[r], _mm_mul_ps(av, b0));
      c1[r] = _mm_add_ps(c1[r], _mm_mul_ps(av, b1));
    }
    b += ldb;
  }
  if (act) {
    alignas(16) float v[8];
    for (int r = 0; r < R; ++r) {
      _mm_store_ps(v, c0[r]);
      _mm_store_ps(v + 4, c1[r]);
      for (int j = 0; j < 8; ++j) {
        *bad |= static_cast<unsigned>(!(v[j] - v[j] == 0.0f));
        c[r * ldc + j] = apply_activation(*act, v[j]);
      }
    }
    return;
  }
  for (int r = 0; r < R; ++r) {
    _mm_storeu_ps(c + r * ldc, c0[r]);
    _mm_storeu_ps(c + r * ldc + 4, c1[r]);
  }
}

struct KernelInfo {
  Kernel fn[9];  // by row count 1..mr
  int mr, nr;
  bool avx2;
  const char* name;
};

// The best micro-kernel the CPU (and the FACETRACE_FACES_KERNEL cap, cpu_features.h) allows.
const KernelInfo& kernel() {
  static const KernelInfo k = [] {
    const bool avx2 = cpu_has_avx2_fma();
    if (cpu_has_avx512f())
      return KernelInfo{{nullptr, kernel_avx512<1>, kernel_avx512<2>, kernel_avx512<3>, kernel_avx512<4>,
                         kernel_avx512<5>, kernel_avx512<6>, kernel_avx512<7>, kernel_avx512<8>},
                        8,
                        32,
                        true,
                        "avx512f 8x32"};
    if (avx2)
      return KernelInfo{{nullptr, kernel_avx2<1>, kernel_avx2<2>, kernel_avx2<3>, kernel_avx2<4>,
                         kernel_avx2<5>, kernel_avx2<6>, nullptr, nullptr},
                        6,
                        16,
                        true,
                        "avx2-fma 6x16"};
    return KernelInfo{{nullptr, kernel_sse2<1>, kernel_sse2<2>, kernel_sse2<3>, kernel_sse2<4>, nullptr,
                       nullptr, nullptr, nullptr},
                      4,
                      8,
                      false,
                      "sse2 4x8"};
  }();
  return k;
}

// 16 columns of a stride-2 row: d[i] = s[2i] (reads s[0..31]).
__attribute__((target("avx2"))) void gather16_s2_avx2(const float* s, float* d) {
  const __m256 a = _mm256_loadu_ps(s), b = _mm256_loadu_ps(s + 8);
  const __m256 c = _mm256_loadu_ps(s + 16), e = _mm256_loadu_ps(s + 24);
  const __m256 ab = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));  // a0 a2 b0 b2 | a4 a6 b4 b6
  const __m256 ce = _mm256_shuffle_ps(c, e, _MM_SHUFFLE(2, 0, 2, 0));
  _mm256_storeu_ps(d, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ab), 0xd8)));
  _mm256_storeu_ps(d + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ce), 0xd8)));
}

// 32 columns of a stride-2 im2col row: d[j] = s[2j] for the lanes with lo ≤ ox + j < hi, 0 for the others
// (s = the row's tap at column ox, so lane j reads s[2j]). Masked loads: positions outside the valid span are never
// read, so this also serves the panels at the left and right edges.
__attribute__((target("avx512f"))) void gather32_s2_avx512(const float* s, std::int64_t ox, std::int64_t lo,
                                                           std::int64_t hi, float* d) {
  const std::int64_t a = std::clamp<std::int64_t>(2 * (lo - ox), 0, 64);
  const std::int64_t b = std::clamp<std::int64_t>(2 * (hi - ox) - 1, 0, 64);
  std::uint64_t m = 0;
  if (b > a) m = (b >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << b) - 1) & ~((std::uint64_t{1} << a) - 1);
  const __m512 v0 = _mm512_maskz_loadu_ps(static_cast<__mmask16>(m), s);
  const __m512 v1 = _mm512_maskz_loadu_ps(static_cast<__mmask16>(m >> 16), s + 16);
  const __m512 v2 = _mm512_maskz_loadu_ps(static_cast<__mmask16>(m >> 32), s + 32);
  const __m512 v3 = _mm512_maskz_loadu_ps(static_cast<__mmask16>(m >> 48), s + 48);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  _mm512_storeu_ps(d, _mm512_permutex2var_ps(v0, even, v1));
  _mm512_storeu_ps(d + 16, _mm512_permutex2var_ps(v2, even, v3));
}

}  // namespace

void MatrixB::pack(std::int64_t k0, std::int64_t kc, std::int64_t n0, std::int64_t nc, float* dst,
                   int nr) const {
  for (std::int64_t p = 0; p * nr < nc; ++p) {
    const std::int64_t j0 = n0 + p * nr;
    const std::int64_t valid = std::min<std::int64_t>(nr, n_ - j0);
    float* d = dst + p * kc * nr;
    for (std::int64_t kk = 0; kk < kc; ++kk, d += nr) {
      const float* src = b_ + (k0 + kk) * ldb_ + j0;
      std::int64_t jj = 0;
      for (; jj < valid; ++jj) d[jj] = src[jj];
      for (; jj < nr; ++jj) d[jj] = 0.0f;
    }
  }
}

void Im2colB::pack(std::int64_t k0, std::int64_t kc, std::int64_t n0, std::int64_t nc, float* dst,
                   int nr) const {
  const std::int64_t n = oh_ * ow_;
  const std::int64_t taps = kh_ * kw_;
  const std::int64_t npanels = (nc + nr - 1) / nr;
  const bool avx2 = kernel().avx2 && nr % 16 == 0;
  const bool s2_512 = kernel().nr == 32 && nr == 32 && sw_ == 2;
  // per row kk of the block: the input plane, ky, the column offset and the valid output columns [lo, hi)
  struct Row {
    const float* plane;
    std::int64_t ky, off, lo, hi;
  };
  std::array<Row, kMaxPackRows> rows;  // kc ≤ kMaxPackRows: no allocation inside the SGEMM's parallel loop
  for (std::int64_t kk = 0; kk < kc; ++kk) {
    const std::int64_t k = k0 + kk;
    const std::int64_t ci = k / taps, ky = (k % taps) / kw_, kx = k % kw_;
    const std::int64_t off = kx - pl_;
    // output columns ox with 0 ≤ ox·sw + off < w
    const std::int64_t lo = off >= 0 ? 0 : (-off + sw_ - 1) / sw_;
    const std::int64_t hi = std::min(ow_, (w_ - 1 - off) < 0 ? 0 : (w_ - 1 - off) / sw_ + 1);
    rows[static_cast<std::size_t>(kk)] = Row{x_ + ci * h_ * w_, ky, off, lo, hi};
  }
  std::int64_t oy = n0 / ow_, ox = n0 % ow_;  // position of the panel's first column
  for (std::int64_t p = 0; p < npanels; ++p) {
    float* const pan = dst + p * kc * nr;
    const std::int64_t j = n0 + p * nr;
    const std::int64_t jend = std::min(n, j + nr);
    if (jend - j == nr && ox + nr <= ow_) {  // the whole panel in one output row
      for (std::int64_t kk = 0; kk < kc; ++kk) {
        const Row& r = rows[static_cast<std::size_t>(kk)];
        float* d = pan + kk * nr;
        const std::int64_t iy = oy * sh_ + r.ky - pt_;
        if (iy < 0 || iy >= h_) {
          std::fill_n(d, nr, 0.0f);
          continue;
        }
        const float* src = r.plane + iy * w_ + r.off;
        if (s2_512) {  // AVX-512 kernel (nr = 32), stride 2: masked vector gather, edges included
          gather32_s2_avx512(src + ox * 2, ox, r.lo, r.hi, d);
          continue;
        }
        if (ox >= r.lo && ox + nr <= r.hi) {  // every tap inside the input
          if (sw_ == 1) {
            std::memcpy(d, src + ox, static_cast<std::size_t>(nr) * sizeof(float));
            continue;
          }
          // the vector gather reads one float past the last tap; stay inside the row
          if (avx2 && sw_ == 2 && (ox + nr - 1) * 2 + r.off + 1 < w_) {
            for (int jj = 0; jj < nr; jj += 16) gather16_s2_avx2(src + (ox + jj) * 2, d + jj);
            continue;
          }
        }
        for (int jj = 0; jj < nr; ++jj) {
          const std::int64_t c = ox + jj;
          d[jj] = (c >= r.lo && c < r.hi) ? src[c * sw_] : 0.0f;
        }
      }
    } else {  // the panel spans rows or the end
      for (std::int64_t kk = 0; kk < kc; ++kk) {
        const Row& r = rows[static_cast<std::size_t>(kk)];
        float* d = pan + kk * nr;
        std::int64_t yy = oy, xx = ox;
        int jj = 0;
        for (std::int64_t q = j; q < jend; ++q, ++jj) {
          const std::int64_t iy = yy * sh_ + r.ky - pt_;
          d[jj] =
              (iy >= 0 && iy < h_ && xx >= r.lo && xx < r.hi) ? r.plane[iy * w_ + xx * sw_ + r.off] : 0.0f;
          if (++xx == ow_) xx = 0, ++yy;
        }
        for (; jj < nr; ++jj) d[jj] = 0.0f;
      }
    }
    ox += nr;
    while (ox >= ow_) ox -= ow_, ++oy;
  }
}

const char* sgemm_kernel_name() { return kernel().name; }

KernelResult sgemm_bias_act(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
                            const float* bias, const BSource& b, float* c, std::int64_t ldc,
                            const Activation& act, int threads) {
  if (m <= 0 || n <= 0) return KernelResult::kOk;
  const KernelInfo& ker = kernel();
  const int mr = ker.mr, nr = ker.nr;
  const float* direct = b.direct();  // a plain matrix is read in place, no packing
  const std::int64_t direct_ldb = b.direct_ldb();
  if (k <= 0) {  // no taps: the bias alone
    unsigned bad = 0;
    for (std::int64_t r = 0; r < m; ++r)
      for (std::int64_t j = 0; j < n; ++j) {
        const float v = bias ? bias[r] : 0.0f;
        bad |= static_cast<unsigned>(!(v - v == 0.0f));
        c[r * ldc + j] = apply_activation(act, v);
      }
    return bad == 0 ? KernelResult::kOk : KernelResult::kNonFinite;
  }
  const std::int64_t mpanels = (m + mr - 1) / mr;
  // A B panel read in place has its kc rows ldb floats apart; with ldb a multiple of 256 (1 KiB) they fall into
  // at most 4 L1 sets (one for 4 KiB multiples, as for 160×160 or 320×320 planes), so a panel of more than ~12
  // rows cannot stay in L1 while the A panels pass over it: copy it first (faster for K > 16; at K = 16 the copy
  // costs more than it saves: benchmarks/NOTES.md, faces). A single A panel reads it once.
  const bool copy_direct = direct && direct_ldb % 256 == 0 && mpanels > 1 && k > 16;
  // Tasks: N blocks × M chunks, enough of them to keep every thread busy.
  const int t = threads <= 0 ? core::hardware_threads() : threads;
  std::int64_t nc = kNc;
  std::int64_t nblocks = (n + nc - 1) / nc;
  if (nblocks < t && n > nr) {
    nc = std::max<std::int64_t>(nr, ((n + t - 1) / t + nr - 1) / nr * nr);
    nblocks = (n + nc - 1) / nc;
  }
  const std::int64_t mchunks =
      t <= 1 ? 1 : std::clamp<std::int64_t>((2 * t + nblocks - 1) / nblocks, 1, mpanels);
  const std::int64_t panels_per_chunk = (mpanels + mchunks - 1) / mchunks;
  ResultFlags result;
  core::parallel_for(nblocks * mchunks, t, [&](std::int64_t task) {
    const std::int64_t nb = task / mchunks, mc = task % mchunks;
    const std::int64_t n0 = nb * nc, ncur = std::min(nc, n - n0);
    const std::int64_t p_begin = mc * panels_per_chunk, p_end = std::min(mpanels, p_begin + panels_per_chunk);
    if (p_begin >= p_end) return;
    const std::int64_t npanels = (ncur + nr - 1) / nr;
    float* bp = thread_scratch(0, std::min(kKc, k) * npanels * nr);
    if (!bp) {
      result.add(KernelResult::kOutOfMemory);
      return;
    }
    alignas(64) float tile[8 * 32];
    unsigned bad = 0;
    for (std::int64_t k0 = 0; k0 < k; k0 += kKc) {
      const std::int64_t kc = std::min(kKc, k - k0);
      const bool first = k0 == 0, last = k0 + kc == k;
      const Activation* epi = last ? &act : nullptr;
      if (!direct) {
        b.pack(k0, kc, n0, ncur, bp, nr);
      } else if (ncur % nr != 0) {  // only the ragged last panel needs packing
        const std::int64_t lastp = (npanels - 1) * nr;
        b.pack(k0, kc, n0 + lastp, ncur - lastp, bp + (npanels - 1) * kc * nr, nr);
      }
      // one B panel (kc × nr) stays in L1 while every A panel of the chunk passes over it
      for (std::int64_t q = 0; q < npanels; ++q) {
        const std::int64_t col0 = n0 + q * nr;
        const std::int64_t cols = std::min<std::int64_t>(nr, n - col0);
        const float* bpan = bp + q * kc * nr;
        std::int64_t ldb = nr;
        if (direct && cols == nr) {
          bpan = direct + k0 * direct_ldb + col0, ldb = direct_ldb;
          if (copy_direct) {  // into a contiguous panel: the rows of B would share a few L1 sets
            float* d = bp + q * kc * nr;
            if (nr == 32) {  // a constant size: inline moves, not a memcpy call per row
              for (std::int64_t kk = 0; kk < kc; ++kk)
                std::memcpy(d + kk * 32, bpan + kk * ldb, 32 * sizeof(float));
            } else {
              for (std::int64_t kk = 0; kk < kc; ++kk)
                std::memcpy(d + kk * nr, bpan + kk * ldb, nr * sizeof(float));
            }
            bpan = d, ldb = nr;
          }
        }
        for (std::int64_t p = p_begin; p < p_end; ++p) {
          const std::int64_t row0 = p * mr;
          const int rows = static_cast<int>(std::min<std::int64_t>(mr, m - row0));
          const float* ap = a + row0 * lda + k0;
          const float* br = bias ? bias + row0 : nullptr;
          float* cp = c + row0 * ldc + col0;
          if (cols == nr) {
            ker.fn[rows](kc, ap, lda, bpan, ldb, cp, ldc, br, first, epi, &bad);
          } else {
            for (int r = 0; r < rows; ++r)
              for (int jj = 0; jj < nr; ++jj)
                tile[r * nr + jj] = (!first && jj < cols) ? cp[r * ldc + jj] : 0.0f;
            // columns past n see zero B and start from the bias (first) or zero: always finite
            ker.fn[rows](kc, ap, lda, bpan, ldb, tile, nr, br, first, epi, &bad);
            for (int r = 0; r < rows; ++r)
              for (std::int64_t jj = 0; jj < cols; ++jj) cp[r * ldc + jj] = tile[r * nr + jj];
          }
        }
      }
    }
    if (bad) result.add(KernelResult::kNonFinite);
  });
  return result.get();
}

}  // namespace facetrace::faces::detail
