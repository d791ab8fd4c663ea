/// @file
/// Private, CUDA builds only: launchers of the pooling and reduction kernels of the GPU face program
/// (docs/design/faces.md §8): MaxPool / AvgPool with pads, GlobalAverage, ReduceMean and Softmax, the whole batch
/// per launch. Reductions run in a fixed order (no atomics), so results are identical from run to run.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "facetrace/core/status.h"
#include "facetrace/faces/program.h"

namespace facetrace::faces::gpu {

Status launch_maxpool(const MaxPoolOp& m, int batch, const float* x, float* y, cudaStream_t s);
Status launch_avgpool(const AvgPoolOp& a, int batch, const float* x, float* y, cudaStream_t s);
/// One block per (image, channel): a double sum in a fixed tree, divided by the plane.
Status launch_global_average(const GlobalAverageOp& g, int batch, const float* x, float* y, cudaStream_t s);
/// One thread per (image, outer, inner): a double sum over len, in order.
Status launch_reduce_mean(const ReduceMeanOp& r, int batch, const float* x, float* y, cudaStream_t s);
/// One thread per (image, outer, inner) line: max, exp(x − max), sum, divide.
Status launch_softmax(const SoftmaxOp& m, int batch, const float* x, float* y, cudaStream_t s);

}  // namespace facetrace::faces::gpu
