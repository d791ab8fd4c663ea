/// @file
/// The CUDA error classifier (docs/design/runtime.md §4) and the process-poison flag.
#include "facetrace/runtime/cuda_errors.h"

#include <atomic>
#include <mutex>
#include <string>

#include "facetrace/runtime/testing/fault.h"
#include "log.h"

namespace facetrace::runtime {
namespace {

std::atomic<bool> g_poisoned{false};
std::mutex g_reason_mu;
std::string g_reason;

struct Named {
  int code;
  std::string_view name;
};
constexpr Named kNames[] = {
    {0, "cudaSuccess"},
    {1, "cudaErrorInvalidValue"},
    {2, "cudaErrorMemoryAllocation"},
    {3, "cudaErrorInitializationError"},
    {35, "cudaErrorInsufficientDriver"},
    {46, "cudaErrorDevicesUnavailable"},
    {100, "cudaErrorNoDevice"},
    {101, "cudaErrorInvalidDevice"},
    {200, "cudaErrorInvalidKernelImage"},
    {209, "cudaErrorNoKernelImageForDevice"},
    {214, "cudaErrorECCUncorrectable"},
    {222, "cudaErrorUnsupportedPtxVersion"},
    {400, "cudaErrorInvalidResourceHandle"},
    {600, "cudaErrorNotReady"},
    {700, "cudaErrorIllegalAddress"},
    {701, "cudaErrorLaunchOutOfResources"},
    {702, "cudaErrorLaunchTimeout"},
    {710, "cudaErrorAssert"},
    {714, "cudaErrorHardwareStackError"},
    {715, "cudaErrorIllegalInstruction"},
    {716, "cudaErrorMisalignedAddress"},
    {717, "cudaErrorInvalidAddressSpace"},
    {718, "cudaErrorInvalidPc"},
    {719, "cudaErrorLaunchFailure"},
    {803, "cudaErrorSystemDriverMismatch"},
    {804, "cudaErrorCompatNotSupportedOnDevice"},
    {911, "cudaErrorExternalDevice"},
    {999, "cudaErrorUnknown"},
};

}  // namespace

ErrorClass classify_cuda_error(int code) noexcept {
  switch (code) {
    case 0:
    case 600: return ErrorClass::kNone;
    case 100:
    case 35: return ErrorClass::kNoGpu;
    case 2: return ErrorClass::kOutOfMemory;
    case 700:
    case 702:
    case 710:
    case 714:
    case 715:
    case 716:
    case 717:
    case 718:
    case 719:
    case 911:
    case 214:
    case 999: return ErrorClass::kSticky;
    case 46: return g_poisoned.load(std::memory_order_acquire) ? ErrorClass::kSticky : ErrorClass::kTransient;
    default: return ErrorClass::kTransient;
  }
}

std::string_view cuda_error_name(int code) noexcept {
  for (const auto& n : kNames)
    if (n.code == code) return n.name;
  return "cudaError(unlisted)";
}

bool process_cuda_poisoned() noexcept { return g_poisoned.load(std::memory_order_acquire); }

std::string process_poison_reason() {
  std::lock_guard lock(g_reason_mu);
  return g_reason;
}

void mark_process_poisoned(std::string reason) {
  std::lock_guard lock(g_reason_mu);
  if (!g_poisoned.load(std::memory_order_relaxed)) g_reason = std::move(reason);
  g_poisoned.store(true, std::memory_order_release);
}

Status cuda_status(int code, std::string_view expr, const char* file, int line) {
  std::string what = std::string(cuda_error_name(code)) + " (" + std::to_string(code) + ") from " +
                     std::string(expr) + " at " + file + ":" + std::to_string(line);
  switch (classify_cuda_error(code)) {
    case ErrorClass::kNone: return internal_error("cuda_status called with a non-error code: " + what);
    case ErrorClass::kNoGpu: return {Code::kNotSupported, "no GPU: " + what};
    case ErrorClass::kOutOfMemory: return {Code::kOutOfMemory, what};
    case ErrorClass::kSticky:
      mark_process_poisoned(what);
      return {Code::kDeviceLost, "sticky CUDA error, device lost: " + what};
    case ErrorClass::kTransient: break;
  }
  return {Code::kDeclined, what};
}

}  // namespace facetrace::runtime
