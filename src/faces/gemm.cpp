/// @file
/// Cache-blocked SGEMM: A packed once into MR-row panels, B packed per (KC × NC) block into NR-column panels,
/// an MR × NR register-tile micro-kernel (AVX2+FMA when the CPU has it, chosen at run time; SSE2 otherwise).
/// Portable build flags: the AVX2 kernel is compiled through a function target attribute.
#include "faces/gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "faces/thread_pool.h"

namespace facetrace::faces::detail {
namespace {

constexpr std::int64_t kKc = 256;  // K block: an A micro-panel (MR·KC floats) stays in L1
constexpr std::int64_t kNc = 512;  // N block: the packed B block (KC·NC floats) stays in L2

// Each kernel: c[r·ldc + j] += Σ_kk a[kk·MR + r] · b[kk·NR + j], kk ascending, for a full MR × NR tile.
__attribute__((target("avx2,fma"))) void kernel_avx2_6x16(std::int64_t kc, const float* a, const float* b,
                                                          std::int64_t ldb, float* c, std::int64_t ldc) {
  __m256 c00 = _mm256_loadu_ps(c + 0 * ldc), c01 = _mm256_loadu_ps(c + 0 * ldc + 8);
  __m256 c10 = _mm256_loadu_ps(c + 1 * ldc), c11 = _mm256_loadu_ps(c + 1 * ldc + 8);
  __m256 c20 = _mm256_loadu_ps(c + 2 * ldc), c21 = _mm256_loadu_ps(c + 2 * ldc + 8);
  __m256 c30 = _mm256_loadu_ps(c + 3 * ldc), c31 = _mm256_loadu_ps(c + 3 * ldc + 8);
  __m256 c40 = _mm256_loadu_ps(c + 4 * ldc), c41 = _mm256_loadu_ps(c + 4 * ldc + 8);
  __m256 c50 = _mm256_loadu_ps(c + 5 * ldc), c51 = _mm256_loadu_ps(c + 5 * ldc + 8);
  for (std::int64_t kk = 0; kk < kc; ++kk) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    __m256 av = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(av, b0, c00);
    c01 = _mm256_fmadd_ps(av, b1, c01);
    av = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(av, b0, c10);
    c11 = _mm256_fmadd_ps(av, b1, c11);
    av = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(av, b0, c20);
    c21 = _mm256_fmadd_ps(av, b1, c21);
    av = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(av, b0, c30);
    c31 = _mm256_fmadd_ps(av, b1, c31);
    av = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(av, b0, c40);
    c41 = _mm256_fmadd_ps(av, b1, c41);
    av = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(av, b0, c50);
    c51 = _mm256_fmadd_ps(av, b1, c51);
    a += 6;
    b += ldb;
  }
  _mm256_storeu_ps(c + 0 * ldc, c00), _mm256_storeu_ps(c + 0 * ldc + 8, c01);
  _mm256_storeu_ps(c + 1 * ldc, c10), _mm256_storeu_ps(c + 1 * ldc + 8, c11);
  _mm256_storeu_ps(c + 2 * ldc, c20), _mm256_storeu_ps(c + 2 * ldc + 8, c21);
  _mm256_storeu_ps(c + 3 * ldc, c30), _mm256_storeu_ps(c + 3 * ldc + 8, c31);
  _mm256_storeu_ps(c + 4 * ldc, c40), _mm256_storeu_ps(c + 4 * ldc + 8, c41);
  _mm256_storeu_ps(c + 5 * ldc, c50), _mm256_storeu_ps(c + 5 * ldc + 8, c51);
}

void kernel_sse2_4x8(std::int64_t kc, const float* a, const float* b, std::int64_t ldb, float* c, std::int64_t ldc) {
  __m128 c00 = _mm_loadu_ps(c + 0 * ldc), c01 = _mm_loadu_ps(c + 0 * ldc + 4);
  __m128 c10 = _mm_loadu_ps(c + 1 * ldc), c11 = _mm_loadu_ps(c + 1 * ldc + 4);
  __m128 c20 = _mm_loadu_ps(c + 2 * ldc), c21 = _mm_loadu_ps(c + 2 * ldc + 4);
  __m128 c30 = _mm_loadu_ps(c + 3 * ldc), c31 = _mm_loadu_ps(c + 3 * ldc + 4);
  for (std::int64_t kk = 0; kk < kc; ++kk) {
    const __m128 b0 = _mm_loadu_ps(b), b1 = _mm_loadu_ps(b + 4);
    __m128 av = _mm_set1_ps(a[0]);
    c00 = _mm_add_ps(c00, _mm_mul_ps(av, b0));
    c01 = _mm_add_ps(c01, _mm_mul_ps(av, b1));
    av = _mm_set1_ps(a[1]);
    c10 = _mm_add_ps(c10, _mm_mul_ps(av, b0));
    c11 = _mm_add_ps(c11, _mm_mul_ps(av, b1));
    av = _mm_set1_ps(a[2]);
    c20 = _mm_add_ps(c20, _mm_mul_ps(av, b0));
    c21 = _mm_add_ps(c21, _mm_mul_ps(av, b1));
    av = _mm_set1_ps(a[3]);
    c30 = _mm_add_ps(c30, _mm_mul_ps(av, b0));
    c31 = _mm_add_ps(c31, _mm_mul_ps(av, b1));
    a += 4;
    b += ldb;
  }
  _mm_storeu_ps(c + 0 * ldc, c00), _mm_storeu_ps(c + 0 * ldc + 4, c01);
  _mm_storeu_ps(c + 1 * ldc, c10), _mm_storeu_ps(c + 1 * ldc + 4, c11);
  _mm_storeu_ps(c + 2 * ldc, c20), _mm_storeu_ps(c + 2 * ldc + 4, c21);
  _mm_storeu_ps(c + 3 * ldc, c30), _mm_storeu_ps(c + 3 * ldc + 4, c31);
}

using Kernel = void (*)(std::int64_t, const float*, const float*, std::int64_t, float*, std::int64_t);

struct KernelInfo {
  Kernel fn;
  int mr, nr;
  const char* name;
};

const KernelInfo& kernel() {
  static const KernelInfo k = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      return KernelInfo{kernel_avx2_6x16, 6, 16, "avx2-fma 6x16"};
    return KernelInfo{kernel_sse2_4x8, 4, 8, "sse2 4x8"};
  }();
  return k;
}

}  // namespace

