/// @file
/// Private: the face networks' device op (runtime op seam, docs/runtime.md; docs/design/faces.md §8) — its id, its
/// argument struct and the layout of its input region, shared by the host side (gpu_accelerator.cpp) and the
/// handlers (faces_ops.cpp in CUDA builds, linked into facetrace-gpud; sim_ops.cpp for the simulated executor).
///
/// kOpFacesRun runs one lowered program on a batch. The program is the resident "faces/<key>/program" (encoded by
/// program_codec.h); constant i of its wire order is the resident "faces/<key>/c<i>", except the constants
/// listed in the input region, which travel with every run (a model past the resident budget). The input
/// region holds, in order: the batch (B·lens[0] floats), the inline table (inline_count u32 constant indices,
/// ascending), then each inline constant's floats, every part starting at a multiple of kInlineAlign bytes. The
/// reply is ONE ring ticket holding every Program::outputs entry in order, each B·lens[value] floats
/// image-major (one readback).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "facetrace/core/status.h"
#include "facetrace/faces/accelerator.h"
#include "facetrace/runtime/op.h"

namespace facetrace::faces::gpu {

/// Plan choices (docs/design/faces.md §8.2 "Plan choices"): what a child's planner chose by timing (the
/// algorithm of each conv, fp32 only), as an opaque blob the parent keeps and sends back. Every kOpFacesRun and
/// kOpFacesDetect reply carries, as its inline bytes (OpReply::bytes), the blob of the plan that ran (empty when
/// there is none to carry). With kRunFlagPlanChoices set in FacesRunArgs::flags the op's args are followed by
/// such a blob, which the child uses when it plans that (model, batch, precision) (a replacement child, or a plan
/// made again), so that it makes the same choices and gives the same bits. Only the child interprets it
/// (cuda/faces/gpu_program.h encode_conv_choices); one it cannot use is ignored and the plan searches.
inline constexpr std::uint32_t kRunFlagPlanChoices = 1;
inline constexpr std::size_t kMaxPlanChoiceBytes = 16 * 1024;

/// Faces op ids (range 0x0002'xxxx, op.h).
inline constexpr runtime::OpId kOpFacesRun = 0x00020001;

/// Arguments of kOpFacesRun.
struct FacesRunArgs {
  std::uint64_t key = 0;           ///< the model: hash of the program bytes and every constant's data
  std::uint64_t input_bytes = 0;   ///< B·lens[0]·4
  std::uint64_t output_bytes = 0;  ///< Σ over outputs of B·lens[value]·4: the reply ticket's size
  std::uint32_t batch = 1;         ///< B ≥ 1
  std::uint32_t inline_count = 0;  ///< constants carried in the input region
  std::uint8_t precision = 0;      ///< faces::Precision
  std::uint8_t use_graph = 1;      ///< GpuProgram PlanOptions::use_graph
  std::uint16_t reserved = 0;
  std::uint32_t flags = 0;
};
static_assert(std::is_trivially_copyable_v<FacesRunArgs>);
static_assert(sizeof(FacesRunArgs) == 40);

/// kOpFacesDetect: YuNet end to end on a batch of decoded frames (docs/design/faces.md §5), in ONE ring ticket.
/// The model, residents, inline constants and plan cache are kOpFacesRun's (the same key, batch and precision;
/// FacesDetectArgs::run). The input region's first part (run.input_bytes) holds batch FrameHeaders, then each
/// frame's RGB8 pixels at its header's offset (from the region's start, a multiple of kInlineAlign); the inline
/// table and constants follow as for kOpFacesRun. The handler uploads the frames, letterboxes them into the
/// program's n×n input, runs the program and yunet_decode_nms (cuda/faces/yunet_gpu.h) on the same stream. The
/// reply (run.output_bytes = detect_reply_bytes) holds batch int32 counts, then at detect_records_offset each
/// image's `capacity` records of kDetectionFloats floats (x0, y0, x1, y1, score, 5 landmark x, y pairs).
inline constexpr runtime::OpId kOpFacesDetect = 0x00020002;

/// Arguments of kOpFacesDetect.
struct FacesDetectArgs {
  FacesRunArgs run;
  std::uint32_t n = 0;         ///< the letterbox side: the program's input is [1, 3, n, n]
  std::uint32_t capacity = 0;  ///< records per image in the reply, ≥ min(max_faces, 4000), ≥ 1
  float score = 0.6f;          ///< DetectOptions, as given (the handler sanitises them as decode_yunet does)
  float nms_iou = 0.3f;
  std::int32_t max_faces = 200;
  std::uint32_t reserved = 0;
};
static_assert(std::is_trivially_copyable_v<FacesDetectArgs>);
static_assert(sizeof(FacesDetectArgs) == 64);

/// One frame of kOpFacesDetect's input region.
struct FrameHeader {
  std::uint32_t width = 0;
  std::uint32_t height = 0;
  std::uint64_t offset = 0;  ///< of its width·height·3 bytes, from the region's start
};
static_assert(sizeof(FrameHeader) == 16);

/// Floats of one reply record (GpuDetection in cuda/faces/prepost_launch.h).
inline constexpr std::uint64_t kDetectionFloats = 15;

/// Alignment of every part of the input region.
inline constexpr std::uint64_t kInlineAlign = 256;

inline constexpr std::uint64_t align_up(std::uint64_t n) {
  return (n + kInlineAlign - 1) / kInlineAlign * kInlineAlign;
}

/// Where kOpFacesDetect's records start in its reply, and the reply's size.
inline constexpr std::uint64_t detect_records_offset(std::uint64_t batch) {
  return align_up(batch * sizeof(std::int32_t));
}
inline constexpr std::uint64_t detect_reply_bytes(std::uint64_t batch, std::uint64_t capacity) {
  return detect_records_offset(batch) + batch * capacity * kDetectionFloats * sizeof(float);
}

/// Reads an op's argument struct T (FacesRunArgs, or FacesDetectArgs whose first member is one) from `args`,
/// and the plan-choice blob after it when its flags say so (else `choices` is empty). kInvalidArgument for a
/// size that does not match, unknown flags or a blob over kMaxPlanChoiceBytes.
Status read_op_args(std::span<const std::byte> args, std::size_t own_bytes, void* own,
                    std::span<const std::byte>& choices);
template <class T>
Status read_op_args(std::span<const std::byte> args, T& v, std::span<const std::byte>& choices) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) >= sizeof(FacesRunArgs));
  return read_op_args(args, sizeof(T), &v, choices);
}

