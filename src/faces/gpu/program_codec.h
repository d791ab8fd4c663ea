/// @file
/// Private: a Program to bytes and back (docs/design/faces.md §8 "Whole-program execution"), so the GPU child
/// (facetrace-gpud) receives a lowered network as one resident blob. The bytes hold the structure (steps, lens,
/// shapes, outputs, free lists, fusion marks) and the size of every constant, never the constants' data: those
/// travel separately (residents or per-run bytes) and are bound after decoding.
///
/// Wire order of the constants ("blobs"): Program::consts[0..n), then for each Conv step in step order its
/// weights and, when present, its bias. decode_program validates everything an executor indexes with (value and
/// constant ids, topological order, per-op element counts against lens, enum ranges, fusion offsets), so
/// hostile or truncated bytes give kInvalidArgument, never a crash or an out-of-range index.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "facetrace/core/status.h"
#include "facetrace/faces/program.h"

namespace facetrace::faces::gpu {

/// The encoded structure and the constants in wire order (shared, not copied).
struct EncodedProgram {
  std::vector<std::byte> bytes;
  std::vector<Blob> blobs;
};

/// Encodes `program`. kInvalidArgument when a constant the program references is missing (a null blob).
Expected<EncodedProgram> encode_program(const Program& program);

/// A decoded program whose constants are not bound yet (Program::consts and the conv weights/bias are null).
struct DecodedProgram {
  Program program;
  std::vector<std::uint64_t> blob_floats;  ///< size of every constant in wire order
};

/// Decodes and validates. kInvalidArgument naming the field for anything malformed.
Expected<DecodedProgram> decode_program(std::span<const std::byte> bytes);

/// Binds `blobs` (wire order, sizes as blob_floats) into `program`: consts and conv weights/bias.
/// kInvalidArgument when the count or a size differs.
Status bind_blobs(Program& program, std::span<const Blob> blobs);

/// Bytes of `floats` floats.
inline constexpr std::uint64_t blob_bytes(std::uint64_t floats) { return floats * sizeof(float); }

}  // namespace facetrace::faces::gpu
