/// @file
/// Private, CUDA builds only: the one check family for CUDA, cuBLAS and cuDNN calls and the one launch check.
/// Each check classifies a failure into a Status (docs/design/runtime.md §4) and returns it from the enclosing function
/// (which returns Status or Expected<T>). Included by cuda/**.cu and by the runtime's CUDA .cpp files; never by
/// a public header.
///
/// - FT_CUDA_TRY(call): a cudaError_t call; sticky errors become kDeviceLost and poison the process.
/// - FT_CUBLAS_TRY(call) / FT_CUDNN_TRY(call): defined when <cublas_v2.h> / <cudnn.h> was included before this
///   header, so a file that uses neither library never sees their headers.
/// - FT_CUDA_LAUNCH_CHECK(name, stream): after every kernel launch. Reads cudaGetLastError (a bad configuration
///   or a sticky error from earlier work); with FT_SYNC_CHECK defined it also synchronises `stream`, so an
///   asynchronous fault is reported at the launch that caused it (docs/design/style.md §4 launch rules).
/// - FT_CUDA_IGNORE(call): destructors only; a sticky error was already reported where it happened.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "facetrace/core/status.h"
#include "facetrace/runtime/cuda_errors.h"

/// The generator of the family: evaluates `call` once and, when the result is not `ok`, returns
/// to_status(result, "<call>", __FILE__, __LINE__).
#define FT_CHECK_GEN(call, ok, to_status)                                                                   \
  do {                                                                                                      \
    if (const auto ft_err_ = (call); ft_err_ != (ok)) return to_status(ft_err_, #call, __FILE__, __LINE__); \
  } while (false)

namespace facetrace::runtime {

/// The Status of a failed CUDA runtime call (cuda_status: classification, poisoning on a sticky error).
inline Status cuda_call_status(cudaError_t err, const char* expr, const char* file, int line) {
  return cuda_status(static_cast<int>(err), expr, file, line);
}

/// The Status after launching kernel `name` on `stream`: the launch error, then (FT_SYNC_CHECK) the stream's.
inline Status launch_status(const char* name, cudaStream_t stream, const char* file, int line) {
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return cuda_call_status(e, name, file, line);
#ifdef FT_SYNC_CHECK
  if (const cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess)
    return cuda_call_status(e, (std::string("cudaStreamSynchronize after ") + name).c_str(), file, line);
#else
  static_cast<void>(stream);
#endif
  return {};
}

}  // namespace facetrace::runtime

#define FT_CUDA_TRY(call) FT_CHECK_GEN(call, cudaSuccess, ::facetrace::runtime::cuda_call_status)

#define FT_CUDA_LAUNCH_CHECK(name, stream) \
  FT_TRY(::facetrace::runtime::launch_status(name, stream, __FILE__, __LINE__))

#define FT_CUDA_IGNORE(call) static_cast<void>(call)

#if defined(CUBLAS_VER_MAJOR)
namespace facetrace::runtime {

/// The Status of a failed cuBLAS call: kOutOfMemory for an allocation failure; a failed execution reports the
/// CUDA error behind it when there is one (so a sticky error still becomes kDeviceLost); otherwise kDeclined.
inline Status cublas_call_status(cublasStatus_t err, const char* expr, const char* file, int line) {
  if (err == CUBLAS_STATUS_EXECUTION_FAILED)
    if (const cudaError_t e = cudaPeekAtLastError(); e != cudaSuccess)
      return cuda_call_status(e, expr, file, line);
  const std::string what = std::string(cublasGetStatusString(err)) + " (" +
                           std::to_string(static_cast<int>(err)) + ") from " + expr + " at " + file + ":" +
                           std::to_string(line);
  return {err == CUBLAS_STATUS_ALLOC_FAILED ? Code::kOutOfMemory : Code::kDeclined, what};
}

}  // namespace facetrace::runtime
#define FT_CUBLAS_TRY(call) \
  FT_CHECK_GEN(call, CUBLAS_STATUS_SUCCESS, ::facetrace::runtime::cublas_call_status)
#endif

#if defined(CUDNN_MAJOR)
namespace facetrace::runtime {

/// The Status of a failed cuDNN (9) call: kOutOfMemory for a host or device allocation failure; a failed
/// execution (the 5000 category) reports the CUDA error behind it when there is one; otherwise kDeclined.
inline Status cudnn_call_status(cudnnStatus_t err, const char* expr, const char* file, int line) {
  if (static_cast<int>(err) / 1000 == CUDNN_STATUS_EXECUTION_FAILED / 1000)
    if (const cudaError_t e = cudaPeekAtLastError(); e != cudaSuccess)
      return cuda_call_status(e, expr, file, line);
  const bool oom = err == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
                   err == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED;
  const std::string what = std::string(cudnnGetErrorString(err)) + " (" +
                           std::to_string(static_cast<int>(err)) + ") from " + expr + " at " + file + ":" +
                           std::to_string(line);
  return {oom ? Code::kOutOfMemory : Code::kDeclined, what};
}

}  // namespace facetrace::runtime
#define FT_CUDNN_TRY(call) FT_CHECK_GEN(call, CUDNN_STATUS_SUCCESS, ::facetrace::runtime::cudnn_call_status)
#endif
