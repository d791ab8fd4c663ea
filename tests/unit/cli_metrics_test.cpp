// --metrics-file (src/cli/metrics.h, docs/cli.md "Metrics"): the Prometheus text format and the atomic rewrite.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <unistd.h>

#include "metrics.h"

namespace facetrace::cli {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Metrics sample_metrics() {
  Metrics m;
  m.requests_done_gpu = 7;
  m.requests_done_cpu = 3;
  m.requests_declined = 2;
  m.requests_cancelled = 1;
  m.device_losses = {{"cudaErrorIllegalAddress", 2}, {"child_exited", 1}};
  m.child_restarts = 3;
  m.recoveries = 2;
  m.ring_stalls = 5;
  m.paths_gpu = 1048576ull * 4096;
  m.paths_cpu = 12;
  m.seconds = 2.5;
  m.progress = 0.25;
  return m;
}

TEST(CliMetrics, LossReasonsMapToTheCudaErrorName) {
  EXPECT_EQ(loss_error_name("cudaStreamSynchronize(s) failed: cudaErrorIllegalAddress (700) at x.cu:12"),
            "cudaErrorIllegalAddress");
  EXPECT_EQ(loss_error_name("cudaErrorLaunchTimeout"), "cudaErrorLaunchTimeout");
  EXPECT_EQ(loss_error_name("GPU child exited with signal 9"), "child_exited");
  EXPECT_EQ(loss_error_name("reply deadline of 30000 ms passed"), "timeout");
  EXPECT_EQ(loss_error_name("something else"), "other");
}

TEST(CliMetrics, TextHasEveryCounterWithTheExpectedValues) {
  const std::string t = prometheus_text(sample_metrics());
  for (const char* line : {
           "facetrace_requests_total{device=\"gpu\",outcome=\"done\"} 7\n",
           "facetrace_requests_total{device=\"gpu\",outcome=\"declined\"} 2\n",
           "facetrace_requests_total{device=\"gpu\",outcome=\"cancelled\"} 1\n",
           "facetrace_requests_total{device=\"cpu\",outcome=\"done\"} 3\n",
           "facetrace_device_losses_total{error=\"cudaErrorIllegalAddress\"} 2\n",
           "facetrace_device_losses_total{error=\"child_exited\"} 1\n",
           "facetrace_gpu_child_restarts_total 3\n",
           "facetrace_gpu_recoveries_total 2\n",
           "facetrace_ring_stalls_total 5\n",
           "facetrace_paths_rendered_total{device=\"gpu\"} 4294967296\n",
           "facetrace_paths_rendered_total{device=\"cpu\"} 12\n",
           "facetrace_elapsed_seconds 2.5\n",
           "facetrace_progress_ratio 0.25\n",
           "facetrace_finished 0\n",
           "# TYPE facetrace_requests_total counter\n",
           "# TYPE facetrace_elapsed_seconds gauge\n",
       })
    EXPECT_NE(t.find(line), std::string::npos) << line << "\nin\n" << t;
  EXPECT_EQ(t.find("# TYPE facetrace_exit_code"), std::string::npos);  // only once finished
}

TEST(CliMetrics, EveryLineFollowsTheExpositionFormat) {
  Metrics m = sample_metrics();
  m.device_losses["weird\"name\\x"] = 1;  // escaped, never breaks the line
  m.finished = true;
  m.exit_code = 43;
  const std::string t = prometheus_text(m);
  const std::regex comment(R"(^# (HELP|TYPE) [a-z_]+ .+$)");
  const std::regex sample_line(R"(^[a-z_]+(\{([a-z_]+="([^"\\]|\\.)*",?)+\})? [0-9.e+-]+$)");
  std::istringstream in(t);
  int samples = 0;
  for (std::string l; std::getline(in, l);) {
    if (l.rfind("#", 0) == 0) {
      EXPECT_TRUE(std::regex_match(l, comment)) << l;
    } else {
      EXPECT_TRUE(std::regex_match(l, sample_line)) << l;
      ++samples;
    }
  }
  EXPECT_EQ(samples, 16);  // 4 requests, 3 losses, restarts + recoveries + stalls, 2 paths, 4 gauges
  EXPECT_NE(t.find("facetrace_exit_code 43\n"), std::string::npos);
  EXPECT_EQ(t.back(), '\n');
}

TEST(CliMetrics, FileIsReplacedWholeAndLeavesNoTemporary) {
  const fs::path dir = fs::temp_directory_path() / ("ft_metrics_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path file = dir / "render.prom";
  { std::ofstream(file) << "old\n"; }
  Metrics m = sample_metrics();
  ASSERT_TRUE(write_metrics_file(file.string(), m).ok());
  EXPECT_EQ(slurp(file), prometheus_text(m));
  m.ring_stalls = 6;
  ASSERT_TRUE(write_metrics_file(file.string(), m).ok());
  EXPECT_EQ(slurp(file), prometheus_text(m));
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 1);  // no temporary left behind
  fs::remove_all(dir);
}

TEST(CliMetrics, UnwritableTargetIsAnIoErrorNamingThePath) {
  const Status st = write_metrics_file("/nonexistent_dir_ft/metrics.prom", sample_metrics());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kIo);
  EXPECT_NE(st.what().find("/nonexistent_dir_ft/metrics.prom"), std::string::npos) << st.what();
}

}  // namespace
}  // namespace facetrace::cli
