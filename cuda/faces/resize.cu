/// @file
/// Resize kernels of the GPU face program (docs/design/faces.md §8): one output element per thread, the source
/// coordinate computed in float as the ONNX definition writes it (program.h ResizeCoord / ResizeNearest).
#include "faces/resize.cuh"

#include "common/cuda_check.cuh"
#include "faces/launch.cuh"

namespace facetrace::faces::gpu {
namespace {

// x_in of output coordinate o on an axis of `in` → `out` samples at scale s (ResizeCoord).
__device__ inline float source_coord(ResizeCoord c, std::int64_t o, float s, std::int64_t in,
                                     std::int64_t out) {
  const float xo = static_cast<float>(o);
  switch (c) {
    case ResizeCoord::kAsymmetric: return xo / s;
    case ResizeCoord::kHalfPixel: return (xo + 0.5f) / s - 0.5f;
    case ResizeCoord::kPytorchHalfPixel: return out > 1 ? (xo + 0.5f) / s - 0.5f : 0.0f;
    case ResizeCoord::kAlignCorners:
      return out > 1 ? xo * static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.0f;
  }
  return xo / s;
}

__device__ inline std::int64_t nearest_index(ResizeNearest m, float x, std::int64_t in) {
  float r;
  switch (m) {
    case ResizeNearest::kFloor: r = floorf(x); break;
    case ResizeNearest::kCeil: r = ceilf(x); break;
    case ResizeNearest::kRoundPreferFloor: r = (x == floorf(x) + 0.5f) ? floorf(x) : roundf(x); break;
    default: r = (x == floorf(x) + 0.5f) ? ceilf(x) : roundf(x); break;
  }
  auto i = static_cast<std::int64_t>(r);
  return i < 0 ? 0 : (i > in - 1 ? in - 1 : i);
}

__device__ inline float clampf(float v, float lo, float hi) { return fminf(fmaxf(v, lo), hi); }

__global__ void resize_kernel(ResizeOp r, float sy, float sx, const float* __restrict__ x,
                              float* __restrict__ y, std::int64_t n) {
  pdl_entry();
  FT_FOR_EACH(i, n) {
    const std::int64_t ox = i % r.ow, oy = (i / r.ow) % r.oh, pc = i / (r.ow * r.oh);
    const float* in = x + pc * r.h * r.w;
    if (r.mode == ResizeMode::kNearest) {
      std::int64_t iy, ix;
      if (r.sy > 0 && r.sx > 0) {
        iy = oy / r.sy;
        ix = ox / r.sx;
      } else {
        iy = nearest_index(r.nearest, source_coord(r.coord, oy, sy, r.h, r.oh), r.h);
        ix = nearest_index(r.nearest, source_coord(r.coord, ox, sx, r.w, r.ow), r.w);
      }
      y[i] = in[iy * r.w + ix];
    } else {
      const float fy = clampf(source_coord(r.coord, oy, sy, r.h, r.oh), 0.0f, static_cast<float>(r.h - 1));
      const float fx = clampf(source_coord(r.coord, ox, sx, r.w, r.ow), 0.0f, static_cast<float>(r.w - 1));
      const auto y0 = static_cast<std::int64_t>(floorf(fy)), x0 = static_cast<std::int64_t>(floorf(fx));
      const std::int64_t y1 = y0 + 1 < r.h ? y0 + 1 : r.h - 1, x1 = x0 + 1 < r.w ? x0 + 1 : r.w - 1;
      const float ly = fy - static_cast<float>(y0), lx = fx - static_cast<float>(x0);
      // the CPU interpreter's lerps (src/faces/cpu/ops.cpp), rounded the same way
      const float v00 = in[y0 * r.w + x0], v01 = in[y0 * r.w + x1], v10 = in[y1 * r.w + x0],
                  v11 = in[y1 * r.w + x1];
      const float top = __fadd_rn(v00, __fmul_rn(__fsub_rn(v01, v00), lx));
      const float bot = __fadd_rn(v10, __fmul_rn(__fsub_rn(v11, v10), lx));
      y[i] = __fadd_rn(top, __fmul_rn(__fsub_rn(bot, top), ly));
    }
  }
}

__global__ void resize_binary_kernel(ResizeOp r, BinaryKind k, int side, const float* __restrict__ x,
                                     const float* __restrict__ o, std::int64_t obs, float* __restrict__ y,
                                     std::int64_t per_image, std::int64_t n) {
  pdl_entry();
  const std::int64_t oh = r.h * r.sy, ow = r.w * r.sx;
  FT_FOR_EACH(i, n) {
    const std::int64_t ox = i % ow, oy = (i / ow) % oh, pc = i / (ow * oh);
    const std::int64_t img = i / per_image;
    const float u = x[pc * r.h * r.w + (oy / r.sy) * r.w + ox / r.sx];
    const float v = o[img * obs + (i - img * per_image)];
    const float a = side == 0 ? u : v, b = side == 0 ? v : u;
    float out;
    switch (k) {
      case BinaryKind::kAdd: out = __fadd_rn(a, b); break;
      case BinaryKind::kSub: out = __fsub_rn(a, b); break;
      case BinaryKind::kMul: out = __fmul_rn(a, b); break;
      default: out = __fdiv_rn(a, b); break;
    }
    y[i] = out;
  }
}

}  // namespace

Status launch_resize(const ResizeOp& r, int batch, const float* x, float* y, cudaStream_t s) {
  const std::int64_t n = r.channels * r.oh * r.ow * batch;
  if (n <= 0) return {};
  const float sy = r.scale_y > 0.0f ? r.scale_y : static_cast<float>(r.oh) / static_cast<float>(r.h);
  const float sx = r.scale_x > 0.0f ? r.scale_x : static_cast<float>(r.ow) / static_cast<float>(r.w);
  pdl_launch(resize_kernel, blocks_for(n), kThreads, 0, s, r, sy, sx, x, y, n);
  FT_CUDA_LAUNCH_CHECK("resize_kernel", s);
  return {};
}

Status launch_resize_binary(const ResizeOp& r, BinaryKind kind, int side, int batch, const float* x,
                            const float* o, std::int64_t o_bstride, float* y, cudaStream_t s) {
  if (r.sy <= 0 || r.sx <= 0) return Status(Code::kDeclined, "Resize+Binary fusion of a non-integer resize");
  const std::int64_t per = r.channels * r.h * r.sy * r.w * r.sx;
  const std::int64_t n = per * batch;
  if (n <= 0) return {};
  pdl_launch(resize_binary_kernel, blocks_for(n), kThreads, 0, s, r, kind, side, x, o, o_bstride, y, per, n);
  FT_CUDA_LAUNCH_CHECK("resize_binary_kernel", s);
  return {};
}

}  // namespace facetrace::faces::gpu
