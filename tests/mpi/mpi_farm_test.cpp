/// @file
/// facetrace-mpi end to end (farm.md §2, §3; ctest label mpi): `mpirun -np 1, 2, 4` canonical merges equal, bit for
/// bit, a single-process render of the same units summed in ascending order into f64 (computed here with the CPU
/// tracer alone, no farm code); reduce agrees to 1e-12; checkpoints resume; the exit codes 42 and 43.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "facetrace/runtime/executor.h"
#include "facetrace/tracer/cpu_tracer.h"
#include "facetrace/tracer/film.h"
#include "facetrace/tracer/scene.h"

namespace fs = std::filesystem;
namespace tr = facetrace::tracer;

namespace {

// The test job: the built-in diamond, small; 37 spp in units of 8 → 5 units, the last one of 5 samples.
struct JobSpec {
  std::uint32_t width = 24, height = 16, spp = 37, unit = 8;
};
constexpr std::uint32_t kBounces = 6;

std::string job_json(const JobSpec& j = {}) {
  return "{\"name\": \"mpitest\", \"scene\": \"builtin:diamond\", \"spp\": " + std::to_string(j.spp) +
         ", \"unit_samples\": " + std::to_string(j.unit) + ", \"width\": " + std::to_string(j.width) +
         ", \"height\": " + std::to_string(j.height) + ", \"max_bounces\": " + std::to_string(kBounces) + "}";
}

/// The reference: every unit [u·K, min((u+1)·K, spp)) traced into a zeroed film by the CPU tracer, then
/// F = Σ over u ascending of f64(S_u) (farm.md §1 "Merge", step 3).
std::vector<double> reference_sums(const JobSpec& j = {}) {
  tr::Scene scene = tr::builtin_diamond_scene();
  scene.width = j.width;
  scene.height = j.height;
  scene.max_bounces = kBounces;
  std::vector<double> f(std::size_t{j.width} * j.height * 3, 0.0);
  for (std::uint32_t first = 0; first < j.spp; first += j.unit) {
    tr::Film film(j.width, j.height);
    const std::uint32_t n = std::min(j.unit, j.spp - first);
    EXPECT_TRUE(tr::cpu_accumulate(scene, first, n, film).ok());
    for (std::size_t i = 0; i < f.size(); ++i) f[i] += static_cast<double>(film.xyz[i]);
  }
  return f;
}

/// A raw f64 sums file (farm.md §1: magic, W, H, N, non-finite count, scene sha256, 3·W·H doubles).
struct Sums {
  std::uint32_t width = 0, height = 0;
  std::uint64_t samples = 0, nonfinite = 0;
  std::vector<double> xyz;
};

Sums read_sums(const std::string& path) {
  Sums s;
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  EXPECT_EQ(0, std::memcmp(magic, "FTSUM1\0\0", 8)) << path;
  in.read(reinterpret_cast<char*>(&s.width), 4);
  in.read(reinterpret_cast<char*>(&s.height), 4);
  in.read(reinterpret_cast<char*>(&s.samples), 8);
  in.read(reinterpret_cast<char*>(&s.nonfinite), 8);
  char sha[32];
  in.read(sha, 32);
  s.xyz.resize(std::size_t{s.width} * s.height * 3);
  in.read(reinterpret_cast<char*>(s.xyz.data()), static_cast<std::streamsize>(s.xyz.size() * sizeof(double)));
  EXPECT_TRUE(in.good()) << path << ": truncated";
  return s;
}

struct ProcessRun {
  int rc = -1;
  std::string err;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

/// A fresh folder holding job.json.
std::string fresh_dir(const std::string& name, const std::string& job = job_json()) {
  const std::string d = ::testing::TempDir() + "mpi_farm_test_" + name + "_" + std::to_string(::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  std::ofstream(d + "/job.json") << job;
  return d;
}

/// Starts `argv` in `dir` with stderr to dir/err.txt (stdout discarded); returns the pid.
pid_t spawn(const std::string& dir, const std::vector<std::string>& args) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::chdir(dir.c_str()) != 0) ::_exit(120);
    // Open MPI refuses to start as root (a CI container) unless both are set; harmless for other users.
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    const int e = ::open("err.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int o = ::open("/dev/null", O_WRONLY);
    if (e < 0 || o < 0) ::_exit(120);
    ::dup2(o, 1);
    ::dup2(e, 2);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    ::_exit(121);
  }
  return pid;
}

ProcessRun wait_for(const std::string& dir, pid_t pid) {
  ProcessRun r;
  int status = 0;
  if (pid > 0 && ::waitpid(pid, &status, 0) == pid) {
    if (WIFEXITED(status))
      r.rc = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
      r.rc = 128 + WTERMSIG(status);
  }
  r.err = slurp(dir + "/err.txt");
  return r;
}

/// `mpirun -np N [preflags] facetrace-mpi render job.json args...` in `dir`; N = 0 runs the binary directly
/// (an MPI singleton).
ProcessRun mpi(const std::string& dir, int np, const std::vector<std::string>& args) {
  std::vector<std::string> argv;
  if (np > 0) {
    argv = {FT_MPIEXEC, FT_MPIEXEC_NUMPROC_FLAG, std::to_string(np)};
    std::string pre = FT_MPIEXEC_PREFLAGS;
    for (std::size_t p = 0; p < pre.size();) {
      const std::size_t q = pre.find(';', p);
      const std::string one = pre.substr(p, q == std::string::npos ? std::string::npos : q - p);
      if (!one.empty()) argv.push_back(one);
      if (q == std::string::npos) break;
      p = q + 1;
    }
  }
  argv.push_back(FT_FACETRACE_MPI_EXE);
  argv.push_back("render");
  argv.push_back("job.json");
  argv.insert(argv.end(), args.begin(), args.end());
  return wait_for(dir, spawn(dir, argv));
}

std::string describe(const ProcessRun& r) { return "exit " + std::to_string(r.rc) + "\nstderr:\n" + r.err; }

void expect_bit_identical(const std::vector<double>& want, const Sums& got, const std::string& what,
                          const JobSpec& j = {}) {
  ASSERT_EQ(got.width, j.width) << what;
  ASSERT_EQ(got.height, j.height) << what;
  ASSERT_EQ(got.xyz.size(), want.size()) << what;
  std::size_t differ = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&want[i], &got.xyz[i], sizeof(double)) != 0) ++differ;
  EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << want.size() << " sums differ in their bits";
}

