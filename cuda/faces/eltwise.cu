/// @file
/// Element-wise and data-movement kernels of the GPU face program (docs/design/faces.md §8), the CPU
/// interpreter's arithmetic (src/faces/cpu/eltwise.cpp) one element per thread.
#include "faces/eltwise.cuh"

#include "common/cuda_check.cuh"
#include "faces/launch.cuh"

#include <cstdlib>

namespace facetrace::faces::gpu {
namespace {

__device__ inline float unary_value(UnaryKind k, float x, float lo, float hi, float alpha, float beta) {
  switch (k) {
    case UnaryKind::kRelu: return x > 0.0f ? x : 0.0f;
    case UnaryKind::kSigmoid: return 1.0f / (1.0f + expf(-x));
    case UnaryKind::kClip: return fminf(fmaxf(x, lo), hi);
    case UnaryKind::kLeakyRelu: return x >= 0.0f ? x : alpha * x;
    case UnaryKind::kTanh: return tanhf(x);
    case UnaryKind::kHardSigmoid: return fmaxf(0.0f, fminf(1.0f, alpha * x + beta));
    case UnaryKind::kHardSwish: return x * fmaxf(0.0f, fminf(1.0f, x / 6.0f + 0.5f));
    case UnaryKind::kSqrt: return sqrtf(x);
  }
  return x;
}

__global__ void unary_kernel(UnaryKind k, float lo, float hi, float alpha, float beta,
                             const float* __restrict__ x, float* __restrict__ y, std::int64_t n) {
  pdl_entry();
  FT_FOR_EACH(i, n) y[i] = unary_value(k, x[i], lo, hi, alpha, beta);
}

template <class I>
__global__ void affine_kernel(const float* __restrict__ x, const float* __restrict__ sc,
                              const float* __restrict__ sh, float* __restrict__ y, I channels, I plane, I n) {
  pdl_entry();
  FT_FOR_EACH_T(I, i, n) {
    const I c = (i / plane) % channels;
    y[i] = __fadd_rn(__fmul_rn(x[i], sc[c]), sh[c]);  // x·scale + shift, two roundings like the CPU
  }
}

template <class I>
__device__ inline float with_bias(float v, const OperandBias& b, I i) {
  return b.bias ? __fadd_rn(v, b.bias[(i / static_cast<I>(b.plane)) % static_cast<I>(b.channels)]) : v;
}

template <class I>
__global__ void prelu_kernel(const float* __restrict__ x, const float* __restrict__ sl, float* __restrict__ y,
                             I channels, I plane, I n, OperandBias bias) {
  pdl_entry();
  FT_FOR_EACH_T(I, i, n) {
    const float v = with_bias<I>(x[i], bias, i);
    y[i] = v >= 0.0f ? v : __fmul_rn(sl[(i / plane) % channels], v);
  }
}

struct Dims4 {
  std::int64_t d[4], as[4], bs[4];
};

template <class I>
__global__ void binary_kernel(BinaryKind k, Dims4 g, const float* __restrict__ a, I abs_,
                              const float* __restrict__ b, I bbs, float* __restrict__ y, I per_image, I n,
                              OperandBias a_bias, OperandBias b_bias) {
  pdl_entry();
  I d[4], as[4], bs[4];
  for (int ax = 0; ax < 4; ++ax)
    d[ax] = static_cast<I>(g.d[ax]), as[ax] = static_cast<I>(g.as[ax]), bs[ax] = static_cast<I>(g.bs[ax]);
  FT_FOR_EACH_T(I, i, n) {
    const I img = i / per_image;
    I r = i - img * per_image;
    I ia = 0, ib = 0;  // per-image offsets
#pragma unroll
    for (int ax = 3; ax >= 0; --ax) {
      const I q = r / d[ax], j = r - q * d[ax];
      ia += j * as[ax];
      ib += j * bs[ax];
      r = q;
    }
    const float u = with_bias<I>(a[img * abs_ + ia], a_bias, ia),
                v = with_bias<I>(b[img * bbs + ib], b_bias, ib);
    float o;
    switch (k) {
      case BinaryKind::kAdd: o = __fadd_rn(u, v); break;
      case BinaryKind::kSub: o = __fsub_rn(u, v); break;
      case BinaryKind::kMul: o = __fmul_rn(u, v); break;
      default: o = __fdiv_rn(u, v); break;
    }
    y[i] = o;
  }
}

struct Copy4 {
  std::int64_t d[4], s[4];
};

__global__ void strided_copy_kernel(Copy4 g, std::int64_t offset, const float* __restrict__ x,
                                    std::int64_t xbs, float* __restrict__ y, std::int64_t per_image,
                                    std::int64_t n) {
  pdl_entry();
  FT_FOR_EACH(i, n) {
    const std::int64_t img = i / per_image;
    std::int64_t r = i - img * per_image;
    std::int64_t at = img * xbs + offset;
    for (int ax = 3; ax >= 0; --ax) {
      const std::int64_t q = r / g.d[ax];
      at += (r - q * g.d[ax]) * g.s[ax];
      r = q;
    }
    y[i] = x[at];
  }
}

struct Pad4 {
  std::int64_t in[4], begin[4], out[4];
};

__global__ void pad_kernel(Pad4 g, float value, const float* __restrict__ x, std::int64_t xbs,
                           float* __restrict__ y, std::int64_t per_image, std::int64_t n) {
  pdl_entry();
  FT_FOR_EACH(i, n) {
    const std::int64_t img = i / per_image;
    std::int64_t r = i - img * per_image;
    std::int64_t at = 0, mul = 1;
    bool inside = true;
    for (int ax = 3; ax >= 0; --ax) {
      const std::int64_t q = r / g.out[ax], j = r - q * g.out[ax] - g.begin[ax];
      inside = inside && j >= 0 && j < g.in[ax];
      at += j * mul;
      mul *= g.in[ax];
      r = q;
    }
    y[i] = inside ? x[img * xbs + at] : value;
  }
}

__global__ void concat_kernel(std::int64_t part, std::int64_t inner, std::int64_t total, std::int64_t at,
                              const float* __restrict__ x, std::int64_t xbs, float* __restrict__ y,
                              std::int64_t per_image_in, std::int64_t per_image_out, std::int64_t n) {
  pdl_entry();
  FT_FOR_EACH(i, n) {
    const std::int64_t img = i / per_image_in;
    const std::int64_t r = i - img * per_image_in;
    const std::int64_t o = r / (part * inner), pi = r - o * part * inner;
    y[img * per_image_out + o * total * inner + at * inner + pi] = x[img * xbs + r];
  }
}

template <class I>
__global__ void bias_act_kernel(float* __restrict__ y, const float* __restrict__ bias, I channels, I plane,
                                EpilogueAct e, I n) {
  pdl_entry();
  const I per_image = channels * plane;
  FT_FOR_EACH_T(I, i, n) {
    float v = y[i];
    const I img = i / per_image, at = i - img * per_image, c = at / plane;
    if (bias) v = __fadd_rn(v, bias[c]);
    y[i] = apply_epilogue(e, v, c, img, at);
  }
}

__global__ void fill_rows_kernel(float* __restrict__ y, const float* __restrict__ bias, std::int64_t n_cols,
                                 std::int64_t n) {
  pdl_entry();
  FT_FOR_EACH(i, n) y[i] = bias[i % n_cols];
}

// Channels-last forms (docs/design/faces.md §8.3): plane 1, C a multiple of 4, four consecutive channels of one
// pixel per thread as one float4; the per-element arithmetic of the scalar kernels above (the same bits).
__global__ void bias_act_c4_kernel(float* __restrict__ y, const float* __restrict__ bias, int C,
                                   EpilogueAct e, int n4) {
  pdl_entry();
  FT_FOR_EACH_T(int, q, n4) {
    const int i = 4 * q, pix = i / C, c = i - pix * C;
    float4 v = reinterpret_cast<float4*>(y)[q];
    float r[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float t = r[k];
      if (bias) t = __fadd_rn(t, bias[c + k]);
      r[k] = apply_epilogue(e, t, c + k, pix, c + k);
    }
    reinterpret_cast<float4*>(y)[q] = make_float4(r[0], r[1], r[2], r[3]);
  }
}

__global__ void affine_c4_kernel(const float* __restrict__ x, const float* __restrict__ sc,
                                 const float* __restrict__ sh, float* __restrict__ y, int C, int n4) {
  pdl_entry();
  FT_FOR_EACH_T(int, q, n4) {
    const int c = (4 * q) % C;
    const float4 v = reinterpret_cast<const float4*>(x)[q];
    reinterpret_cast<float4*>(y)[q] = make_float4(
        __fadd_rn(__fmul_rn(v.x, sc[c]), sh[c]), __fadd_rn(__fmul_rn(v.y, sc[c + 1]), sh[c + 1]),
        __fadd_rn(__fmul_rn(v.z, sc[c + 2]), sh[c + 2]), __fadd_rn(__fmul_rn(v.w, sc[c + 3]), sh[c + 3]));
  }
}

__global__ void prelu_c4_kernel(const float* __restrict__ x, const float* __restrict__ sl,
                                float* __restrict__ y, int C, int n4, const float* __restrict__ bias) {
  pdl_entry();
  FT_FOR_EACH_T(int, q, n4) {
    const int c = (4 * q) % C;
    const float4 v = reinterpret_cast<const float4*>(x)[q];
    float r[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float t = bias ? __fadd_rn(r[k], bias[c + k]) : r[k];
      r[k] = t >= 0.0f ? t : __fmul_rn(sl[c + k], t);
    }
    reinterpret_cast<float4*>(y)[q] = make_float4(r[0], r[1], r[2], r[3]);
  }
}

// Per image a [R][S] matrix to [S][R] through 32×32 tiles of shared memory (the layout conversions).
__global__ void transpose2d_kernel(const float* __restrict__ x, std::int64_t xbs, float* __restrict__ y,
                                   int R, int S) {
  pdl_entry();
  __shared__ float t[32][33];
  const float* xi = x + static_cast<std::int64_t>(blockIdx.z) * xbs;
  float* yi = y + static_cast<std::int64_t>(blockIdx.z) * R * S;
  const int s0 = static_cast<int>(blockIdx.x) * 32, r0 = static_cast<int>(blockIdx.y) * 32;
  const int tx = static_cast<int>(threadIdx.x);
  for (int k = static_cast<int>(threadIdx.y); k < 32; k += 8) {
    const int r = r0 + k, c = s0 + tx;
    if (r < R && c < S) t[k][tx] = xi[static_cast<std::int64_t>(r) * S + c];
  }
  __syncthreads();
  for (int k = static_cast<int>(threadIdx.y); k < 32; k += 8) {
    const int c = s0 + k, r = r0 + tx;
    if (r < R && c < S) yi[static_cast<std::int64_t>(c) * R + r] = t[tx][k];
  }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Right-aligns up to 4 dims (missing leading axes: size 1, stride 0).
template <class D, class S>
void align4(const D& dims, const S& strides, std::size_t rank, std::int64_t (&d)[4], std::int64_t (&s)[4]) {
  for (int ax = 0; ax < 4; ++ax) {
    d[ax] = 1;
    s[ax] = 0;
  }
  for (std::size_t k = 0; k < rank; ++k) {
    d[4 - rank + k] = dims[k];
    s[4 - rank + k] = strides[k];
  }
}

}  // namespace

Status launch_unary(const UnaryOp& u, const float* x, float* y, std::int64_t n, cudaStream_t s) {
  pdl_launch(unary_kernel, blocks_for(n), kThreads, 0, s, u.kind, u.lo, u.hi, u.alpha, u.beta, x, y, n);
  FT_CUDA_LAUNCH_CHECK("unary_kernel", s);
  return {};
}

Status launch_channel_affine(const ChannelAffineOp& a, int batch, const float* x, const float* scale,
                             const float* shift, float* y, cudaStream_t s) {
  const std::int64_t n = a.channels * a.plane * batch;
  if (a.plane == 1 && a.channels % 4 == 0 && small_index(n) && aligned16(x) && aligned16(y)) {
    const int n4 = static_cast<int>(n / 4);
    pdl_launch(affine_c4_kernel, blocks_for(n4), kThreads, 0, s, x, scale, shift, y,
               static_cast<int>(a.channels), n4);
    FT_CUDA_LAUNCH_CHECK("affine_c4_kernel", s);
    return {};
  }
  if (small_index(n))
    pdl_launch(affine_kernel<int>, blocks_for(n), kThreads, 0, s, x, scale, shift, y,
               static_cast<int>(a.channels), static_cast<int>(a.plane), static_cast<int>(n));
  else
    pdl_launch(affine_kernel<std::int64_t>, blocks_for(n), kThreads, 0, s, x, scale, shift, y, a.channels,
               a.plane, n);
  FT_CUDA_LAUNCH_CHECK("affine_kernel", s);
  return {};
}

Status launch_channel_prelu(const ChannelPreluOp& p, int batch, const float* x, const float* slope, float* y,
                            cudaStream_t s, OperandBias bias) {
  const std::int64_t n = p.channels * p.plane * batch;
  const bool bias_c4 = !bias.bias || (bias.plane == 1 && bias.channels == p.channels);
  if (p.plane == 1 && p.channels % 4 == 0 && bias_c4 && small_index(n) && aligned16(x) && aligned16(y)) {
    const int n4 = static_cast<int>(n / 4);
    pdl_launch(prelu_c4_kernel, blocks_for(n4), kThreads, 0, s, x, slope, y, static_cast<int>(p.channels), n4,
               bias.bias);
    FT_CUDA_LAUNCH_CHECK("prelu_c4_kernel", s);
    return {};
  }
  if (small_index(n))
    pdl_launch(prelu_kernel<int>, blocks_for(n), kThreads, 0, s, x, slope, y, static_cast<int>(p.channels),
               static_cast<int>(p.plane), static_cast<int>(n), bias);
  else
    pdl_launch(prelu_kernel<std::int64_t>, blocks_for(n), kThreads, 0, s, x, slope, y, p.channels, p.plane, n,
               bias);
  FT_CUDA_LAUNCH_CHECK("prelu_kernel", s);
  return {};
}

Status launch_binary(const BinaryOp& op, int batch, const float* a, std::int64_t a_bstride, const float* b,
                     std::int64_t b_bstride, float* y, cudaStream_t s, OperandBias a_bias,
                     OperandBias b_bias) {
  Dims4 g{};
  std::int64_t per = 1;
  for (int ax = 0; ax < 4; ++ax) {
    g.d[ax] = op.dims[static_cast<std::size_t>(ax)];
    g.as[ax] = op.a_strides[static_cast<std::size_t>(ax)];
    g.bs[ax] = op.b_strides[static_cast<std::size_t>(ax)];
    per *= g.d[ax];
  }
  if (per <= 0) return {};
  const std::int64_t n = per * batch;
  // 32-bit when the output and both operands' reach stay small (strides may be large or negative: check them)
  std::int64_t reach = n + std::max(a_bstride, b_bstride) * batch;
  for (int ax = 0; ax < 4; ++ax) reach += (g.d[ax] + 1) * (std::abs(g.as[ax]) + std::abs(g.bs[ax]));
  if (small_index(reach))
    pdl_launch(binary_kernel<int>, blocks_for(n), kThreads, 0, s, op.kind, g, a, static_cast<int>(a_bstride),
               b, static_cast<int>(b_bstride), y, static_cast<int>(per), static_cast<int>(n), a_bias, b_bias);
  else
    pdl_launch(binary_kernel<std::int64_t>, blocks_for(n), kThreads, 0, s, op.kind, g, a, a_bstride, b,
               b_bstride, y, per, n, a_bias, b_bias);
  FT_CUDA_LAUNCH_CHECK("binary_kernel", s);
  return {};
}

Status launch_strided_copy(const TransposeOp& op, int batch, const float* x, std::int64_t x_bstride, float* y,
                           cudaStream_t s) {
  const std::size_t rank = op.dims.size();
  if (rank > 4 || op.strides.size() != rank)
    return Status(Code::kDeclined,
                  "strided copy of rank " + std::to_string(rank) + " (the GPU takes rank <= 4)");
  Copy4 g{};
  align4(op.dims, op.strides, rank, g.d, g.s);
  const std::int64_t per = g.d[0] * g.d[1] * g.d[2] * g.d[3];
  if (per <= 0) return {};
  // the channels-last conversions (docs/design/faces.md §8.3): a per-image matrix transpose, tiled
  if (rank == 3 && op.offset == 0 && batch <= 65535) {
    const std::int64_t d0 = op.dims[0], d1 = op.dims[1], d2 = op.dims[2];
    std::int64_t R = 0, S = 0;
    if (op.strides[0] == d1 && op.strides[1] == 1 && op.strides[2] == d0 * d1)
      R = d2, S = d0 * d1;  // to NHWC
    if (op.strides[0] == 1 && op.strides[1] == d2 * d0 && op.strides[2] == d0)
      R = d1 * d2, S = d0;  // to NCHW
    if (R > 0 && R < (1 << 30) && S < (1 << 30) && R * S == per) {
      const dim3 grid(static_cast<unsigned>((S + 31) / 32), static_cast<unsigned>((R + 31) / 32),
                      static_cast<unsigned>(batch));
      if (grid.y <= 65535) {
        pdl_launch(transpose2d_kernel, grid, dim3(32, 8), 0, s, x, x_bstride, y, static_cast<int>(R),
                   static_cast<int>(S));
        FT_CUDA_LAUNCH_CHECK("transpose2d_kernel", s);
        return {};
      }
    }
  }
  const std::int64_t n = per * batch;
  pdl_launch(strided_copy_kernel, blocks_for(n), kThreads, 0, s, g, op.offset, x, x_bstride, y, per, n);
  FT_CUDA_LAUNCH_CHECK("strided_copy_kernel", s);
  return {};
}

Status launch_pad(const PadOp& op, int batch, const float* x, std::int64_t x_bstride, float* y,
                  cudaStream_t s) {
  Pad4 g{};
  std::int64_t per = 1;
  for (int ax = 0; ax < 4; ++ax) {
    const auto k = static_cast<std::size_t>(ax);
    g.in[ax] = op.in_dims[k];
    g.begin[ax] = op.begin[k];
    g.out[ax] = op.in_dims[k] + op.begin[k] + op.end[k];
    per *= g.out[ax];
  }
  if (per <= 0) return {};
  const std::int64_t n = per * batch;
  pdl_launch(pad_kernel, blocks_for(n), kThreads, 0, s, g, op.value, x, x_bstride, y, per, n);
  FT_CUDA_LAUNCH_CHECK("pad_kernel", s);
  return {};
}

Status launch_concat_part(std::int64_t outer, std::int64_t part, std::int64_t inner, std::int64_t total,
                          std::int64_t at, int batch, const float* x, std::int64_t x_bstride, float* y,
                          cudaStream_t s) {
  const std::int64_t per_in = outer * part * inner, per_out = outer * total * inner;
  if (per_in <= 0) return {};
  const std::int64_t n = per_in * batch;
  pdl_launch(concat_kernel, blocks_for(n), kThreads, 0, s, part, inner, total, at, x, x_bstride, y, per_in,
             per_out, n);
  FT_CUDA_LAUNCH_CHECK("concat_kernel", s);
  return {};
}

Status launch_bias_act(float* y, const float* bias, std::int64_t channels, std::int64_t plane, int batch,
                       EpilogueAct act, cudaStream_t s) {
  const std::int64_t n = channels * plane * batch;
  if (plane == 1 && channels % 4 == 0 && small_index(n) && aligned16(y) && act.residual_bstride == channels) {
    const int n4 = static_cast<int>(n / 4);
    pdl_launch(bias_act_c4_kernel, blocks_for(n4), kThreads, 0, s, y, bias, static_cast<int>(channels), act,
               n4);
    FT_CUDA_LAUNCH_CHECK("bias_act_c4_kernel", s);
    return {};
  }
  if (small_index(n) && small_index(act.residual_bstride * batch))
    pdl_launch(bias_act_kernel<int>, blocks_for(n), kThreads, 0, s, y, bias, static_cast<int>(channels),
               static_cast<int>(plane), act, static_cast<int>(n));
  else
    pdl_launch(bias_act_kernel<std::int64_t>, blocks_for(n), kThreads, 0, s, y, bias, channels, plane, act,
               n);
  FT_CUDA_LAUNCH_CHECK("bias_act_kernel", s);
  return {};
}

Status launch_fill_rows(float* y, const float* bias, std::int64_t n, int batch, cudaStream_t s) {
  const std::int64_t total = n * batch;
  pdl_launch(fill_rows_kernel, blocks_for(total), kThreads, 0, s, y, bias, n, total);
  FT_CUDA_LAUNCH_CHECK("fill_rows_kernel", s);
  return {};
}

}  // namespace facetrace::faces::gpu
