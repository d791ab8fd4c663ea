/// @file
/// Private: each area's CLI subcommands register themselves here. A command's callback stores its
/// process exit code in `exit_code` (0 ok, 1 runtime failure, 2 bad input).
#pragma once

#include <CLI/CLI.hpp>

namespace facetrace::cli {

void register_render(CLI::App& app, int& exit_code);  // src/cli/cmd_render.cpp (tracer)
void register_info(CLI::App& app, int& exit_code);    // src/cli/cmd_info.cpp (runtime)
void register_faces(CLI::App& app, int& exit_code);   // src/cli/cmd_faces.cpp (faces)

}  // namespace facetrace::cli