std::size_t count_partials(const std::string& dir) {
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".ftp") ++n;
  return n;
}

TEST(MpiFarm, canonical_merge_is_bit_identical_to_one_process_for_1_2_and_4_ranks) {
  const std::vector<double> want = reference_sums();
  for (int np : {1, 2, 4}) {
    const std::string d = fresh_dir("canonical" + std::to_string(np));
    const ProcessRun r = mpi(d, np, {"--backend=cpu", "--merge=canonical", "--sums", "out.ftsum", "--quiet"});
    ASSERT_EQ(r.rc, 0) << "np " << np << ": " << describe(r);
    const Sums s = read_sums(d + "/out.ftsum");
    EXPECT_EQ(s.samples, JobSpec{}.spp) << "np " << np;
    expect_bit_identical(want, s, "np " + std::to_string(np));
  }
}

TEST(MpiFarm, reduce_merge_agrees_to_1e_12_relative) {
  const std::vector<double> want = reference_sums();
  for (int np : {2, 4}) {
    const std::string d = fresh_dir("reduce" + std::to_string(np));
    const ProcessRun r = mpi(d, np, {"--backend=cpu", "--merge=reduce", "--sums", "out.ftsum", "--quiet"});
    ASSERT_EQ(r.rc, 0) << "np " << np << ": " << describe(r);
    const Sums s = read_sums(d + "/out.ftsum");
    EXPECT_EQ(s.samples, JobSpec{}.spp);
    ASSERT_EQ(s.xyz.size(), want.size());
    double worst = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double scale = std::max(std::abs(want[i]), 1e-300);
      worst = std::max(worst, std::abs(s.xyz[i] - want[i]) / scale);
    }
    EXPECT_LE(worst, 1e-12) << "np " << np;
  }
}

