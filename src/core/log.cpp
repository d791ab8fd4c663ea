/// @file
/// The "facetrace" logger and the application-side set-up.
#include "log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "facetrace/core/logging.h"

namespace facetrace::core {
namespace {
std::mutex g_mutex;
}  // namespace

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    std::lock_guard lock(g_mutex);
    if (auto existing = spdlog::get("facetrace")) return existing;
    auto l = std::make_shared<spdlog::logger>("facetrace", spdlog::sinks_init_list{});
    l->set_level(spdlog::level::warn);
    spdlog::register_logger(l);
    return l;
  }();
  return *instance;
}

bool set_log_level(std::string_view level) {
  const auto lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off") return false;
  logger().set_level(lvl);
  return true;
}

void init_logging_from_env() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& l = logger();
    {
      std::lock_guard lock(g_mutex);
      l.sinks().push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    }
    l.set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
    if (const char* env = std::getenv("FACETRACE_LOG_LEVEL"); env && *env) {
      if (!set_log_level(env))
        l.warn("FACETRACE_LOG_LEVEL='{}' is not a level (trace|debug|info|warn|error|off); using warn", env);
    }
  });
}

}  // namespace facetrace::core
