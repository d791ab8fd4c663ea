/// @file
/// SHA-256 of a byte buffer, for pinning model files (docs/design/faces.md §7); the one implementation is core's.
#pragma once

#include "facetrace/core/sha256.h"

namespace facetrace::faces {

using core::sha256_hex;  ///< lower-case hex SHA-256 of a byte span. Thread-safe.

}  // namespace facetrace::faces
