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

/// `--gpu-device INDEX|UUID` on `app` and on every subcommand registered so far (call after them): a malformed
/// value is a parse error (exit 2); a good one becomes FACETRACE_GPU_DEVICE as soon as it is parsed, before any
/// command runs (docs/runtime.md "Device selection"). src/cli/gpu_device_option.cpp (runtime)
void add_gpu_device_option(CLI::App& app);

}  // namespace facetrace::cli
