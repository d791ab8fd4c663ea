/// @file
/// Private: each area's CLI subcommands register themselves here. A command's callback stores its
/// process exit code in `exit_code`: one of exit_codes.h (kExitOk, kExitFailure, kExitBadInput, kExitCancelled).
#pragma once

#include <CLI/CLI.hpp>

namespace facetrace::cli {

void register_render(CLI::App& app, int& exit_code);  // src/cli/cmd_render.cpp (tracer)
void register_info(CLI::App& app, int& exit_code);    // src/cli/cmd_info.cpp (runtime)
void register_faces(CLI::App& app, int& exit_code);   // src/cli/cmd_faces.cpp (faces)
void register_worker(CLI::App& app, int& exit_code);  // src/cli/cmd_worker.cpp (farm)
void register_merge(CLI::App& app, int& exit_code);   // src/cli/cmd_merge.cpp (farm)

}  // namespace facetrace::cli
