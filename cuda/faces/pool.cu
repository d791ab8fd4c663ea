/// @file
/// Pooling and reduction kernels of the GPU face program (docs/design/faces.md §8), one output per thread (or
/// per block for GlobalAverage), each summed in one fixed order.
#include "faces/pool.cuh"

#include "common/cuda_check.cuh"
#include "faces/launch.cuh"

#include <algorithm>
#include <cstdint>

namespace facetrace::faces::gpu {
namespace {

__global__ void maxpool_kernel(MaxPoolOp m, const float* __restrict__ x, float* __restrict__ y,
                               std::int64_t n) {
  pdl_entry();
  FT_FOR_EACH(i, n) {
    const std::int64_t ox = i % m.ow, oy = (i / m.ow) % m.oh,
                       pc = i / (m.ow * m.oh);  // pc: image·channels + c
    const float* in = x + pc * m.h * m.w;
    const std::int64_t y0 = oy * m.sh - m.pt, x0 = ox * m.sw - m.pl;
    bool any = false;
    float best = 0.0f;
    for (std::int64_t ky = 0; ky < m.kh; ++ky) {
      const std::int64_t iy = y0 + ky;
      if (iy < 0 || iy >= m.h) continue;
      for (std::int64_t kx = 0; kx < m.kw; ++kx) {
        const std::int64_t ix = x0 + kx;
        if (ix < 0 || ix >= m.w) continue;
        const float v = in[iy * m.w + ix];
        best = !any ? v : (v > best ? v : best);
        any = true;
      }
    }
    y[i] = best;
  }
}

// maxpool_kernel in index type I (32-bit where every index fits), the window fixed at compile time when K > 0:
// the same taps in the same order, so the same result.
template <int K, class I>
__global__ void maxpool_small_kernel(MaxPoolOp m, const float* __restrict__ x, float* __restrict__ y, I n) {
  pdl_entry();
  const I h = static_cast<I>(m.h), w = static_cast<I>(m.w), oh = static_cast<I>(m.oh),
          ow = static_cast<I>(m.ow);
  const I kh = K > 0 ? K : static_cast<I>(m.kh), kw = K > 0 ? K : static_cast<I>(m.kw);
  const I sh = static_cast<I>(m.sh), sw = static_cast<I>(m.sw);
  FT_FOR_EACH_T(I, i, n) {
    const I q = i / ow, ox = i - q * ow;
    const I pc = q / oh, oy = q - pc * oh;
    const float* in = x + pc * h * w;
    const I y0 = oy * sh - static_cast<I>(m.pt), x0 = ox * sw - static_cast<I>(m.pl);
    bool any = false;
    float best = 0.0f;
#pragma unroll
    for (I ky = 0; ky < kh; ++ky) {
      const I iy = y0 + ky;
      if (iy < 0 || iy >= h) continue;
#pragma unroll
      for (I kx = 0; kx < kw; ++kx) {
        const I ix = x0 + kx;
        if (ix < 0 || ix >= w) continue;
        const float v = in[iy * w + ix];
        best = !any ? v : (v > best ? v : best);
        any = true;
      }
    }
    y[i] = best;
  }
}

// 2×2 windows of stride 2 without pads over planes of a width that is a multiple of 4 (oh = h/2, ow = w/2):
// two adjacent outputs per thread from one float4 of each input row, the taps in maxpool_kernel's order.
__global__ void maxpool2x2_x2_kernel(int h, int w, int oh, int ow, const float* __restrict__ x,
                                     float* __restrict__ y, int n) {
  pdl_entry();
  const int ow2 = ow / 2;
  FT_FOR_EACH_T(int, i, n) {
    const int q = i / ow2, ox0 = (i - q * ow2) * 2;
    const int pc = q / oh, oy = q - pc * oh;
    const float* in = x + static_cast<std::int64_t>(pc) * h * w + (2 * oy) * w + 2 * ox0;
    const float4 a = __ldg(reinterpret_cast<const float4*>(in));
    const float4 b = __ldg(reinterpret_cast<const float4*>(in + w));
    const auto mx = [](float best, float v) { return v > best ? v : best; };
    float2 r;
    r.x = mx(mx(mx(a.x, a.y), b.x), b.y);
    r.y = mx(mx(mx(a.z, a.w), b.z), b.w);
    *reinterpret_cast<float2*>(y + static_cast<std::int64_t>(q) * ow + ox0) = r;
  }
}

__global__ void avgpool_kernel(AvgPoolOp a, const float* __restrict__ x, float* __restrict__ y,
                               std::int64_t n) {
  pdl_entry();
  FT_FOR_EACH(i, n) {
    const std::int64_t ox = i % a.ow, oy = (i / a.ow) % a.oh, pc = i / (a.ow * a.oh);
    const float* in = x + pc * a.h * a.w;
    const std::int64_t y0 = oy * a.sh - a.pt, x0 = ox * a.sw - a.pl;
    float sum = 0.0f;
    std::int64_t real = 0, padded = 0;
    for (std::int64_t ky = 0; ky < a.kh; ++ky) {
      const std::int64_t iy = y0 + ky;
      const bool in_pad_y = iy >= -a.pt && iy < a.h + a.pb;
      for (std::int64_t kx = 0; kx < a.kw; ++kx) {
        const std::int64_t ix = x0 + kx;
        if (in_pad_y && ix >= -a.pl && ix < a.w + a.pr) ++padded;
        if (iy < 0 || iy >= a.h || ix < 0 || ix >= a.w) continue;
        sum = __fadd_rn(sum, in[iy * a.w + ix]);
        ++real;
      }
    }
    const std::int64_t count = a.count_include_pad ? padded : real;
    y[i] = count > 0 ? sum / static_cast<float>(count) : 0.0f;
  }
}

constexpr int kReduceThreads = 256;

__global__ void global_average_kernel(const float* __restrict__ x, float* __restrict__ y,
                                      std::int64_t plane) {
  pdl_entry();
  __shared__ double part[kReduceThreads];
  const float* in = x + static_cast<std::int64_t>(blockIdx.x) * plane;
  double s = 0.0;
  for (std::int64_t i = threadIdx.x; i < plane; i += kReduceThreads) s += in[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int h = kReduceThreads / 2; h > 0; h /= 2) {
    if (static_cast<int>(threadIdx.x) < h) part[threadIdx.x] += part[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[blockIdx.x] = static_cast<float>(part[0] / static_cast<double>(plane));
}

__global__ void reduce_mean_kernel(ReduceMeanOp r, const float* __restrict__ x, float* __restrict__ y,
                                   std::int64_t n) {
  pdl_entry();
  FT_FOR_EACH(i, n) {
    const std::int64_t in_i = i % r.inner, o = i / r.inner;  // o: image·outer + outer index
    const float* p = x + o * r.len * r.inner + in_i;
    double s = 0.0;
    for (std::int64_t k = 0; k < r.len; ++k) s += p[k * r.inner];
    y[i] = static_cast<float>(s / static_cast<double>(r.len));
  }
}

__global__ void softmax_kernel(SoftmaxOp m, const float* __restrict__ x, float* __restrict__ y,
                               std::int64_t n) {
  pdl_entry();
  FT_FOR_EACH(i, n) {
    const std::int64_t in_i = i % m.inner, o = i / m.inner;
    const std::int64_t base = o * m.axis * m.inner + in_i;
    float mx = x[base];
    for (std::int64_t k = 1; k < m.axis; ++k) mx = fmaxf(mx, x[base + k * m.inner]);
    double sum = 0.0;  // in double, as the CPU interpreter
    for (std::int64_t k = 0; k < m.axis; ++k) {
      const float e = expf(x[base + k * m.inner] - mx);
      y[base + k * m.inner] = e;
      sum += e;
    }
    const auto inv = static_cast<float>(sum);
    for (std::int64_t k = 0; k < m.axis; ++k) y[base + k * m.inner] = y[base + k * m.inner] / inv;
  }
}

}  // namespace

Status launch_maxpool(const MaxPoolOp& m, int batch, const float* x, float* y, cudaStream_t s) {
  const std::int64_t n = m.channels * m.oh * m.ow * batch;
  if (n <= 0) return {};
  const bool aligned =
      reinterpret_cast<std::uintptr_t>(x) % 16 == 0 && reinterpret_cast<std::uintptr_t>(y) % 8 == 0;
  if (m.kh == 2 && m.kw == 2 && m.sh == 2 && m.sw == 2 && m.pt == 0 && m.pl == 0 && m.w % 4 == 0 &&
      m.oh * 2 == m.h && m.ow * 2 == m.w && aligned && small_index(m.channels * m.h * m.w * batch)) {
    const int half = static_cast<int>(n / 2);
    pdl_launch(maxpool2x2_x2_kernel, blocks_for(half), kThreads, 0, s, static_cast<int>(m.h),
               static_cast<int>(m.w), static_cast<int>(m.oh), static_cast<int>(m.ow), x, y, half);
    FT_CUDA_LAUNCH_CHECK("maxpool2x2_x2_kernel", s);
    return {};
  }
  if (small_index(std::max(n, m.channels * m.h * m.w * batch))) {
    const int n32 = static_cast<int>(n);
    if (m.kh == 2 && m.kw == 2)
      pdl_launch(maxpool_small_kernel<2, int>, blocks_for(n), kThreads, 0, s, m, x, y, n32);
    else if (m.kh == 3 && m.kw == 3)
      pdl_launch(maxpool_small_kernel<3, int>, blocks_for(n), kThreads, 0, s, m, x, y, n32);
    else
      pdl_launch(maxpool_small_kernel<0, int>, blocks_for(n), kThreads, 0, s, m, x, y, n32);
    FT_CUDA_LAUNCH_CHECK("maxpool_small_kernel", s);
    return {};
  }
  pdl_launch(maxpool_kernel, blocks_for(n), kThreads, 0, s, m, x, y, n);
  FT_CUDA_LAUNCH_CHECK("maxpool_kernel", s);
  return {};
}

Status launch_avgpool(const AvgPoolOp& a, int batch, const float* x, float* y, cudaStream_t s) {
  const std::int64_t n = a.channels * a.oh * a.ow * batch;
  if (n <= 0) return {};
  pdl_launch(avgpool_kernel, blocks_for(n), kThreads, 0, s, a, x, y, n);
  FT_CUDA_LAUNCH_CHECK("avgpool_kernel", s);
  return {};
}

Status launch_global_average(const GlobalAverageOp& g, int batch, const float* x, float* y, cudaStream_t s) {
  const std::int64_t rows = g.channels * batch;
  if (rows <= 0) return {};
  if (rows > 0x7fffffff) return Status(Code::kDeclined, "GlobalAverage over more than 2^31 planes");
  pdl_launch(global_average_kernel, static_cast<unsigned>(rows), kReduceThreads, 0, s, x, y, g.plane);
  FT_CUDA_LAUNCH_CHECK("global_average_kernel", s);
  return {};
}

Status launch_reduce_mean(const ReduceMeanOp& r, int batch, const float* x, float* y, cudaStream_t s) {
  const std::int64_t n = r.outer * r.inner * batch;
  if (n <= 0) return {};
  pdl_launch(reduce_mean_kernel, blocks_for(n), kThreads, 0, s, r, x, y, n);
  FT_CUDA_LAUNCH_CHECK("reduce_mean_kernel", s);
  return {};
}

Status launch_softmax(const SoftmaxOp& m, int batch, const float* x, float* y, cudaStream_t s) {
  const std::int64_t n = m.outer * m.inner * batch;
  if (n <= 0 || m.axis <= 0) return {};
  pdl_launch(softmax_kernel, blocks_for(n), kThreads, 0, s, m, x, y, n);
  FT_CUDA_LAUNCH_CHECK("softmax_kernel", s);
  return {};
}

}  // namespace facetrace::faces::gpu
