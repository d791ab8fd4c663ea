/// @file
/// Private: the plan choice of one conv (docs/design/faces.md §8.2 "Plan choices"), shared by the planner's
/// C++20 header (gpu_program.h) and the CUDA sources (conv.cuh), so plain C++17.
#pragma once

#include <cstdint>

namespace facetrace::faces::gpu {

/// What the planner chose by timing for one conv in fp32 (docs/design/faces.md §8.2 "Plan choices"): the own
/// kernel and its form, or the cuDNN algorithm. Given back to a later plan (PlanOptions::conv_choices), it makes
/// that plan run the same kernels, so the same bits, without timing; one that does not fit the conv there (a
/// different shape or device, or a hostile blob) is ignored and the conv is searched as usual.
struct ConvChoice {
  std::uint8_t own = 0;        ///< own kernel (else cuDNN)
  std::uint8_t pipelined = 0;  ///< own implicit GEMM: the double-buffered form
  std::uint8_t fused = 0;      ///< cuDNN: conv + bias + ReLU in one call
  std::uint8_t reserved = 0;
  std::int16_t splits = 0;  ///< own: ConvAlgo::splits (0 direct, ≥ 1 implicit GEMM K splits, −1, −2, −3)
  std::int16_t tile_m = 0;  ///< own implicit GEMM: tile rows
  std::int32_t algo = 0;    ///< cuDNN: cudnnConvolutionFwdAlgo_t
  std::int32_t math = 0;    ///< cuDNN: cudnnMathType_t (fp32: CUDNN_FMA_MATH only)
};
static_assert(sizeof(ConvChoice) == 16);

}  // namespace facetrace::faces::gpu
