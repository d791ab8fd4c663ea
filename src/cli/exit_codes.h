/// @file
/// The CLI's process exit codes, one set for every command (docs/cli.md "Exit codes"; the farm side in
/// docs/farm.md). Farm managers act on them: 42 is never retried, 43 is retried on another node, 129/130/143
/// mean "interrupted".
#pragma once

namespace facetrace::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;       ///< the work could not be done (I/O, device, not supported)
inline constexpr int kExitBadInput = 2;      ///< bad usage or bad input: every parse error, a wrong flag value
inline constexpr int kExitInvalidJob = 42;   ///< the job or scene is invalid: permanent, never retry
inline constexpr int kExitGpuUnavailable = 43;  ///< GPU required but unavailable or lost, no fallback: retry elsewhere
inline constexpr int kExitHangup = 129;      ///< 128 + SIGHUP
inline constexpr int kExitCancelled = 130;   ///< 128 + SIGINT, as shells report it
inline constexpr int kExitTerminated = 143;  ///< 128 + SIGTERM (docker stop, Kubernetes, Slurm preemption)

}  // namespace facetrace::cli
