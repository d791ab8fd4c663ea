/// @file
/// Private, CUDA builds only: the channels-last rewrite of a program for the tensor-core precisions
/// (docs/design/faces.md §8.3). Host C++ (no CUDA headers), so a CPU-only test can check it.
///
/// The convs cuDNN runs on NHWC tensors (one group, channel counts of a multiple of 8, symmetric pads), and the
/// per-channel element-wise steps between them (ChannelAffine, ChannelPrelu, Unary, a Binary without
/// broadcasting), keep their values channels-last, so the tensor-core kernels read and write them directly; a
/// strided copy (TransposeOp) converts a value where an NCHW step meets an NHWC one. Program outputs stay NCHW.
/// An NHWC value keeps its logical shape [1, C, H, W] and its length; only its element order is H, W, C. In the
/// rewritten program a ChannelAffine or ChannelPrelu on an NHWC value has plane 1: the GPU planner runs it over
/// B·H·W rows of C (channel = offset mod C), the original step's arithmetic per element. The rewritten program is
/// for the GPU planner only (the CPU interpreter knows neither NHWC convs nor that reading of plane 1).
#pragma once

#include <cstdint>
#include <vector>

#include "facetrace/core/status.h"
#include "facetrace/faces/program.h"

namespace facetrace::faces::gpu {

struct NhwcProgram {
  Program program;         ///< the rewritten program (steps, values, free lists; outputs unchanged)
  std::vector<bool> nhwc;  ///< per value of `program`: stored channels-last
  int conversions = 0;     ///< strided copies inserted
  int nhwc_convs = 0;      ///< convs that run channels-last
};

/// Whether a conv can run channels-last through cuDNN at `batch` (one group, C % 8 == 0 on both sides, pads
/// that give the IR's output size when applied symmetrically, 32-bit element counts).
bool nhwc_conv_ok(const ConvJob& j, int batch);

/// The rewrite. Errors: kInvalidArgument for a malformed program (a fusion mark past the end, an operand out
/// of range); a program with no conv that can run channels-last comes back unchanged (nhwc_convs == 0).
Expected<NhwcProgram> rewrite_nhwc(const Program& p, int batch);

}  // namespace facetrace::faces::gpu
