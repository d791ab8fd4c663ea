/// @file
/// Convolutions of the GPU face program (docs/design/faces.md §8): cuDNN descriptors and the plan-time algorithm
/// search (deterministic results only; FP32 mode also CUDNN_FMA_MATH only), and the own direct kernels cuDNN is
/// slow at (depthwise, few output channels per group) or cannot express (asymmetric pads).
#include <cudnn.h>

#include "common/cuda_check.cuh"
#include "faces/conv.cuh"
#include "faces/launch.cuh"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace facetrace::faces::gpu {
namespace {

// The geometry of a conv as plain integers (a ConvJob holds shared pointers, which a kernel cannot take).
struct ConvGeom {
  std::int64_t cin, h, w, cout, cin_g, cout_g, kh, kw, sh, sw, pt, pl, oh, ow, dh, dw;
};

ConvGeom geom_of(const ConvJob& j) {
  return {j.cin, j.h, j.w, j.cout, j.cin / j.groups, j.cout / j.groups, j.kh, j.kw, j.sh, j.sw, j.pt, j.pl,
          j.oh, j.ow, j.dh, j.dw};
}

// One output per thread: Σ over the group's input channels and the taps in (ci, ky, kx) order, then bias and
// activation. KH/KW > 0 fix the window at compile time (unrolled); 0 reads it from g.
template <int KH, int KW>
__global__ void conv_direct_kernel(ConvGeom g, const float* __restrict__ x, const float* __restrict__ w,
                                   const float* __restrict__ bias, EpilogueAct::Kind act, float lo, float hi,
                                   float* __restrict__ y, std::int64_t n) {
  const std::int64_t kh = KH > 0 ? KH : g.kh, kw = KW > 0 ? KW : g.kw;
  FT_FOR_EACH(i, n) {
    const std::int64_t ox = i % g.ow, oy = (i / g.ow) % g.oh, co = (i / (g.ow * g.oh)) % g.cout;
    const std::int64_t img = i / (g.ow * g.oh * g.cout);
    const std::int64_t grp = co / g.cout_g;
    const float* xb = x + (img * g.cin + grp * g.cin_g) * g.h * g.w;
    const float* wb = w + co * g.cin_g * kh * kw;
    const std::int64_t y0 = oy * g.sh - g.pt, x0 = ox * g.sw - g.pl;
    float acc = 0.0f;
    for (std::int64_t ci = 0; ci < g.cin_g; ++ci) {
      const float* xc = xb + ci * g.h * g.w;
      const float* wc = wb + ci * kh * kw;
#pragma unroll
      for (std::int64_t ky = 0; ky < kh; ++ky) {
        const std::int64_t iy = y0 + ky * g.dh;
        if (iy < 0 || iy >= g.h) continue;
#pragma unroll
        for (std::int64_t kx = 0; kx < kw; ++kx) {
          const std::int64_t ix = x0 + kx * g.dw;
          if (ix < 0 || ix >= g.w) continue;
          acc = fmaf(xc[iy * g.w + ix], __ldg(wc + ky * kw + kx), acc);
        }
      }
    }
    if (bias) acc = __fadd_rn(acc, __ldg(bias + co));
    if (act == EpilogueAct::Kind::kRelu) acc = acc > 0.0f ? acc : 0.0f;
    if (act == EpilogueAct::Kind::kClip) acc = fminf(fmaxf(acc, lo), hi);
    y[i] = acc;
  }
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

}  // namespace

std::string own_conv_kernel(const ConvJob& j) {
  if (j.cin / j.groups == 1 && j.kh == 3 && j.kw == 3) return "own:depthwise3x3";
  if (j.cin / j.groups == 1) return "own:depthwise";
  return "own:direct";
}

Status launch_conv_direct(const ConvJob& j, int batch, const float* x, const float* w, const float* bias,
                          EpilogueAct act, float* y, cudaStream_t s) {
  const ConvGeom g = geom_of(j);
  const std::int64_t n = g.cout * g.oh * g.ow * batch;
  if (n <= 0) return {};
  if (g.kh == 3 && g.kw == 3)
    conv_direct_kernel<3, 3><<<blocks_for(n), kThreads, 0, s>>>(g, x, w, bias, act.kind, act.lo, act.hi, y, n);
  else if (g.kh == 1 && g.kw == 1)
    conv_direct_kernel<1, 1><<<blocks_for(n), kThreads, 0, s>>>(g, x, w, bias, act.kind, act.lo, act.hi, y, n);
  else
    conv_direct_kernel<0, 0><<<blocks_for(n), kThreads, 0, s>>>(g, x, w, bias, act.kind, act.lo, act.hi, y, n);
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
    FT_CUDNN_TRY(cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, batch_, i32(job.cin),
                                            i32(job.h), i32(job.w)));
    FT_CUDNN_TRY(cudnnSetTensor4dDescriptor(y_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, batch_, i32(job.cout),
                                            i32(job.oh), i32(job.ow)));
    FT_CUDNN_TRY(cudnnSetTensor4dDescriptor(b_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, i32(job.cout), 1, 1));
    FT_CUDNN_TRY(cudnnSetFilter4dDescriptor(w_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, i32(job.cout),
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
          act_desc_, act.kind == EpilogueAct::Kind::kRelu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_CLIPPED_RELU,
          CUDNN_NOT_PROPAGATE_NAN, act.kind == EpilogueAct::Kind::kRelu ? 0.0 : static_cast<double>(act.hi)));
  }
  cudnn_ok_ = expressible;
  const bool fusable = cudnn_ok_ && bias != nullptr &&
                       (act.kind == EpilogueAct::Kind::kRelu ||
                        (act.kind == EpilogueAct::Kind::kClip && act.lo == 0.0f && std::isfinite(act.hi)));
  if (known) {
    algo_ = *known;
    if (!algo_.own && !cudnn_ok_) return internal_error("conv " + shape_text(job) + ": cached cuDNN algorithm");
    algo_.fused = algo_.fused && fusable;
    if (!algo_.own) FT_CUDNN_TRY(cudnnSetConvolutionMathType(c_, algo_.math));
    return {};
  }
  ConvAlgo own;
  own.own = true;
  own.kernel = own_conv_kernel(job);
  const std::int64_t cin_g = job.cin / job.groups, cout_g = job.cout / job.groups;
  const bool own_fits = !cudnn_ok_ || cin_g == 1 || cout_g < 8;
  if (!cudnn_ok_) {
    algo_ = own;
    return {};
  }
  // cuDNN: every algorithm measured on the probe buffers, the fastest deterministic one kept
  constexpr int kAlgos = 16;
  cudnnConvolutionFwdAlgoPerf_t perf[kAlgos];
  int returned = 0;
  FT_CUDNN_TRY(cudnnSetStream(handle_, stream));
  FT_CUDNN_TRY(cudnnFindConvolutionForwardAlgorithmEx(handle_, x_, probe.x, w_, weights, c_, y_, probe.y, kAlgos,
                                                      &returned, perf, probe.workspace, probe.workspace_bytes));
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
  if (candidates.empty()) {
    algo_ = own;
    return {};
  }
  ConvAlgo best = candidates.front();
  FT_CUDNN_TRY(cudnnSetConvolutionMathType(c_, best.math));
  if (fusable) {  // conv + bias + ReLU in one cuDNN call, when the algorithm takes it
    ConvAlgo f = best;
    f.fused = true;
    algo_ = f;
    if (run_with(f, probe.x, probe.y, probe.workspace, stream).ok() && cudaStreamSynchronize(stream) == cudaSuccess)
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
  }
  if (best.fused) best.kernel += "+bias+relu";
  algo_ = best;
  return {};
}

