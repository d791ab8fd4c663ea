/// @file
/// Launcher of the physics probe kernel (cuda/tracer/physics_check.cu): evaluates trace_sample on the device
/// for a list of (x, y, s) tuples, so tests can compare the device build of the shared physics with the host.
#pragma once

#include <cstdint>

#include "facetrace/core/status.h"
#include "tracer/physics/params.h"

namespace facetrace::tracer {

/// One (pixel, sample) tuple to evaluate.
struct PhysicsProbeTuple {
  std::uint32_t x, y, s;
};
static_assert(sizeof(PhysicsProbeTuple) == 12, "PhysicsProbeTuple layout");

/// Evaluates trace_sample(params, planes, x, y, s) on the current device for `count` tuples and writes the
/// results to `out` (host memory, `count` entries). All pointers are host pointers; synchronous. Returns
/// kDeclined when no device or driver is usable, kInvalidArgument for bad sizes, kInternal for other CUDA
/// failures (message names the call, file and line). Not thread-safe with respect to the device's state.
Status launch_physics_probe(const physics::TraceParams& params, const physics::GpuPlane* planes,
                            const PhysicsProbeTuple* tuples, std::uint32_t count, physics::SampleXyz* out);

}  // namespace facetrace::tracer
