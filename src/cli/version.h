/// @file
/// Private: what `facetrace --version` prints and the exit-code table of `--help` (docs/cli.md "Version",
/// "Exit codes").
#pragma once

#include <string>

namespace facetrace::cli {

/// The git commit of the build ("868d55a1b2c3", "-dirty" appended for uncommitted changes, or "unknown");
/// generated at build time (cmake/ft_git_sha.cmake).
const char* build_git_sha();

/// "facetrace 0.1 (git …)\nCUDA runtime 13.0.48 (needs driver >= 580); architectures: sm_90 compute_90", or
/// "CUDA: none (built without CUDA)" on the second line.
std::string version_text();

/// The `--help` footer: every exit code and what a farm manager does with it.
std::string exit_code_help();

}  // namespace facetrace::cli
