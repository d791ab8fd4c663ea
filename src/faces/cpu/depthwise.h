/// @file
/// Private: the depthwise / one-input-channel-per-group conv kernels of the CPU interpreter (docs/design/faces.md §3).
#pragma once

#include "cpu/gemm.h"
#include "facetrace/faces/program.h"

namespace facetrace::faces::detail {

/// One output channel of a one-input-channel-per-group conv (x: its input plane, wt: its kh·kw taps) into y, with
/// the activation. Per element: bias, then the taps in (ky, kx) order, whatever the path (AVX2/AVX-512/portable),
/// so every path gives the same bits. False when a value before the activation was not finite.
bool dw_channel(const ConvJob& j, const float* x, const float* wt, float bias, float* y,
                const Activation& act);

}  // namespace facetrace::faces::detail
