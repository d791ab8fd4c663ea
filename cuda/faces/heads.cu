/// @file
/// The fused detection heads (cuda/faces/heads.cuh, docs/design/faces.md §8.1 "head fusion"): one kernel per
/// level for every 1×1 → depthwise 3×3 → transpose [→ Sigmoid] head reading one feature map.
#include "faces/heads.cuh"

#include "common/cuda_check.cuh"
#include "faces/launch.cuh"

#include <algorithm>

namespace facetrace::faces::gpu {
namespace {

constexpr int kTileW = 16, kTileH = 4;                   // output pixels of one block
constexpr int kHaloW = kTileW + 2, kHaloH = kTileH + 2;  // the 1×1 outputs the depthwise taps read
constexpr int kHalo = kHaloW * kHaloH;
constexpr int kHeadThreads = 256;
constexpr std::size_t kMaxShared = 48 * 1024;  // without the opt-in attribute

std::size_t shared_bytes(int cin, int c) {
  return sizeof(float) * (static_cast<std::size_t>(cin) * kHalo + static_cast<std::size_t>(cin) * c +
                          static_cast<std::size_t>(c) * kHalo);
}

// Shared memory: xs [cin][kHalo] (X over the tile and its halo, 0 outside the image), ws [cin][Cg] (the 1×1
// weights of the block's channels transposed: a warp reads consecutive channels), ps [Cg][kHalo] (the 1×1
// outputs). Block (tile, image, group) computes channels [group·cg, group·cg + Cg) of the C fused ones: a small
// map (a stride-32 level at batch 1 is ten tiles) spreads over more multiprocessors; every output is the same
// sum whatever the grouping. Per channel (set by thread 0): its head, its index in the head, the head's width
// and flags.
__global__ void __launch_bounds__(kHeadThreads)
    heads_kernel(HeadsJob j, int c_total, int cg, int tiles_x, const float* __restrict__ x,
                 const float* __restrict__ p) {
  pdl_entry();
  extern __shared__ float sm[];
  __shared__ float* s_out[kMaxHeads];
  __shared__ int s_head[kMaxHeadChannels], s_local[kMaxHeadChannels], s_n[kMaxHeadChannels];
  __shared__ bool s_pwb[kMaxHeadChannels], s_dwb[kMaxHeadChannels], s_sig[kMaxHeadChannels];
  const int C = c_total, cin = j.cin, h = j.h, w = j.w;
  const int c0 = static_cast<int>(blockIdx.z) * cg, Cg = min(cg, C - c0);
  float* xs = sm;
  float* ws = xs + cin * kHalo;
  float* ps = ws + cin * Cg;
  const int tid = static_cast<int>(threadIdx.x);
  const int img = static_cast<int>(blockIdx.y);
  const int tile = static_cast<int>(blockIdx.x);
  const int oy0 = (tile / tiles_x) * kTileH, ox0 = (tile % tiles_x) * kTileW;
  const float* pw_w = p;
  const float* pw_b = pw_w + C * cin;
  const float* dw_w = pw_b + C;
  const float* dw_b = dw_w + C * 9;
  if (tid == 0) {
    int c = 0;
#pragma unroll
    for (int k = 0; k < kMaxHeads; ++k) {
      s_out[k] = j.out[k];
      const bool live = k < j.heads;
      for (int q = 0; live && q < j.channels[k]; ++q, ++c) {
        s_head[c] = k, s_local[c] = q, s_n[c] = j.channels[k];
        s_pwb[c] = j.pw_bias[k], s_dwb[c] = j.dw_bias[k], s_sig[c] = j.sigmoid[k];
      }
    }
  }
  const std::int64_t plane = static_cast<std::int64_t>(h) * w;
  const float* xi = x + static_cast<std::int64_t>(img) * cin * plane;
#pragma unroll 8
  for (int i = tid; i < cin * kHalo; i += kHeadThreads) {
    const int ci = i / kHalo, q = i - ci * kHalo;
    const int yy = oy0 - 1 + q / kHaloW, xx = ox0 - 1 + q % kHaloW;
    xs[i] = yy >= 0 && yy < h && xx >= 0 && xx < w ? __ldg(xi + ci * plane + yy * w + xx) : 0.0f;
  }
  for (int i = tid; i < Cg * cin; i += kHeadThreads) {
    const int c = i / cin, ci = i - c * cin;
    ws[ci * Cg + c] = __ldg(pw_w + c0 * cin + i);
  }
  __syncthreads();
  // the 1×1 outputs over the halo: Σ over ci in order, then the bias (conv_direct_kernel's order)
  for (int i = tid; i < kHalo * Cg; i += kHeadThreads) {
    const int q = i / Cg, c = i - q * Cg;
    const int yy = oy0 - 1 + q / kHaloW, xx = ox0 - 1 + q % kHaloW;
    float acc = 0.0f;
    if (yy >= 0 && yy < h && xx >= 0 && xx < w) {
      for (int ci = 0; ci < cin; ++ci) acc = fmaf(xs[ci * kHalo + q], ws[ci * Cg + c], acc);
      if (s_pwb[c0 + c]) acc = __fadd_rn(acc, __ldg(pw_b + c0 + c));
    }
    ps[c * kHalo + q] = acc;  // outside the image: never read (those taps are skipped below)
  }
  __syncthreads();
  // the depthwise taps in (ky, kx) order inside the image, its bias, the Sigmoid, the channels-last store
  for (int i = tid; i < kTileW * kTileH * Cg; i += kHeadThreads) {
    const int q = i / Cg, cl = i - q * Cg, c = c0 + cl;
    const int ty = q / kTileW, tx = q - ty * kTileW;
    const int oy = oy0 + ty, ox = ox0 + tx;
    if (oy >= h || ox >= w) continue;
    const float* pc = ps + cl * kHalo;
    const float* wc = dw_w + c * 9;
    float acc = 0.0f;
#pragma unroll
    for (int ky = 0; ky < 3; ++ky) {
      const int iy = oy - 1 + ky;
      if (iy < 0 || iy >= h) continue;
#pragma unroll
      for (int kx = 0; kx < 3; ++kx) {
        const int ix = ox - 1 + kx;
        if (ix < 0 || ix >= w) continue;
        acc = fmaf(pc[(ty + ky) * kHaloW + tx + kx], __ldg(wc + ky * 3 + kx), acc);
      }
    }
    if (s_dwb[c]) acc = __fadd_rn(acc, __ldg(dw_b + c));
    if (s_sig[c]) acc = 1.0f / (1.0f + expf(-acc));  // eltwise.cu's Sigmoid
    const int nk = s_n[c];
    s_out[s_head[c]][(static_cast<std::int64_t>(img) * plane + static_cast<std::int64_t>(oy) * w + ox) * nk +
                     s_local[c]] = acc;
  }
}

}  // namespace

int heads_channels(const HeadsJob& j) {
  int c = 0;
  for (int k = 0; k < j.heads && k < kMaxHeads; ++k) c += j.channels[k];
  return c;
}

std::int64_t heads_packed_floats(const HeadsJob& j) {
  const std::int64_t c = heads_channels(j);
  return c * j.cin + c + c * 9 + c;
}

bool heads_fit(const HeadsJob& j) {
  if (j.heads < 1 || j.heads > kMaxHeads || j.cin < 1 || j.h < 1 || j.w < 1) return false;
  for (int k = 0; k < j.heads; ++k)
    if (j.channels[k] < 1) return false;
  const int c = heads_channels(j);
  return c <= kMaxHeadChannels && shared_bytes(j.cin, c) <= kMaxShared &&
         static_cast<std::int64_t>(j.cin) * j.h * j.w < (std::int64_t{1} << 30);
}

Status launch_heads(const HeadsJob& j, int batch, const float* x, const float* packed, cudaStream_t s) {
  bool outs = true;
  for (int k = 0; k < j.heads && k < kMaxHeads; ++k) outs = outs && j.out[k];
  if (!heads_fit(j) || !outs || batch < 1 || batch > 65535 || !x || !packed)
    return Status(Code::kInvalidArgument, "fused heads: a job the kernel does not take");
  const int c = heads_channels(j);
  const int tiles_x = (j.w + kTileW - 1) / kTileW, tiles_y = (j.h + kTileH - 1) / kTileH;
  // channel groups until about two blocks per multiprocessor (132 on the H200; a few more elsewhere is harmless)
  const std::int64_t blocks = static_cast<std::int64_t>(tiles_x) * tiles_y * batch;
  const int groups = static_cast<int>(std::clamp<std::int64_t>((264 + blocks - 1) / blocks, 1, c));
  const int cg = (c + groups - 1) / groups;
  const dim3 grid(static_cast<unsigned>(tiles_x * tiles_y), static_cast<unsigned>(batch),
                  static_cast<unsigned>((c + cg - 1) / cg));
  pdl_launch(heads_kernel, grid, kHeadThreads, shared_bytes(j.cin, cg), s, j, c, cg, tiles_x, x, packed);
  FT_CUDA_LAUNCH_CHECK("heads_kernel", s);
  return {};
}

}  // namespace facetrace::faces::gpu
