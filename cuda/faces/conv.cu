/// @file
/// Convolutions of the GPU face program (docs/design/faces.md §8): cuDNN descriptors and the plan-time algorithm
/// search (deterministic results only; FP32 mode also CUDNN_FMA_MATH only), and the own direct kernels cuDNN is
/// slow at (depthwise, few output channels per group) or cannot express (asymmetric pads).
#include <cuda_bf16.h>
#include <cudnn.h>

#include "common/cuda_check.cuh"
#include "faces/conv.cuh"
#include "faces/launch.cuh"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

namespace facetrace::faces::gpu {
namespace {

// The geometry of a conv as plain integers (a ConvJob holds shared pointers, which a kernel cannot take).
// The geometry of a conv as plain integers (a ConvJob holds shared pointers, which a kernel cannot take), in the
// index type of the launch: 32-bit when every index fits (64-bit division is many instructions on the GPU).
template <class I>
struct ConvGeom {
  I cin, h, w, cout, cin_g, cout_g, kh, kw, sh, sw, pt, pl, oh, ow, dh, dw;
};

template <class I>
ConvGeom<I> geom_of(const ConvJob& j) {
  const auto c = [](std::int64_t v) { return static_cast<I>(v); };
  return {c(j.cin),
          c(j.h),
          c(j.w),
          c(j.cout),
          c(j.cin / j.groups),
          c(j.cout / j.groups),
          c(j.kh),
          c(j.kw),
          c(j.sh),
          c(j.sw),
          c(j.pt),
          c(j.pl),
          c(j.oh),
          c(j.ow),
          c(j.dh),
          c(j.dw)};
}

// One output per thread: Σ over the group's input channels and the taps in (ci, ky, kx) order, then bias and
// activation. KH/KW > 0 fix the window at compile time (unrolled); 0 reads it from g.
template <int KH, int KW, class I>
__global__ void conv_direct_kernel(ConvGeom<I> g, const float* __restrict__ x, const float* __restrict__ w,
                                   const float* __restrict__ bias, EpilogueAct act, float* __restrict__ y,
                                   I n) {
  pdl_entry();
  const I kh = KH > 0 ? KH : g.kh, kw = KW > 0 ? KW : g.kw;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I q = i / g.ow, ox = i - q * g.ow;
    const I r = q / g.oh, oy = q - r * g.oh;
    const I img = r / g.cout, co = r - img * g.cout;
    const I grp = co / g.cout_g;
    const float* xb = x + (img * g.cin + grp * g.cin_g) * g.h * g.w;
    const float* wb = w + co * g.cin_g * kh * kw;
    const I y0 = oy * g.sh - g.pt, x0 = ox * g.sw - g.pl;
    float acc = 0.0f;
    for (I ci = 0; ci < g.cin_g; ++ci) {
      const float* xc = xb + ci * g.h * g.w;
      const float* wc = wb + ci * kh * kw;
      const bool has_ib = act.in_bias != nullptr;
      const float ib = has_ib ? __ldg(act.in_bias + grp * g.cin_g + ci) : 0.0f;
#pragma unroll
      for (I ky = 0; ky < kh; ++ky) {
        const I iy = y0 + ky * g.dh;
        if (iy < 0 || iy >= g.h) continue;
#pragma unroll
        for (I kx = 0; kx < kw; ++kx) {
          const I ix = x0 + kx * g.dw;
          if (ix < 0 || ix >= g.w) continue;
          const float xv = has_ib ? __fadd_rn(xc[iy * g.w + ix], ib) : xc[iy * g.w + ix];
          acc = fmaf(xv, __ldg(wc + ky * kw + kx), acc);
        }
      }
    }
    if (bias) acc = __fadd_rn(acc, __ldg(bias + co));
    y[i] = apply_epilogue(act, acc, co, img, i - img * g.cout * g.oh * g.ow);
  }
}

// Depthwise 3×3 (dilation 1, stride SW ∈ {1, 2}), four adjacent outputs of a row per thread: the input taps the
// four windows share are loaded once. Per output the same products in the same (ky, kx) order as
// conv_direct_kernel, so both give the same bits.
// kVec (left pad 1, input and output widths multiples of 4, 16-byte aligned planes): the row's taps as float4
// loads from the first window's centre column plus the left halo (and for stride 1 the right one) as scalars,
// the four outputs as one float4 store.
template <int SW, bool kVec>
__global__ void dw3x3_x4_kernel(ConvGeom<int> g, const float* __restrict__ x, const float* __restrict__ w,
                                const float* __restrict__ bias, EpilogueAct act, float* __restrict__ y,
                                int n) {
  pdl_entry();
  constexpr int kSpan = 3 * SW + 3;  // input columns of four windows
  const int ow4 = (g.ow + 3) / 4;
  FT_FOR_EACH_T(int, i, n) {
    const int q = i / ow4, ox0 = (i - q * ow4) * 4;
    const int r = q / g.oh, oy = q - r * g.oh;
    const int img = r / g.cout, co = r - img * g.cout;
    const float* xc = x + (static_cast<std::int64_t>(img) * g.cin + co) * g.h * g.w;
    const float* wc = w + co * 9;
    const bool has_ib = act.in_bias != nullptr;
    const float ib = has_ib ? __ldg(act.in_bias + co) : 0.0f;
    const int y0 = oy * g.sh - g.pt, x0 = ox0 * SW - g.pl;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int ky = 0; ky < 3; ++ky) {
      const int iy = y0 + ky;
      if (iy < 0 || iy >= g.h) continue;
      float v[kSpan];
      bool in[kSpan];
      if constexpr (kVec) {  // x0 = ox0·SW − 1 with ox0·SW a multiple of 4 below g.w
        const float* row = xc + iy * g.w;
        float raw[kSpan];
        raw[0] = x0 >= 0 ? __ldg(row + x0) : 0.0f;
#pragma unroll
        for (int q = 0; q < (kSpan - 1) / 4; ++q) {
          const int at = x0 + 1 + 4 * q;
          const float4 f = at < g.w ? __ldg(reinterpret_cast<const float4*>(row + at)) : float4{0, 0, 0, 0};
          raw[1 + 4 * q] = f.x, raw[2 + 4 * q] = f.y, raw[3 + 4 * q] = f.z, raw[4 + 4 * q] = f.w;
        }
        if constexpr ((kSpan - 1) % 4 != 0)
          raw[kSpan - 1] = x0 + kSpan - 1 < g.w ? __ldg(row + x0 + kSpan - 1) : 0.0f;
#pragma unroll
        for (int t = 0; t < kSpan; ++t) {
          const int ix = x0 + t;
          in[t] = ix >= 0 && ix < g.w;
          const float r = in[t] ? raw[t] : 0.0f;
          v[t] = has_ib ? __fadd_rn(r, ib) : r;
        }
      } else {
#pragma unroll
        for (int t = 0; t < kSpan; ++t) {
          const int ix = x0 + t;
          in[t] = ix >= 0 && ix < g.w;
          const float raw = in[t] ? xc[iy * g.w + ix] : 0.0f;
          v[t] = has_ib ? __fadd_rn(raw, ib) : raw;
        }
      }
#pragma unroll
      for (int kx = 0; kx < 3; ++kx) {
        const float wv = __ldg(wc + ky * 3 + kx);
#pragma unroll
        for (int o = 0; o < 4; ++o)
          if (in[o * SW + kx]) acc[o] = fmaf(v[o * SW + kx], wv, acc[o]);
      }
    }
    const int per_image = g.cout * g.oh * g.ow;
    if constexpr (kVec) {  // ox0 + 3 < g.ow
      float r[4];
#pragma unroll
      for (int o = 0; o < 4; ++o) {
        float a = acc[o];
        if (bias) a = __fadd_rn(a, __ldg(bias + co));
        r[o] = apply_epilogue(act, a, co, img, (co * g.oh + oy) * g.ow + ox0 + o);
      }
      const int at = (co * g.oh + oy) * g.ow + ox0;
      *reinterpret_cast<float4*>(y + static_cast<std::int64_t>(img) * per_image + at) =
          make_float4(r[0], r[1], r[2], r[3]);
      continue;
    }
#pragma unroll
    for (int o = 0; o < 4; ++o) {
      if (ox0 + o >= g.ow) break;
      float a = acc[o];
      if (bias) a = __fadd_rn(a, __ldg(bias + co));
      const int at = (co * g.oh + oy) * g.ow + ox0 + o;
      y[static_cast<std::int64_t>(img) * per_image + at] = apply_epilogue(act, a, co, img, at);
    }
  }
}

// Every output channel of one output pixel per thread (groups 1, a 3×3 window of dilation 1, stride SH × SW of
// 1 or 2, few input channels, cout ≤ CO): a block of 32 × 8 outputs of one image first loads its input window
// (zeros outside the input, the deferred input bias added inside) and the weights ([ci][tap][CO], zero past cout)
// into shared memory, then each thread sums its 27-or-fewer taps for all channels from there. Per output the same
// products in the same (ci, ky, kx) order as conv_direct_kernel; a tap outside the input adds fmaf(0, w, acc) =
// acc (acc is never −0), so both give the same bits. A stem conv (YuNet's 3 → 16, stride 2) reads its input once.
inline constexpr int kStemTileW = 32, kStemTileH = 8;
template <int CO, int SH, int SW>
__global__ void __launch_bounds__(kStemTileW* kStemTileH)
    conv_allco3x3_kernel(ConvGeom<int> g, const float* __restrict__ x, const float* __restrict__ w,
                         const float* __restrict__ bias, EpilogueAct act, float* __restrict__ y, int tiles_x,
                         int tiles_y) {
  pdl_entry();
  constexpr int kIw = (kStemTileW - 1) * SW + 3, kIh = (kStemTileH - 1) * SH + 3;
  extern __shared__ float4 stem_shared[];
  float* ws = reinterpret_cast<float*>(stem_shared);  // [ci][9][CO]
  float* xs = ws + g.cin * 9 * CO;                    // [ci][kIh][kIw]
  const int t = static_cast<int>(threadIdx.x);
  const int nw = g.cin * 9 * CO;
  for (int i = t; i < nw; i += kStemTileW * kStemTileH) {
    const int co = i % CO, tap = i / CO;  // tap = ci·9 + k
    ws[i] = co < g.cout ? __ldg(w + co * g.cin * 9 + tap) : 0.0f;
  }
  int b = static_cast<int>(blockIdx.x);
  const int tx = b % tiles_x;
  b /= tiles_x;
  const int ty = b % tiles_y, img = b / tiles_y;
  const int ox0 = tx * kStemTileW, oy0 = ty * kStemTileH;
  const int ix0 = ox0 * SW - g.pl, iy0 = oy0 * SH - g.pt;
  const float* xb = x + static_cast<std::int64_t>(img) * g.cin * g.h * g.w;
  const int nx = g.cin * kIh * kIw;
#pragma unroll 4
  for (int i = t; i < nx; i += kStemTileW * kStemTileH) {
    const int c = i % kIw, q = i / kIw;
    const int r = q % kIh, ci = q / kIh;
    const int iy = iy0 + r, ix = ix0 + c;
    float v = 0.0f;
    if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) {
      v = __ldg(xb + (ci * g.h + iy) * g.w + ix);
      if (act.in_bias) v = __fadd_rn(v, __ldg(act.in_bias + ci));
    }
    xs[i] = v;
  }
  __syncthreads();
  const int lx = t % kStemTileW, ly = t / kStemTileW;
  const int ox = ox0 + lx, oy = oy0 + ly;
  if (ox >= g.ow || oy >= g.oh) return;
  float acc[CO];
