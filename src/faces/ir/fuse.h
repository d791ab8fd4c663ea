/// @file
/// Private: the fusion pass over a lowered Program (docs/design/faces.md §3). A named predicate, can_fuse, says whether a run of
/// consecutive steps may execute as one unit (ggml's ggml_can_fuse_ext: the op sequence, a single use of each
/// intermediate, each step fed by the one before); match_fusion adds each group kind's own conditions; fuse marks
/// the groups in Step::fusion once, after lowering. The CPU interpreter and the GPU program both execute what the
/// marks say.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "facetrace/faces/program.h"

namespace facetrace::faces::detail {

/// The kind of a step's op (the order of the Op variant).
enum class OpKind : std::uint8_t {
  kConv,
  kUnary,
  kChannelAffine,
  kChannelPrelu,
  kBinary,
  kTranspose,
  kMaxPool,
  kResize,
  kGlobalAverage,
  kGemv,
  kAvgPool,
  kSoftmax,
  kConcat,
  kMatMul,
  kReduceMean,
  kPad
};

/// The kind of `op`.
OpKind op_kind(const Op& op);

/// True when steps first, first + 1, …, first + ops.size() − 1 exist and have the kinds `ops`, and for each pair
/// of neighbours the later step reads the earlier one's output exactly once among its operands and is that
/// output's last reader (released there, so not read later and not a graph output). A single step always fuses
/// with itself.
bool can_fuse(const Program& p, std::size_t first, std::span<const OpKind> ops);

/// The fused group that starts at step `first`, or a Fusion of kind kNone. Tries, in order: a kConvBand group
/// (from a 1×1 conv, or from a dense conv feeding one), then kConvAct, then kResizeBinary.
Fusion match_fusion(const Program& p, std::size_t first);

/// Marks every fused group of `p` (scanning in step order; a step belongs to at most one group) in Step::fusion.
/// Run once after lowering; running it again changes nothing.
void fuse(Program& p);

/// True when step `first`'s mark is one an executor can run: kNone with one step, or a group whose steps lie
/// inside the program and whose members have the ops of their roles. (A check on a Program built elsewhere, not a
/// re-match: it does not ask whether the group should have been fused.)
bool fusion_well_formed(const Program& p, std::size_t first);

/// Clears every mark: the same program with every step run alone.
void unfuse(Program& p);

}  // namespace facetrace::faces::detail
