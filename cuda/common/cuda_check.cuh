/// @file
/// Private, CUDA builds only: FT_CUDA_TRY classifies a failed CUDA call (runtime.md §4) and returns its Status.
#pragma once

#include <cuda_runtime.h>

#include "facetrace/runtime/cuda_errors.h"

#define FT_CUDA_TRY(call)                                                                          \
  do {                                                                                             \
    if (const cudaError_t ft_err_ = (call); ft_err_ != cudaSuccess)                                \
      return ::facetrace::runtime::cuda_status(static_cast<int>(ft_err_), #call, __FILE__, __LINE__); \
  } while (false)

/// For destructors: ignore the result (a sticky error was already reported where it happened).
#define FT_CUDA_IGNORE(call) static_cast<void>(call)
