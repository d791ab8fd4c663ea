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
#include <memory>
#include <optional>
#include <string>

#include "faces/conv_graph.h"
#include "faces/eltwise.cuh"
#include "faces/conv_choice.h"
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
  bool tf32 = false;  ///< tensor-op math allowed (Precision::kTf32 and kBf16)
  bool bf16 =
      false;  ///< the bf16 cuDNN form is a candidate too (Precision::kBf16, docs/design/faces.md §8.1)
  bool autotune = true;  ///< time own kernels against cuDNN where both apply
  std::size_t max_workspace_bytes = std::size_t{256} << 20;
  /// Channels-last input and output (docs/design/faces.md §8.3): cuDNN only (NHWC fp32 with tensor-op math, or
  /// the bf16 form with element-wise conversions), the epilogue indexed channel = offset mod cout.
  bool nhwc = false;
  /// fp32, NCHW: an earlier plan's choice for this conv (PlanOptions::conv_choices), taken instead of searching
  /// when it fits the conv here.
  const ConvChoice* carried = nullptr;
};

/// The choice for one (shape, batch, precision): shared by every conv step of that shape.
struct ConvAlgo {
  bool own = false;  ///< own kernel instead of cuDNN
  /// own: 0 = the direct kernel, ≥ 1 = the tiled implicit GEMM with this many K splits, −1 = the depthwise 3×3
  /// kernel of four outputs per thread, −2 = the 3×3 kernel of every output channel per thread
  /// (launch_allco3x3), −3 = the 1×1 kernel (launch_pw1x1, its form in tile_m)
  int splits = 0;
  bool pipelined = false;  ///< the implicit GEMM's double-buffered form
  int tile_m = 64;         ///< the implicit GEMM's tile rows (16, 64 or 128); the 1×1 kernel's form
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnMathType_t math = CUDNN_FMA_MATH;
  std::size_t workspace = 0;
  bool fused = false;  ///< cudnnConvolutionBiasActivationForward (conv + bias + ReLU)
  bool bf16 = false;   ///< cuDNN on NHWC bf16 copies of the input and weights, fp32 accumulate
  std::size_t cudnn_workspace =
      0;  ///< bf16: cuDNN's part of `workspace` (the bf16 input and output follow it)
  /// Channels-last: a cuDNN graph-API plan instead of the legacy algorithm (docs/design/faces.md §8.3); shared by
  /// every conv of the shape (it holds no pointers).
  std::shared_ptr<GraphConv> graph;
  std::string kernel;
  float us = 0.0f;
  std::string
      tried;  ///< the candidates' plan-time times, "name us; ..." (FACETRACE_FACES_PLAN_DETAIL=1 shows them)
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
  /// Runs on the plan's stream; `workspace` holds at least algo().workspace bytes; `residual` binds the
  /// epilogue's residual operand when it was planned with one.
  Status run(const float* x, float* y, void* workspace, cudaStream_t stream, const float* residual = nullptr);
  const ConvAlgo& algo() const { return algo_; }
  /// Input-bias deferral (docs/design/faces.md §8.1): the producer gives its bias away (its epilogue pass is
  /// skipped when nothing else remains), the consumer (own kernels only) adds it to its input taps.
  const float* take_bias() {
    const float* b = b_dev_;
    b_dev_ = nullptr;
    return b;
  }
  void set_input_bias(const float* bias) { act_.in_bias = bias; }
  /// bf16 form only: the ChannelAffine before this conv (x·scale + shift per input channel), applied by its
  /// input conversion (docs/design/faces.md §8.1).
  void set_input_affine(const float* scale, const float* shift) { in_scale_ = scale, in_shift_ = shift; }
  /// Device bytes of the weight copies this conv holds (bf16 KRSC for the bf16 form, fp32 KRSC channels-last).
  std::uint64_t bf16_weight_bytes() const {
    const auto n = static_cast<std::uint64_t>(job_.cout * job_.cin * job_.kh * job_.kw);
    return (w_bf16_ ? (n * 2 + 255) / 256 * 256 : 0) + (w_krsc_ ? (n * 4 + 255) / 256 * 256 : 0);
  }
  bool nhwc() const { return nhwc_; }
  /// The choice to carry to a later plan (fp32 NCHW: cuDNN's legacy algorithm or an own kernel).
  ConvChoice choice() const;

 private:
  /// The algorithm of a carried choice when the search could have chosen it for this conv here (the same
  /// candidate rules, the workspace worked out again, a cuDNN algorithm run once on the probe buffers), else
  /// nullopt.
  std::optional<ConvAlgo> carried_algo(const ConvChoice& c, const ConvSetup& setup, bool fusable,
                                       const ConvProbe& probe, cudaStream_t stream);
  Status run_with(const ConvAlgo& a, const float* x, float* y, void* workspace, cudaStream_t stream) const;
  Status run_own(const float* x, float* y, cudaStream_t stream) const;
  Status setup_bf16(cudaStream_t stream);  // the NHWC bf16 descriptors and the bf16 copy of the weights
  Expected<std::optional<ConvAlgo>> find_bf16(const ConvSetup& setup, const ConvProbe& probe,
                                              cudaStream_t stream);
  void drop_bf16_weights();
  /// Channels-last: the graph API's best deterministic plan for this conv in fp32 (tf32 engines) or bf16 (on
  /// the bf16 copies), timed on the probe buffers; nullopt when no engine takes it.
  Expected<std::optional<ConvAlgo>> find_graph(const ConvSetup& setup, const ConvProbe& probe,
                                               cudaStream_t stream, bool bf16);
  Status make_krsc(cudaStream_t stream);  // channels-last: the KRSC fp32 copy of the weights
  void drop_krsc();
  const float* cudnn_weights() const { return nhwc_ ? w_krsc_ : w_dev_; }
  Status run_bf16(const ConvAlgo& a, const float* x, float* y, void* workspace, cudaStream_t stream) const;

