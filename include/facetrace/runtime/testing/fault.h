/// @file
/// Fault-injection seams (docs/design/runtime.md §7): the faults an executor can be told to inject, and marking this
/// process poisoned the way a sticky CUDA error does. Test seams, not the product API.
#pragma once

#include <cstdint>
#include <string>

namespace facetrace::runtime {

/// Faults an executor can be told to inject (Executor::inject_fault).
enum class FaultKind : std::uint8_t {
  kIllegalAddress = 1,  ///< a real kernel writing through a bad pointer: a genuine sticky error
  kSimulatedLoss = 2,   ///< report a device loss without touching the GPU (works without one)
};

/// Marks the process poisoned as a sticky CUDA error does (cuda_status calls it; exposed for fault-injection
/// tests of the classifier). The first reason is kept. Thread-safe.
void mark_process_poisoned(std::string reason);

}  // namespace facetrace::runtime