#pragma unroll
  for (int co = 0; co < CO; ++co) acc[co] = 0.0f;
  for (int ci = 0; ci < g.cin; ++ci) {
    const float* xc = xs + (ci * kIh + ly * SH) * kIw + lx * SW;
    const float4* wc = reinterpret_cast<const float4*>(ws + ci * 9 * CO);
#pragma unroll
    for (int k = 0; k < 9; ++k) {
      const float xv = xc[(k / 3) * kIw + k % 3];
#pragma unroll
      for (int q = 0; q < CO / 4; ++q) {
        const float4 wv = wc[k * (CO / 4) + q];
        acc[4 * q + 0] = fmaf(xv, wv.x, acc[4 * q + 0]);
        acc[4 * q + 1] = fmaf(xv, wv.y, acc[4 * q + 1]);
        acc[4 * q + 2] = fmaf(xv, wv.z, acc[4 * q + 2]);
        acc[4 * q + 3] = fmaf(xv, wv.w, acc[4 * q + 3]);
      }
    }
  }
  const int plane_out = g.oh * g.ow, r = oy * g.ow + ox;
  float* yb = y + static_cast<std::int64_t>(img) * g.cout * plane_out;
#pragma unroll
  for (int co = 0; co < CO; ++co) {
    if (co >= g.cout) break;
    float a = acc[co];
    if (bias) a = __fadd_rn(a, __ldg(bias + co));
    yb[co * plane_out + r] = apply_epilogue(act, a, co, img, co * plane_out + r);
  }
}

// A dense 1×1 conv of stride 1 without pads (NCHW: a matrix product per image), PX adjacent pixels (4: one float4,
// or 1) × CT output channels per thread. Block b takes channel group b mod groups of pixel block b / groups, so
// the groups that read the same input run side by side; the group's weights sit in shared memory as [ci][CT] and
// are read as broadcasts. The one-pixel forms load kU input rows before their products, so a small plane's few
// threads keep kU loads in flight. Per output the same products in the same ci order as conv_direct_kernel<1, 1>, then the
// bias and the epilogue: the same bits. PX 1 and small CT give a small plane (YuNet's 20×20 at batch 1) enough
// threads to spread over the device.
template <int CT, int PX>
__global__ void pw1x1_kernel(int cin, int cout, int plane, int units, int total, int groups,
                             const float* __restrict__ x, const float* __restrict__ w,
                             const float* __restrict__ bias, EpilogueAct act, float* __restrict__ y) {
  static_assert(PX == 1 || PX == 4);
  pdl_entry();
  extern __shared__ float4 pw_shared[];
  float* ws = reinterpret_cast<float*>(pw_shared);  // [ci][CT]
  const int cg = static_cast<int>(blockIdx.x) % groups;
  const int pb = static_cast<int>(blockIdx.x) / groups;
  const int co0 = cg * CT;
#pragma unroll 4
  for (int i = static_cast<int>(threadIdx.x); i < cin * CT; i += static_cast<int>(blockDim.x)) {
    const int c = i % CT, ci = i / CT;
    ws[i] = co0 + c < cout ? __ldg(w + static_cast<std::int64_t>(co0 + c) * cin + ci) : 0.0f;
  }
  __syncthreads();
  const int q = pb * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
  if (q >= total) return;
  const int img = q / units, p = (q - img * units) * PX;
  const float* xb = x + static_cast<std::int64_t>(img) * cin * plane + p;
  float acc[CT][PX];
#pragma unroll
  for (int c = 0; c < CT; ++c)
#pragma unroll
    for (int e = 0; e < PX; ++e) acc[c][e] = 0.0f;
  const bool has_ib = act.in_bias != nullptr;
  struct Row {
    float v[PX];
  };
  const auto row = [&](int ci) {
    Row r;
    const float* at = xb + static_cast<std::int64_t>(ci) * plane;
    if constexpr (PX == 4) {
      const float4 f = __ldg(reinterpret_cast<const float4*>(at));
      r.v[0] = f.x, r.v[1] = f.y, r.v[2] = f.z, r.v[3] = f.w;
    } else {
      r.v[0] = __ldg(at);
    }
    return r;
  };
  const auto add = [&](Row r, int ci) {
    if (has_ib) {
      const float ib = __ldg(act.in_bias + ci);
#pragma unroll
      for (int e = 0; e < PX; ++e) r.v[e] = __fadd_rn(r.v[e], ib);
    }
    float wk[CT];
    if constexpr (CT % 4 == 0) {
      const float4* wc = reinterpret_cast<const float4*>(ws + ci * CT);
#pragma unroll
      for (int k = 0; k < CT / 4; ++k) {
        const float4 wv = wc[k];
        wk[4 * k] = wv.x, wk[4 * k + 1] = wv.y, wk[4 * k + 2] = wv.z, wk[4 * k + 3] = wv.w;
      }
    } else {
#pragma unroll
      for (int c = 0; c < CT; ++c) wk[c] = ws[ci * CT + c];
    }
#pragma unroll
    for (int c = 0; c < CT; ++c)
#pragma unroll
      for (int e = 0; e < PX; ++e) acc[c][e] = fmaf(r.v[e], wk[c], acc[c][e]);
  };
  constexpr int kU =
      PX == 1 ? 8 : 1;  // the float4 forms: more loads in flight cost occupancy on large planes
  int ci = 0;
  for (; ci + kU <= cin; ci += kU) {
    Row v[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) v[u] = row(ci + u);
#pragma unroll
    for (int u = 0; u < kU; ++u) add(v[u], ci + u);
  }
  for (; ci < cin; ++ci) add(row(ci), ci);
  float* yb = y + static_cast<std::int64_t>(img) * cout * plane + p;
#pragma unroll
  for (int c = 0; c < CT; ++c) {
    const int co = co0 + c;
    if (co >= cout) break;
    float r[PX];
#pragma unroll
    for (int e = 0; e < PX; ++e) {
      float a = acc[c][e];
      if (bias) a = __fadd_rn(a, __ldg(bias + co));
      r[e] = apply_epilogue(act, a, co, img, static_cast<std::int64_t>(co) * plane + p + e);
    }
    if constexpr (PX == 4)
      *reinterpret_cast<float4*>(yb + static_cast<std::int64_t>(co) * plane) =
          make_float4(r[0], r[1], r[2], r[3]);
    else
      yb[static_cast<std::int64_t>(co) * plane] = r[0];
  }
}

template <class I>
void launch_direct(const ConvJob& j, I n, const float* x, const float* w, const float* bias, EpilogueAct act,
                   float* y, cudaStream_t s) {
  const ConvGeom<I> g = geom_of<I>(j);
  if (g.kh == 3 && g.kw == 3)
    pdl_launch(conv_direct_kernel<3, 3, I>, blocks_for(n), kThreads, 0, s, g, x, w, bias, act, y, n);
  else if (g.kh == 1 && g.kw == 1)
    pdl_launch(conv_direct_kernel<1, 1, I>, blocks_for(n), kThreads, 0, s, g, x, w, bias, act, y, n);
  else
    pdl_launch(conv_direct_kernel<0, 0, I>, blocks_for(n), kThreads, 0, s, g, x, w, bias, act, y, n);
}

std::string shape_text(const ConvJob& j) {
  return std::to_string(j.cin) + "->" + std::to_string(j.cout) + " g" + std::to_string(j.groups) + " k" +
         std::to_string(j.kh) + "x" + std::to_string(j.kw) + " s" + std::to_string(j.sh) + " " +
         std::to_string(j.h) + "x" + std::to_string(j.w);
}

const char* algo_name(cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "ALGO";
  }
}

// Median-free mean of `reps` runs after one warm-up, in microseconds, on `s`.
template <class F>
Expected<float> time_us(F&& f, cudaStream_t s, int reps = 3) {
  cudaEvent_t a = nullptr, b = nullptr;
  FT_CUDA_TRY(cudaEventCreate(&a));
  if (const cudaError_t e = cudaEventCreate(&b); e != cudaSuccess) {
    FT_CUDA_IGNORE(cudaEventDestroy(a));
    return runtime::cuda_call_status(e, "cudaEventCreate", __FILE__, __LINE__);
  }
  auto done = [&](Status st) -> Expected<float> {
    FT_CUDA_IGNORE(cudaEventDestroy(a));
    FT_CUDA_IGNORE(cudaEventDestroy(b));
    return st;
  };
  if (Status st = f(); !st.ok()) return done(std::move(st));
  if (const cudaError_t e = cudaEventRecord(a, s); e != cudaSuccess)
    return done(runtime::cuda_call_status(e, "cudaEventRecord", __FILE__, __LINE__));
  for (int r = 0; r < reps; ++r)
    if (Status st = f(); !st.ok()) return done(std::move(st));
  float ms = 0.0f;
  cudaError_t e = cudaEventRecord(b, s);
  if (e == cudaSuccess) e = cudaEventSynchronize(b);
  if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, a, b);
  FT_CUDA_IGNORE(cudaEventDestroy(a));
  FT_CUDA_IGNORE(cudaEventDestroy(b));
  if (e != cudaSuccess) return runtime::cuda_call_status(e, "timing a conv candidate", __FILE__, __LINE__);
  return 1000.0f * ms / static_cast<float>(reps);
}

// ---- the tiled implicit GEMM ------------------------------------------------------------------------------
// C[m, n] = Σ_k W[g·Mg + m, k] · X̂[k, n] per group g: m an output channel of the group, n an output pixel of the
// whole batch (image-major), k = (ci, ky, kx) of the group's input channels. TM×TN tiles (TM·TN = 4096: 16×256
// for few output channels, 64×64, 128×32 for few output pixels), 16-deep K steps, 256 threads of 4×4 outputs
// each; blockIdx.z = group · splits + split. Every tile shape sums each output's products in the same K order,
// so all give the same bits.
constexpr int kTk = 16;

