/// @file
/// Helpers of the facetrace-mpi tests (farm.md §2): the test job, the CPU-tracer reference of its canonical
/// merge, the raw f64 sums reader, and running mpiexec / facetrace-mpi in a folder.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "facetrace/tracer/cpu_tracer.h"
#include "facetrace/tracer/film.h"
#include "facetrace/tracer/scene.h"

namespace mpi_test {

namespace fs = std::filesystem;
namespace tr = facetrace::tracer;

// The test job: the built-in diamond, small; 37 spp in units of 8 → 5 units, the last one of 5 samples.
struct JobSpec {
  std::uint32_t width = 24, height = 16, spp = 37, unit = 8;
};
constexpr std::uint32_t kBounces = 6;

inline std::string job_json(const JobSpec& j = {}) {
  return "{\"name\": \"mpitest\", \"scene\": \"builtin:diamond\", \"spp\": " + std::to_string(j.spp) +
         ", \"unit_samples\": " + std::to_string(j.unit) + ", \"width\": " + std::to_string(j.width) +
         ", \"height\": " + std::to_string(j.height) + ", \"max_bounces\": " + std::to_string(kBounces) + "}";
}

/// The reference: every unit [u·K, min((u+1)·K, spp)) traced into a zeroed film by the CPU tracer, then
/// F = Σ over u ascending of f64(S_u) (farm.md §1 "Merge", step 3).
inline std::vector<double> reference_sums(const JobSpec& j = {}) {
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

inline Sums read_sums(const std::string& path) {
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
  std::string out, err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

/// A fresh folder holding job.json.
inline std::string fresh_dir(const std::string& name, const std::string& job = job_json()) {
  const std::string d = ::testing::TempDir() + "mpi_farm_test_" + name + "_" + std::to_string(::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  std::ofstream(d + "/job.json") << job;
  return d;
}

/// Starts `args` in `dir` with stdout to dir/out.txt and stderr to dir/err.txt, `env` ("NAME=value") added to
/// its environment; returns the pid.
inline pid_t spawn(const std::string& dir, const std::vector<std::string>& args,
                   const std::vector<std::string>& env = {}) {
  // Everything the child needs is built here: between fork and exec it only makes async-signal-safe calls.
  // Open MPI refuses to start as root (a CI container) unless both are set; harmless for other users.
  std::vector<std::string> vars = {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"};
  vars.insert(vars.end(), env.begin(), env.end());
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv(*e);
    const std::string name = kv.substr(0, kv.find('='));
    if (std::none_of(vars.begin(), vars.end(),
                     [&](const std::string& v) { return v.rfind(name + "=", 0) == 0; }))
      vars.push_back(kv);
  }
  std::vector<char*> envp, argv;
  for (const std::string& v : vars) envp.push_back(const_cast<char*>(v.c_str()));
  envp.push_back(nullptr);
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::string out = dir + "/out.txt", err = dir + "/err.txt";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (e < 0 || o < 0 || ::chdir(dir.c_str()) != 0) ::_exit(120);
    ::dup2(o, 1);
    ::dup2(e, 2);
    ::execvpe(argv[0], argv.data(), envp.data());
    ::_exit(121);
  }
  return pid;
}

inline ProcessRun wait_for(const std::string& dir, pid_t pid) {
  ProcessRun r;
  int status = 0;
  if (pid > 0 && ::waitpid(pid, &status, 0) == pid) {
    if (WIFEXITED(status))
      r.rc = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
      r.rc = 128 + WTERMSIG(status);
  }
  r.out = slurp(dir + "/out.txt");
  r.err = slurp(dir + "/err.txt");
  return r;
}

/// The binaries: the build's, unless FT_FACETRACE_MPI_EXE / FT_MPIEXEC in the environment name others (a test
/// binary carried to another machine).
inline std::string mpi_exe() {
  const char* e = std::getenv("FT_FACETRACE_MPI_EXE");
  return e && *e ? e : FT_FACETRACE_MPI_EXE;
}
inline std::string mpiexec() {
  const char* e = std::getenv("FT_MPIEXEC");
  return e && *e ? e : FT_MPIEXEC;
}

/// `mpirun -np N [preflags] facetrace-mpi render job.json args...` in `dir`; N = 0 runs the binary directly
/// (an MPI singleton).
inline ProcessRun mpi(const std::string& dir, int np, const std::vector<std::string>& args,
                      const std::vector<std::string>& env = {}) {
  std::vector<std::string> argv;
  if (np > 0) {
    argv = {mpiexec(), FT_MPIEXEC_NUMPROC_FLAG, std::to_string(np)};
    std::string pre = FT_MPIEXEC_PREFLAGS;
    for (std::size_t p = 0; p < pre.size();) {
      const std::size_t q = pre.find(';', p);
      const std::string one = pre.substr(p, q == std::string::npos ? std::string::npos : q - p);
      if (!one.empty()) argv.push_back(one);
      if (q == std::string::npos) break;
      p = q + 1;
    }
  }
  argv.push_back(mpi_exe());
  argv.push_back("render");
  argv.push_back("job.json");
  argv.insert(argv.end(), args.begin(), args.end());
  return wait_for(dir, spawn(dir, argv, env));
}

inline std::string describe(const ProcessRun& r) {
  return "exit " + std::to_string(r.rc) + "\nstdout:\n" + r.out + "stderr:\n" + r.err;
}

inline void expect_bit_identical(const std::vector<double>& want, const Sums& got, const std::string& what,
                                 const JobSpec& j = {}) {
  ASSERT_EQ(got.width, j.width) << what;
  ASSERT_EQ(got.height, j.height) << what;
  ASSERT_EQ(got.xyz.size(), want.size()) << what;
  std::size_t differ = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&want[i], &got.xyz[i], sizeof(double)) != 0) ++differ;
  EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << want.size() << " sums differ in their bits";
}

inline std::size_t count_partials(const std::string& dir) {
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".ftp") ++n;
  return n;
}

}  // namespace mpi_test