/// Resident names of model `key`.
std::string program_resident_name(std::uint64_t key);
std::string const_resident_name(std::uint64_t key, std::size_t index);

/// Offsets of the input region's parts, from the inline constants' sizes (floats, in table order).
struct InputLayout {
  std::uint64_t table_offset = 0;
  std::vector<std::uint64_t> blob_offsets;  ///< per inline constant
  std::uint64_t total = 0;
};
InputLayout input_layout(std::uint64_t input_bytes, std::span<const std::uint64_t> inline_floats);

/// The input region as the handler sees it: the batch and, per constant index, its inline bytes (empty when the
/// constant is a resident). kInvalidArgument when the region is shorter than the layout, the table is not
/// ascending or names a constant out of range.
struct ParsedInput {
  std::span<const std::byte> batch;
  std::vector<std::span<const std::byte>> inline_blobs;  ///< indexed by constant; empty = resident
};
Expected<ParsedInput> parse_input(const FacesRunArgs& args, std::span<const std::byte> in,
                                  std::span<const std::uint64_t> blob_floats);

/// Registers kOpFacesRun and kOpFacesDetect on `registry` (CUDA builds; faces_ops.cpp). Linked into
/// facetrace-gpud through ft_add_gpu_ops; in-process users call
/// OpRegistry::global().add_provider(&register_faces_ops).
void register_faces_ops(runtime::OpRegistry& registry);

}  // namespace facetrace::faces::gpu
