/// @file
/// The fused conv band (cuda/faces/band.cuh, docs/design/faces.md §8.1 "band kernel").
#include "faces/band.cuh"

#include "common/cuda_check.cuh"
#include "faces/launch.cuh"

namespace facetrace::faces::gpu {
namespace {

constexpr int kBandThreads = 256;
constexpr int kChunk = 16;                     // channels per pass over the halo
constexpr std::size_t kMaxShared = 48 * 1024;  // without the opt-in attribute

__device__ __forceinline__ float band_act(const BandAct& a, float v) {
  if (a.kind == 1) return v > 0.0f ? v : 0.0f;          // apply_epilogue's Relu
  if (a.kind == 2) return fminf(fmaxf(v, a.lo), a.hi);  // and Clip
  return v;
}

template <int TW, int TH>
__host__ __device__ constexpr int halo() {
  return (TW + 2) * (TH + 2);
}

template <int TW, int TH>
std::size_t shared_bytes(int cin) {
  return sizeof(float) *
         (static_cast<std::size_t>(cin) * halo<TW, TH>() + static_cast<std::size_t>(cin) * kChunk +
          static_cast<std::size_t>(kChunk) * halo<TW, TH>());
}

// Shared memory: xs [cin][halo] (the input over the tile and its halo, 0 outside the image), ws [cin][kChunk]
// (the chunk's 1×1 weights transposed), ps [kChunk][halo] (the chunk's 1×1 outputs).
template <int TW, int TH>
__global__ void __launch_bounds__(kBandThreads)
    band_kernel(BandJob j, int tiles_x, const float* __restrict__ x, const float* __restrict__ pw_w,
                const float* __restrict__ pw_b, const float* __restrict__ dw_w,
                const float* __restrict__ dw_b, float* __restrict__ y) {
  pdl_entry();
  constexpr int HW = TW + 2, H = halo<TW, TH>();
  extern __shared__ float sm[];
  const int cin = j.cin, C = j.c, h = j.h, w = j.w;
  float* xs = sm;
  float* ws = xs + cin * H;
  float* ps = ws + cin * kChunk;
  const int tid = static_cast<int>(threadIdx.x);
  const int img = static_cast<int>(blockIdx.y);
  const int tile = static_cast<int>(blockIdx.x);
  const int oy0 = (tile / tiles_x) * TH, ox0 = (tile % tiles_x) * TW;
  const int plane = h * w;
  const float* xi = x + static_cast<std::int64_t>(img) * cin * plane;
#pragma unroll 8
  for (int i = tid; i < cin * H; i += kBandThreads) {
    const int ci = i / H, q = i - ci * H;
    const int yy = oy0 - 1 + q / HW, xx = ox0 - 1 + q % HW;
    xs[i] = yy >= 0 && yy < h && xx >= 0 && xx < w ? __ldg(xi + ci * plane + yy * w + xx) : 0.0f;
  }
  const int oh = j.pool ? h / 2 : h, ow = j.pool ? w / 2 : w;
  float* yi = y + static_cast<std::int64_t>(img) * C * oh * ow;
  for (int c0 = 0; c0 < C; c0 += kChunk) {
    const int nc = C - c0 < kChunk ? C - c0 : kChunk;
    if (c0 > 0) __syncthreads();  // the previous chunk's reads of ws and ps are done
    for (int i = tid; i < nc * cin; i += kBandThreads) {
      const int cc = i / cin, ci = i - cc * cin;
      ws[ci * kChunk + cc] = __ldg(pw_w + (c0 + cc) * cin + ci);
    }
    __syncthreads();
    // the 1×1 outputs over the halo: Σ over ci in order, the bias, the activation
    for (int i = tid; i < H * kChunk; i += kBandThreads) {
      const int q = i / kChunk, cc = i - q * kChunk;
      if (cc >= nc) continue;
      const int yy = oy0 - 1 + q / HW, xx = ox0 - 1 + q % HW;
      float acc = 0.0f;
      if (yy >= 0 && yy < h && xx >= 0 && xx < w) {
        for (int ci = 0; ci < cin; ++ci) acc = fmaf(xs[ci * H + q], ws[ci * kChunk + cc], acc);
        if (pw_b) acc = __fadd_rn(acc, __ldg(pw_b + c0 + cc));
        acc = band_act(j.pw_act, acc);
      }
      ps[cc * H + q] = acc;  // outside the image: never read (those taps are skipped below)
    }
    __syncthreads();
    // the depthwise taps in (ky, kx) order inside the image, the bias, the activation (and the 2×2 max)
    const int per = j.pool ? 4 : 1;  // depthwise outputs per item
    const int pix = TW * TH / per;   // items per channel: consecutive threads take a row of one channel
    for (int i = tid; i < pix * nc; i += kBandThreads) {
      const int cc = i / pix, q = i - cc * pix;
      const int c = c0 + cc;
      const float* pc = ps + cc * H;
      const float* wc = dw_w + c * 9;
      const float bias = dw_b ? __ldg(dw_b + c) : 0.0f;
      int ty, tx;
      if (j.pool) {
        ty = (q / (TW / 2)) * 2, tx = (q % (TW / 2)) * 2;
      } else {
        ty = q / TW, tx = q % TW;
      }
      float best = 0.0f;
      bool any = false;
      for (int k = 0; k < per; ++k) {
        const int dy = k / 2, dx = k % 2;
        const int oy = oy0 + ty + dy, ox = ox0 + tx + dx;
        if (oy >= h || ox >= w) continue;
        float acc = 0.0f;
#pragma unroll
        for (int ky = 0; ky < 3; ++ky) {
          const int iy = oy - 1 + ky;
          if (iy < 0 || iy >= h) continue;
#pragma unroll
          for (int kx = 0; kx < 3; ++kx) {
            const int ix = ox - 1 + kx;
            if (ix < 0 || ix >= w) continue;
            acc = fmaf(pc[(ty + dy + ky) * HW + tx + dx + kx], __ldg(wc + ky * 3 + kx), acc);
          }
        }
        if (dw_b) acc = __fadd_rn(acc, bias);
        acc = band_act(j.dw_act, acc);
        best = !any ? acc : (acc > best ? acc : best);
        any = true;
      }
      if (!any) continue;
      const int py = j.pool ? (oy0 + ty) / 2 : oy0 + ty, px = j.pool ? (ox0 + tx) / 2 : ox0 + tx;
      yi[(c * oh + py) * ow + px] = best;
    }
  }
}

template <int TW, int TH>
Status launch_tile(const BandJob& j, int batch, const float* x, const float* pw_w, const float* pw_b,
                   const float* dw_w, const float* dw_b, float* y, cudaStream_t s) {
  const int tiles_x = (j.w + TW - 1) / TW, tiles_y = (j.h + TH - 1) / TH;
  const dim3 grid(static_cast<unsigned>(tiles_x * tiles_y), static_cast<unsigned>(batch));
  pdl_launch(band_kernel<TW, TH>, grid, kBandThreads, shared_bytes<TW, TH>(j.cin), s, j, tiles_x, x, pw_w,
             pw_b, dw_w, dw_b, y);
  FT_CUDA_LAUNCH_CHECK("band_kernel", s);
  return {};
}

// The wide tile (less halo recomputation) where its shared memory fits, else the narrow one.
bool wide(const BandJob& j) { return shared_bytes<32, 8>(j.cin) <= kMaxShared; }

}  // namespace

bool band_fits(const BandJob& j, int batch) {
  if (j.cin < 1 || j.c < 1 || j.h < 1 || j.w < 1 || batch < 1 || batch > 65535) return false;
  if (j.pool && (j.h % 2 || j.w % 2)) return false;
  const std::int64_t most = static_cast<std::int64_t>(j.cin > j.c ? j.cin : j.c) * j.h * j.w;
  return shared_bytes<16, 4>(j.cin) <= kMaxShared && most < (std::int64_t{1} << 30);
}

Status launch_band(const BandJob& j, int batch, const float* x, const float* pw_w, const float* pw_b,
                   const float* dw_w, const float* dw_b, float* y, cudaStream_t s) {
  if (!band_fits(j, batch) || !x || !pw_w || !dw_w || !y)
    return Status(Code::kInvalidArgument, "fused band: a job the kernel does not take");
  if (wide(j)) return launch_tile<32, 8>(j, batch, x, pw_w, pw_b, dw_w, dw_b, y, s);
  return launch_tile<16, 4>(j, batch, x, pw_w, pw_b, dw_w, dw_b, y, s);
}

}  // namespace facetrace::faces::gpu
