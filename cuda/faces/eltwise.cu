/// @file
/// Element-wise and data-movement kernels of the GPU face program (docs/design/faces.md §8), the CPU
/// interpreter's arithmetic (src/faces/cpu/eltwise.cpp) one element per thread.
#include "faces/eltwise.cuh"

#include "common/cuda_check.cuh"
#include "faces/launch.cuh"

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

__global__ void unary_kernel(UnaryKind k, float lo, float hi, float alpha, float beta, const float* __restrict__ x,
                             float* __restrict__ y, std::int64_t n) {
  FT_FOR_EACH(i, n) y[i] = unary_value(k, x[i], lo, hi, alpha, beta);
}

__global__ void affine_kernel(const float* __restrict__ x, const float* __restrict__ sc,
                              const float* __restrict__ sh, float* __restrict__ y, std::int64_t channels,
                              std::int64_t plane, std::int64_t n) {
  FT_FOR_EACH(i, n) {
    const std::int64_t c = (i / plane) % channels;
    y[i] = __fadd_rn(__fmul_rn(x[i], sc[c]), sh[c]);  // x·scale + shift, two roundings like the CPU
  }
}

__device__ inline float with_bias(float v, const OperandBias& b, std::int64_t i) {
  return b.bias ? __fadd_rn(v, b.bias[(i / b.plane) % b.channels]) : v;
}

__global__ void prelu_kernel(const float* __restrict__ x, const float* __restrict__ sl, float* __restrict__ y,
                             std::int64_t channels, std::int64_t plane, std::int64_t n, OperandBias bias) {
  FT_FOR_EACH(i, n) {
    const float v = with_bias(x[i], bias, i);
    y[i] = v >= 0.0f ? v : __fmul_rn(sl[(i / plane) % channels], v);
  }
}

struct Dims4 {
  std::int64_t d[4], as[4], bs[4];
};

__global__ void binary_kernel(BinaryKind k, Dims4 g, const float* __restrict__ a, std::int64_t abs_,
                              const float* __restrict__ b, std::int64_t bbs, float* __restrict__ y,
                              std::int64_t per_image, std::int64_t n, OperandBias a_bias, OperandBias b_bias) {
  FT_FOR_EACH(i, n) {
    const std::int64_t img = i / per_image;
    std::int64_t r = i - img * per_image;
    std::int64_t ia = 0, ib = 0;  // per-image offsets
    for (int ax = 3; ax >= 0; --ax) {
      const std::int64_t q = r / g.d[ax], j = r - q * g.d[ax];
      ia += j * g.as[ax];
      ib += j * g.bs[ax];
      r = q;
    }
    const float u = with_bias(a[img * abs_ + ia], a_bias, ia), v = with_bias(b[img * bbs + ib], b_bias, ib);
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
  FT_FOR_EACH(i, n) {
    const std::int64_t img = i / per_image_in;
    const std::int64_t r = i - img * per_image_in;
    const std::int64_t o = r / (part * inner), pi = r - o * part * inner;
    y[img * per_image_out + o * total * inner + at * inner + pi] = x[img * xbs + r];
  }
}

__global__ void bias_act_kernel(float* __restrict__ y, const float* __restrict__ bias, std::int64_t channels,
                                std::int64_t plane, EpilogueAct::Kind k, float lo, float hi, std::int64_t n) {
  FT_FOR_EACH(i, n) {
    float v = y[i];
    if (bias) v = __fadd_rn(v, bias[(i / plane) % channels]);
    if (k == EpilogueAct::Kind::kRelu) v = v > 0.0f ? v : 0.0f;
    if (k == EpilogueAct::Kind::kClip) v = fminf(fmaxf(v, lo), hi);
    y[i] = v;
  }
}

__global__ void fill_rows_kernel(float* __restrict__ y, const float* __restrict__ bias, std::int64_t n_cols,
                                 std::int64_t n) {
  FT_FOR_EACH(i, n) y[i] = bias[i % n_cols];
}

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
  unary_kernel<<<blocks_for(n), kThreads, 0, s>>>(u.kind, u.lo, u.hi, u.alpha, u.beta, x, y, n);
  FT_CUDA_LAUNCH_CHECK("unary_kernel", s);
  return {};
}

