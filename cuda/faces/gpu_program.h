/// @file
/// The GPU face program (docs/design/faces.md §8): a lowered Program planned once for one batch size and precision
/// on one device, then run any number of times on one stream. Host C++ only (no CUDA headers), so the device op
/// (src/faces/gpu/ops.cpp) and the tests include it; the implementation is cuda/faces/gpu_program.cpp (host C++20,
/// which this header's includes need; the kernels are the .cu files beside it).
///
/// Planning (GpuProgram::plan) does everything that allocates or measures: the activation arena laid out best-fit
/// from the IR's liveness (Program::free), one cuDNN descriptor set per conv with its algorithm found once (only
/// deterministic algorithms; FP32 mode also only CUDNN_FMA_MATH) and compared with the own kernels where they
/// apply (the faster is kept), the cuBLAS handle, and the CUDA graph of the whole program. run() then copies the
/// input into the arena, launches one graph replay (or the recorded launches when graphs are off, or when the
/// stream is the legacy default stream, which cannot be captured) and copies the outputs out.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "faces/conv_choice.h"
#include "facetrace/core/status.h"
#include "facetrace/faces/accelerator.h"
#include "facetrace/faces/program.h"

struct CUstream_st;  // cudaStream_t without <cuda_runtime.h>

namespace facetrace::faces::gpu {

using faces::Precision;  // accelerator.h: kFp32 true FP32 (no TF32 anywhere), kTf32 / kBf16 tensor cores


/// The plan-choice blob of src/faces/gpu/faces_ops.h: a u32 magic, a u32 count, then count ConvChoice. Empty
/// for no choices (and when more than fit kMaxPlanChoiceBytes).
std::vector<std::byte> encode_conv_choices(std::span<const ConvChoice> choices);
/// kInvalidArgument naming the problem when `blob` is not such an encoding.
Expected<std::vector<ConvChoice>> decode_conv_choices(std::span<const std::byte> blob);

/// Options of GpuProgram::plan.
struct PlanOptions {
  int batch = 1;  ///< B: every value holds B·lens[v] floats, image-major
  Precision precision = Precision::kFp32;
  bool use_graph = true;  ///< capture the program as a CUDA graph at plan time and replay it
  bool autotune = true;   ///< time own kernels against cuDNN per conv shape and keep the faster
  /// tf32 / bf16: run the convs cuDNN can take channels-last on NHWC values, with the per-channel steps between
  /// them (docs/design/faces.md §8.3); off, or when nothing can, every value is NCHW. Ignored in fp32.
  bool nhwc = true;
  /// Fuse detection heads (1×1 conv → depthwise 3×3 → channels-last Transpose [→ Sigmoid] chains reading one
  /// feature map, YuNet's cls/obj/bbox/kps) into one kernel per feature map (docs/design/faces.md §8.1); the same
  /// bits as the steps run one by one with the own direct kernels.
  bool fuse_heads = true;
  /// 1×1 conv → depthwise 3×3 [→ MaxPool 2×2] bands as one kernel (docs/design/faces.md §8.1): kTimed where it is
  /// faster than the separate steps (timed at plan time), kAlways wherever the kernel takes the band (tests). Off
  /// by default: on the H200 every YuNet band it takes was slower than its steps at batch 1 (benchmarks/NOTES.md).
  enum class Bands : std::uint8_t { kOff, kTimed, kAlways };
  Bands bands = Bands::kOff;
  std::uint64_t max_workspace_bytes = std::uint64_t{256} << 20;  ///< cuDNN workspace cap (algorithms above it skipped)
  /// fp32: one choice per conv of the program (GpuProgram::conv_choices of an earlier plan of it) to take
  /// instead of timing; ignored in tf32 / bf16 and when the count differs from the program's convs.
  std::vector<ConvChoice> conv_choices;
};

/// Device pointers to the program's constants, indexed like Program::consts (each holds consts[i]->size() floats).
/// They must stay valid and unchanged while the GpuProgram lives (a captured graph holds them). The table may also
/// hold the conv weights after the consts, in the program codec's wire order (for each Conv step in step order its
/// weights, then its bias when it has one); without them plan uploads the conv weights itself (counted in
/// device_bytes).
using ConstTable = std::vector<const float*>;

/// What plan chose for one step (benchmarks and `info`).
struct StepPlan {
  std::string node;    ///< ONNX node
  std::string kernel;  ///< e.g. "cudnn:WINOGRAD_NONFUSED", "own:depthwise3x3", "cublas:sgemm", "fused:conv+relu"
  float us = 0.0f;     ///< measured time of the step (group) in one eager pass at plan time
};

/// A program planned for (batch, precision) on the current device. Not thread-safe: one stream, one caller.
class GpuProgram {
 public:
  /// Plans `program` on `stream`. Errors: kDeclined (a step this device cannot express, e.g. a rank > 4
  /// transpose: the caller runs the CPU), kOutOfMemory (arena, workspace), kDeviceLost (a sticky CUDA error),
  /// kInvalidArgument (a const count or size that does not match the program).
  static Expected<std::unique_ptr<GpuProgram>> plan(const Program& program, const ConstTable& consts,
                                                    const PlanOptions& options, CUstream_st* stream);
  virtual ~GpuProgram() = default;

  /// Runs the program on B inputs. `input`: device pointer to B·lens[0] floats (image-major). `output`: device
  /// pointer to output_floats() floats, filled with every Program::outputs entry in order, each B·lens[value]
  /// floats image-major. Asynchronous on the plan's stream; errors as plan (kDeviceLost for a launch failure).
  virtual Status run(const float* input, float* output) = 0;

  /// Σ over outputs of B·lens[value].
  virtual std::uint64_t output_floats() const = 0;
  /// Device bytes this plan holds (activation arena + workspace + converted weights), not counting the consts.
  virtual std::uint64_t device_bytes() const = 0;
  virtual int batch() const = 0;
  virtual Precision precision() const = 0;
  /// The choice per step, in step order (fused groups once, under their first step's node).
  virtual const std::vector<StepPlan>& steps() const = 0;
  /// fp32: the choice of every conv, in the order PlanOptions::conv_choices takes them; empty in tf32 / bf16.
  virtual std::vector<ConvChoice> conv_choices() const = 0;
  /// How many of PlanOptions::conv_choices this plan took (the rest were searched).
  virtual int carried_choices() const = 0;
};

}  // namespace facetrace::faces::gpu
