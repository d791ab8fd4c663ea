/// @file
/// The process-wide worker pool (the one parallel loop of the library). Callers take part in their own work, so nested or
/// concurrent parallel_for calls never deadlock; each index runs exactly once.
#pragma once

#include <cstdint>
#include <functional>

namespace facetrace::core {

/// Hardware threads (≥ 1).
int hardware_threads();

/// Runs fn(0..n-1) on up to `threads` threads (0 = all; the caller is one of them) and returns when every call
/// has returned. fn must not throw (an escaping exception terminates the process): a loop body reports failure
/// through state of its own, and allocates what it needs before the loop or without throwing. Thread-safe.
void parallel_for(std::int64_t n, int threads, const std::function<void(std::int64_t)>& fn);

}  // namespace facetrace::core