Status GpuConv::run_with(const ConvAlgo& a, const float* x, float* y, void* workspace, cudaStream_t stream) const {
  if (a.own) return launch_conv_direct(job_, batch_, x, w_dev_, b_dev_, act_, y, stream);
  FT_CUDNN_TRY(cudnnSetStream(handle_, stream));
  const float one = 1.0f, zero = 0.0f;
  if (a.fused) {
    FT_CUDNN_TRY(cudnnConvolutionBiasActivationForward(handle_, &one, x_, x, w_, w_dev_, c_, a.algo, workspace,
                                                       a.workspace, &zero, y_, y, b_, b_dev_, act_desc_, y_, y));
    return {};
  }
  FT_CUDNN_TRY(cudnnConvolutionForward(handle_, &one, x_, x, w_, w_dev_, c_, a.algo, workspace, a.workspace, &zero,
                                       y_, y));
  if (b_dev_ || act_.kind != EpilogueAct::Kind::kNone)
    FT_TRY(launch_bias_act(y, b_dev_, job_.cout, job_.oh * job_.ow, batch_, act_, stream));
  return {};
}

Status GpuConv::run(const float* x, float* y, void* workspace, cudaStream_t stream) const {
  return run_with(algo_, x, y, workspace, stream);
}

}  // namespace facetrace::faces::gpu
