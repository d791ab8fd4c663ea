/// @file
/// Private: the GPU accelerator on a runtime::GpuBackend (docs/design/faces.md §4, §8). make_gpu_accelerator uses the
/// process-wide backend (runtime::shared_backend(), shared with renders); tests build one over their own backend
/// (a simulated executor, or an isolated child with a short recovery cool-down) with make_gpu_accelerator_on.
///
/// One run_program is one Workload through GpuBackend::accumulate: a turnstile turn, the model's residents
/// uploaded in begin_turn (once per model, within the resident budget), one kOpFacesRun in run_chunk (the batch
/// and any constants past the budget in one arena block), its one ring ticket collected in drain and copied out
/// in commit.
#pragma once

#include <cstdint>
#include <memory>

#include "facetrace/faces/accelerator.h"
#include "facetrace/runtime/backend.h"
#include "facetrace/runtime/testing/fault.h"

namespace facetrace::faces::gpu {

/// Convolutions below this many multiply-adds are declined (the CPU is faster; docs/design/faces.md §4).
inline constexpr std::int64_t kMinMacs = std::int64_t{1} << 20;  // docs/design/faces.md §4

/// An accelerator over `backend`, which must outlive it. Registers kOpFacesRun in this process's op registry
/// (CUDA builds) for in-process executors. kNotSupported with the backend's reason when it has no GPU.
Expected<std::shared_ptr<Accelerator>> make_gpu_accelerator_on(runtime::GpuBackend& backend,
                                                               const GpuAcceleratorOptions& options);

/// Test seam: the next run of `acc` (made by make_gpu_accelerator*) injects `kind` into the executor inside its
/// turn, just before it invokes the op (a device loss in the middle of a batch). No-op for other accelerators.
void arm_fault(Accelerator& acc, runtime::FaultKind kind);

}  // namespace facetrace::faces::gpu
