/// @file
/// Private, CUDA builds only: launchers of the Resize kernels of the GPU face program (docs/design/faces.md §8):
/// nearest (every ONNX nearest_mode) and bilinear with the ONNX coordinate modes, and the kResizeBinary fusion
/// (an integer nearest up-scale combined with the element-wise Binary that reads it; the up-scaled tensor is
/// never stored).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "facetrace/core/status.h"
#include "facetrace/faces/program.h"

namespace facetrace::faces::gpu {

Status launch_resize(const ResizeOp& r, int batch, const float* x, float* y, cudaStream_t s);
/// y = up(x) ∘ o (side 0) or o ∘ up(x) (side 1); `o` has the up-scaled shape, stride o_bstride between images.
Status launch_resize_binary(const ResizeOp& r, BinaryKind kind, int side, int batch, const float* x,
                            const float* o, std::int64_t o_bstride, float* y, cudaStream_t s);

}  // namespace facetrace::faces::gpu
