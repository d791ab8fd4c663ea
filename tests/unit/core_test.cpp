/// @file
/// Status, Expected, environment parsing, the capped file reader and the PNG writer.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "facetrace/core/env.h"
#include "facetrace/core/file.h"
#include "facetrace/core/image.h"
#include "facetrace/core/parallel.h"
#include "facetrace/core/status.h"
#include "log_guard.h"

namespace facetrace {
namespace {

Status fails_with_io() { return io_error("disk full at /tmp/x"); }
Status propagates() {
  FT_TRY(fails_with_io());
  return internal_error("not reached");
}

// The idle-priority pool (parallel.h, the render's hybrid lane, docs/design/tracer.md §10.7): every index once,
// helpers under SCHED_IDLE, and the normal pool's helpers not.
TEST(Parallel, idle_priority_helpers_run_every_index_once_under_sched_idle) {
  if (core::hardware_threads() < 2) GTEST_SKIP() << "one hardware thread: parallel_for runs on the caller alone";
  bool idle_allowed = false;
  std::thread([&] { idle_allowed = core::make_this_thread_idle(); }).join();
  if (!idle_allowed) GTEST_SKIP() << "this system refuses SCHED_IDLE (sched_setscheduler)";
  for (const auto priority : {core::Priority::kIdle, core::Priority::kNormal}) {
    constexpr int kN = 400;
    std::vector<std::atomic<int>> runs(kN);
    std::atomic<int> on_helpers{0}, idle_helpers{0};
    const auto caller = std::this_thread::get_id();
    // On a loaded machine (ctest -j) an idle-priority helper runs only when a core falls idle: the caller's
    // share waits (up to 10 s) until one has joined, which frees this core.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    core::parallel_for(
        kN, 0,
        [&](std::int64_t i) {
          runs[static_cast<std::size_t>(i)].fetch_add(1);
          if (std::this_thread::get_id() != caller) {
            on_helpers.fetch_add(1);
            if (sched_getscheduler(0) == SCHED_IDLE) idle_helpers.fetch_add(1);
          } else {
            while (on_helpers.load() == 0 && std::chrono::steady_clock::now() < give_up)
              std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        },
        priority);
    for (int i = 0; i < kN; ++i) ASSERT_EQ(runs[static_cast<std::size_t>(i)].load(), 1) << i;
    EXPECT_GT(on_helpers.load(), 0);
    if (priority == core::Priority::kIdle)
      EXPECT_EQ(idle_helpers.load(), on_helpers.load());
    else
      EXPECT_EQ(idle_helpers.load(), 0);
  }
  EXPECT_NE(sched_getscheduler(0), SCHED_IDLE);  // the caller keeps its own priority
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

/// Sets `var` to `value` (nullptr: unsets it), reads it with `read` and expects `want`, and the warning
/// containing `warning` when one is given (none otherwise: the log guard fails the test on an unexpected one).
template <class T, class Read>
void expect_env(const char* var, const char* value, Read read, T want, const char* warning = nullptr) {
  if (value != nullptr) {
    ::setenv(var, value, 1);
  } else {
    ::unsetenv(var);
  }
  if (warning == nullptr) {
    EXPECT_EQ(read(var), want) << var << "=" << (value ? value : "(unset)");
    return;
  }
  testing::ExpectLogs logs;
  EXPECT_EQ(read(var), want) << var << "=" << value;
  EXPECT_TRUE(logs.contains(warning)) << "expected a warning containing \"" << warning << "\"";
}

TEST(Env, clamps_and_warns) {
  auto read = [](const char* v) { return core::env_int_clamped(v, 7, 2, 256); };
  expect_env<std::int64_t>("FACETRACE_TEST_INT", "1000", read, 256, "above the maximum");
  expect_env<std::int64_t>("FACETRACE_TEST_INT", "abc", read, 7, "not an integer");
  expect_env<std::int64_t>("FACETRACE_TEST_INT", "12", read, 12);
  expect_env<std::int64_t>("FACETRACE_TEST_INT", nullptr, read, 7);
}

TEST(Env, double_values_clamp_with_the_same_warnings) {
  auto read = [](const char* v) { return core::env_double_clamped(v, 1.0, 0.25, 8.0); };
  expect_env("FACETRACE_TEST_DOUBLE", "-3.5", read, 0.25, "below the minimum");
  expect_env("FACETRACE_TEST_DOUBLE", "9", read, 8.0, "above the maximum");
  expect_env("FACETRACE_TEST_DOUBLE", "x1", read, 1.0, "not a number");
  expect_env("FACETRACE_TEST_DOUBLE", "2.5", read, 2.5);
  expect_env("FACETRACE_TEST_DOUBLE", nullptr, read, 1.0);
}

std::string write_temp(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + "core_test_" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

TEST(ReadFile, missing_file_is_io_naming_the_path_and_the_os_error) {
  const std::string path = ::testing::TempDir() + "core_test_no_such_file";
  std::remove(path.c_str());
  const auto r = core::read_file(path, 100);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kIo);
  EXPECT_NE(r.status().what().find(path), std::string::npos) << r.status().what();
  EXPECT_NE(r.status().what().find("No such file or directory"), std::string::npos) << r.status().what();
}

TEST(ReadFile, directory_is_io) {
  const auto r = core::read_file(::testing::TempDir(), 100);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kIo);
}

TEST(ReadFile, over_the_cap_is_invalid_argument_naming_both_sizes) {
  const std::string path = write_temp("over", std::string(11, 'x'));
  const auto r = core::read_file(path, 10);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().what(), path + ": 11 bytes exceeds the limit of 10 bytes");
}

TEST(ReadFile, empty_file_gives_no_bytes) {
  const std::string path = write_temp("empty", "");
  const auto r = core::read_file(path, 10);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->empty());
  const auto zero_cap = core::read_file(path, 0);
  ASSERT_TRUE(zero_cap.ok()) << zero_cap.status().to_string();
  EXPECT_TRUE(zero_cap->empty());
}

