/// @file
/// Private, CUDA builds only: the fused conv band of the GPU face program (docs/design/faces.md §8.1 "band
/// kernel"): a 1×1 conv (cin → c) [→ Relu/Clip] → depthwise 3×3 (stride 1, pad 1) [→ Relu/Clip [→ MaxPool 2×2
/// of stride 2]] in one kernel, the 1×1 output never stored. A block takes a tile of output pixels of one image:
/// the input over the tile and its one-pixel halo into shared memory, then per chunk of 16 channels the 1×1
/// outputs over the halo, the depthwise taps, the activation and the pool, stored NCHW. Per output the own direct
/// kernels' arithmetic (Σ over ci in order, the bias, the activation; the taps in (ky, kx) order skipping those
/// outside the image, the bias, the activation; the max of the four, which is order-free after a Relu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "facetrace/core/status.h"

namespace facetrace::faces::gpu {

/// An activation of the band: 0 none, 1 Relu (x > 0 ? x : 0), 2 Clip (min(max(x, lo), hi)).
struct BandAct {
  int kind = 0;
  float lo = 0.0f, hi = 0.0f;
};

struct BandJob {
  int cin = 0, c = 0, h = 0, w = 0;
  BandAct pw_act, dw_act;
  bool pool = false;  ///< MaxPool 2×2 of stride 2 after dw_act (h and w even): the output is c × h/2 × w/2
};

/// Whether the kernel takes the job (sizes, shared memory, 32-bit indices at `batch`).
bool band_fits(const BandJob& j, int batch);
/// x [batch, cin, h, w] → y [batch, c, h, w] (or the pooled size); pw_w [c][cin], dw_w [c][9]; biases may be null.
Status launch_band(const BandJob& j, int batch, const float* x, const float* pw_w, const float* pw_b,
                   const float* dw_w, const float* dw_b, float* y, cudaStream_t s);

}  // namespace facetrace::faces::gpu