struct IgemmGeom {
  int cin, h, w, cin_g, cout_g, kh, kw, sh, sw, pt, pl, oh, ow, dh, dw;
  int m, n, k;        // per group: cout_g, B·oh·ow, cin_g·kh·kw
  int splits, k_per;  // K slices and the K length of each (a multiple of kTk)
  int groups;
};

// kPipe: the next K step's global loads are issued into registers before the current step's FMAs, into a second
// shared buffer after them (one barrier per step); the same products in the same order either way. KS > 0 fixes
// a KS×KS window at compile time (the tap index arithmetic becomes multiplications), 0 reads it from g.
template <bool kPipe, int TM, int KS>
__global__ void __launch_bounds__(256)
    conv_igemm_kernel(IgemmGeom g, const float* __restrict__ x, const float* __restrict__ w,
                      const float* __restrict__ bias, EpilogueAct act, float* __restrict__ y,
                      float* __restrict__ partial) {
  pdl_entry();
  constexpr int TN = 4096 / TM;
  constexpr int kRa = TM * kTk / 256, kRb = TN * kTk / 256;  // loads per thread of A and B per K step
  constexpr int kBStep = 256 / TN;                           // K rows between one thread's B loads
  constexpr int kCols = TN / 4;                              // threads along N
  __shared__ __align__(16) float As[2][kTk][TM + 4];
  __shared__ __align__(16) float Bs[2][kTk][TN];
  const int tid = static_cast<int>(threadIdx.x);
  const int grp = static_cast<int>(blockIdx.z) / g.splits, split = static_cast<int>(blockIdx.z) % g.splits;
  const int m0 = static_cast<int>(blockIdx.y) * TM, n0 = static_cast<int>(blockIdx.x) * TN;
  const int k_begin = split * g.k_per, k_end = min(g.k, k_begin + g.k_per);
  const int plane = g.oh * g.ow;
  const int kh = KS > 0 ? KS : g.kh, kw = KS > 0 ? KS : g.kw;
  // this thread's B column (one output pixel) and its input window origin
  const int bn = tid % TN, bk0 = tid / TN;  // rows bk0 + kBStep·r of the K step
  const int pn = n0 + bn;
  const bool pix_ok = pn < g.n;
  const int img = pix_ok ? pn / plane : 0, pp = pix_ok ? pn % plane : 0;
  const int iy0 = (pp / g.ow) * g.sh - g.pt, ix0 = (pp % g.ow) * g.sw - g.pl;
  const float* xg =
      x + (static_cast<std::int64_t>(img) * g.cin + static_cast<std::int64_t>(grp) * g.cin_g) * g.h * g.w;
  // this thread's A rows (weights): element (am, ak) for idx = tid + r·256
  const float* wg = w + static_cast<std::int64_t>(grp) * g.cout_g * g.k;
  const int taps = kh * kw;
  const int ty = tid / kCols, tx = tid % kCols;
  float acc[4][4] = {};
  float ra[kRa], rb[kRb];
  auto load = [&](int k0) {
#pragma unroll
    for (int r = 0; r < kRa; ++r) {
      const int idx = tid + r * 256;
      const int am = idx / kTk, ak = idx % kTk;
      const int gm = m0 + am, gk = k0 + ak;
      ra[r] = (gm < g.m && gk < k_end) ? __ldg(wg + static_cast<std::int64_t>(gm) * g.k + gk) : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < kRb; ++r) {
      const int kk = k0 + bk0 + kBStep * r;
      float v = 0.0f;
      if (pix_ok && kk < k_end) {
        const int ci = kk / taps, t = kk - ci * taps;
        const int ky = t / kw, kx = t - ky * kw;
        const int iy = iy0 + ky * g.dh, ix = ix0 + kx * g.dw;
        if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) {
          v = xg[(static_cast<std::int64_t>(ci) * g.h + iy) * g.w + ix];
          if (act.in_bias) v = __fadd_rn(v, __ldg(act.in_bias + grp * g.cin_g + ci));
        }
      }
      rb[r] = v;
    }
  };
  auto store = [&](int buf) {
#pragma unroll
    for (int r = 0; r < kRa; ++r) {
      const int idx = tid + r * 256;
      As[buf][idx % kTk][idx / kTk] = ra[r];
    }
#pragma unroll
    for (int r = 0; r < kRb; ++r) Bs[buf][bk0 + kBStep * r][bn] = rb[r];
  };
  auto compute = [&](int buf) {
#pragma unroll
    for (int kk = 0; kk < kTk; ++kk) {
      const float4 a = *reinterpret_cast<const float4*>(&As[buf][kk][ty * 4]);
      const float4 b = *reinterpret_cast<const float4*>(&Bs[buf][kk][tx * 4]);
      const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
  };
  if (!kPipe) {
    for (int k0 = k_begin; k0 < k_end; k0 += kTk) {
      load(k0);
      store(0);
      __syncthreads();
      compute(0);
      __syncthreads();
    }
  } else {
    if (k_begin < k_end) {
      load(k_begin);
      store(0);
    }
    __syncthreads();
    int buf = 0;
    for (int k0 = k_begin; k0 < k_end; k0 += kTk) {
      const bool more = k0 + kTk < k_end;
      if (more) load(k0 + kTk);
      compute(buf);
      if (more) store(buf ^ 1);  // last read in the previous step, before its barrier
      __syncthreads();
      buf ^= 1;
    }
  }
  const std::int64_t cout = static_cast<std::int64_t>(g.cout_g) * g.groups;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int gm = m0 + ty * 4 + i;
    if (gm >= g.m) continue;
    const std::int64_t co = static_cast<std::int64_t>(grp) * g.cout_g + gm;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n = n0 + tx * 4 + j;
      if (n >= g.n) continue;
      const std::int64_t at = (static_cast<std::int64_t>(n / plane) * cout + co) * plane + n % plane;  // NCHW
      float v = acc[i][j];
      if (g.splits > 1) {
        partial[static_cast<std::int64_t>(split) * cout * g.n + at] = v;
        continue;
      }
      if (bias) v = __fadd_rn(v, __ldg(bias + co));
      y[at] = apply_epilogue(act, v, co, n / plane, at - static_cast<std::int64_t>(n / plane) * cout * plane);
    }
  }
}

template <bool kPipe, int TM>
void launch_igemm_tile(const IgemmGeom& g, dim3 grid, const float* x, const float* w, const float* bias,
                       EpilogueAct act, float* y, float* partial, cudaStream_t s) {
  if (g.kh == 3 && g.kw == 3)
    pdl_launch(conv_igemm_kernel<kPipe, TM, 3>, grid, 256, 0, s, g, x, w, bias, act, y, partial);
  else if (g.kh == 1 && g.kw == 1)
    pdl_launch(conv_igemm_kernel<kPipe, TM, 1>, grid, 256, 0, s, g, x, w, bias, act, y, partial);
  else
    pdl_launch(conv_igemm_kernel<kPipe, TM, 0>, grid, 256, 0, s, g, x, w, bias, act, y, partial);
}

template <int TM>
void launch_igemm_pipe(bool pipelined, const IgemmGeom& g, dim3 grid, const float* x, const float* w,
                       const float* bias, EpilogueAct act, float* y, float* partial, cudaStream_t s) {
  if (pipelined)
    launch_igemm_tile<true, TM>(g, grid, x, w, bias, act, y, partial, s);
  else
    launch_igemm_tile<false, TM>(g, grid, x, w, bias, act, y, partial, s);
}

// Σ over the K slices in slice order, then bias and activation.
__global__ void igemm_reduce_kernel(const float* __restrict__ partial, int splits, std::int64_t total,
                                    std::int64_t cout, std::int64_t plane, const float* __restrict__ bias,
                                    EpilogueAct act, float* __restrict__ y) {
  pdl_entry();
  FT_FOR_EACH(i, total) {
    float v = partial[i];
    for (int s = 1; s < splits; ++s) v = __fadd_rn(v, partial[static_cast<std::int64_t>(s) * total + i]);
    const std::int64_t img = i / (cout * plane), at = i - img * cout * plane, co = at / plane;
    if (bias) v = __fadd_rn(v, __ldg(bias + co));
    y[i] = apply_epilogue(act, v, co, img, at);
  }
}

IgemmGeom igemm_geom(const ConvJob& j, int batch, int splits) {
  IgemmGeom g{};
  const auto i = [](std::int64_t v) { return static_cast<int>(v); };
  g.cin = i(j.cin), g.h = i(j.h), g.w = i(j.w), g.cin_g = i(j.cin / j.groups),
  g.cout_g = i(j.cout / j.groups);
  g.kh = i(j.kh), g.kw = i(j.kw), g.sh = i(j.sh), g.sw = i(j.sw), g.pt = i(j.pt), g.pl = i(j.pl);
  g.oh = i(j.oh), g.ow = i(j.ow), g.dh = i(j.dh), g.dw = i(j.dw), g.groups = i(j.groups);
  g.m = g.cout_g, g.n = i(batch * j.oh * j.ow), g.k = i(g.cin_g * j.kh * j.kw);
  g.splits = std::max(1, splits);
  const int steps = (g.k + kTk - 1) / kTk;
  g.k_per = ((steps + g.splits - 1) / g.splits) * kTk;
  g.splits = (g.k + g.k_per - 1) / g.k_per;  // no empty slice
  return g;
}

// The bf16 form (docs/design/faces.md §8.1): per image the [C][P] fp32 plane matrix to [P][C] bf16 (round to
// nearest even) through 32×32 tiles of shared memory, with the input affine when one is fused (scale non-null).
__global__ void nchw_to_nhwc_bf16_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ y, int C,
                                         int P, const float* __restrict__ scale,
                                         const float* __restrict__ shift) {
  pdl_entry();
  __shared__ float t[32][33];
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.z) * C * P;
  const int p0 = static_cast<int>(blockIdx.x) * 32, c0 = static_cast<int>(blockIdx.y) * 32;
  const int tx = static_cast<int>(threadIdx.x);
  for (int k = static_cast<int>(threadIdx.y); k < 32; k += 8) {
    const int c = c0 + k, p = p0 + tx;
    if (c < C && p < P) {
      const float v = x[base + static_cast<std::int64_t>(c) * P + p];
      // the fused ChannelAffine: x·scale + shift, two roundings like its own kernel
      t[k][tx] = scale ? __fadd_rn(__fmul_rn(v, scale[c]), shift[c]) : v;
    }
  }
  __syncthreads();
  for (int k = static_cast<int>(threadIdx.y); k < 32; k += 8) {
    const int p = p0 + k, c = c0 + tx;
    if (c < C && p < P) y[base + static_cast<std::int64_t>(p) * C + c] = __float2bfloat16_rn(t[tx][k]);
  }
}

