/// @file
/// The process-wide worker pool (the one parallel loop of the library). Callers take part in their own work, so nested or
/// concurrent parallel_for calls never deadlock; each index runs exactly once.
#pragma once

#include <cstdint>
#include <functional>

namespace facetrace::core {

/// Hardware threads (≥ 1).
int hardware_threads();

/// Which workers help a parallel_for.
enum class Priority {
  kNormal,  ///< the process-wide pool
  /// A second pool whose workers run under SCHED_IDLE (Linux): they take only cores that nothing else wants, so
  /// background work (the render's hybrid CPU lane) never delays the threads that feed the GPU. The caller's own
  /// share of the loop runs at the caller's priority.
  kIdle,
};

/// Runs fn(0..n-1) on up to `threads` threads (0 = all; the caller is one of them) and returns when every call
/// has returned. fn must not throw (an escaping exception terminates the process): a loop body reports failure
/// through state of its own, and allocates what it needs before the loop or without throwing. Thread-safe.
void parallel_for(std::int64_t n, int threads, const std::function<void(std::int64_t)>& fn,
                  Priority priority = Priority::kNormal);

/// Puts the calling thread under SCHED_IDLE (Linux; see Priority::kIdle). An unprivileged thread cannot undo
/// this: call it only on a thread of its own. False where the system refused or has no such policy.
bool make_this_thread_idle();

}  // namespace facetrace::core