Status launch_channel_affine(const ChannelAffineOp& a, int batch, const float* x, const float* scale,
                             const float* shift, float* y, cudaStream_t s) {
  const std::int64_t n = a.channels * a.plane * batch;
  affine_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, scale, shift, y, a.channels, a.plane, n);
  FT_CUDA_LAUNCH_CHECK("affine_kernel", s);
  return {};
}

Status launch_channel_prelu(const ChannelPreluOp& p, int batch, const float* x, const float* slope, float* y,
                            cudaStream_t s, OperandBias bias) {
  const std::int64_t n = p.channels * p.plane * batch;
  prelu_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, slope, y, p.channels, p.plane, n, bias);
  FT_CUDA_LAUNCH_CHECK("prelu_kernel", s);
  return {};
}

Status launch_binary(const BinaryOp& op, int batch, const float* a, std::int64_t a_bstride, const float* b,
                     std::int64_t b_bstride, float* y, cudaStream_t s, OperandBias a_bias, OperandBias b_bias) {
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
  binary_kernel<<<blocks_for(n), kThreads, 0, s>>>(op.kind, g, a, a_bstride, b, b_bstride, y, per, n, a_bias,
                                                   b_bias);
  FT_CUDA_LAUNCH_CHECK("binary_kernel", s);
  return {};
}

Status launch_strided_copy(const TransposeOp& op, int batch, const float* x, std::int64_t x_bstride, float* y,
                           cudaStream_t s) {
  const std::size_t rank = op.dims.size();
  if (rank > 4 || op.strides.size() != rank)
    return Status(Code::kDeclined, "strided copy of rank " + std::to_string(rank) + " (the GPU takes rank <= 4)");
  Copy4 g{};
  align4(op.dims, op.strides, rank, g.d, g.s);
  const std::int64_t per = g.d[0] * g.d[1] * g.d[2] * g.d[3];
  if (per <= 0) return {};
  const std::int64_t n = per * batch;
  strided_copy_kernel<<<blocks_for(n), kThreads, 0, s>>>(g, op.offset, x, x_bstride, y, per, n);
  FT_CUDA_LAUNCH_CHECK("strided_copy_kernel", s);
  return {};
}

Status launch_pad(const PadOp& op, int batch, const float* x, std::int64_t x_bstride, float* y, cudaStream_t s) {
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
  pad_kernel<<<blocks_for(n), kThreads, 0, s>>>(g, op.value, x, x_bstride, y, per, n);
  FT_CUDA_LAUNCH_CHECK("pad_kernel", s);
  return {};
}

Status launch_concat_part(std::int64_t outer, std::int64_t part, std::int64_t inner, std::int64_t total,
                          std::int64_t at, int batch, const float* x, std::int64_t x_bstride, float* y,
                          cudaStream_t s) {
  const std::int64_t per_in = outer * part * inner, per_out = outer * total * inner;
  if (per_in <= 0) return {};
  const std::int64_t n = per_in * batch;
  concat_kernel<<<blocks_for(n), kThreads, 0, s>>>(part, inner, total, at, x, x_bstride, y, per_in, per_out, n);
  FT_CUDA_LAUNCH_CHECK("concat_kernel", s);
  return {};
}

Status launch_bias_act(float* y, const float* bias, std::int64_t channels, std::int64_t plane, int batch,
                       EpilogueAct act, cudaStream_t s) {
  const std::int64_t n = channels * plane * batch;
  bias_act_kernel<<<blocks_for(n), kThreads, 0, s>>>(y, bias, channels, plane, act.kind, act.lo, act.hi, n);
  FT_CUDA_LAUNCH_CHECK("bias_act_kernel", s);
  return {};
}

Status launch_fill_rows(float* y, const float* bias, std::int64_t n, int batch, cudaStream_t s) {
  const std::int64_t total = n * batch;
  fill_rows_kernel<<<blocks_for(total), kThreads, 0, s>>>(y, bias, n, total);
  FT_CUDA_LAUNCH_CHECK("fill_rows_kernel", s);
  return {};
}

}  // namespace facetrace::faces::gpu
