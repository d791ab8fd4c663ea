/// @file
/// `facetrace` as a farm manager drives it (docs/cli.md): the binary runs in a child process and its exit code,
/// stdout and stderr are checked. Every exit code of the table (0, 1, 2 for every kind of command-line error,
/// 42, 43, 129/130/143 for SIGHUP/SIGINT/SIGTERM mid-render), --help and --version, render --json,
/// --progress lines and json, --metrics-file, info --require-gpu.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_child.h"

namespace facetrace {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::string slurp(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> r;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) r.push_back(l);
  return r;
}

/// A scratch folder per test, removed afterwards.
class CliRender : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("cli_render_test." + std::to_string(::getpid()) + "." +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  struct Run {
    int rc = -1;     ///< exit code, or -1 when ended by a signal
    int signal = 0;  ///< the signal that ended it, 0 if it exited
    std::string out, err;
  };

  /// Starts `facetrace args...` in `dir_` with `env` added (a value "-" unsets), stdout/stderr to files.
  pid_t spawn(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {}) {
    return facetrace::testing::spawn_redirected(FT_FACETRACE_EXE, args, path("stdout"), path("stderr"), [&] {
      for (const auto& [k, v] : env) v == "-" ? ::unsetenv(k.c_str()) : ::setenv(k.c_str(), v.c_str(), 1);
      return ::chdir(dir_.c_str()) == 0;
    });
  }
  /// Waits for the child; after `limit` it is killed (SIGKILL, reported as signal 9) so a test never hangs.
  Run wait(pid_t pid, std::chrono::seconds limit = std::chrono::seconds(120)) {
    Run r;
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    pid_t got = 0;
    while (pid > 0 && (got = ::waitpid(pid, &status, WNOHANG)) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        got = ::waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (got == pid) {
      if (WIFEXITED(status)) r.rc = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
    }
    r.out = slurp(path("stdout"));
    r.err = slurp(path("stderr"));
    return r;
  }
  Run run(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {}) {
    return wait(spawn(args, env));
  }

  fs::path dir_;
};

/// A tiny CPU render: fast everywhere.
std::vector<std::string> tiny(std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"render", "--width", "16", "--height", "12", "--spp", "2", "--device", "cpu"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

TEST_F(CliRender, EveryCommandLineErrorIsExitTwo) {
  const std::vector<std::vector<std::string>> cases = {
      {},                                 // no subcommand
      {"--bogus"},                        // unknown flag before the subcommand
      {"nosuch"},                         // unknown subcommand
      {"render", "--bogus"},              // unknown flag (CLI11's ExtrasError, 109 on its own)
      {"render", "--spp"},                // missing value
      {"render", "a.json", "b.json"},     // one positional too many
      {"render", "--spp", "many"},        // not a number
      {"render", "--spp", "0"},           // out of range
      {"render", "--device", "tpu"},      // not a device
      {"render", "--progress", "fancy"},  // not a progress mode
      {"info", "--bogus"},
      {"render", "--quiet=maybe"},  // a flag given a value it does not take
  };
  for (const auto& args : cases) {
    std::string shown;
    for (const auto& a : args) shown += a + " ";
    const Run r = run(args);
    EXPECT_EQ(r.rc, 2) << "facetrace " << shown << "\nstderr: " << r.err;
    EXPECT_FALSE(r.err.empty()) << "facetrace " << shown << ": no message";
  }
  // a sample range past the tracer's 32-bit sample index: refused before rendering, naming both flags
  const Run r = run({"render", "--width", "8", "--height", "8", "--spp", "4", "--first-sample", "4294967294",
                     "--device", "cpu", "-o", path("far.png")});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("--first-sample"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--spp"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("rendering"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("far.png")));
}

TEST_F(CliRender, HelpListsTheExitCodesAndVersionNamesTheBuild) {
  for (const auto& args : std::vector<std::vector<std::string>>{{"--help"}, {"render", "--help"}}) {
    const Run r = run(args);
    EXPECT_EQ(r.rc, 0);
    for (const char* line : {"Exit codes", "  0    done", "  2    bad usage", "  42   invalid job or scene",
                             "  43   GPU required but unavailable", "  129  ", "  130  ", "  143  "})
      EXPECT_NE(r.out.find(line), std::string::npos) << line << " in\n" << r.out;
  }
  const Run v = run({"--version"});
  EXPECT_EQ(v.rc, 0);
  const auto l = lines_of(v.out);
  ASSERT_EQ(l.size(), 2u) << v.out;
  EXPECT_EQ(l[0].rfind("facetrace 0.", 0), 0u) << l[0];
  EXPECT_NE(l[0].find(" (git "), std::string::npos) << l[0];
  EXPECT_EQ(l[0].find("(git )"), std::string::npos) << l[0];
  EXPECT_TRUE(l[1].rfind("CUDA runtime ", 0) == 0 || l[1].rfind("CUDA: none", 0) == 0) << l[1];
  if (l[1].rfind("CUDA runtime ", 0) == 0) {
    EXPECT_NE(l[1].find("architectures: sm_"), std::string::npos) << l[1];
  }
}

TEST_F(CliRender, DoneIsZeroAndJsonSummarisesTheRender) {
  const Run r = run(tiny({"-o", "out.png", "--json", "--progress", "none", "--exr", "sums.exr",
                          "--save-scene", "resolved.json"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto l = lines_of(r.out);
  ASSERT_EQ(l.size(), 1u) << r.out;  // one object, nothing else on stdout
  const Json j = Json::parse(l[0]);
  EXPECT_EQ(j.at("ok"), true);
  EXPECT_EQ(j.at("exit_code"), 0);
  EXPECT_EQ(j.at("device"), "cpu");
  EXPECT_EQ(j.at("spp"), 2);
  EXPECT_EQ(j.at("width"), 16);
  EXPECT_EQ(j.at("height"), 12);
  EXPECT_EQ(j.at("paths"), 16 * 12 * 2);
  EXPECT_EQ(j.at("gpu_samples"), 0);
  EXPECT_EQ(j.at("cpu_samples"), 2);
  EXPECT_EQ(j.at("declined"), 0);
  EXPECT_EQ(j.at("declined_by_loss"), 0);
  EXPECT_EQ(j.at("decline_reasons"), Json::array());
  EXPECT_GT(j.at("seconds").get<double>(), 0.0);
  EXPECT_GE(j.at("gpu_start_seconds").get<double>(), 0.0);  // trying for a GPU is part of the render's time
  EXPECT_LE(j.at("gpu_start_seconds").get<double>(), j.at("seconds").get<double>());
  EXPECT_NEAR(j.at("paths_per_s").get<double>(), 384.0 / j.at("seconds").get<double>(),
              1e-6 * 384.0 / j.at("seconds").get<double>());
  EXPECT_EQ(j.at("files"), Json::array({"resolved.json", "out.png", "sums.exr"}));
  for (const char* f : {"resolved.json", "out.png", "sums.exr"}) EXPECT_TRUE(fs::exists(path(f))) << f;
  EXPECT_EQ(slurp(path("out.png")).substr(1, 3), "PNG");
  EXPECT_EQ(r.err.find("render:"), std::string::npos) << r.err;  // --progress none
}

TEST_F(CliRender, SceneTheTracerCannotRenderIsAFailure) {
  // Topaz is biaxial: Tier 3, which neither tracer implements.
  std::ofstream(path("tier3.json")) << R"({"material": {"preset": "topaz"}})";
  const Run r = run(tiny({"tier3.json"}));
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("not supported"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("biaxial"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("tier3.png")));
}

TEST_F(CliRender, InvalidSceneIsFortyTwoAndAMissingFileIsBadInput) {
  std::ofstream(path("broken.json")) << "{\"width\": 16,";
  std::ofstream(path("unknown.json")) << R"({"widht": 16})";
  std::ofstream(path("zero.json")) << R"({"width": 0})";
  for (const char* f : {"broken.json", "unknown.json", "zero.json"}) {
    const Run r = run(tiny({f, "--json"}));
    EXPECT_EQ(r.rc, 42) << f << ": " << r.err;
    const Json j = Json::parse(r.out);
    EXPECT_EQ(j.at("ok"), false);
    EXPECT_EQ(j.at("exit_code"), 42);
    EXPECT_NE(j.at("error").get<std::string>().find(f), std::string::npos) << j.dump();
  }
  const Run missing = run(tiny({"no_such_scene.json"}));
  EXPECT_EQ(missing.rc, 2) << missing.err;
  EXPECT_NE(missing.err.find("no_such_scene.json"), std::string::npos) << missing.err;
}

TEST_F(CliRender, GpuRequiredButUnavailableIsFortyThree) {
  // No device visible to this process (and its GPU child): -1 hides every GPU (CUDA stops at an invalid index).
  const Run r = run({"render", "--width", "16", "--height", "12", "--spp", "2", "--device", "gpu", "--json"},
                    {{"CUDA_VISIBLE_DEVICES", "-1"}});
  EXPECT_EQ(r.rc, 43) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j.at("exit_code"), 43);
  EXPECT_NE(j.at("error").get<std::string>().find("--device gpu"), std::string::npos) << j.dump();
  EXPECT_FALSE(fs::exists(path("diamond.png")));
  // auto still renders, on the CPU.
  const Run a = run({"render", "--width", "16", "--height", "12", "--spp", "2", "--device", "auto", "-q"},
                    {{"CUDA_VISIBLE_DEVICES", "-1"}});
  EXPECT_EQ(a.rc, 0) << a.err;
  EXPECT_TRUE(fs::exists(path("diamond.png")));
}

class CliRenderSignal : public CliRender, public ::testing::WithParamInterface<int> {};

TEST_P(CliRenderSignal, InterruptsWithTheShellsCodeAndWritesNothing) {
  const int sig = GetParam();
  // Long enough to be interrupted anywhere: 256² × 65536 spp on the CPU.
  const pid_t pid =
      spawn({"render", "--width", "256", "--height", "256", "--spp", "65536", "--device", "cpu", "--threads",
             "1", "--progress", "json", "--metrics-file", "m.prom", "-o", "out.png"});
  ASSERT_GT(pid, 0);
  // The first progress object comes from the loop that runs under the signal handlers.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (slurp(path("stderr")).find("{\"progress\"") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(::kill(pid, sig), 0);
  const Run r = wait(pid, std::chrono::seconds(30));  // the next tile boundary is milliseconds away
  EXPECT_EQ(r.signal, 0) << "ended by signal " << r.signal << " instead of exiting";
  EXPECT_EQ(r.rc, 128 + sig) << r.err;
  EXPECT_NE(r.err.find("cancelled by SIG"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("out.png")));
  const std::string m = slurp(path("m.prom"));
  EXPECT_NE(m.find("facetrace_finished 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("facetrace_exit_code " + std::to_string(128 + sig) + "\n"), std::string::npos) << m;
}

INSTANTIATE_TEST_SUITE_P(
    IntTermHup, CliRenderSignal, ::testing::Values(SIGINT, SIGTERM, SIGHUP), [](const auto& info) {
      return std::string(info.param == SIGINT ? "SIGINT" : info.param == SIGTERM ? "SIGTERM" : "SIGHUP");
    });

TEST_F(CliRender, ProgressOffATerminalIsALinePerPercent) {
  const Run r = run({"render", "--width", "64", "--height", "64", "--spp", "64", "--device", "cpu"});
  ASSERT_EQ(r.rc, 0) << r.err;
  int last = -1, count = 0;
  for (const std::string& l : lines_of(r.err)) {
    if (l.rfind("render: ", 0) != 0) continue;
    const int pct = std::stoi(l.substr(8));
    EXPECT_GT(pct, last) << l;  // each percent at most once, ascending
    last = pct;
    ++count;
  }
  EXPECT_EQ(last, 100) << r.err;
  EXPECT_GE(count, 1);
  EXPECT_LE(count, 101);
  EXPECT_EQ(r.err.find('\r'), std::string::npos);  // no bar off a terminal
}

TEST_F(CliRender, ProgressJsonIsOneObjectPerLine) {
  const Run r = run({"render", "--width", "64", "--height", "64", "--spp", "64", "--device", "cpu",
                     "--progress", "json", "-q"});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::vector<Json> objs;
  for (const std::string& l : lines_of(r.err)) objs.push_back(Json::parse(l));  // stderr holds only objects
  EXPECT_TRUE(objs.empty()) << "--quiet silences progress too";
  const Run p = run(
      {"render", "--width", "64", "--height", "64", "--spp", "64", "--device", "cpu", "--progress", "json"});
  ASSERT_EQ(p.rc, 0) << p.err;
  for (const std::string& l : lines_of(p.err))
    if (!l.empty() && l[0] == '{') objs.push_back(Json::parse(l));
  ASSERT_FALSE(objs.empty()) << p.err;
  std::uint64_t prev = 0;
  for (const Json& o : objs) {
    for (const char* k : {"done", "total", "elapsed", "eta", "paths_per_s"}) EXPECT_TRUE(o.contains(k)) << o;
    EXPECT_EQ(o.at("total"), 64u * 64u * 64u);
    EXPECT_GE(o.at("done").get<std::uint64_t>(), prev);
    prev = o.at("done").get<std::uint64_t>();
  }
  EXPECT_EQ(objs.back().at("done"), 64u * 64u * 64u);
  EXPECT_EQ(objs.back().at("eta"), 0);
}

TEST_F(CliRender, MetricsFileCountsTheRender) {
  const Run r = run(tiny({"--metrics-file", "render.prom", "-q", "-o", "first.png"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string m = slurp(path("render.prom"));
  for (const char* line : {"facetrace_paths_rendered_total{device=\"cpu\"} 384\n",
                           "facetrace_paths_rendered_total{device=\"gpu\"} 0\n",
                           "facetrace_requests_total{device=\"gpu\",outcome=\"declined\"} 0\n",
                           "facetrace_gpu_child_restarts_total 0\n", "facetrace_gpu_recoveries_total 0\n",
                           "facetrace_ring_stalls_total 0\n", "facetrace_finished 1\n",
                           "facetrace_exit_code 0\n", "# TYPE facetrace_device_losses_total counter\n"})
    EXPECT_NE(m.find(line), std::string::npos) << line << " in\n" << m;
  int tmp = 0;
  for (const auto& e : fs::directory_iterator(dir_))
    if (e.path().filename().string().rfind(".render.prom", 0) == 0) ++tmp;
  EXPECT_EQ(tmp, 0) << "a temporary was left behind";
  const Run bad = run(tiny({"--metrics-file", "no_such_dir/m.prom"}));
  EXPECT_EQ(bad.rc, 2) << bad.err;
  EXPECT_NE(bad.err.find("--metrics-file"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(path("diamond.png")));  // refused before rendering
  const Run same = run(tiny({"-o", "x.png", "--metrics-file", "x.png"}));
  EXPECT_EQ(same.rc, 2) << same.err;  // an output of its own, never the PNG (core/file.h check_outputs)
  EXPECT_FALSE(fs::exists(path("x.png")));
}

using CliInfo = CliRender;

TEST_F(CliInfo, RequireGpuFailsUnlessTheGpuIsReady) {
  const std::map<std::string, std::string> no_gpu = {{"CUDA_VISIBLE_DEVICES", "-1"}};
  const Run plain = run({"info"}, no_gpu);
  EXPECT_EQ(plain.rc, 0) << plain.err;  // no GPU is a state to report
  EXPECT_NE(plain.out.find("state:"), std::string::npos) << plain.out;
  const Run req = run({"info", "--require-gpu"}, no_gpu);
  EXPECT_EQ(req.rc, 43) << req.err;
  EXPECT_NE(req.err.find("--require-gpu: the GPU is not ready"), std::string::npos) << req.err;
  const Run json = run({"info", "--json", "--require-gpu"}, no_gpu);
  EXPECT_EQ(json.rc, 43);
  EXPECT_NE(Json::parse(json.out).at("state"), "ready");
}

}  // namespace
}  // namespace facetrace
