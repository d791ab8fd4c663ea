/// @file
/// Private: the CPU kernels of the exporter's other IR ops (docs/design/faces.md §3): dilated convs, padded and
/// ceil-mode pools, average pools, the general Resize, Softmax, Concat, MatMul, ReduceMean and Pad. Plain loops,
/// correct first; threads over channels or lines, each output computed by one thread in a fixed order, so results
/// do not depend on the thread count.
#pragma once

#include <cstdint>
#include <span>

#include "cpu/gemm.h"
#include "facetrace/faces/program.h"

namespace facetrace::faces::detail {

/// A conv by its definition (any groups, strides, pads, dilations), summed in float: bias, then ci, ky, kx
/// ascending. For convs the im2col/depthwise kernels do not take (dilation above 1).
KernelResult conv_direct(const ConvJob& j, const float* x, float* y, const Activation& act, int threads);

/// A MaxPool whose windows reach into pads (pt/pl, or past the plane from ceil_mode): padded taps skipped.
void maxpool_padded(const MaxPoolOp& m, const float* x, float* y, int threads);
/// True when the op's windows all lie inside the plane (the unpadded kernels apply).
bool maxpool_inside(const MaxPoolOp& m);

/// AveragePool, summed in double (docs/design/faces.md §3 for the divisor).
void avgpool(const AvgPoolOp& a, const float* x, float* y, int threads);

/// Any ResizeOp (nearest with every nearest_mode, bilinear), per ONNX's coordinate transforms in float.
void resize_general(const ResizeOp& r, const float* x, float* y, int threads);

/// Softmax along the op's axis: max, exp(x − max) in float, their sum in double, then exp/sum.
void softmax(const SoftmaxOp& s, const float* x, float* y, int threads);

/// Concatenation of the operands (one pointer per part).
void concat(const ConcatOp& c, std::span<const float* const> parts, float* y);

/// The batched matrix products (through the blocked SGEMM; a transposed B is transposed first). kNonFinite when
/// an output is not finite; kOutOfMemory when a scratch could not be allocated.
KernelResult matmul(const MatMulOp& m, const float* a, const float* b, float* y, int threads);

/// Mean over the middle axis of [outer, len, inner], summed in double in ascending order.
void reduce_mean(const ReduceMeanOp& r, const float* x, float* y, int threads);

/// Constant padding.
void pad(const PadOp& p, const float* x, float* y);

}  // namespace facetrace::faces::detail
