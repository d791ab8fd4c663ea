/// @file
/// Test support: every test binary fails a test on any `warn`-or-above log from the "facetrace" logger,
/// unless the test opens an ExpectLogs scope (docs/design/style.md §5).
#pragma once

#include <string>
#include <vector>

namespace facetrace::testing {

/// While alive, warn/error logs are recorded instead of failing the test. Not nestable.
class ExpectLogs {
 public:
  ExpectLogs();
  ~ExpectLogs();
  ExpectLogs(const ExpectLogs&) = delete;
  ExpectLogs& operator=(const ExpectLogs&) = delete;
  /// Messages captured so far (warn and above).
  std::vector<std::string> messages() const;
  /// True when some captured message contains `needle`.
  bool contains(const std::string& needle) const;
};

/// Directory with the test data (FT_TEST_DATA_DIR, the repository's tests/data, else FACETRACE_TEST_DATA); empty
/// when neither is a folder.
std::string test_data_dir();

}  // namespace facetrace::testing

/// Skip (naming the variables) when the test data folder is missing.
#define FT_REQUIRE_TEST_DATA(dir_var)                                \
  const std::string dir_var = ::facetrace::testing::test_data_dir(); \
  if (dir_var.empty()) GTEST_SKIP() << "test data not found (FT_TEST_DATA_DIR / FACETRACE_TEST_DATA)"
