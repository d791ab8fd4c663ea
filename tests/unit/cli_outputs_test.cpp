/// @file
/// Outputs that never destroy anything, as a user meets them: `facetrace render` and `faces detect` are started in
/// child processes; an output that is an input, another output, a directory, a FIFO, a device or unwritable is
/// refused with exit 2 before any work; a symbolic link is written through; a file size limit (a full disk) keeps
/// the old PNG; two renders writing the same files at once both succeed and leave a whole EXR.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "facetrace/core/file.h"
#include "facetrace/core/image.h"
#include "facetrace/tracer/output.h"
#include "run_child.h"

namespace facetrace {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int rc = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string describe(const CliRun& r) {
  return "exit " + std::to_string(r.rc) + "\nstdout:\n" + r.out + "stderr:\n" + r.err;
}

/// Starts `facetrace args...` with stdout and stderr to files named after `tag`; `setup` runs in the child
/// before exec (limits, signal dispositions). Returns the child's pid.
pid_t start_cli(const std::vector<std::string>& args, const std::string& tag,
                const std::function<void()>& setup = {}) {
  const std::string base =
      ::testing::TempDir() + "cli_outputs_test_run." + tag + "." + std::to_string(::getpid());
  return facetrace::testing::spawn_redirected(FT_FACETRACE_EXE, args, base + ".out", base + ".err", [&] {
    if (setup) setup();
    return true;
  });
}

CliRun finish_cli(pid_t pid, const std::string& tag) {
  const std::string base =
      ::testing::TempDir() + "cli_outputs_test_run." + tag + "." + std::to_string(::getpid());
  CliRun r;
  int status = 0;
  if (pid > 0 && ::waitpid(pid, &status, 0) == pid)
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  fs::remove(base + ".out");
  fs::remove(base + ".err");
  return r;
}

CliRun run_cli(const std::vector<std::string>& args, const std::function<void()>& setup = {}) {
  return finish_cli(start_cli(args, "one", setup), "one");
}

/// `render` of the built-in diamond at `width`x`height`, 2 spp on the CPU, plus `extra`.
std::vector<std::string> render_args(std::vector<std::string> extra, int width = 16, int height = 12) {
  std::vector<std::string> a{
      "render", "--device", "cpu", "--width", std::to_string(width), "--height", std::to_string(height),
      "--spp",  "2"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::string fresh_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "cli_outputs_test_" + name + "." + std::to_string(::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> r;
  for (const auto& e : fs::directory_iterator(dir)) r.push_back(e.path().filename().string());
  std::sort(r.begin(), r.end());
  return r;
}

/// Checks a refusal: exit 2, the message names `says`, and the render never started.
void expect_refused(const CliRun& r, const std::string& says) {
  EXPECT_EQ(r.rc, 2) << describe(r);
  EXPECT_NE(r.err.find(says), std::string::npos) << describe(r);
  EXPECT_EQ(r.err.find("rendering "), std::string::npos) << "refused only after the render started\n"
                                                         << describe(r);
}

TEST(CliOutputs, render_refuses_to_write_over_its_own_scene) {
  const std::string dir = fresh_dir("scene");
  const std::string scene = dir + "/s.json";
  ASSERT_EQ(run_cli(render_args({"--save-scene", scene, "-o", dir + "/first.png"})).rc, 0);
  const std::string before = slurp(scene);
  ASSERT_FALSE(before.empty());
  expect_refused(run_cli(render_args({scene, "-o", scene})), "is the same file as the input scene");
  expect_refused(
      run_cli(render_args({scene, "--exr", dir + "/../" + fs::path(dir).filename().string() + "/s.json"})),
      "refusing to overwrite an input");
  expect_refused(run_cli(render_args({scene, "--save-scene", scene})), "is the same file as the input");
  EXPECT_EQ(slurp(scene), before);
  fs::remove_all(dir);
}

TEST(CliOutputs, render_refuses_two_outputs_in_one_file) {
  const std::string dir = fresh_dir("twice");
  expect_refused(run_cli(render_args({"-o", dir + "/x.png", "--exr", dir + "/x.png"})),
                 "--exr " + dir + "/x.png: is the same file as the output -o");
  EXPECT_TRUE(names_in(dir).empty());
  fs::remove_all(dir);
}

TEST(CliOutputs, render_refuses_directories_fifos_devices_and_unwritable_places_before_rendering) {
  const std::string dir = fresh_dir("kinds");
  fs::create_directories(dir + "/sub");
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0644), 0);
  expect_refused(run_cli(render_args({"-o", dir + "/sub"})), "is a directory");
  expect_refused(run_cli(render_args({"-o", dir + "/fifo"})), "is a FIFO");  // and does not block on it
  expect_refused(run_cli(render_args({"--exr", "/dev/null"})), "is a device");
  expect_refused(run_cli(render_args({"-o", dir + "/missing/x.png"})), "does not exist");
  expect_refused(run_cli(render_args({"-o", "/proc/facetrace-x.png"})), "cannot write in directory /proc");
  fs::create_directories(dir + "/locked");
  ASSERT_EQ(::chmod((dir + "/locked").c_str(), 0555), 0);
  // root ignores permission bits: that render runs as nobody
  const CliRun locked = run_cli(render_args({"-o", dir + "/locked/x.png"}), [] {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(122);
  });
  expect_refused(locked, "Permission denied");
  EXPECT_TRUE(fs::is_fifo(dir + "/fifo"));
  EXPECT_TRUE(fs::is_empty(dir + "/sub"));
  EXPECT_TRUE(fs::is_empty(dir + "/locked"));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  ::chmod((dir + "/locked").c_str(), 0755);
  fs::remove_all(dir);
}

TEST(CliOutputs, render_writes_through_a_symbolic_link_and_keeps_it) {
  const std::string dir = fresh_dir("link");
  fs::create_directories(dir + "/store");
  fs::create_symlink("store/frame.png", dir + "/latest.png");
  const CliRun r = run_cli(render_args({"-q", "-o", dir + "/latest.png"}));
  ASSERT_EQ(r.rc, 0) << describe(r);
  EXPECT_TRUE(fs::is_symlink(dir + "/latest.png"));
  auto png = tracer::read_png(dir + "/store/frame.png");
  ASSERT_TRUE(png.ok()) << png.status().what();
  EXPECT_EQ(png->width, 16u);
  EXPECT_EQ(names_in(dir + "/store"), std::vector<std::string>{"frame.png"});
  fs::remove_all(dir);
}

TEST(CliOutputs, a_full_disk_keeps_the_previous_png) {
  const std::string dir = fresh_dir("full");
  const std::string png = dir + "/frame.png";
  ASSERT_EQ(run_cli(render_args({"-q", "-o", png}, 8, 8)).rc, 0);
  const std::string before = slurp(png);
  ASSERT_FALSE(before.empty());
  // A 256x256 PNG of the diamond does not fit under a 4 KiB file size limit; with SIGXFSZ ignored the write
  // fails with EFBIG, where a full disk fails with ENOSPC.
  const CliRun r = run_cli(render_args({"-q", "-o", png}, 256, 256), [] {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit lim{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &lim);
  });
  EXPECT_EQ(r.rc, 1) << describe(r);
  EXPECT_NE(r.err.find(png + ": cannot write PNG: write error: File too large"), std::string::npos)
      << describe(r);
  EXPECT_EQ(slurp(png), before);
  EXPECT_EQ(names_in(dir), std::vector<std::string>{"frame.png"});
  fs::remove_all(dir);
}

TEST(CliOutputs, two_renders_writing_the_same_files_both_succeed_and_leave_whole_files) {
  const std::string dir = fresh_dir("race");
  const std::string png = dir + "/same.png", exr = dir + "/same.exr";
  std::vector<pid_t> pids;
  for (int k = 0; k < 2; ++k)
    pids.push_back(
        start_cli(render_args({"-q", "-o", png, "--exr", exr, "--first-sample", std::to_string(k * 2)}),
                  "race" + std::to_string(k)));
  for (int k = 0; k < 2; ++k) {
    const CliRun r = finish_cli(pids[static_cast<std::size_t>(k)], "race" + std::to_string(k));
    EXPECT_EQ(r.rc, 0) << describe(r);
    EXPECT_EQ(r.err.find("rename"), std::string::npos) << describe(r);
  }
  auto back = tracer::read_exr(exr);
  ASSERT_TRUE(back.ok()) << back.status().what();
  EXPECT_EQ(back->film.width, 16u);
  EXPECT_TRUE(back->info.first_sample == 0 || back->info.first_sample == 2) << back->info.first_sample;
  EXPECT_TRUE(tracer::read_png(png).ok());
  const std::vector<std::string> expected{"same.exr", "same.png"};
  EXPECT_EQ(names_in(dir), expected);
  fs::remove_all(dir);
}

#if defined(FT_HAVE_FACES)
TEST(CliOutputs, faces_annotations_never_overwrite_a_photo) {
  const std::string dir = fresh_dir("faces");
  const core::Image photo{4, 4, std::vector<std::uint8_t>(4 * 4 * 3, 200)};
  ASSERT_TRUE(core::write_png(dir + "/a.png", photo).ok());
  const std::string before = slurp(dir + "/a.png");
  CliRun r = run_cli({"faces", "detect", "--device", "cpu", dir, "--annotate-dir", dir});
  EXPECT_EQ(r.rc, 2) << describe(r);
  EXPECT_NE(r.err.find("is the same file as the input photo"), std::string::npos) << describe(r);
  r = run_cli({"faces", "detect", "--device", "cpu", dir + "/a.png", "--annotate", dir + "/a.png"});
  EXPECT_EQ(r.rc, 2) << describe(r);
  // an annotation folder that is a file, or a FIFO as the one annotation: bad input too
  r = run_cli({"faces", "detect", "--device", "cpu", dir + "/a.png", "--annotate-dir", dir + "/a.png"});
  EXPECT_EQ(r.rc, 2) << describe(r);
  EXPECT_NE(r.err.find("--annotate-dir " + dir + "/a.png: Not a directory"), std::string::npos)
      << describe(r);
  ASSERT_EQ(::mkfifo((dir + "/pipe").c_str(), 0644), 0);
  r = run_cli({"faces", "detect", "--device", "cpu", dir + "/a.png", "--annotate", dir + "/pipe"});
  EXPECT_EQ(r.rc, 2) << describe(r);
  EXPECT_NE(r.err.find("is a FIFO"), std::string::npos) << describe(r);
  fs::remove(dir + "/pipe");
  EXPECT_EQ(slurp(dir + "/a.png"), before);
  EXPECT_EQ(names_in(dir), std::vector<std::string>{"a.png"});
  fs::remove_all(dir);
}

TEST(CliOutputs, faces_an_annotation_that_fails_mid_run_is_an_error_record_and_keeps_the_old_file) {
  // Pre-flight passes; the write then fails under a file size limit (a full disk): the photo's record carries
  // the error, the run goes on and exits 1, the old annotation stays whole and no temporary is left.
  const std::string dir = fresh_dir("faces_full");
  fs::create_directories(dir + "/in");
  fs::create_directories(dir + "/out");
  core::Image noisy{300, 200, std::vector<std::uint8_t>(300 * 200 * 3)};
  std::uint32_t x = 12345;
  for (auto& v : noisy.rgb) v = static_cast<std::uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
  ASSERT_TRUE(core::write_png(dir + "/in/noise.png", noisy).ok());
  const std::string old = "an old annotation";
  { std::ofstream(dir + "/out/noise.png", std::ios::binary) << old; }
  const CliRun r = run_cli(
      {"faces", "detect", "--json", "--device", "cpu", dir + "/in", "--annotate-dir", dir + "/out"}, [] {
        std::signal(SIGXFSZ, SIG_IGN);
        const rlimit lim{16384, 16384};
        ::setrlimit(RLIMIT_FSIZE, &lim);
      });
  EXPECT_EQ(r.rc, 1) << describe(r);
  EXPECT_NE(r.out.find("cannot write PNG: write error: File too large"), std::string::npos) << describe(r);
  EXPECT_EQ(slurp(dir + "/out/noise.png"), old);
  EXPECT_EQ(names_in(dir + "/out"), std::vector<std::string>{"noise.png"});
  fs::remove_all(dir);
}
#endif

}  // namespace
}  // namespace facetrace
