/// @file
/// Private: `--gpu-device INDEX|UUID`, accepted by the top-level command and by every subcommand; it sets
/// FACETRACE_GPU_DEVICE for the GPU runtime (docs/runtime.md "Device selection").
#pragma once

#include <CLI/CLI.hpp>

namespace facetrace::cli {

/// Adds --gpu-device to `app` and to each subcommand registered so far (call after registering them). A
/// malformed value is a parse error (exit 2); a well-formed one is exported as FACETRACE_GPU_DEVICE as soon as
/// it is parsed, before any command runs.
void add_gpu_device_option(CLI::App& app);

}  // namespace facetrace::cli
