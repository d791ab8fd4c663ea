/// @file
/// Device side of YuNet's decode (docs/design/faces.md §5): the per-batch parameters the kernels and Thrust
/// functors share, and the per-cell arithmetic, written with explicit round-to-nearest steps in detector.cpp's
/// decode_yunet order so the GPU gives the CPU's bits. Included only by cuda/faces/*.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "facetrace/faces/decode_math.h"
#include "faces/prepost_launch.h"

namespace facetrace::faces::gpu {

/// Sort key: image (12 bits) | 0x3F800000 − bits(score) (30 bits: descending score, scores lie in [0, 1]) |
/// cell index within the image over strides 8, 16, 32 (22 bits: the CPU's candidate order breaks ties).
inline constexpr int kKeyCellBits = 22;
inline constexpr int kKeyImageShift = 52;
inline constexpr std::uint32_t kScoreOne = 0x3F800000u;

struct PostParams {
  const float* cls[3];
  const float* obj[3];
  const float* bbox[3];
  const float* kps[3];
  int cols[3];
  int cells[3];  // per image, per stride
  int first[3];  // first cell index of each stride within an image
  int total;     // cells per image
  float thr;
};

/// std::clamp(v, lo, hi) with its comparisons (a NaN passes through).
__device__ __forceinline__ float clamp_as_std(float v, float lo, float hi) {
  return v < lo ? lo : (hi < v ? hi : v);
}

/// √(clamp(cls)·clamp(obj)) of cell g (within the image) of image b.
__device__ __forceinline__ float cell_score(const PostParams& p, int b, int s, int i) {
  const float c = p.cls[s][static_cast<std::size_t>(b) * p.cells[s] + i];
  const float o = p.obj[s][static_cast<std::size_t>(b) * p.cells[s] + i];
  return __fsqrt_rn(__fmul_rn(clamp_as_std(c, 0.0f, 1.0f), clamp_as_std(o, 0.0f, 1.0f)));
}

/// The stride index of cell g.
__device__ __forceinline__ int stride_of(const PostParams& p, int g) {
  return g < p.first[1] ? 0 : (g < p.first[2] ? 1 : 2);
}

/// The CPU's decoded candidate: box and landmarks in photo fractions, before clipping.
struct Candidate {
  float box[4];
  float lm[10];
};

/// decode_yunet's per-cell arithmetic for cell i of stride s of image b (scale, fw, fh: its geometry).
__device__ __forceinline__ void decode_cell(const PostParams& p, int b, int s, int i, float scale, float fw,
                                            float fh, bool landmarks, Candidate& c) {
  const int cols = p.cols[s];
  const float fs = static_cast<float>(8 << s);
  const auto row = static_cast<float>(i / cols);
  const auto col = static_cast<float>(i % cols);
  const float* bb = p.bbox[s] + (static_cast<std::size_t>(b) * p.cells[s] + i) * 4;
  const float cx = __fmul_rn(__fadd_rn(col, bb[0]), fs), cy = __fmul_rn(__fadd_rn(row, bb[1]), fs);
  const float w = __fmul_rn(decode_expf(clamp_as_std(bb[2], -10.0f, 10.0f)), fs);
  const float h = __fmul_rn(decode_expf(clamp_as_std(bb[3], -10.0f, 10.0f)), fs);
  const float hw = __fdiv_rn(w, 2.0f), hh = __fdiv_rn(h, 2.0f);
  c.box[0] = __fdiv_rn(__fdiv_rn(__fsub_rn(cx, hw), scale), fw);
  c.box[1] = __fdiv_rn(__fdiv_rn(__fsub_rn(cy, hh), scale), fh);
  c.box[2] = __fdiv_rn(__fdiv_rn(__fadd_rn(cx, hw), scale), fw);
  c.box[3] = __fdiv_rn(__fdiv_rn(__fadd_rn(cy, hh), scale), fh);
  if (!landmarks) return;
  const float* k = p.kps[s] + (static_cast<std::size_t>(b) * p.cells[s] + i) * 10;
  for (int m = 0; m < 5; ++m) {
    c.lm[2 * m] = __fdiv_rn(__fdiv_rn(__fmul_rn(__fadd_rn(k[2 * m], col), fs), scale), fw);
    c.lm[2 * m + 1] = __fdiv_rn(__fdiv_rn(__fmul_rn(__fadd_rn(k[2 * m + 1], row), fs), scale), fh);
  }
}

}  // namespace facetrace::faces::gpu
