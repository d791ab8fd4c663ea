/// @file
/// Status, Expected and environment parsing.
#include <gtest/gtest.h>

#include <cstdlib>

#include "facetrace/core/env.h"
#include "facetrace/core/status.h"
#include "log_guard.h"

namespace facetrace {
namespace {

Status fails_with_io() { return io_error("disk full at /tmp/x"); }
Status propagates() {
  FT_TRY(fails_with_io());
  return internal_error("not reached");
}

TEST(Status, default_is_ok_and_codes_have_names) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(code_name(Code::kDeviceLost), "DeviceLost");
  EXPECT_EQ(invalid_argument("width: -1").to_string(), "InvalidArgument: width: -1");
}

TEST(Status, try_macro_propagates_the_first_error_with_context) {
  const Status s = propagates().with_context("render");
  EXPECT_EQ(s.code(), Code::kIo);
  EXPECT_EQ(s.what(), "render: disk full at /tmp/x");
}

TEST(Expected, holds_value_or_error) {
  Expected<int> a(5);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, 5);
  Expected<int> b(invalid_argument("nope"));
  EXPECT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Code::kInvalidArgument);
  Expected<int> c{Status{}};
  EXPECT_FALSE(c.ok()) << "an ok Status cannot make an Expected without a value";
}

TEST(Env, clamps_and_warns) {
  ::setenv("FACETRACE_TEST_INT", "1000", 1);
  {
    testing::ExpectLogs logs;
    EXPECT_EQ(core::env_int_clamped("FACETRACE_TEST_INT", 7, 2, 256), 256);
    EXPECT_TRUE(logs.contains("above the maximum"));
  }
  ::setenv("FACETRACE_TEST_INT", "abc", 1);
  {
    testing::ExpectLogs logs;
    EXPECT_EQ(core::env_int_clamped("FACETRACE_TEST_INT", 7, 2, 256), 7);
    EXPECT_TRUE(logs.contains("not an integer"));
  }
  ::setenv("FACETRACE_TEST_INT", "12", 1);
  EXPECT_EQ(core::env_int_clamped("FACETRACE_TEST_INT", 7, 2, 256), 12);
  ::unsetenv("FACETRACE_TEST_INT");
  EXPECT_EQ(core::env_int_clamped("FACETRACE_TEST_INT", 7, 2, 256), 7);
}

}  // namespace
}  // namespace facetrace
