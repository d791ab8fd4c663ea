/// @file
/// SHA-256 of a byte buffer: pins model files (docs/design/faces.md §7) and identifies a farm job's scene
/// (docs/design/farm.md §1).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace facetrace::core {

/// SHA-256 digest of `bytes` (FIPS 180-4). Thread-safe.
std::array<std::uint8_t, 32> sha256(std::span<const std::uint8_t> bytes);

/// Lower-case hex of `bytes` (two digits per byte).
std::string hex(std::span<const std::uint8_t> bytes);

/// Lower-case hex SHA-256 of `bytes`. Thread-safe.
std::string sha256_hex(std::span<const std::uint8_t> bytes);

}  // namespace facetrace::core
