/// @file
/// Device side of the YuNet preprocessing (docs/design/faces.md §5 letterbox): the per-launch frame table the
/// kernels take by value and the resampling taps, the same arithmetic as detector.cpp's taps() and
/// letterbox_bgr. Included only by cuda/faces/*.cu; the host API is cuda/faces/yunet_gpu.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace facetrace::faces::gpu {

/// Frames per launch: the table travels as a kernel argument (well under the 4 KiB parameter limit).
inline constexpr int kFramesPerLaunch = 32;

/// One frame of a launch. rx, ry: source/placed size ratio per axis, in double as the CPU's taps() has it.
struct PrepFrame {
  const std::uint8_t* rgb;
  int width, height;       // source
  int placed_w, placed_h;  // letterbox: the resized size; native: width, height
  double rx, ry;
  float scale;
  int out_index;  // image index in the batch output
};

struct PrepTable {
  PrepFrame frame[kFramesPerLaunch];
  int frames;
};

/// Calls f(src, weight) for the taps of destination index i of a src→dst resampling with ratio r = src/dst, in
/// the CPU's order: the exact area overlap when shrinking (r ≥ 1), the two half-pixel bilinear taps clamped at
/// the edge when enlarging. Double arithmetic with explicit round-to-nearest steps (no contraction).
template <class F>
__device__ __forceinline__ void for_each_tap(int i, int src, double r, F&& f) {
  if (r >= 1.0) {
    const double a = __dmul_rn(static_cast<double>(i), r), b = __dmul_rn(static_cast<double>(i + 1), r);
    for (int s = static_cast<int>(floor(a)); s < src && s < b; ++s) {
      const double hi = b < static_cast<double>(s + 1) ? b : static_cast<double>(s + 1);  // std::min<double>
      const double lo = static_cast<double>(s) < a ? a : static_cast<double>(s);          // std::max<double>
      const double ov = __dsub_rn(hi, lo);
      if (ov > 0) f(s, static_cast<float>(__ddiv_rn(ov, r)));
    }
  } else {
    const double c0 = __dsub_rn(__dmul_rn(__dadd_rn(static_cast<double>(i), 0.5), r), 0.5);
    const double c = c0 < 0.0 ? 0.0 : c0;  // std::max(c0, 0.0)
    const int fl = static_cast<int>(floor(c));
    const int i0 = src - 1 < fl ? src - 1 : fl;  // std::min
    const float w = static_cast<float>(__dsub_rn(c, static_cast<double>(i0)));
    f(i0, __fsub_rn(1.0f, w));
    f(i0 + 1 < src - 1 ? i0 + 1 : src - 1, w);
  }
}

}  // namespace facetrace::faces::gpu
