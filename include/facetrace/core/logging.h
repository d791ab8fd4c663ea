/// @file
/// Application-side logging set-up. The library logs through one spdlog logger named "facetrace",
/// created lazily; it never installs sinks or levels unless the application calls these.
#pragma once

#include <string_view>

namespace facetrace::core {

/// Applications (the CLI, benchmarks) call this once: stderr sink, level from FACETRACE_LOG_LEVEL
/// (trace|debug|info|warn|error|off; default warn). Thread-safe; idempotent.
void init_logging_from_env();

/// Set the level of the "facetrace" logger by name; returns false for an unknown name.
bool set_log_level(std::string_view level);

}  // namespace facetrace::core
