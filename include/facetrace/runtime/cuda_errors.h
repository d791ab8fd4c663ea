/// @file
/// The one CUDA error classifier (docs/design/runtime.md §4). Works on plain integer codes, so it compiles without CUDA.
#pragma once

#include <string>
#include <string_view>

#include "facetrace/core/status.h"

namespace facetrace::runtime {

/// What a CUDA result means for the caller (docs/design/runtime.md §4).
enum class ErrorClass : std::uint8_t {
  kNone,         ///< 0 success, 600 not ready
  kNoGpu,        ///< 100 no device, 35 insufficient driver: decline, never retry, never an error
  kOutOfMemory,  ///< 2: this call fails, the device stays
  kTransient,    ///< anything else that is not sticky: this call declines
  kSticky,       ///< 700, 702, 710, 714–719, 911, 214, 999 (and 46 after a sticky error): device lost
};

/// Classifies a `cudaError_t` value. 46 (`cudaErrorDevicesUnavailable`) is sticky only once a sticky error
/// has been seen in this process (see `process_cuda_poisoned`). Thread-safe, never calls CUDA.
ErrorClass classify_cuda_error(int code) noexcept;

/// The `cudaError_t` enumerator name for the codes the classifier knows ("cudaErrorIllegalAddress"), or
/// "cudaError<code>". Never calls CUDA.
std::string_view cuda_error_name(int code) noexcept;

/// Builds the Status for a failed CUDA call and records stickiness: kDeviceLost (sticky; also marks the
/// process poisoned), kOutOfMemory, kNotSupported ("no GPU: ..."), otherwise kDeclined. The message names the
/// call, the code and file:line. `code` must not be 0.
Status cuda_status(int code, std::string_view expr, const char* file, int line);

/// True once any sticky CUDA error was classified in this process: from then on no code path may call CUDA
/// in this process again (docs/design/runtime.md §4). Thread-safe.
bool process_cuda_poisoned() noexcept;

/// The reason of the first sticky error in this process ("" when none). Thread-safe.
std::string process_poison_reason();

/// Marking the process poisoned (cuda_status does it) is a test seam: facetrace/runtime/testing/fault.h.

}  // namespace facetrace::runtime