void MatrixB::pack(std::int64_t k0, std::int64_t kc, std::int64_t n0, std::int64_t nc, float* dst, int nr) const {
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

void Im2colB::pack(std::int64_t k0, std::int64_t kc, std::int64_t n0, std::int64_t nc, float* dst, int nr) const {
  const std::int64_t n = oh_ * ow_;
  const std::int64_t taps = kh_ * kw_;
  const std::int64_t npanels = (nc + nr - 1) / nr;
  for (std::int64_t kk = 0; kk < kc; ++kk) {
    const std::int64_t k = k0 + kk;
    const std::int64_t ci = k / taps, ky = (k % taps) / kw_, kx = k % kw_;
    const float* plane = x_ + ci * h_ * w_;
    // walk the columns output row by output row: iy is fixed within a row, ix = ox·sw + kx − pl
    std::int64_t j = n0;
    const std::int64_t jend = std::min(n, n0 + nc);
    while (j < jend) {
      const std::int64_t oy = j / ow_, ox0 = j % ow_;
      const std::int64_t run = std::min(ow_ - ox0, jend - j);
      const std::int64_t iy = oy * sh_ + ky - pt_;
      const bool row_in = iy >= 0 && iy < h_;
      const float* src = plane + iy * w_;
      for (std::int64_t r = 0; r < run; ++r) {
        const std::int64_t jj = j - n0 + r;
        const std::int64_t ix = (ox0 + r) * sw_ + kx - pl_;
        dst[(jj / nr) * kc * nr + kk * nr + (jj % nr)] = (row_in && ix >= 0 && ix < w_) ? src[ix] : 0.0f;
      }
      j += run;
    }
    for (std::int64_t jj = jend - n0; jj < npanels * nr; ++jj) dst[(jj / nr) * kc * nr + kk * nr + (jj % nr)] = 0.0f;
  }
}

const char* sgemm_kernel_name() { return kernel().name; }

void sgemm_acc(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda, const BSource& b,
               float* c, std::int64_t ldc, int threads) {
  if (m <= 0 || n <= 0 || k <= 0) return;
  const KernelInfo& ker = kernel();
  const int mr = ker.mr, nr = ker.nr;
  const float* direct = b.direct();  // a plain matrix is read in place, no packing
  const std::int64_t direct_ldb = b.direct_ldb();
  // A in MR-row panels over the whole K: ap[panel·k·mr + kk·mr + r], zero rows past m.
  const std::int64_t mpanels = (m + mr - 1) / mr;
  std::vector<float> ap(static_cast<std::size_t>(mpanels * k * mr));
  for (std::int64_t p = 0; p < mpanels; ++p)
    for (std::int64_t kk = 0; kk < k; ++kk)
      for (int r = 0; r < mr; ++r) {
        const std::int64_t row = p * mr + r;
        ap[static_cast<std::size_t>((p * k + kk) * mr + r)] = row < m ? a[row * lda + kk] : 0.0f;
      }
  // Tasks: N blocks × M chunks, enough of them to keep every thread busy.
  const int t = threads <= 0 ? hardware_threads() : threads;
  std::int64_t nc = kNc;
  std::int64_t nblocks = (n + nc - 1) / nc;
  if (nblocks < t && n > nr) {
    nc = std::max<std::int64_t>(nr, ((n + t - 1) / t + nr - 1) / nr * nr);
    nblocks = (n + nc - 1) / nc;
  }
  const std::int64_t mchunks = std::clamp<std::int64_t>((2 * t + nblocks - 1) / nblocks, 1, mpanels);
  const std::int64_t panels_per_chunk = (mpanels + mchunks - 1) / mchunks;
  const bool ok = parallel_for(nblocks * mchunks, t, [&](std::int64_t task) {
    const std::int64_t nb = task / mchunks, mc = task % mchunks;
    const std::int64_t n0 = nb * nc, ncur = std::min(nc, n - n0);
    const std::int64_t p_begin = mc * panels_per_chunk, p_end = std::min(mpanels, p_begin + panels_per_chunk);
    if (p_begin >= p_end) return;
    const std::int64_t npanels = (ncur + nr - 1) / nr;
    std::vector<float> bp(static_cast<std::size_t>(std::min(kKc, k) * npanels * nr));
    alignas(32) float tile[6 * 16];
    for (std::int64_t k0 = 0; k0 < k; k0 += kKc) {
      const std::int64_t kc = std::min(kKc, k - k0);
      if (!direct) {
        b.pack(k0, kc, n0, ncur, bp.data(), nr);
      } else if (ncur % nr != 0) {  // only the ragged last panel needs packing
        const std::int64_t last = (npanels - 1) * nr;
        b.pack(k0, kc, n0 + last, ncur - last, bp.data() + (npanels - 1) * kc * nr, nr);
      }
      for (std::int64_t p = p_begin; p < p_end; ++p) {
        const float* apan = ap.data() + (p * k + k0) * mr;
        const std::int64_t row0 = p * mr;
        const std::int64_t rows = std::min<std::int64_t>(mr, m - row0);
        for (std::int64_t q = 0; q < npanels; ++q) {
          const float* bpan = bp.data() + q * kc * nr;  // may be replaced by a direct pointer
          const std::int64_t col0 = n0 + q * nr;
          const std::int64_t cols = std::min<std::int64_t>(nr, n - col0);
          float* cp = c + row0 * ldc + col0;
          if (direct && cols == nr) {
            const float* bd = direct + k0 * direct_ldb + col0;
            if (rows == mr) {
              ker.fn(kc, apan, bd, direct_ldb, cp, ldc);
              continue;
            }
            bpan = bd;
          }
          const std::int64_t ldb = bpan == bp.data() + q * kc * nr ? nr : direct_ldb;
          if (rows == mr && cols == nr) {
            ker.fn(kc, apan, bpan, ldb, cp, ldc);
          } else {
            for (int r = 0; r < mr; ++r)
              for (int j = 0; j < nr; ++j) tile[r * nr + j] = (r < rows && j < cols) ? cp[r * ldc + j] : 0.0f;
            ker.fn(kc, apan, bpan, ldb, tile, nr);
            for (std::int64_t r = 0; r < rows; ++r)
              for (std::int64_t j = 0; j < cols; ++j) cp[r * ldc + j] = tile[r * nr + j];
          }
        }
      }
    }
  });
  if (!ok) throw std::bad_alloc();
}

}  // namespace facetrace::faces::detail
