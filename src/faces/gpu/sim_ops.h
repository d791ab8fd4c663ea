/// @file
/// Private test seam: kOpFacesRun on a runtime::SimulatedExecutor (docs/design/runtime.md §6), the device op's
/// contract without a GPU. It decodes the resident program, takes every constant from its resident or from the
/// input region, runs the CPU interpreter on the batch and returns all outputs in one ring ticket, as the CUDA
/// handler does, so CPU tests exercise the whole host path (codec, residents, layout, turns, readback).
#pragma once

#include <functional>
#include <vector>

#include "facetrace/core/status.h"
#include "facetrace/runtime/testing/simulated_executor.h"

namespace facetrace::faces::gpu {

/// Knobs of the simulated op (all optional).
struct SimFacesOptions {
  /// Called before each run; a non-ok Status is returned instead of running (a simulated OOM or failure).
  std::function<Status()> fail;
  /// Edits the packed outputs before they are returned (a deliberately wrong accelerator).
  std::function<void(std::vector<float>&)> tamper;
};

/// Registers (or replaces) the simulated kOpFacesRun on `ex`.
void add_faces_sim_op(runtime::SimulatedExecutor& ex, SimFacesOptions options = {});

}  // namespace facetrace::faces::gpu
