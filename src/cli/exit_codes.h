/// @file
/// The CLI's process exit codes, one set for every command (README "Command line", docs/design/layout.md).
#pragma once

namespace facetrace::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;      ///< the work could not be done (I/O, device, not supported)
inline constexpr int kExitBadInput = 2;     ///< the input or the arguments are wrong
inline constexpr int kExitCancelled = 130;  ///< 128 + SIGINT, as shells report it

}  // namespace facetrace::cli
