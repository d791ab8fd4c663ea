/// @file
/// Private: the conv kernels of the CPU interpreter (docs/design/faces.md §3): dense and grouped convs through the blocked
/// SGEMM, one-input-channel groups through the depthwise kernels, and the row-band form of a 1×1 conv feeding a
/// depthwise conv.
#pragma once

#include <cstdint>

#include "cpu/gemm.h"
#include "facetrace/faces/program.h"

namespace facetrace::faces::detail {

/// Threads worth waking for `macs` multiply-adds (at least 1, at most `threads`; 0 = all).
int threads_for(std::int64_t macs, int threads);

/// y = act(conv(x)); kNonFinite when a value before the activation was not finite, kOutOfMemory when a GEMM
/// scratch could not be allocated.
KernelResult conv(const ConvJob& j, const float* x, float* y, const Activation& act, int threads);

/// Target size of a band's 1×1-output scratch (a fraction of the per-core L2).
std::int64_t band_scratch_bytes();

/// What each conv of a band group found (kOk for an absent pre).
struct BandResult {
  KernelResult pre = KernelResult::kOk, pw = KernelResult::kOk, dw = KernelResult::kOk;
};

/// [pre [+ preact] →] pw [+ pact] → dw [+ dact] [→ pool] in row bands, the same bits as the steps run apart (see
/// conv.cpp). x: the input of the first conv; y: the group's output.
BandResult conv_pw_dw(const ConvJob* pre, const Activation& preact, const ConvJob& pw, const Activation& pact,
                      const ConvJob& dw, const Activation& dact, const MaxPoolOp* pool, const float* x,
                      float* y, int threads);

}  // namespace facetrace::faces::detail
