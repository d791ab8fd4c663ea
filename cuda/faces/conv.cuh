/// @file
/// Private, CUDA builds only: the convolutions of the GPU face program (docs/design/faces.md §8). One GpuConv per
/// conv step: cuDNN's legacy API (cudnnConvolutionForward, or cudnnConvolutionBiasActivationForward for
/// conv + bias + ReLU; otherwise the bias/activation epilogue kernel after it) with the algorithm found once at
/// plan time (deterministic algorithms only; FP32: CUDNN_FMA_MATH only), and the own direct kernels (depthwise
/// 3×3, general depthwise, direct for few output channels per group, and the general direct form cuDNN cannot
/// express, e.g. asymmetric pads). With autotune both are timed on the real shape and the faster kept.
#pragma once

#include <cudnn.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "faces/eltwise.cuh"
#include "facetrace/core/status.h"
#include "facetrace/faces/program.h"

namespace facetrace::faces::gpu {

/// Probe buffers plan time measures candidates on (contents are don't-care; sized for the largest conv).
struct ConvProbe {
  float* x = nullptr;
  float* y = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

/// How GpuConv::setup chooses.
struct ConvSetup {
  int batch = 1;
  bool tf32 = false;     ///< tensor-op math allowed (Precision::kTf32)
  bool autotune = true;  ///< time own kernels against cuDNN where both apply
  std::size_t max_workspace_bytes = std::size_t{256} << 20;
};

/// The choice for one (shape, batch, precision): shared by every conv step of that shape.
struct ConvAlgo {
  bool own = false;  ///< own kernel instead of cuDNN
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnMathType_t math = CUDNN_FMA_MATH;
  std::size_t workspace = 0;
  bool fused = false;  ///< cudnnConvolutionBiasActivationForward (conv + bias + ReLU)
  std::string kernel;
  float us = 0.0f;
};

/// One conv step on the GPU. Not copyable (owns cuDNN descriptors).
class GpuConv {
 public:
  GpuConv() = default;
  GpuConv(const GpuConv&) = delete;
  GpuConv& operator=(const GpuConv&) = delete;
  ~GpuConv();

  /// Describes `job` at setup.batch with the fused activation `act`; `weights` / `bias` are device pointers
  /// (bias may be null). When `known` is non-null the algorithm is taken from it (a shape met before),
  /// otherwise it is searched (and timed against the own kernels) on the probe buffers.
  Status setup(cudnnHandle_t handle, const ConvJob& job, const ConvSetup& setup, EpilogueAct act,
               const float* weights, const float* bias, const ConvAlgo* known, const ConvProbe& probe,
               cudaStream_t stream);
  /// Runs on the plan's stream; `workspace` holds at least algo().workspace bytes.
  Status run(const float* x, float* y, void* workspace, cudaStream_t stream) const;
  const ConvAlgo& algo() const { return algo_; }

 private:
  Status run_with(const ConvAlgo& a, const float* x, float* y, void* workspace, cudaStream_t stream) const;
  Status run_own(const float* x, float* y, cudaStream_t stream) const;

  cudnnHandle_t handle_ = nullptr;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr, b_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t c_ = nullptr;
  cudnnActivationDescriptor_t act_desc_ = nullptr;
  bool cudnn_ok_ = false;  ///< cuDNN can express the shape (symmetric pads give the IR's output size)
  ConvJob job_;
  int batch_ = 1;
  EpilogueAct act_;
  const float* w_dev_ = nullptr;
  const float* b_dev_ = nullptr;
  ConvAlgo algo_;
};

/// The own direct kernel: any groups, strides, dilations and pads (taps outside the input are zero), bias and
/// activation in its epilogue. Specialised for depthwise 3×3.
Status launch_conv_direct(const ConvJob& j, int batch, const float* x, const float* w, const float* bias,
                          EpilogueAct act, float* y, cudaStream_t s);
/// The kernel name launch_conv_direct uses for `j` ("own:depthwise3x3", "own:depthwise", "own:direct").
std::string own_conv_kernel(const ConvJob& j);

}  // namespace facetrace::faces::gpu
