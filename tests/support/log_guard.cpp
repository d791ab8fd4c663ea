/// @file
/// Installs the failing log sink into every test binary (via a global test environment).
#include "log_guard.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/base_sink.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "log.h"
#include "facetrace/core/logging.h"

namespace facetrace::testing {
namespace {

std::mutex g_mu;
std::atomic<bool> g_expecting{false};
std::vector<std::string> g_captured;

class FailingSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (msg.level < spdlog::level::warn) return;
    std::string text(msg.payload.data(), msg.payload.size());
    if (g_expecting.load()) {
      std::lock_guard lock(g_mu);
      g_captured.push_back(std::move(text));
    } else {
      ADD_FAILURE() << "unexpected " << spdlog::level::to_string_view(msg.level).data() << " log: " << text;
    }
  }
  void flush_() override {}
};

class LogEnvironment final : public ::testing::Environment {
 public:
  void SetUp() override {
    auto& l = core::logger();
    l.sinks().push_back(std::make_shared<FailingSink>());
    if (const char* lvl = std::getenv("FACETRACE_LOG_LEVEL"); lvl && *lvl) {
      core::set_log_level(lvl);
    }
  }
};

[[maybe_unused]] ::testing::Environment* const g_env =
    ::testing::AddGlobalTestEnvironment(new LogEnvironment);

}  // namespace

ExpectLogs::ExpectLogs() {
  std::lock_guard lock(g_mu);
  g_captured.clear();
  g_expecting.store(true);
}
ExpectLogs::~ExpectLogs() { g_expecting.store(false); }

std::vector<std::string> ExpectLogs::messages() const {
  std::lock_guard lock(g_mu);
  return g_captured;
}

bool ExpectLogs::contains(const std::string& needle) const {
  for (const auto& m : messages())
    if (m.find(needle) != std::string::npos) return true;
  return false;
}

std::string test_data_dir() {
#ifdef FT_TEST_DATA_DIR
  if (std::filesystem::is_directory(FT_TEST_DATA_DIR)) return FT_TEST_DATA_DIR;
#endif
  if (const char* e = std::getenv("FACETRACE_TEST_DATA"); e && std::filesystem::is_directory(e)) return e;
  return {};
}

}  // namespace facetrace::testing