TEST(ReadFile, exactly_the_cap_is_read_whole) {
  std::string content(3u << 20, '\0');  // several read chunks
  for (std::size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>(i * 7 + 3);
  const std::string path = write_temp("exact", content);
  const auto r = core::read_file(path, content.size());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), content.size());
  EXPECT_TRUE(std::equal(r->begin(), r->end(), content.begin(),
                         [](std::uint8_t a, char b) { return a == static_cast<std::uint8_t>(b); }));
  EXPECT_FALSE(core::read_file(path, content.size() - 1).ok());
}

TEST(ReadFile, only_regular_files_are_read_and_a_fifo_never_blocks) {
  // /dev/zero never ends and a FIFO without a writer blocks a plain open forever: both refused at once.
  const auto z = core::read_file("/dev/zero", 4096);
  ASSERT_FALSE(z.ok());
  EXPECT_EQ(z.status().code(), Code::kIo);  // like a missing file: the path does not name something readable
  EXPECT_NE(z.status().what().find("/dev/zero: not a regular file"), std::string::npos) << z.status().what();
  const std::string fifo = ::testing::TempDir() + "/read_file_fifo_" + std::to_string(::getpid());
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const auto f = core::read_file(fifo, 4096);
  ::unlink(fifo.c_str());
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().what().find("not a regular file (a FIFO, device or socket)"), std::string::npos)
      << f.status().what();
  const auto d = core::read_file(::testing::TempDir(), 4096);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().what().find("not a regular file (a directory)"), std::string::npos) << d.status().what();
}

std::vector<std::uint8_t> file_bytes(const std::string& path) {
  auto r = core::read_file(path, 1 << 20);
  return r.ok() ? *r : std::vector<std::uint8_t>{};
}

TEST(Png, rgb_and_rgba_pixels_decode_back_unchanged) {
  core::Image im{5, 3, {}};
  for (int i = 0; i < 5 * 3 * 3; ++i) im.rgb.push_back(static_cast<std::uint8_t>(i * 37 + 11));
  const std::string rgb_path = ::testing::TempDir() + "core_test_rgb.png";
  ASSERT_TRUE(core::write_png(rgb_path, im).ok());
  auto back = core::decode_image(file_bytes(rgb_path));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->width, 5);
  EXPECT_EQ(back->height, 3);
  EXPECT_EQ(back->rgb, im.rgb);

  std::vector<std::uint8_t> rgba;
  for (std::size_t p = 0; p < 15; ++p)
    rgba.insert(rgba.end(), {im.rgb[p * 3], im.rgb[p * 3 + 1], im.rgb[p * 3 + 2], 255});
  const std::string rgba_path = ::testing::TempDir() + "core_test_rgba.png";
  ASSERT_TRUE(core::write_png_pixels(rgba_path, 5, 3, core::PixelFormat::kRgba8, rgba).ok());
  auto back4 = core::decode_image(file_bytes(rgba_path));  // decodes to RGB
  ASSERT_TRUE(back4.ok()) << back4.status().to_string();
  EXPECT_EQ(back4->rgb, im.rgb);
}

TEST(Png, malformed_pixels_and_unwritable_paths_name_the_file) {
  core::Image bad{4, 4, std::vector<std::uint8_t>(10)};
  const Status size = core::write_png("m.png", bad);
  EXPECT_EQ(size.code(), Code::kInvalidArgument);
  EXPECT_EQ(size.what(), "m.png: cannot write PNG: image buffer does not match 4x4 RGB8");
  EXPECT_EQ(core::write_png("m.png", core::Image{}).code(), Code::kInvalidArgument);
  const std::vector<std::uint8_t> one(4, 0);
  EXPECT_EQ(core::write_png_pixels("m.png", 1, 1, core::PixelFormat::kRgb8, one).code(),
            Code::kInvalidArgument);
  const std::string path = "/nonexistent-dir-facetrace/x.png";
  const Status io = core::write_png_pixels(path, 1, 1, core::PixelFormat::kRgba8, one);
  EXPECT_EQ(io.code(), Code::kIo);
  EXPECT_NE(io.what().find(path), std::string::npos) << io.what();
}

}  // namespace
}  // namespace facetrace
