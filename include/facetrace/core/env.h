/// @file
/// Reading FACETRACE_* environment variables with clamping and warnings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace facetrace::core {

/// The variable's value, or nullopt when unset or empty.
std::optional<std::string> env_string(const char* name);

/// An integer variable clamped to [lo, hi]. Unset -> `def` silently; unparsable -> `def` with a warning;
/// outside the range -> the nearest bound with a warning. Thread-safe.
std::int64_t env_int_clamped(const char* name, std::int64_t def, std::int64_t lo, std::int64_t hi);

/// A floating-point variable with the same rules as env_int_clamped.
double env_double_clamped(const char* name, double def, double lo, double hi);

}  // namespace facetrace::core
