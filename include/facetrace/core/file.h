/// @file
/// The one whole-file reader: a file's bytes with a size cap (models, images, scenes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "facetrace/core/status.h"

namespace facetrace::core {

/// Reads the whole file at `path`. Returns kIo naming the path and the OS error when it cannot be opened or read,
/// and kInvalidArgument naming the path, its size and `max_bytes` when it holds more than `max_bytes` bytes. The
/// cap also bounds the read itself: a file that grows while it is read never makes this read more than
/// `max_bytes + 1` bytes. An empty file gives an empty vector. Thread-safe (no shared state).
Expected<std::vector<std::uint8_t>> read_file(const std::string& path, std::uint64_t max_bytes);

}  // namespace facetrace::core
