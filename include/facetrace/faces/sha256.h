/// @file
/// SHA-256 of a byte buffer, for pinning model files (docs/design/faces.md §7).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace facetrace::faces {

/// Lower-case hex SHA-256 of `bytes`. Thread-safe.
std::string sha256_hex(std::span<const std::uint8_t> bytes);

}  // namespace facetrace::faces