TEST(MpiFarm, png_and_exr_outputs_are_written_by_rank_0) {
  const std::string d = fresh_dir("outputs");
  const ProcessRun r = mpi(d, 2, {"--backend=cpu", "--png", "frame.png", "--exr", "sums.exr", "--quiet"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  EXPECT_GT(fs::file_size(d + "/frame.png"), 100u);
  EXPECT_GT(fs::file_size(d + "/sums.exr"), 100u);
}

TEST(MpiFarm, checkpoint_partials_let_a_rerun_render_nothing_and_merge_the_same_bits) {
  const std::vector<double> want = reference_sums();
  const std::string d = fresh_dir("checkpoint");
  ProcessRun r = mpi(d, 2, {"--backend=cpu", "--checkpoint", "parts", "--sums", "a.ftsum"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  EXPECT_EQ(count_partials(d + "/parts"), 2u) << "one partial per rank that rendered";
  expect_bit_identical(want, read_sums(d + "/a.ftsum"), "first run");
  // Rerun on 4 ranks: every unit is checkpointed, nothing is rendered, nothing new is written.
  r = mpi(d, 4, {"--backend=cpu", "--checkpoint", "parts", "--sums", "b.ftsum"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  EXPECT_NE(r.err.find("5 checkpointed, 0 to render"), std::string::npos) << describe(r);
  EXPECT_EQ(count_partials(d + "/parts"), 2u);
  expect_bit_identical(want, read_sums(d + "/b.ftsum"), "rerun from the checkpoint (canonical)");
  r = mpi(d, 3, {"--backend=cpu", "--merge=reduce", "--checkpoint", "parts", "--sums", "c.ftsum", "--quiet"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  expect_bit_identical(want, read_sums(d + "/c.ftsum"), "rerun from the checkpoint (reduce, root adds them)");
}

TEST(MpiFarm, sigterm_flushes_finished_units_exits_143_and_the_rerun_completes_the_same_bits) {
  // A job long enough to be interrupted on one CPU thread: 20 units of 16 samples at 64×48.
  const JobSpec spec{64, 48, 320, 16};
  const std::string d = fresh_dir("sigterm", job_json(spec));
  // An MPI singleton (no mpirun): the signal reaches the rank itself, as from Slurm or a container runtime.
  const pid_t pid = spawn(d, {FT_FACETRACE_MPI_EXE, "render", "job.json", "--backend=cpu", "--threads", "1",
                              "--checkpoint", "parts", "--sums", "a.ftsum"});
  // Wait for at least one finished unit in the partial, then SIGTERM.
  bool started = false;
  for (int i = 0; i < 3000 && !started; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (fs::is_directory(d + "/parts"))
      for (const auto& e : fs::directory_iterator(d + "/parts"))
        if (e.path().extension() == ".ftp" && fs::file_size(e.path()) > 12u * spec.width * spec.height)
          started = true;
  }
  ASSERT_TRUE(started) << "no unit was checkpointed within 30 s";
  ::kill(pid, SIGTERM);
  ProcessRun r = wait_for(d, pid);
  if (r.rc == 0) GTEST_SKIP() << "the render finished before SIGTERM arrived";
  EXPECT_EQ(r.rc, 143) << describe(r);
  EXPECT_FALSE(fs::exists(d + "/a.ftsum")) << "an interrupted run writes no merge";
  r = mpi(d, 2, {"--backend=cpu", "--checkpoint", "parts", "--sums", "b.ftsum"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  EXPECT_EQ(r.err.find(" 0 checkpointed"), std::string::npos) << "the rerun resumed nothing: " << describe(r);
  expect_bit_identical(reference_sums(spec), read_sums(d + "/b.ftsum"), "interrupted + resumed", spec);
}

TEST(MpiFarm, an_invalid_job_exits_42_on_every_rank) {
  const std::string d = fresh_dir("badjob",
                                  "{\"name\": \"mpitest\", \"scene\": \"builtin:diamond\", \"spp\": 0, "
                                  "\"unit_samples\": 8}");
  const ProcessRun r = mpi(d, 2, {"--backend=cpu", "--quiet"});
  EXPECT_EQ(r.rc, 42) << describe(r);
  EXPECT_NE(r.err.find("spp"), std::string::npos) << describe(r);
}

TEST(MpiFarm, bad_usage_exits_2) {
  const std::string d = fresh_dir("usage");
  EXPECT_EQ(mpi(d, 0, {"--merge=sideways"}).rc, 2);
  EXPECT_EQ(mpi(d, 0, {"--no-such-flag"}).rc, 2);
}

TEST(MpiFarm, gpu_required_without_a_gpu_exits_43_and_cpu_fallback_renders_the_same_bits) {
  if (!facetrace::runtime::gpu_unavailable_reason())
    GTEST_SKIP() << "this host has a usable GPU; the test is about hosts without one";
  const std::string d = fresh_dir("nogpu");
  ProcessRun r = mpi(d, 2, {"--backend=gpu", "--sums", "a.ftsum", "--quiet"});
  EXPECT_EQ(r.rc, 43) << describe(r);
  EXPECT_FALSE(fs::exists(d + "/a.ftsum"));
  r = mpi(d, 2, {"--backend=gpu", "--cpu-fallback", "--sums", "b.ftsum", "--quiet"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  expect_bit_identical(reference_sums(), read_sums(d + "/b.ftsum"), "--cpu-fallback");
}

}  // namespace