  cudnnHandle_t handle_ = nullptr;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr, b_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t c_ = nullptr;
  cudnnActivationDescriptor_t act_desc_ = nullptr;
  cudnnTensorDescriptor_t xh_ = nullptr, yh_ = nullptr;  // bf16 NHWC
  cudnnFilterDescriptor_t wh_ = nullptr;
  cudnnConvolutionDescriptor_t ch_ = nullptr;  // fp32 compute, tensor-op math
  void* w_bf16_ = nullptr;                     // KRSC bf16 weights (owned)
  float* w_krsc_ = nullptr;                    // channels-last: KRSC fp32 weights (owned), cuDNN's filter
  bool nhwc_ = false;
  const float* in_scale_ = nullptr;  // bf16: the input affine (null: none)
  const float* in_shift_ = nullptr;
  bool cudnn_ok_ = false;  ///< cuDNN can express the shape (symmetric pads give the IR's output size)
  ConvJob job_;
  int batch_ = 1;
  EpilogueAct act_;
  const float* w_dev_ = nullptr;
  const float* b_dev_ = nullptr;
  ConvAlgo algo_;
};

/// Fills `n` floats with a fixed pseudo-random pattern in [-1, 1] (plan-time probe inputs: all-zero data would
/// time tensor-core kernels faster than real activations).
Status launch_fill_probe(float* x, std::int64_t n, cudaStream_t s);

/// The own direct kernel: any groups, strides, dilations and pads (taps outside the input are zero), bias and
/// activation in its epilogue. Specialised for depthwise 3×3.
Status launch_conv_direct(const ConvJob& j, int batch, const float* x, const float* w, const float* bias,
                          EpilogueAct act, float* y, cudaStream_t s);
/// The own tiled implicit GEMM (tile_m × 4096/tile_m tiles of output channels × output pixels of the whole
/// batch, tile_m 16, 64 or 128; K = the group's cin·kh·kw): with splits > 1 each K slice writes its partial sums
/// to `partial` (splits·B·cout·oh·ow floats) and a second kernel adds them in slice order with bias and
/// activation, so the result does not depend on the schedule (nor on the tile shape). False `fits` when the
/// shape is outside its 32-bit indexing.
Status launch_conv_igemm(const ConvJob& j, int batch, int splits, const float* x, const float* w,
                         const float* bias, EpilogueAct act, float* y, float* partial, cudaStream_t s,
                         bool pipelined = false, int tile_m = 64);
bool igemm_fits(const ConvJob& j, int batch);
/// The tile rows launch_conv_igemm takes.
bool igemm_tile_ok(int tile_m);
/// The K splits that fill the device with tiles of `tile_m` rows for this shape (1 when the tiles alone do).
int igemm_splits(const ConvJob& j, int batch, int multiprocessors, int tile_m = 64);
/// Depthwise 3×3, dilation 1, stride-x 1 or 2: four outputs of a row per thread (the same bits as the direct
/// kernel). `fits` says whether the shape is one it takes.
bool dw3x3_x4_fits(const ConvJob& j, int batch);
Status launch_dw3x3_x4(const ConvJob& j, int batch, const float* x, const float* w, const float* bias,
                       EpilogueAct act, float* y, cudaStream_t s);
/// A dense 3×3 conv of few input taps (cin·9 ≤ 64), cout ≤ 32, dilation 1 and strides of 1 or 2, every output
/// channel of one output pixel per thread from a shared-memory input window (the same bits as the direct kernel):
/// a stem conv reads its input once instead of cout times.
bool allco3x3_fits(const ConvJob& j, int batch);
Status launch_allco3x3(const ConvJob& j, int batch, const float* x, const float* w, const float* bias,
                       EpilogueAct act, float* y, cudaStream_t s);
/// A dense 1×1 conv of stride 1 without pads (a matrix product per image). `form` > 0: four adjacent pixels ×
/// form output channels per thread (4, 8 or 16; the plane a multiple of 4); `form` < 0: one pixel × −form
/// channels (1, 2, 4 or 8), for small planes. The same bits as the direct kernel (which it runs when a float4
/// form's plane is not 16-byte aligned).
bool pw1x1_fits(const ConvJob& j, int batch, int form);
Status launch_pw1x1(const ConvJob& j, int batch, int form, const float* x, const float* w, const float* bias,
                    EpilogueAct act, float* y, cudaStream_t s);
/// "own:pw1x1/c<channels>" and "p1" for the one-pixel forms.
std::string pw1x1_name(int form);
/// The kernel name launch_conv_direct uses for `j` ("own:depthwise3x3", "own:depthwise", "own:direct").
std::string own_conv_kernel(const ConvJob& j);

}  // namespace facetrace::faces::gpu
