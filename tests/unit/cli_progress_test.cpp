// --progress modes (src/cli/progress.h, docs/cli.md "Progress"): what each mode writes for a driven sequence.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "progress.h"

namespace facetrace::cli {
namespace {

/// Everything written to a temporary FILE* (never a terminal).
class Capture {
 public:
  Capture() : f_(std::tmpfile()) {}
  ~Capture() { std::fclose(f_); }
  std::FILE* file() { return f_; }
  std::string text() {
    std::fflush(f_);
    std::rewind(f_);
    std::string s;
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f_)) > 0;) s.append(buf, n);
    return s;
  }
  std::vector<std::string> lines() {
    std::vector<std::string> out;
    std::istringstream in(text());
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  }

 private:
  std::FILE* f_;
};

TEST(CliProgress, ParsesEveryModeAndNamesABadOne) {
  EXPECT_EQ(*parse_progress_mode("auto"), ProgressMode::kAuto);
  EXPECT_EQ(*parse_progress_mode("bar"), ProgressMode::kBar);
  EXPECT_EQ(*parse_progress_mode("lines"), ProgressMode::kLines);
  EXPECT_EQ(*parse_progress_mode("json"), ProgressMode::kJson);
  EXPECT_EQ(*parse_progress_mode("none"), ProgressMode::kNone);
  auto bad = parse_progress_mode("fancy");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().what().find("\"fancy\""), std::string::npos);
  EXPECT_NE(bad.status().what().find("--progress"), std::string::npos);
}

TEST(CliProgress, AutoIsABarOnATerminalAndLinesElsewhere) {
  EXPECT_EQ(resolve_progress_mode(ProgressMode::kAuto, true), ProgressMode::kBar);
  EXPECT_EQ(resolve_progress_mode(ProgressMode::kAuto, false), ProgressMode::kLines);
  EXPECT_EQ(resolve_progress_mode(ProgressMode::kJson, true), ProgressMode::kJson);
  Capture c;  // a temporary file is not a terminal
  ProgressReporter p(ProgressMode::kAuto, "render", 100, c.file());
  EXPECT_EQ(p.mode(), ProgressMode::kLines);
}

TEST(CliProgress, LinesModeWritesOneLinePerPercentReached) {
  Capture c;
  {
    ProgressReporter p(ProgressMode::kLines, "render", 1000, c.file());
    p.update(0, 0.1);    // 0 %
    p.update(5, 0.2);    // still 0 %: nothing
    p.update(10, 0.3);   // 1 %
    p.update(19, 0.4);   // 1 %: nothing
    p.update(250, 1.0);  // 25 %: one line, not one per skipped percent
    p.update(100, 1.1);  // going back is ignored
    p.finish(1000, 4.0);
  }
  const auto l = c.lines();
  ASSERT_EQ(l.size(), 4u) << c.text();
  EXPECT_EQ(l[0], "render: 0% (0.1 s, 0.00 M paths/s)");
  EXPECT_EQ(l[1].rfind("render: 1% (0.3 s, ETA 29.7 s,", 0), 0u) << l[1];  // 0.3 * 990 / 10
  EXPECT_EQ(l[2].rfind("render: 25% (1.0 s, ETA 3.0 s,", 0), 0u) << l[2];
  EXPECT_EQ(l[3], "render: 100% (4.0 s, 0.00 M paths/s)");  // 1000 paths in 4 s = 250 /s
}

TEST(CliProgress, JsonModeWritesParsableObjectsWithEveryField) {
  Capture c;
  {
    ProgressReporter p(ProgressMode::kJson, "render", 4000000, c.file());
    p.update(0, 0.0);
    p.update(1000000, 2.0);  // 25 %
    p.update(1000000, 2.5);  // same percent, < 1 s since the last line: nothing
    p.update(1000001, 3.1);  // same percent, ≥ 1 s: a heartbeat line
    p.finish(4000000, 8.0);
  }
  const auto l = c.lines();
  ASSERT_EQ(l.size(), 4u) << c.text();
  std::vector<nlohmann::json> j;
  for (const auto& s : l) j.push_back(nlohmann::json::parse(s));
  for (const auto& o : j) {
    EXPECT_EQ(o.at("progress"), "render");
    EXPECT_EQ(o.at("total"), 4000000u);
    for (const char* k : {"done", "elapsed", "eta", "paths_per_s"}) EXPECT_TRUE(o.contains(k)) << k;
  }
  EXPECT_TRUE(j[0].at("eta").is_null());  // nothing done yet: no estimate
  EXPECT_EQ(j[1].at("done"), 1000000u);
  EXPECT_DOUBLE_EQ(j[1].at("elapsed").get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j[1].at("eta").get<double>(), 6.0);  // 2 s for a quarter: 6 s to go
  EXPECT_DOUBLE_EQ(j[1].at("paths_per_s").get<double>(), 500000.0);
  EXPECT_EQ(j[2].at("done"), 1000001u);
  EXPECT_EQ(j[3].at("done"), 4000000u);
  EXPECT_DOUBLE_EQ(j[3].at("eta").get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(j[3].at("paths_per_s").get<double>(), 500000.0);
}

TEST(CliProgress, BarRedrawsInPlaceAndEndsWithANewline) {
  Capture c;
  {
    ProgressReporter p(ProgressMode::kBar, "render", 10, c.file());
    p.update(5, 1.0);
    p.finish(10, 2.0);
  }
  const std::string t = c.text();
  EXPECT_EQ(t.find('\n'), t.size() - 1) << t;  // one line, redrawn with \r
  EXPECT_NE(t.find("\r[###############---------------]  50%  1.0 s  ETA 1 s"), std::string::npos) << t;
  EXPECT_NE(t.find("\r[##############################] 100%  2.0 s"), std::string::npos) << t;
}

TEST(CliProgress, BarLeftUnfinishedStillEndsTheLine) {
  Capture c;
  { ProgressReporter(ProgressMode::kBar, "render", 10, c.file()).update(3, 0.5); }
  const std::string t = c.text();
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(t.back(), '\n');
}

TEST(CliProgress, NoneWritesNothing) {
  Capture c;
  {
    ProgressReporter p(ProgressMode::kNone, "render", 10, c.file());
    p.update(5, 1.0);
    p.finish(10, 2.0);
  }
  EXPECT_EQ(c.text(), "");
}

}  // namespace
}  // namespace facetrace::cli
