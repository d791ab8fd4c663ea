/// @file
/// The accelerator contract of the face networks (docs/design/faces.md §4): something that runs a lowered Program
/// (or one convolution) faster than the CPU interpreter, declines what it cannot run, and is checked against the
/// CPU before a Net uses it (Net::attach_checked). The GPU accelerator runs inside the device runtime (the GPU
/// child, turnstile turns, readback ring, recovery: docs/design/runtime.md).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "facetrace/core/status.h"
#include "facetrace/faces/program.h"

namespace facetrace::faces {

/// Arithmetic of convolutions and matrix products on an accelerator. kFp32 (the default) is true FP32 (no TF32)
/// and bit-for-bit deterministic from run to run on one GPU child (a replacement child re-plans by timing and may
/// differ in the last bits, within the fp32 bar: docs/design/faces.md §8); kTf32 and kBf16 use tensor cores, are opt-in per net and attach
/// only after attach_checked's looser bar (docs/design/faces.md §4).
enum class Precision : std::uint8_t { kFp32, kTf32, kBf16 };
/// "fp32", "tf32", "bf16".
std::string_view precision_name(Precision p) noexcept;
/// Parses precision_name's spellings; false for anything else.
bool parse_precision(std::string_view text, Precision& out) noexcept;

/// Results of a program run: per input, per Program::outputs entry, the floats of that output.
using ProgramOutputs = std::vector<std::vector<std::vector<float>>>;

struct Detection;      // facetrace/faces/detector.h (which includes this header)
struct DetectOptions;  // facetrace/faces/detector.h

/// One decoded photo for Accelerator::detect_yunet: interleaved RGB8, rows packed (width·height·3 bytes).
struct RgbFrame {
  std::span<const std::uint8_t> rgb;
  int width = 0;
  int height = 0;
};

/// Per photo, its final detections (best score first), as Detector::detect returns them.
using DetectionLists = std::vector<std::vector<Detection>>;

/// An accelerator. Thread-safe. nullopt = declined (the caller runs the CPU); an Expected holding an error = a
/// real failure (kOutOfMemory: this call only; anything else: the Net detaches it, docs/design/faces.md §4).
class Accelerator {
 public:
  virtual ~Accelerator() = default;
  /// One convolution of `input` (cin·h·w floats) → cout·oh·ow floats.
  virtual std::optional<Expected<std::vector<float>>> conv(const ConvJob& job, std::span<const float> input) = 0;
  /// The whole program on B inputs of lens[0] floats each, in one submission.
  virtual std::optional<Expected<ProgramOutputs>> run_program(const Program& program,
                                                              std::span<const std::span<const float>> inputs) = 0;
  /// YuNet end to end on the device (docs/design/faces.md §5): each frame letterboxed into `program`'s n×n input,
  /// the program run, and decode, score filter, top-k and NMS, so only the final boxes come back; the results
  /// equal letterbox_bgr + the CPU program + decode_yunet exactly. Frames are already checked (sides
  /// 1..65536, byte counts). The default declines (the caller runs its own path); defined in detector.cpp.
  virtual std::optional<Expected<DetectionLists>> detect_yunet(const Program& program, int n,
                                                               std::span<const RgbFrame> frames,
                                                               const DetectOptions& options);
  /// "NVIDIA H200 (sm_90, isolated) fp32".
  virtual std::string device() const = 0;
  virtual Precision precision() const = 0;
  /// Device bytes of resident weights held for programs run so far.
  virtual std::uint64_t resident_bytes() const = 0;
  /// Changes whenever the device behind the accelerator was replaced (a lost GPU child respawned): a Net that
  /// sees a new generation re-runs its check before using the accelerator again.
  virtual std::uint64_t generation() const { return 0; }
};

/// Options of the GPU accelerator.
struct GpuAcceleratorOptions {
  Precision precision = Precision::kFp32;
  /// Resident weight budget per accelerator: FACETRACE_FACES_RESIDENT_MB (default 768 MiB). A model over it runs
  /// the layers past the budget with per-run uploads (slower, never a wrong answer).
  std::uint64_t resident_budget_bytes = std::uint64_t{768} << 20;
  bool use_graph = true;  ///< replay each (program, batch) as a CUDA graph
  /// Defaults with FACETRACE_FACES_RESIDENT_MB applied (a warning on a bad value).
  static GpuAcceleratorOptions from_env();
};

/// The GPU accelerator on the process-wide device runtime (the backend the tracer's renders share).
/// kNotSupported with the reason when there is no usable GPU (built without CUDA, no device, no facetrace-gpud).
Expected<std::shared_ptr<Accelerator>> make_gpu_accelerator(const GpuAcceleratorOptions& options = {});

/// Face work's share of the GPU (docs/design/faces.md §4 "Pace"), for every GPU accelerator of this process:
/// at most `concurrent` (≥ 1) runs in flight; after a run of length t its turn is held idle for t·(1 − share)/share
/// (at most 2 s), share ∈ [0.05, 1] (non-finite → 1), so a render running at the same time keeps ≥ 1 − share.
void set_pace(int concurrent, double share);

}  // namespace facetrace::faces
