/// @file
/// faces::Net: an ONNX subset loaded, validated and lowered to a Program, run by the CPU interpreter.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "facetrace/core/status.h"
#include "facetrace/faces/accelerator.h"
#include "facetrace/faces/program.h"

namespace facetrace::faces {

/// Load limits (docs/design/faces.md §1). Refusals name the node and the reason.
struct NetLimits {
  std::int64_t max_file_bytes = std::int64_t{512} << 20;
  std::int64_t max_nodes = 20000;
  std::int64_t max_initializers = 20000;
  std::int64_t max_node_io = 64;    ///< inputs, outputs and attributes per node
  std::int64_t max_list = 1000000;  ///< FLOATS / INTS attribute length
  std::int64_t max_rank = 8;
  std::int64_t max_tensor_elements = std::int64_t{64} << 20;
  std::int64_t max_weight_elements = std::int64_t{64} << 20;  ///< all initializers together
  std::int64_t max_live_bytes = std::int64_t{512} << 20;      ///< live activations + conv scratch
};

/// Options of a Net.
struct NetOptions {
  NetLimits limits;
  /// Threads per call: 0 = all hardware threads, 1 = the calling thread only.
  int threads = 0;
  /// Accept input shapes whose dims after the first two differ from the declared ones, and leave the declared
  /// output shapes unchecked: a convolutional net run at another image size, as OpenCV runs YuNet at a photo's
  /// own size (docs/design/faces.md §5). input_shape() and the cached program stay the declared ones.
  bool free_spatial_dims = false;
};

/// A named output tensor of one run.
struct NamedTensor {
  std::string name;
  Shape shape;
  std::vector<float> data;
};

/// A loaded network. Immutable after creation, cheap to copy (shared state); `run` is thread-safe and
/// deterministic (the result does not depend on the thread count).
class Net {
 public:
  /// Parses and validates ONNX bytes. Errors: kInvalidArgument (malformed or over a limit, naming the node
  /// and attribute), kNotSupported (an operator or form outside docs/design/faces.md §2).
  static Expected<Net> create(std::span<const std::uint8_t> bytes, const NetOptions& options = {});
  /// Reads a file (core::read_file) and calls create. kIo when it cannot be opened or read, kInvalidArgument when it
  /// holds more than max_file_bytes.
  static Expected<Net> load(const std::string& path, const NetOptions& options = {});

  /// Name and declared shape of the graph input (a symbolic dim is 0).
  const std::string& input_name() const;
  const Shape& input_shape() const;
  /// Declared output names in graph order.
  std::vector<std::string> output_names() const;
  /// The opset of the default domain (recorded, not checked).
  std::int64_t opset() const;
  /// The attributes of the model that no operator rule looks at (so they change nothing), each as
  /// "node '<name>' (<op>) attribute '<attr>'" in graph order, names cut and escaped (core/text.h). Found when the
  /// net is first lowered (at create for a concrete declared shape, else by the first run; empty before) and noted
  /// then, once per model, in one `warn` log line naming the first few. Thread-safe.
  std::vector<std::string> ignored_attributes() const;
  /// Threads per call for `run` (0 = all).
  int threads() const;
  void set_threads(int threads);

  /// Infers every shape for `shape` (batch 1) without allocating activations. kInvalidArgument on mismatch.
  Status validate_input(const Shape& shape) const;
  /// The program lowered for `shape` (cached: the declared shape and the 16 others most recently used).
  Expected<Program> program(const Shape& shape) const;

  /// Runs one input of `shape` (its element count must match). Non-finite input or any non-finite node output
  /// is kInvalidArgument.
  Expected<std::vector<NamedTensor>> run(std::span<const float> input, const Shape& shape) const;
  /// Runs with the declared input shape.
  Expected<std::vector<NamedTensor>> run(std::span<const float> input) const;
  /// B inputs of one shape; threads go across batch items when B > 1.
  Expected<std::vector<std::vector<NamedTensor>>> run_batch(std::span<const std::span<const float>> inputs,
                                                            const Shape& shape) const;

  /// Checks `acc` against the CPU on a deterministic input (xorshift32 noise, seed 0x2545F491,
  /// docs/design/faces.md §4) for the declared input shape and attaches it only if every output is within the bar
  /// of its precision: fp32 max|acc − cpu| ≤ 1e-4 + 1e-3·max|cpu|; tf32/bf16 cosine ≥ 0.999 per output. Otherwise
  /// the net stays CPU-only and the Status says why (kDeclined when `acc` declined the check input). Attaching
  /// replaces any previous accelerator. Shared by every copy of this Net. run / run_batch then use it per the
  /// failure table of docs/design/faces.md §4 (declined or out of memory: that call on the CPU; any other error:
  /// detached for good, that call on the CPU; a replaced device: checked again first).
  Status attach_checked(std::shared_ptr<Accelerator> acc);
  /// Back to the CPU only.
  void detach();
  /// The attached accelerator's device() ("NVIDIA H200 (sm_90, isolated) fp32"), or nullopt.
  std::optional<std::string> accelerator() const;
  /// For a caller's own accelerator hook (Detector's use of Accelerator::detect_yunet): the attached accelerator,
  /// ready for this call (re-checked first when its device was replaced, as run does), or null: the CPU.
  std::shared_ptr<Accelerator> ready_accelerator() const;
  /// The failure table of docs/design/faces.md §4 for a hook's error from `acc`: kDeclined or kOutOfMemory keep it
  /// attached; anything else detaches it for good (one log line, detach_reason). Either way the caller runs that
  /// call on the CPU.
  void accelerator_failed(const std::shared_ptr<Accelerator>& acc, const Status& error) const;
  /// Why the last accelerator was detached (its first non-OOM error, or a failed re-check after the device was
  /// replaced); nullopt when none was.
  std::optional<std::string> detach_reason() const;

  struct Impl;

 private:
  explicit Net(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

/// The CPU interpreter: runs a Program on B inputs (each of lens[0] floats). Returns, per input, the outputs in
/// `program.outputs` order. `threads` as in NetOptions. Thread-safe; per-call scratch; deterministic.
Expected<std::vector<std::vector<std::vector<float>>>> run_program_cpu(
    const Program& program, std::span<const std::span<const float>> inputs, int threads = 0);

/// A one-line description of the CPU and of the interpreter kernels picked for it at run time (for benchmark logs).
std::string cpu_kernel_info();

/// One convolution on the CPU (the reference an accelerator's conv is checked against). `input` holds
/// cin·h·w floats; returns cout·oh·ow.
Expected<std::vector<float>> conv_cpu(const ConvJob& job, std::span<const float> input, int threads = 0);

}  // namespace facetrace::faces