// Back: [P][C] bf16 to the [C][P] fp32 output with the bias and the epilogue (the bias/activation kernel's
// arithmetic).
__global__ void nhwc_bf16_to_nchw_kernel(const __nv_bfloat16* __restrict__ x, const float* __restrict__ bias,
                                         EpilogueAct e, float* __restrict__ y, int C, int P) {
  pdl_entry();
  __shared__ float t[32][33];
  const std::int64_t img = blockIdx.z;
  const std::int64_t base = img * C * P;
  const int p0 = static_cast<int>(blockIdx.x) * 32, c0 = static_cast<int>(blockIdx.y) * 32;
  const int tx = static_cast<int>(threadIdx.x);
  for (int k = static_cast<int>(threadIdx.y); k < 32; k += 8) {
    const int p = p0 + k, c = c0 + tx;
    if (c < C && p < P) t[k][tx] = __bfloat162float(x[base + static_cast<std::int64_t>(p) * C + c]);
  }
  __syncthreads();
  for (int k = static_cast<int>(threadIdx.y); k < 32; k += 8) {
    const int c = c0 + k, p = p0 + tx;
    if (c < C && p < P) {
      float v = t[tx][k];
      if (bias) v = __fadd_rn(v, bias[c]);
      const std::int64_t at = static_cast<std::int64_t>(c) * P + p;
      y[base + at] = apply_epilogue(e, v, c, img, at);
    }
  }
}

// KCRS fp32 weights to KRSC bf16.
__global__ void weights_to_krsc_bf16_kernel(const float* __restrict__ w, __nv_bfloat16* __restrict__ y,
                                            std::int64_t C, std::int64_t RS, std::int64_t n) {
  pdl_entry();
  FT_FOR_EACH(i, n) {
    const std::int64_t c = i % C, rs = (i / C) % RS, k = i / (C * RS);
    y[i] = __float2bfloat16_rn(w[(k * C + c) * RS + rs]);
  }
}

// KCRS fp32 weights to KRSC fp32 (the channels-last filter).
__global__ void weights_to_krsc_f32_kernel(const float* __restrict__ w, float* __restrict__ y, std::int64_t C,
                                           std::int64_t RS, std::int64_t n) {
  pdl_entry();
  FT_FOR_EACH(i, n) {
    const std::int64_t c = i % C, rs = (i / C) % RS, k = i / (C * RS);
    y[i] = w[(k * C + c) * RS + rs];
  }
}

// Channels-last bf16 form (docs/design/faces.md §8.3): the input is already NHWC, so the conversions are
// element-wise (channel = offset mod C), with the input affine when one is fused (scale non-null).
// Four consecutive channels of one pixel per thread (C is a multiple of 8): a float4 in, two bf16 pairs out.
__global__ void nhwc_f32_to_bf16_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ y, int C,
                                        int n4, const float* __restrict__ scale,
                                        const float* __restrict__ shift) {
  pdl_entry();
  FT_FOR_EACH_T(int, q, n4) {
    const int c = (4 * q) % C;
    const float4 v = reinterpret_cast<const float4*>(x)[q];
    float r[4] = {v.x, v.y, v.z, v.w};
    if (scale) {
#pragma unroll
      for (int k = 0; k < 4; ++k) r[k] = __fadd_rn(__fmul_rn(r[k], scale[c + k]), shift[c + k]);
    }
    __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(y) + 2 * static_cast<std::int64_t>(q);
    o[0] = __nv_bfloat162(__float2bfloat16_rn(r[0]), __float2bfloat16_rn(r[1]));
    o[1] = __nv_bfloat162(__float2bfloat16_rn(r[2]), __float2bfloat16_rn(r[3]));
  }
}

// Back to fp32 NHWC with the bias and the epilogue; the residual is NHWC too (residual_bstride = C: one "image"
// of apply_epilogue is one pixel).
__global__ void nhwc_bf16_to_f32_kernel(const __nv_bfloat16* __restrict__ x, const float* __restrict__ bias,
                                        EpilogueAct e, float* __restrict__ y, int C, int n4) {
  pdl_entry();
  FT_FOR_EACH_T(int, q, n4) {
    const int i = 4 * q, pix = i / C, c = i - pix * C;
    const __nv_bfloat162* in = reinterpret_cast<const __nv_bfloat162*>(x) + 2 * static_cast<std::int64_t>(q);
    const __nv_bfloat162 a = in[0], b = in[1];
    float r[4] = {__low2float(a), __high2float(a), __low2float(b), __high2float(b)};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (bias) r[k] = __fadd_rn(r[k], bias[c + k]);
      r[k] = apply_epilogue(e, r[k], c + k, pix, c + k);
    }
    reinterpret_cast<float4*>(y)[q] = make_float4(r[0], r[1], r[2], r[3]);
  }
}

std::size_t bf16_bytes(std::int64_t n) { return (static_cast<std::size_t>(n) * 2 + 255) / 256 * 256; }

}  // namespace

