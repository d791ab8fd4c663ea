/// @file
/// Private test seam: kOpFacesRun and kOpFacesDetect on a runtime::SimulatedExecutor (docs/design/runtime.md §6),
/// the device ops' contract without a GPU. They decode the resident program, take every constant from its
/// resident or from the input region, run the CPU interpreter on the batch (detect: with the CPU's letterbox and
/// decode) and return the reply in one ring ticket, as the CUDA handlers do, so CPU tests exercise the whole host
/// path (codec, residents, layout, turns, readback).
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "facetrace/core/status.h"
#include "facetrace/runtime/testing/simulated_executor.h"

namespace facetrace::faces::gpu {

/// Knobs of the simulated op (all optional).
struct SimFacesOptions {
  /// Called before each run; a non-ok Status is returned instead of running (a simulated OOM or failure).
  std::function<Status()> fail;
  /// Edits the packed outputs before they are returned (a deliberately wrong accelerator).
  /// kOpFacesRun: the packed outputs; kOpFacesDetect: each image's first output before its decode.
  std::function<void(std::vector<float>&)> tamper;
  /// Called with the op's id on every call (before `fail`).
  std::function<void(runtime::OpId)> seen;
  /// Plan choices (faces_ops.h): called on every call with the blob the parent sent (empty when none); what it
  /// returns is the reply's blob. Unset: the reply carries none, as a device op in tf32 / bf16.
  std::function<std::vector<std::byte>(std::span<const std::byte>)> plan_choices;
};

/// Registers (or replaces) the simulated kOpFacesRun and kOpFacesDetect (letterbox_bgr, the interpreter and
/// decode_yunet on the CPU, the reply in the device op's layout) on `ex`.
void add_faces_sim_op(runtime::SimulatedExecutor& ex, SimFacesOptions options = {});

}  // namespace facetrace::faces::gpu
