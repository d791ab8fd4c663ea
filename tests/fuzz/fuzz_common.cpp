/// @file
/// The fuzz targets' shared helpers that need spdlog (kept out of fuzz_common.h: spdlog only in .cpp files).
#include "fuzz_common.h"

#include <spdlog/spdlog.h>

namespace facetrace::fuzz {

void quiet_logs() { spdlog::set_level(spdlog::level::off); }

}  // namespace facetrace::fuzz
