/// @file
/// Private: the library's spdlog logger. Include only from .cpp files (never .cu/.cuh/public headers).
#pragma once

#include <spdlog/spdlog.h>

namespace facetrace::core {

/// The "facetrace" logger, created lazily with spdlog's default sink if the application set none.
spdlog::logger& logger();

}  // namespace facetrace::core

#define FT_LOG_DEBUG(...) ::facetrace::core::logger().debug(__VA_ARGS__)
#define FT_LOG_INFO(...) ::facetrace::core::logger().info(__VA_ARGS__)
#define FT_LOG_WARN(...) ::facetrace::core::logger().warn(__VA_ARGS__)
#define FT_LOG_ERROR(...) ::facetrace::core::logger().error(__VA_ARGS__)