Status GpuConv::setup_bf16(cudaStream_t stream) {
  const auto i32 = [](std::int64_t v) { return static_cast<int>(v); };
  const ConvJob& j = job_;
  if (!xh_) {
    FT_CUDNN_TRY(cudnnCreateTensorDescriptor(&xh_));
    FT_CUDNN_TRY(cudnnCreateTensorDescriptor(&yh_));
    FT_CUDNN_TRY(cudnnCreateFilterDescriptor(&wh_));
    FT_CUDNN_TRY(cudnnCreateConvolutionDescriptor(&ch_));
    FT_CUDNN_TRY(cudnnSetTensor4dDescriptor(xh_, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, batch_, i32(j.cin),
                                            i32(j.h), i32(j.w)));
    FT_CUDNN_TRY(cudnnSetTensor4dDescriptor(yh_, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, batch_, i32(j.cout),
                                            i32(j.oh), i32(j.ow)));
    FT_CUDNN_TRY(cudnnSetFilter4dDescriptor(wh_, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NHWC, i32(j.cout),
                                            i32(j.cin), i32(j.kh), i32(j.kw)));
    FT_CUDNN_TRY(cudnnSetConvolution2dDescriptor(ch_, i32(j.pt), i32(j.pl), i32(j.sh), i32(j.sw), i32(j.dh),
                                                 i32(j.dw), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    FT_CUDNN_TRY(cudnnSetConvolutionMathType(ch_, CUDNN_TENSOR_OP_MATH));
  }
  if (!w_bf16_) {
    const std::int64_t n = j.cout * j.cin * j.kh * j.kw;
    FT_CUDA_TRY(cudaMalloc(&w_bf16_, bf16_bytes(n)));
    pdl_launch(weights_to_krsc_bf16_kernel, blocks_for(n), kThreads, 0, stream, w_dev_,
               static_cast<__nv_bfloat16*>(w_bf16_), j.cin, j.kh * j.kw, n);
    FT_CUDA_LAUNCH_CHECK("weights_to_krsc_bf16_kernel", stream);
    FT_CUDA_TRY(cudaStreamSynchronize(stream));
  }
  return {};
}

void GpuConv::drop_bf16_weights() {
  if (w_bf16_) FT_CUDA_IGNORE(cudaFree(w_bf16_));
  w_bf16_ = nullptr;
}

Status GpuConv::run_bf16(const ConvAlgo& a, const float* x, float* y, void* workspace,
                         cudaStream_t stream) const {
  const ConvJob& j = job_;
  auto* ws = static_cast<char*>(workspace);
  auto* xh = reinterpret_cast<__nv_bfloat16*>(ws + a.cudnn_workspace);
  auto* yh =
      reinterpret_cast<__nv_bfloat16*>(ws + a.cudnn_workspace + bf16_bytes(batch_ * j.cin * j.h * j.w));
  const int pin = static_cast<int>(j.h * j.w), pout = static_cast<int>(j.oh * j.ow);
  if (nhwc_) {
    // nhwc_conv_ok: element counts below 2^31, channel counts multiples of 8
    const int nin4 = static_cast<int>(static_cast<std::int64_t>(batch_) * j.cin * pin / 4);
    const int nout4 = static_cast<int>(static_cast<std::int64_t>(batch_) * j.cout * pout / 4);
    pdl_launch(nhwc_f32_to_bf16_kernel, blocks_for(nin4), kThreads, 0, stream, x, xh, static_cast<int>(j.cin),
               nin4, in_scale_, in_shift_);
    FT_CUDA_LAUNCH_CHECK("nhwc_f32_to_bf16_kernel", stream);
    if (a.graph) {
      FT_TRY(a.graph->run(xh, w_bf16_, yh, workspace, stream));
    } else {
      FT_CUDNN_TRY(cudnnSetStream(handle_, stream));
      const float one = 1.0f, zero = 0.0f;
      FT_CUDNN_TRY(cudnnConvolutionForward(handle_, &one, xh_, xh, wh_, w_bf16_, ch_, a.algo,
                                           a.cudnn_workspace ? workspace : nullptr, a.cudnn_workspace, &zero,
                                           yh_, yh));
    }
    pdl_launch(nhwc_bf16_to_f32_kernel, blocks_for(nout4), kThreads, 0, stream, yh, b_dev_, act_, y,
               static_cast<int>(j.cout), nout4);
    FT_CUDA_LAUNCH_CHECK("nhwc_bf16_to_f32_kernel", stream);
    return {};
  }
  const dim3 block(32, 8);
  const dim3 gin(static_cast<unsigned>((pin + 31) / 32), static_cast<unsigned>((j.cin + 31) / 32),
                 static_cast<unsigned>(batch_));
  pdl_launch(nchw_to_nhwc_bf16_kernel, gin, block, 0, stream, x, xh, static_cast<int>(j.cin), pin, in_scale_,
             in_shift_);
  FT_CUDA_LAUNCH_CHECK("nchw_to_nhwc_bf16_kernel", stream);
  FT_CUDNN_TRY(cudnnSetStream(handle_, stream));
  const float one = 1.0f, zero = 0.0f;
  FT_CUDNN_TRY(cudnnConvolutionForward(handle_, &one, xh_, xh, wh_, w_bf16_, ch_, a.algo,
                                       a.cudnn_workspace ? workspace : nullptr, a.cudnn_workspace, &zero, yh_,
                                       yh));
  const dim3 gout(static_cast<unsigned>((pout + 31) / 32), static_cast<unsigned>((j.cout + 31) / 32),
                  static_cast<unsigned>(batch_));
  pdl_launch(nhwc_bf16_to_nchw_kernel, gout, block, 0, stream, yh, b_dev_, act_, y, static_cast<int>(j.cout),
             pout);
  FT_CUDA_LAUNCH_CHECK("nhwc_bf16_to_nchw_kernel", stream);
  return {};
}

bool igemm_fits(const ConvJob& j, int batch) {
  const std::int64_t lim = std::int64_t{1} << 30;
  return j.cin / j.groups >= 2 && j.cout / j.groups >= 8 && j.cin * j.h * j.w * batch < lim &&
         j.cout * j.oh * j.ow * batch < lim;
}

bool igemm_tile_ok(int tile_m) { return tile_m == 16 || tile_m == 64 || tile_m == 128; }

int igemm_splits(const ConvJob& j, int batch, int multiprocessors, int tile_m) {
  const int tm = igemm_tile_ok(tile_m) ? tile_m : 64, tn = 4096 / tm;
  const std::int64_t tiles =
      ((j.cout / j.groups + tm - 1) / tm) * ((batch * j.oh * j.ow + tn - 1) / tn) * j.groups;
  const std::int64_t k = (j.cin / j.groups) * j.kh * j.kw;
  const std::int64_t want = (2 * multiprocessors + tiles - 1) / tiles;
  return static_cast<int>(std::clamp<std::int64_t>(want, 1, std::clamp<std::int64_t>(k / (4 * kTk), 1, 16)));
}

Status launch_conv_igemm(const ConvJob& j, int batch, int splits, const float* x, const float* w,
                         const float* bias, EpilogueAct act, float* y, float* partial, cudaStream_t s,
                         bool pipelined, int tile_m) {
  if (!igemm_tile_ok(tile_m))
    return internal_error("implicit GEMM tile of " + std::to_string(tile_m) + " rows");
  const IgemmGeom g = igemm_geom(j, batch, splits);
  if (g.splits > 1 && !partial) return internal_error("implicit GEMM with K splits and no partial buffer");
  const int tn = 4096 / tile_m;
  const dim3 grid(static_cast<unsigned>((g.n + tn - 1) / tn),
                  static_cast<unsigned>((g.m + tile_m - 1) / tile_m),
                  static_cast<unsigned>(g.groups * g.splits));
  if (tile_m == 16)
    launch_igemm_pipe<16>(pipelined, g, grid, x, w, bias, act, y, partial, s);
  else if (tile_m == 128)
    launch_igemm_pipe<128>(pipelined, g, grid, x, w, bias, act, y, partial, s);
  else
    launch_igemm_pipe<64>(pipelined, g, grid, x, w, bias, act, y, partial, s);
  FT_CUDA_LAUNCH_CHECK("conv_igemm_kernel", s);
  if (g.splits > 1) {
    const std::int64_t total = j.cout * j.oh * j.ow * batch;
    pdl_launch(igemm_reduce_kernel, blocks_for(total), kThreads, 0, s, partial, g.splits, total, j.cout,
               j.oh * j.ow, bias, act, y);
    FT_CUDA_LAUNCH_CHECK("igemm_reduce_kernel", s);
  }
  return {};
}

bool dw3x3_x4_fits(const ConvJob& j, int batch) {
  return j.cin / j.groups == 1 && j.kh == 3 && j.kw == 3 && j.dh == 1 && j.dw == 1 &&
         (j.sw == 1 || j.sw == 2) && j.cout == j.cin &&
         small_index(std::max(j.cout * j.oh * j.ow, j.cin * j.h * j.w) * batch);
}

Status launch_dw3x3_x4(const ConvJob& j, int batch, const float* x, const float* w, const float* bias,
                       EpilogueAct act, float* y, cudaStream_t s) {
  if (!dw3x3_x4_fits(j, batch)) return internal_error("dw3x3_x4 on a shape it does not take");
  const ConvGeom<int> g = geom_of<int>(j);
  const int n = static_cast<int>(j.cout * j.oh * ((j.ow + 3) / 4) * batch);
  if (n <= 0) return {};
  const bool vec = j.pl == 1 && j.w % 4 == 0 && j.ow % 4 == 0 &&
                   reinterpret_cast<std::uintptr_t>(x) % 16 == 0 &&
                   reinterpret_cast<std::uintptr_t>(y) % 16 == 0;
  if (j.sw == 1 && vec)
    pdl_launch(dw3x3_x4_kernel<1, true>, blocks_for(n), kThreads, 0, s, g, x, w, bias, act, y, n);
  else if (j.sw == 1)
    pdl_launch(dw3x3_x4_kernel<1, false>, blocks_for(n), kThreads, 0, s, g, x, w, bias, act, y, n);
  else if (vec)
    pdl_launch(dw3x3_x4_kernel<2, true>, blocks_for(n), kThreads, 0, s, g, x, w, bias, act, y, n);
  else
    pdl_launch(dw3x3_x4_kernel<2, false>, blocks_for(n), kThreads, 0, s, g, x, w, bias, act, y, n);
  FT_CUDA_LAUNCH_CHECK("dw3x3_x4_kernel", s);
  return {};
}

bool allco3x3_fits(const ConvJob& j, int batch) {
  return j.groups == 1 && j.kh == 3 && j.kw == 3 && j.cout <= 32 && j.cin * 9 <= 64 && j.dh == 1 &&
         j.dw == 1 && (j.sh == 1 || j.sh == 2) && (j.sw == 1 || j.sw == 2) && j.oh > 0 && j.ow > 0 &&
         small_index(std::max(j.cout * j.oh * j.ow, j.cin * j.h * j.w) * batch);
}

namespace {
template <int CO, int SH, int SW>
void launch_allco3x3_as(const ConvGeom<int>& g, int batch, const float* x, const float* w, const float* bias,
                        EpilogueAct act, float* y, cudaStream_t s) {
  constexpr int kIw = (kStemTileW - 1) * SW + 3, kIh = (kStemTileH - 1) * SH + 3;
  const int tiles_x = (g.ow + kStemTileW - 1) / kStemTileW, tiles_y = (g.oh + kStemTileH - 1) / kStemTileH;
  const std::size_t shared = static_cast<std::size_t>(g.cin * 9 * CO + g.cin * kIh * kIw) * sizeof(float);
  const auto blocks = static_cast<unsigned>(static_cast<std::int64_t>(tiles_x) * tiles_y * batch);
  pdl_launch(conv_allco3x3_kernel<CO, SH, SW>, blocks, kStemTileW * kStemTileH, shared, s, g, x, w, bias, act,
             y, tiles_x, tiles_y);
}
}  // namespace

Status launch_allco3x3(const ConvJob& j, int batch, const float* x, const float* w, const float* bias,
                       EpilogueAct act, float* y, cudaStream_t s) {
  if (!allco3x3_fits(j, batch)) return internal_error("allco3x3 on a shape it does not take");
  const ConvGeom<int> g = geom_of<int>(j);
  if (batch <= 0) return {};
  const bool co16 = j.cout <= 16;
  const int form = (j.sh == 2 ? 2 : 0) + (j.sw == 2 ? 1 : 0);
  switch (form + (co16 ? 0 : 4)) {
    case 0: launch_allco3x3_as<16, 1, 1>(g, batch, x, w, bias, act, y, s); break;
    case 1: launch_allco3x3_as<16, 1, 2>(g, batch, x, w, bias, act, y, s); break;
    case 2: launch_allco3x3_as<16, 2, 1>(g, batch, x, w, bias, act, y, s); break;
    case 3: launch_allco3x3_as<16, 2, 2>(g, batch, x, w, bias, act, y, s); break;
    case 4: launch_allco3x3_as<32, 1, 1>(g, batch, x, w, bias, act, y, s); break;
    case 5: launch_allco3x3_as<32, 1, 2>(g, batch, x, w, bias, act, y, s); break;
    case 6: launch_allco3x3_as<32, 2, 1>(g, batch, x, w, bias, act, y, s); break;
    default: launch_allco3x3_as<32, 2, 2>(g, batch, x, w, bias, act, y, s); break;
  }
  FT_CUDA_LAUNCH_CHECK("conv_allco3x3_kernel", s);
  return {};
}

bool pw1x1_form_ok(int form) {
  return form == 4 || form == 8 || form == 16 || form == -1 || form == -2 || form == -4 || form == -8;
}

bool pw1x1_fits(const ConvJob& j, int batch, int form) {
  const std::int64_t plane = j.h * j.w;
  const std::int64_t ct = form < 0 ? -form : form;
  return j.is_pointwise() && pw1x1_form_ok(form) && plane > 0 && (form < 0 || plane % 4 == 0) &&
         j.cin * ct <= 8192 && small_index(std::max(j.cin, j.cout) * plane * batch);
}

std::string pw1x1_name(int form) {
  return "own:pw1x1/c" + std::to_string(form < 0 ? -form : form) + (form < 0 ? "p1" : "");
}

namespace {
template <int CT, int PX>
void launch_pw1x1_as(const ConvJob& j, int batch, const float* x, const float* w, const float* bias,
                     EpilogueAct act, float* y, cudaStream_t s) {
  const int plane = static_cast<int>(j.h * j.w), units = plane / PX, total = units * batch;
  const int cin = static_cast<int>(j.cin), cout = static_cast<int>(j.cout);
  const int groups = (cout + CT - 1) / CT;
  constexpr int kPwThreads = 128;
  const auto blocks =
      static_cast<unsigned>(static_cast<std::int64_t>((total + kPwThreads - 1) / kPwThreads) * groups);
  const std::size_t shared = static_cast<std::size_t>(cin * CT) * sizeof(float);
  pdl_launch(pw1x1_kernel<CT, PX>, blocks, kPwThreads, shared, s, cin, cout, plane, units, total, groups, x,
             w, bias, act, y);
}
}  // namespace

Status launch_pw1x1(const ConvJob& j, int batch, int form, const float* x, const float* w, const float* bias,
                    EpilogueAct act, float* y, cudaStream_t s) {
  if (!pw1x1_fits(j, batch, form)) return internal_error("pw1x1 on a shape it does not take");
  if (batch <= 0) return {};
  // float4 rows need 16-byte planes; elsewhere the direct kernel gives the same bits
  if (form > 0 &&
      (reinterpret_cast<std::uintptr_t>(x) % 16 != 0 || reinterpret_cast<std::uintptr_t>(y) % 16 != 0))
    return launch_conv_direct(j, batch, x, w, bias, act, y, s);
  switch (form) {
    case 4: launch_pw1x1_as<4, 4>(j, batch, x, w, bias, act, y, s); break;
    case 8: launch_pw1x1_as<8, 4>(j, batch, x, w, bias, act, y, s); break;
    case 16: launch_pw1x1_as<16, 4>(j, batch, x, w, bias, act, y, s); break;
    case -1: launch_pw1x1_as<1, 1>(j, batch, x, w, bias, act, y, s); break;
    case -2: launch_pw1x1_as<2, 1>(j, batch, x, w, bias, act, y, s); break;
    case -4: launch_pw1x1_as<4, 1>(j, batch, x, w, bias, act, y, s); break;
    default: launch_pw1x1_as<8, 1>(j, batch, x, w, bias, act, y, s); break;
  }
  FT_CUDA_LAUNCH_CHECK("pw1x1_kernel", s);
  return {};
}

std::string own_conv_kernel(const ConvJob& j) {
  if (j.cin / j.groups == 1 && j.kh == 3 && j.kw == 3) return "own:depthwise3x3";
  if (j.cin / j.groups == 1) return "own:depthwise";
  return "own:direct";
}

Status launch_conv_direct(const ConvJob& j, int batch, const float* x, const float* w, const float* bias,
                          EpilogueAct act, float* y, cudaStream_t s) {
  const std::int64_t n = j.cout * j.oh * j.ow * batch;
  if (n <= 0) return {};
  // 32-bit indices when the largest index (input or output) fits
  if (std::max(n, j.cin * j.h * j.w * batch) < (std::int64_t{1} << 30))
    launch_direct<int>(j, static_cast<int>(n), x, w, bias, act, y, s);
  else
    launch_direct<std::int64_t>(j, n, x, w, bias, act, y, s);
  FT_CUDA_LAUNCH_CHECK("conv_direct_kernel", s);
  return {};
}

GpuConv::~GpuConv() {
  if (x_) FT_CUDA_IGNORE(cudnnDestroyTensorDescriptor(x_));
  if (y_) FT_CUDA_IGNORE(cudnnDestroyTensorDescriptor(y_));
  if (b_) FT_CUDA_IGNORE(cudnnDestroyTensorDescriptor(b_));
  if (w_) FT_CUDA_IGNORE(cudnnDestroyFilterDescriptor(w_));
  if (c_) FT_CUDA_IGNORE(cudnnDestroyConvolutionDescriptor(c_));
  if (act_desc_) FT_CUDA_IGNORE(cudnnDestroyActivationDescriptor(act_desc_));
  if (xh_) FT_CUDA_IGNORE(cudnnDestroyTensorDescriptor(xh_));
  if (yh_) FT_CUDA_IGNORE(cudnnDestroyTensorDescriptor(yh_));
  if (wh_) FT_CUDA_IGNORE(cudnnDestroyFilterDescriptor(wh_));
  if (ch_) FT_CUDA_IGNORE(cudnnDestroyConvolutionDescriptor(ch_));
  drop_bf16_weights();
  if (w_krsc_) FT_CUDA_IGNORE(cudaFree(w_krsc_));
}

namespace {
__global__ void fill_probe_kernel(float* __restrict__ x, std::int64_t n) {
  pdl_entry();
  FT_FOR_EACH(i, n) {
    std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u ^ static_cast<std::uint32_t>(i >> 32);
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    x[i] = static_cast<float>(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
}
}  // namespace

Status launch_fill_probe(float* x, std::int64_t n, cudaStream_t s) {
  if (n <= 0) return {};
  pdl_launch(fill_probe_kernel, blocks_for(n), kThreads, 0, s, x, n);
  FT_CUDA_LAUNCH_CHECK("fill_probe_kernel", s);
  return {};
}

Status GpuConv::make_krsc(cudaStream_t stream) {
  if (w_krsc_) return {};
  const ConvJob& j = job_;
  const std::int64_t n = j.cout * j.cin * j.kh * j.kw;
  FT_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&w_krsc_), static_cast<std::size_t>(n) * sizeof(float)));
  pdl_launch(weights_to_krsc_f32_kernel, blocks_for(n), kThreads, 0, stream, w_dev_, w_krsc_, j.cin,
             j.kh * j.kw, n);
  FT_CUDA_LAUNCH_CHECK("weights_to_krsc_f32_kernel", stream);
  FT_CUDA_TRY(cudaStreamSynchronize(stream));
  return {};
}

void GpuConv::drop_krsc() {
  if (w_krsc_) FT_CUDA_IGNORE(cudaFree(w_krsc_));
  w_krsc_ = nullptr;
}

Status GpuConv::setup(cudnnHandle_t handle, const ConvJob& job, const ConvSetup& setup, EpilogueAct act,
                      const float* weights, const float* bias, const ConvAlgo* known, const ConvProbe& probe,
                      cudaStream_t stream) {
  handle_ = handle;
  job_ = job;
  batch_ = setup.batch;
  act_ = act;
  w_dev_ = weights;
  b_dev_ = bias;
  nhwc_ = setup.nhwc;
  // channels-last: one apply_epilogue "image" is one pixel of cout channels (docs/design/faces.md §8.3)
  if (nhwc_) act_.residual_bstride = job.cout;
  const cudnnTensorFormat_t fmt = nhwc_ ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  const auto i32 = [](std::int64_t v) { return static_cast<int>(v); };
  const std::int64_t limit = std::numeric_limits<int>::max();
  bool expressible = job.cin * job.h * job.w * batch_ < limit && job.cout * job.oh * job.ow * batch_ < limit;
  if (expressible) {
    FT_CUDNN_TRY(cudnnCreateTensorDescriptor(&x_));
    FT_CUDNN_TRY(cudnnCreateTensorDescriptor(&y_));
    FT_CUDNN_TRY(cudnnCreateTensorDescriptor(&b_));
    FT_CUDNN_TRY(cudnnCreateFilterDescriptor(&w_));
    FT_CUDNN_TRY(cudnnCreateConvolutionDescriptor(&c_));
    FT_CUDNN_TRY(cudnnCreateActivationDescriptor(&act_desc_));
    FT_CUDNN_TRY(
        cudnnSetTensor4dDescriptor(x_, fmt, CUDNN_DATA_FLOAT, batch_, i32(job.cin), i32(job.h), i32(job.w)));
    FT_CUDNN_TRY(cudnnSetTensor4dDescriptor(y_, fmt, CUDNN_DATA_FLOAT, batch_, i32(job.cout), i32(job.oh),
                                            i32(job.ow)));
    FT_CUDNN_TRY(cudnnSetTensor4dDescriptor(b_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, i32(job.cout), 1, 1));
    FT_CUDNN_TRY(cudnnSetFilter4dDescriptor(w_, CUDNN_DATA_FLOAT, fmt, i32(job.cout),
                                            i32(job.cin / job.groups), i32(job.kh), i32(job.kw)));
    FT_CUDNN_TRY(cudnnSetConvolution2dDescriptor(c_, i32(job.pt), i32(job.pl), i32(job.sh), i32(job.sw),
                                                 i32(job.dh), i32(job.dw), CUDNN_CROSS_CORRELATION,
                                                 CUDNN_DATA_FLOAT));
    FT_CUDNN_TRY(cudnnSetConvolutionGroupCount(c_, i32(job.groups)));
    FT_CUDNN_TRY(cudnnSetConvolutionMathType(c_, setup.tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
    // cuDNN pads symmetrically: usable when that gives the IR's output size (the IR's pads may be asymmetric)
    int n = 0, c = 0, oh = 0, ow = 0;
    FT_CUDNN_TRY(cudnnGetConvolution2dForwardOutputDim(c_, x_, w_, &n, &c, &oh, &ow));
    expressible = n == batch_ && c == job.cout && oh == job.oh && ow == job.ow;
    const bool relu = act.kind == EpilogueAct::Kind::kRelu ||
                      (act.kind == EpilogueAct::Kind::kClip && act.lo == 0.0f && std::isfinite(act.hi));
    if (relu)
      FT_CUDNN_TRY(cudnnSetActivationDescriptor(
          act_desc_,
          act.kind == EpilogueAct::Kind::kRelu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_CLIPPED_RELU,
          CUDNN_NOT_PROPAGATE_NAN, act.kind == EpilogueAct::Kind::kRelu ? 0.0 : static_cast<double>(act.hi)));
  }
  cudnn_ok_ = expressible;
  if (nhwc_ && (!cudnn_ok_ || job.groups != 1))
    return Status(Code::kDeclined, "conv " + shape_text(job) + ": cuDNN cannot run it channels-last");
  const bool fusable = cudnn_ok_ && bias != nullptr && !act.has_residual &&
                       (act.kind == EpilogueAct::Kind::kRelu ||
                        (act.kind == EpilogueAct::Kind::kClip && act.lo == 0.0f && std::isfinite(act.hi)));
  // the bf16 form: cuDNN's NHWC tensor-core kernels want channel counts of a multiple of 8
  const bool bf16_ok = setup.bf16 && cudnn_ok_ && job.groups == 1 && job.cin % 8 == 0 && job.cout % 8 == 0;
  if (!known && setup.carried && !setup.tf32 && !nhwc_) {
    if (auto c = carried_algo(*setup.carried, setup, fusable, probe, stream)) {
      algo_ = std::move(*c);
      if (!algo_.own) FT_CUDNN_TRY(cudnnSetConvolutionMathType(c_, algo_.math));
      return {};
    }
  }
  if (known) {
    algo_ = *known;
    if (nhwc_ && !algo_.bf16) FT_TRY(make_krsc(stream));
    if (!algo_.own && !cudnn_ok_)
      return internal_error("conv " + shape_text(job) + ": cached cuDNN algorithm");
    if (algo_.bf16) {
      if (!bf16_ok) return internal_error("conv " + shape_text(job) + ": cached bf16 algorithm");
      FT_TRY(setup_bf16(stream));
    }
    algo_.fused = algo_.fused && fusable;
    if (!algo_.own) FT_CUDNN_TRY(cudnnSetConvolutionMathType(c_, algo_.math));
    return {};
  }
  ConvAlgo own;
  own.own = true;
  own.kernel = own_conv_kernel(job);
  const std::int64_t cin_g = job.cin / job.groups, cout_g = job.cout / job.groups;
  const bool own_fits = !nhwc_ && (!cudnn_ok_ || cin_g == 1 || cout_g < 8);
  // the implicit GEMM: for shapes small enough that cuDNN's tiles leave the device idle
  int sms = 132;
  FT_CUDA_IGNORE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  // the candidates: every tile shape, direct and double-buffered, each with the K splits that fill the device
  std::vector<ConvAlgo> igs;
  const bool ig_shape = !nhwc_ && setup.autotune && igemm_fits(job, batch_) &&
                        job.cout * job.oh * job.ow * batch_ <= (std::int64_t{1} << 22);
  for (int tm : {64, 16, 128}) {
    if (!ig_shape || (tm == 16 && cout_g > 32) || (tm == 128 && cout_g < 128)) continue;
    for (bool pipe : {false, true}) {
      ConvAlgo ig;
      ig.own = true;
      ig.tile_m = tm;
      ig.pipelined = pipe;
      ig.splits = igemm_splits(job, batch_, sms, tm);
      ig.workspace =
          ig.splits > 1 ? static_cast<std::size_t>(ig.splits) * job.cout * job.oh * job.ow * batch_ * 4 : 0;
      if (ig.workspace > probe.workspace_bytes) continue;
      ig.kernel = (pipe ? "own:igemm2" : "own:igemm") +
                  (tm != 64 ? "/m" + std::to_string(tm) : std::string()) +
                  (ig.splits > 1 ? "/splitk" + std::to_string(ig.splits) : std::string());
      igs.push_back(ig);
    }
  }
  const bool ig_fits = !igs.empty();
  if (!cudnn_ok_) {
    algo_ = own;
    if (ig_fits) {
      auto td = time_us([&] { return run_with(own, probe.x, probe.y, probe.workspace, stream); }, stream);
      if (!td) return td.status();
      own.us = *td;
      for (ConvAlgo& ig : igs) {
        auto ti = time_us([&] { return run_with(ig, probe.x, probe.y, probe.workspace, stream); }, stream);
        if (!ti) return ti.status();
        ig.us = *ti;
        if (ig.us < algo_.us || algo_.us == 0.0f) algo_ = ig;
      }
      if (own.us < algo_.us) algo_ = own;
    }
    return {};
  }
  // cuDNN: every algorithm measured on the probe buffers, the fastest deterministic one kept
  constexpr int kAlgos = 16;
  cudnnConvolutionFwdAlgoPerf_t perf[kAlgos];
  int returned = 0;
  FT_CUDNN_TRY(cudnnSetStream(handle_, stream));
  if (nhwc_) FT_TRY(make_krsc(stream));
  FT_CUDNN_TRY(cudnnFindConvolutionForwardAlgorithmEx(handle_, x_, probe.x, w_, cudnn_weights(), c_, y_,
                                                      probe.y, kAlgos, &returned, perf, probe.workspace,
                                                      probe.workspace_bytes));
  std::vector<ConvAlgo> candidates;
  for (int k = 0; k < returned; ++k) {
    const auto& p = perf[k];
    if (p.status != CUDNN_STATUS_SUCCESS || p.determinism != CUDNN_DETERMINISTIC) continue;
    if (!setup.tf32 && p.mathType != CUDNN_FMA_MATH) continue;  // true FP32: no tensor-op (TF32) math
    if (p.memory > setup.max_workspace_bytes || p.memory > probe.workspace_bytes) continue;
    ConvAlgo a;
    a.algo = p.algo;
    a.math = p.mathType;
    a.workspace = p.memory;
    a.kernel = std::string("cudnn:") + algo_name(p.algo);
    a.us = 1000.0f * p.time;
    candidates.push_back(a);
    break;  // perf is sorted by time: the first acceptable one is the fastest
  }
  std::optional<ConvAlgo> graph_fp32;  // channels-last: the graph API's plan beside the legacy algorithm
  if (nhwc_) {
    auto g = find_graph(setup, probe, stream, false);
    if (!g) return g.status().with_context("conv " + shape_text(job) + " (graph)");
    graph_fp32 = *g;
  }
  if (candidates.empty() && !nhwc_) {
    algo_ = own;
    return {};
  }
  if (candidates.empty() && graph_fp32) {
    candidates.push_back(*graph_fp32);
    graph_fp32.reset();
  }
  if (candidates.empty() && !bf16_ok)
    return Status(Code::kDeclined, "conv " + shape_text(job) + ": no cuDNN algorithm for it channels-last");
  if (candidates.empty()) {  // channels-last bf16 only: the bf16 forms are the candidates
    FT_TRY(setup_bf16(stream));
    auto h = find_bf16(setup, probe, stream);
    if (!h) return h.status().with_context("conv " + shape_text(job) + " (bf16)");
    auto hg = find_graph(setup, probe, stream, true);
    if (!hg) return hg.status().with_context("conv " + shape_text(job) + " (bf16 graph)");
    if (!h->has_value() && !hg->has_value())
      return Status(Code::kDeclined, "conv " + shape_text(job) + ": no cuDNN algorithm for it channels-last");
    algo_ = hg->has_value() ? **hg : **h;
    drop_krsc();
    return {};
  }
  ConvAlgo best = candidates.front();
  if (!best.graph) FT_CUDNN_TRY(cudnnSetConvolutionMathType(c_, best.math));
  if (fusable && !best.graph) {  // conv + bias + ReLU in one cuDNN call, when the algorithm takes it
    ConvAlgo f = best;
    f.fused = true;
    algo_ = f;
    if (run_with(f, probe.x, probe.y, probe.workspace, stream).ok() &&
        cudaStreamSynchronize(stream) == cudaSuccess)
      best = f;
    FT_CUDA_IGNORE(cudaGetLastError());
  }
  if (setup.autotune) {
    auto t = time_us([&] { return run_with(best, probe.x, probe.y, probe.workspace, stream); }, stream);
    if (!t) return t.status().with_context("conv " + shape_text(job));
    best.us = *t;
    if (own_fits) {
      auto to = time_us([&] { return run_with(own, probe.x, probe.y, probe.workspace, stream); }, stream);
      if (!to) return to.status().with_context("conv " + shape_text(job));
      own.us = *to;
      if (own.us < best.us) best = own;
    }
    if (!nhwc_ && dw3x3_x4_fits(job, batch_)) {
      ConvAlgo d4 = own;
      d4.splits = -1;
      d4.kernel = "own:depthwise3x3x4";
      auto t4 = time_us([&] { return run_with(d4, probe.x, probe.y, probe.workspace, stream); }, stream);
      if (!t4) return t4.status().with_context("conv " + shape_text(job));
      d4.us = *t4;
      if (d4.us < best.us) best = d4;
    }
    if (!nhwc_ && allco3x3_fits(job, batch_)) {
      ConvAlgo ac = own;
      ac.splits = -2;
      ac.kernel = "own:allco3x3";
      auto ta = time_us([&] { return run_with(ac, probe.x, probe.y, probe.workspace, stream); }, stream);
      if (!ta) return ta.status().with_context("conv " + shape_text(job));
      ac.us = *ta;
      if (ac.us < best.us) best = ac;
    }
    for (int form : {4, 8, 16, -1, -2, -4, -8}) {
      if (nhwc_ || !pw1x1_fits(job, batch_, form)) continue;
      ConvAlgo pw = own;
      pw.splits = -3;
      pw.tile_m = form;
      pw.kernel = pw1x1_name(form);
      auto tp = time_us([&] { return run_with(pw, probe.x, probe.y, probe.workspace, stream); }, stream);
      if (!tp) return tp.status().with_context("conv " + shape_text(job));
      pw.us = *tp;
      best.tried += pw.kernel + " " + std::to_string(static_cast<int>(pw.us)) + "; ";
      if (pw.us < best.us) {
        const std::string tried = best.tried;
        best = pw;
        best.tried = tried;
      }
    }
    if (ig_fits) {
      for (ConvAlgo& ig : igs) {
        auto ti = time_us([&] { return run_with(ig, probe.x, probe.y, probe.workspace, stream); }, stream);
        if (!ti) return ti.status().with_context("conv " + shape_text(job));
        ig.us = *ti;
        if (ig.us < best.us) best = ig;
      }
    }
  }
  if (graph_fp32) {  // the graph API against the legacy choice, on the same probe buffers
    if (setup.autotune) {
      auto t =
          time_us([&] { return run_with(*graph_fp32, probe.x, probe.y, probe.workspace, stream); }, stream);
      if (!t) return t.status().with_context("conv " + shape_text(job) + " (graph)");
      graph_fp32->us = *t;
    }
    best.tried += best.kernel + " " + std::to_string(static_cast<int>(best.us)) + "; " + graph_fp32->kernel +
                  " " + std::to_string(static_cast<int>(graph_fp32->us)) + graph_fp32->tried + "; ";
    const std::string tried = best.tried;
    if (!setup.autotune || graph_fp32->us < best.us) best = *graph_fp32;
    best.tried = tried;
  }
  if (bf16_ok) {  // the bf16 candidate, timed with its conversions (docs/design/faces.md §8.1)
    FT_TRY(setup_bf16(stream));
    auto h = find_bf16(setup, probe, stream);
    if (!h) return h.status().with_context("conv " + shape_text(job));
    if (nhwc_) {  // channels-last: the graph API's bf16 plan when it beats the legacy one
      auto hg = find_graph(setup, probe, stream, true);
      if (!hg) return hg.status().with_context("conv " + shape_text(job) + " (bf16 graph)");
      if (hg->has_value() && setup.autotune) {
        auto tg = time_us([&] { return run_with(**hg, probe.x, probe.y, probe.workspace, stream); }, stream);
        if (!tg) return tg.status().with_context("conv " + shape_text(job) + " (bf16 graph)");
        (*hg)->us = *tg;
        if (h->has_value()) {
          auto tl = time_us([&] { return run_with(**h, probe.x, probe.y, probe.workspace, stream); }, stream);
          if (!tl) return tl.status().with_context("conv " + shape_text(job) + " (bf16)");
          (*h)->us = *tl;
        }
      }
      best.tried +=
          (h->has_value() ? (*h)->kernel + " " + std::to_string(static_cast<int>((*h)->us)) + "; " : "") +
          (hg->has_value()
               ? (*hg)->kernel + " " + std::to_string(static_cast<int>((*hg)->us)) + (*hg)->tried + "; "
               : "");
      if (hg->has_value() && (!h->has_value() || !setup.autotune || (*hg)->us < (*h)->us)) *h = *hg;
    }
    bool take = false;
    if (h->has_value()) {
      ConvAlgo& a = **h;
      if (setup.autotune && !nhwc_) {  // channels-last: timed above
        auto t = time_us([&] { return run_with(a, probe.x, probe.y, probe.workspace, stream); }, stream);
        if (!t) return t.status().with_context("conv " + shape_text(job) + " (bf16)");
        a.us = *t;
      }
      take = !setup.autotune || a.us < best.us;
      if (take) {
        const std::string tried = best.tried;
        best = a;
        best.tried = tried;
      }
    }
    if (!take) drop_bf16_weights();
  }
  if (best.fused) best.kernel += "+bias+relu";
  if (nhwc_) best.kernel += "/nhwc";
  if (best.bf16 || best.own) drop_krsc();
  algo_ = best;
  return {};
}

Expected<std::optional<ConvAlgo>> GpuConv::find_bf16(const ConvSetup& setup, const ConvProbe& probe,
                                                     cudaStream_t stream) {
  const ConvJob& j = job_;
  const std::size_t io = bf16_bytes(batch_ * j.cin * j.h * j.w) + bf16_bytes(batch_ * j.cout * j.oh * j.ow);
  if (io >= probe.workspace_bytes) return std::optional<ConvAlgo>();
  constexpr int kAlgos = 16;
  cudnnConvolutionFwdAlgoPerf_t perf[kAlgos];
  int returned = 0;
  FT_CUDNN_TRY(cudnnSetStream(handle_, stream));
  // the probe's fp32 buffers hold the bf16 input and output (half their size)
  FT_CUDNN_TRY(cudnnFindConvolutionForwardAlgorithmEx(handle_, xh_, probe.x, wh_, w_bf16_, ch_, yh_, probe.y,
                                                      kAlgos, &returned, perf, probe.workspace,
                                                      probe.workspace_bytes - io));
  for (int k = 0; k < returned; ++k) {
    const auto& p = perf[k];
    if (p.status != CUDNN_STATUS_SUCCESS || p.determinism != CUDNN_DETERMINISTIC) continue;
    const std::size_t ws = (p.memory + 255) / 256 * 256;
    if (p.memory > setup.max_workspace_bytes || ws + io > probe.workspace_bytes) continue;
    ConvAlgo a;
    a.bf16 = true;
    a.algo = p.algo;
    a.math = p.mathType;
    a.cudnn_workspace = ws;
    a.workspace = ws + io;
    a.kernel = std::string("cudnn-bf16:") + algo_name(p.algo);
    a.us = 1000.0f * p.time;
    return std::optional<ConvAlgo>(a);
  }
  return std::optional<ConvAlgo>();
}

Expected<std::optional<ConvAlgo>> GpuConv::find_graph(const ConvSetup& setup, const ConvProbe& probe,
                                                      cudaStream_t stream, bool bf16) {
  const ConvJob& j = job_;
  GraphConvShape gs;
  gs.n = batch_, gs.c = j.cin, gs.h = j.h, gs.w = j.w, gs.k = j.cout, gs.r = j.kh, gs.s = j.kw, gs.oh = j.oh,
  gs.ow = j.ow;
  gs.pad_h = j.pt, gs.pad_w = j.pl, gs.stride_h = j.sh, gs.stride_w = j.sw, gs.dil_h = j.dh, gs.dil_w = j.dw;
  gs.io = bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  // bf16: the probe's fp32 buffers hold the bf16 input and output; the workspace is cuDNN's part of the cap
  const std::size_t io =
      bf16 ? bf16_bytes(batch_ * j.cin * j.h * j.w) + bf16_bytes(batch_ * j.cout * j.oh * j.ow) : 0;
  if (io >= probe.workspace_bytes) return std::optional<ConvAlgo>();
  const std::size_t cap = std::min(setup.max_workspace_bytes, probe.workspace_bytes - io);
  const void* w = bf16 ? static_cast<const void*>(w_bf16_) : static_cast<const void*>(w_krsc_);
  if (!w) return internal_error("conv " + shape_text(j) + ": graph plan without its weight copy");
  auto g = GraphConv::build(handle_, gs, probe.x, w, probe.y, probe.workspace, cap, stream);
  if (!g) {
    if (g.status().code() == Code::kDeclined) return std::optional<ConvAlgo>();
    return g.status();
  }
  ConvAlgo a;
  a.graph = *g;
  a.bf16 = bf16;
  a.math = CUDNN_TENSOR_OP_MATH;
  const std::size_t ws = ((*g)->workspace() + 255) / 256 * 256;
  a.cudnn_workspace = bf16 ? ws : 0;
  a.workspace = ws + io;
  a.kernel = std::string(bf16 ? "cudnn-graph-bf16:" : "cudnn-graph:") + (*g)->name();
  a.tried = "{" + (*g)->tried() + "} ";
  return std::optional<ConvAlgo>(a);
}

Status GpuConv::run_with(const ConvAlgo& a, const float* x, float* y, void* workspace,
                         cudaStream_t stream) const {
  if (a.own && a.splits > 0)
    return launch_conv_igemm(job_, batch_, a.splits, x, w_dev_, b_dev_, act_, y,
                             static_cast<float*>(workspace), stream, a.pipelined, a.tile_m);
  if (a.own && a.splits == -2) return launch_allco3x3(job_, batch_, x, w_dev_, b_dev_, act_, y, stream);
  if (a.own && a.splits == -3)
    return launch_pw1x1(job_, batch_, a.tile_m, x, w_dev_, b_dev_, act_, y, stream);
  if (a.own && a.splits < 0) return launch_dw3x3_x4(job_, batch_, x, w_dev_, b_dev_, act_, y, stream);
  if (a.own) return launch_conv_direct(job_, batch_, x, w_dev_, b_dev_, act_, y, stream);
  if (a.bf16) return run_bf16(a, x, y, workspace, stream);
  if (a.graph) {  // channels-last fp32 (tf32 engines), the epilogue after it as for the legacy call
    FT_TRY(a.graph->run(x, cudnn_weights(), y, workspace, stream));
    if (b_dev_ || act_.kind != EpilogueAct::Kind::kNone || act_.residual)
      FT_TRY(launch_bias_act(y, b_dev_, job_.cout, 1, static_cast<int>(batch_ * job_.oh * job_.ow), act_,
                             stream));
    return {};
  }
  FT_CUDNN_TRY(cudnnSetStream(handle_, stream));
  const float one = 1.0f, zero = 0.0f;
  if (a.fused) {
    FT_CUDNN_TRY(cudnnConvolutionBiasActivationForward(handle_, &one, x_, x, w_, cudnn_weights(), c_, a.algo,
                                                       workspace, a.workspace, &zero, y_, y, b_, b_dev_,
                                                       act_desc_, y_, y));
    return {};
  }
  FT_CUDNN_TRY(cudnnConvolutionForward(handle_, &one, x_, x, w_, cudnn_weights(), c_, a.algo, workspace,
                                       a.workspace, &zero, y_, y));
  // channels-last: channel = offset mod cout, one "image" per pixel (docs/design/faces.md §8.3)
  if (b_dev_ || act_.kind != EpilogueAct::Kind::kNone || act_.residual)
    FT_TRY(nhwc_ ? launch_bias_act(y, b_dev_, job_.cout, 1, static_cast<int>(batch_ * job_.oh * job_.ow),
                                   act_, stream)
                 : launch_bias_act(y, b_dev_, job_.cout, job_.oh * job_.ow, batch_, act_, stream));
  return {};
}

ConvChoice GpuConv::choice() const {
  ConvChoice c;
  c.own = algo_.own ? 1 : 0;
  c.pipelined = algo_.pipelined ? 1 : 0;
  c.fused = algo_.fused ? 1 : 0;
  c.splits = static_cast<std::int16_t>(algo_.splits);
  c.tile_m = static_cast<std::int16_t>(algo_.tile_m);
  c.algo = static_cast<std::int32_t>(algo_.algo);
  c.math = static_cast<std::int32_t>(algo_.math);
  return c;
}

std::optional<ConvAlgo> GpuConv::carried_algo(const ConvChoice& c, const ConvSetup& setup, bool fusable,
                                              const ConvProbe& probe, cudaStream_t stream) {
  const std::int64_t cin_g = job_.cin / job_.groups, cout_g = job_.cout / job_.groups;
  ConvAlgo a;
  if (c.own != 0) {  // the candidate rules of setup's search
    a.own = true;
    if (c.splits == 0) {
      if (cudnn_ok_ && cin_g != 1 && cout_g >= 8) return std::nullopt;
      a.kernel = own_conv_kernel(job_);
    } else if (c.splits == -1) {
      if (!dw3x3_x4_fits(job_, batch_)) return std::nullopt;
      a.kernel = "own:depthwise3x3x4";
    } else if (c.splits == -2) {
      if (!allco3x3_fits(job_, batch_)) return std::nullopt;
      a.kernel = "own:allco3x3";
    } else if (c.splits == -3) {
      if (!pw1x1_fits(job_, batch_, c.tile_m)) return std::nullopt;
      a.tile_m = c.tile_m;
      a.kernel = pw1x1_name(c.tile_m);
    } else if (c.splits >= 1) {
      const int tm = c.tile_m;
      if (!igemm_fits(job_, batch_) || job_.cout * job_.oh * job_.ow * batch_ > (std::int64_t{1} << 22) ||
          !igemm_tile_ok(tm) || (tm == 16 && cout_g > 32) || (tm == 128 && cout_g < 128))
        return std::nullopt;
      int sms = 132;
      FT_CUDA_IGNORE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
      if (c.splits != igemm_splits(job_, batch_, sms, tm)) return std::nullopt;
      a.tile_m = tm;
      a.pipelined = c.pipelined != 0;
      a.workspace =
          c.splits > 1 ? static_cast<std::size_t>(c.splits) * job_.cout * job_.oh * job_.ow * batch_ * 4 : 0;
      if (a.workspace > probe.workspace_bytes) return std::nullopt;
      a.kernel = (a.pipelined ? "own:igemm2" : "own:igemm") +
                 (tm != 64 ? "/m" + std::to_string(tm) : std::string()) +
                 (c.splits > 1 ? "/splitk" + std::to_string(c.splits) : std::string());
    } else {
      return std::nullopt;
    }
    a.splits = c.splits;
    return a;
  }
  if (!cudnn_ok_ || c.algo < 0 || c.algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT || c.math != CUDNN_FMA_MATH)
    return std::nullopt;
  a.algo = static_cast<cudnnConvolutionFwdAlgo_t>(c.algo);
  a.math = CUDNN_FMA_MATH;
  a.fused = c.fused != 0 && fusable;
  a.kernel = std::string("cudnn:") + algo_name(a.algo) + (a.fused ? "+bias+relu" : "");
  if (cudnnSetConvolutionMathType(c_, a.math) != CUDNN_STATUS_SUCCESS) return std::nullopt;
  std::size_t ws = 0;
  if (cudnnGetConvolutionForwardWorkspaceSize(handle_, x_, w_, c_, y_, a.algo, &ws) != CUDNN_STATUS_SUCCESS ||
      ws > setup.max_workspace_bytes || ws > probe.workspace_bytes)
    return std::nullopt;
  a.workspace = ws;
  // As the search verified it: the algorithm runs on this shape (a declined one is not sticky).
  if (cudnnSetStream(handle_, stream) != CUDNN_STATUS_SUCCESS ||
      !run_with(a, probe.x, probe.y, probe.workspace, stream).ok() ||
      cudaStreamSynchronize(stream) != cudaSuccess) {
    FT_CUDA_IGNORE(cudaGetLastError());
    return std::nullopt;
  }
  return a;
}

Status GpuConv::run(const float* x, float* y, void* workspace, cudaStream_t stream, const float* residual) {
  act_.residual = residual;
  return run_with(algo_, x, y, workspace, stream);
}

}  // namespace facetrace::faces::gpu
