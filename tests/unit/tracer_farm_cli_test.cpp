/// @file
/// `facetrace worker` and `facetrace merge` end to end (docs/design/farm.md §1), running the built binary: disjoint
/// workers + merge equal one worker over every unit + merge and the naive canonical sum bit for bit; the merge's
/// refusals; a worker killed mid-run (SIGTERM and SIGKILL), rerun and merged gives the identical result.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "facetrace/tracer/cpu_tracer.h"
#include "facetrace/tracer/farm.h"
#include "facetrace/tracer/output.h"
#include "facetrace/tracer/scene_json.h"

extern char** environ;

namespace facetrace::farm {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "ft_farm_cli_XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

/// Runs `facetrace <args>` through the shell; returns the exit status (128 + n for a signal) and the output.
struct Result {
  int code = -1;
  std::string out;
};
Result facetrace(const std::string& args) {
  const std::string cmd = std::string("\"") + FT_FACETRACE_EXE + "\" " + args + " 2>&1";
  Result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

/// A job file: the built-in diamond at w×h, spp samples in units of k.
std::string write_job(const TempDir& dir, const std::string& name, unsigned w, unsigned h, unsigned spp, unsigned k,
                      float exposure = 1.0f) {
  tracer::Scene s = tracer::builtin_diamond_scene();
  s.width = w;
  s.height = h;
  s.max_bounces = 6;
  s.exposure = exposure;
  const std::string path = dir / (name + ".json");
  std::ofstream(path) << R"({"name":")" << name << R"(","scene":)" << tracer::scene_to_json(s)
                      << R"(,"spp":)" << spp << R"(,"unit_samples":)" << k << "}";
  return path;
}

/// The .ftsum body (3·W·H doubles) of a merge, for bit comparisons.
std::vector<double> ftsum_values(const std::string& path) {
  const std::string bytes = slurp(path);
  std::vector<double> v((bytes.size() - 64) / 8);
  std::memcpy(v.data(), bytes.data() + 64, v.size() * 8);
  return v;
}

/// Naive reference: each unit through the CPU tracer into a fresh film, added ascending into doubles.
std::vector<double> reference(unsigned w, unsigned h, unsigned spp, unsigned k) {
  tracer::Scene s = tracer::builtin_diamond_scene();
  s.width = w;
  s.height = h;
  s.max_bounces = 6;
  std::vector<double> acc(std::size_t{w} * h * 3, 0.0);
  for (unsigned first = 0; first < spp; first += k) {
    tracer::Film film(w, h);
    EXPECT_TRUE(tracer::cpu_accumulate(s, first, std::min(k, spp - first), film).ok());
    for (std::size_t i = 0; i < acc.size(); ++i) acc[i] += static_cast<double>(film.xyz[i]);
  }
  return acc;
}

TEST(FarmCli, disjoint_workers_merge_to_the_bits_of_one_worker_and_of_the_canonical_sum) {
  TempDir dir;
  const std::string job = write_job(dir, "frame", 16, 12, 40, 4);  // 10 units
  const std::string one = dir / "one", split = dir / "split";
  ASSERT_EQ(facetrace("worker -q --device cpu --job " + job + " --units 0:10 --out " + one).code, 0);
  Result w1 = facetrace("worker -q --device cpu --job " + job + " --units 0:3 --out " + split);
  ASSERT_EQ(w1.code, 0) << w1.out;
  ::setenv("FT_TEST_ARRAY_INDEX", "1", 1);  // index 1 of M = 3: units [3, 6)
  Result w2 = facetrace("worker -q --device cpu --job " + job +
                     " --index-env FT_TEST_ARRAY_INDEX --units-per-index 3 --out " + split);
  ASSERT_EQ(w2.code, 0) << w2.out;
  ASSERT_TRUE(fs::exists(split + "/part-frame-3.ftp"));
  ASSERT_EQ(facetrace("worker -q --device cpu --job " + job + " --index 2 --units-per-index 4 --out " + split).code,
            0);  // units [8, 12) clamped to [8, 10)
  ASSERT_EQ(facetrace("worker -q --device cpu --job " + job + " --units 6:8 --out " + split).code, 0);

  for (const auto& [parts, tag] : {std::pair{one, std::string("one")}, std::pair{split, std::string("split")}}) {
    Result m = facetrace("merge " + parts + "/part-frame-*.ftp --exr " + (dir / (tag + ".exr")) + " --png " +
                      (dir / (tag + ".png")) + " --sums " + (dir / (tag + ".ftsum")));
    ASSERT_EQ(m.code, 0) << m.out;
    EXPECT_NE(m.out.find("merged 10 of 10 units of frame"), std::string::npos) << m.out;
  }
  const std::vector<double> want = reference(16, 12, 40, 4);
  const std::vector<double> a = ftsum_values(dir / "one.ftsum"), b = ftsum_values(dir / "split.ftsum");
  ASSERT_EQ(a.size(), want.size());
  EXPECT_EQ(std::memcmp(a.data(), want.data(), a.size() * 8), 0);
  ASSERT_EQ(b.size(), want.size());
  EXPECT_EQ(std::memcmp(b.data(), want.data(), b.size() * 8), 0);
  EXPECT_EQ(slurp(dir / "one.png"), slurp(dir / "split.png"));
  auto ea = tracer::read_exr(dir / "one.exr"), eb = tracer::read_exr(dir / "split.exr");
  ASSERT_TRUE(ea.ok() && eb.ok());
  EXPECT_EQ(ea->film.xyz, eb->film.xyz);
  EXPECT_EQ(ea->info.samples, 40u);
  EXPECT_EQ(ea->film.samples[0], 40u);
  EXPECT_EQ(static_cast<double>(ea->film.xyz[5]), static_cast<double>(static_cast<float>(want[5])));
}

TEST(FarmCli, a_rerun_skips_the_units_present) {
  TempDir dir;
  const std::string job = write_job(dir, "again", 8, 6, 16, 4);
  ASSERT_EQ(facetrace("worker -q --device cpu --job " + job + " --units 0:2 --out " + (dir / "p")).code, 0);
  Result again = facetrace("worker --device cpu --job " + job + " --units 0:4 --out " + (dir / "p"));
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_NE(again.out.find("2 already present"), std::string::npos) << again.out;
  Result done = facetrace("worker --device cpu --job " + job + " --units 1:4 --out " + (dir / "p"));
  ASSERT_EQ(done.code, 0) << done.out;
  EXPECT_NE(done.out.find("all present"), std::string::npos) << done.out;
  Result m = facetrace("merge -q " + (dir / "p"));  // a directory stands for its partials
  EXPECT_EQ(m.code, 0) << m.out;
}

TEST(FarmCli, merge_refuses_bad_sets_of_partials_with_exit_2) {
  TempDir dir;
  const std::string job = write_job(dir, "f", 8, 6, 16, 4);  // 4 units
  const std::string other = write_job(dir, "f2", 8, 6, 16, 4, 0.5f);
  ASSERT_EQ(facetrace("worker -q --device cpu --job " + job + " --units 0:2 --out " + (dir / "a")).code, 0);
  ASSERT_EQ(facetrace("worker -q --device cpu --job " + job + " --units 1:4 --out " + (dir / "b")).code, 0);
  ASSERT_EQ(facetrace("worker -q --device cpu --job " + other + " --units 2:4 --out " + (dir / "c")).code, 0);

  Result missing = facetrace("merge " + (dir / "a") + " --png " + (dir / "x.png"));
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.out.find("2 of 4 units are missing: 2-3"), std::string::npos) << missing.out;
  EXPECT_FALSE(fs::exists(dir / "x.png"));
  Result allowed = facetrace("merge " + (dir / "a") + " --allow-missing --png " + (dir / "x.png"));
  EXPECT_EQ(allowed.code, 0) << allowed.out;
  EXPECT_NE(allowed.out.find("merged 2 of 4 units"), std::string::npos) << allowed.out;
  EXPECT_NE(allowed.out.find("N = 8 samples per pixel"), std::string::npos) << allowed.out;

  Result dup = facetrace("merge " + (dir / "a") + " " + (dir / "b") + " --png " + (dir / "y.png"));
  EXPECT_EQ(dup.code, 2);
  EXPECT_NE(dup.out.find("unit 1 is in both"), std::string::npos) << dup.out;

  Result scene = facetrace("merge " + (dir / "a") + " " + (dir / "c") + " --png " + (dir / "y.png"));
  EXPECT_EQ(scene.code, 2);
  EXPECT_NE(scene.out.find("part-f2-2.ftp does not belong with"), std::string::npos) << scene.out;

  const std::string cut = dir / "a/part-f-0.ftp";
  fs::resize_file(cut, fs::file_size(cut) - 1);
  Result truncated = facetrace("merge " + (dir / "a") + " --allow-missing --png " + (dir / "y.png"));
  EXPECT_EQ(truncated.code, 2);
  EXPECT_NE(truncated.out.find("part-f-0.ftp: truncated: unit 1"), std::string::npos) << truncated.out;

  Result self = facetrace("merge " + (dir / "b/part-f-1.ftp") + " --png " + (dir / "b/part-f-1.ftp"));
  EXPECT_EQ(self.code, 2) << self.out;  // an output equal to an input
  EXPECT_TRUE(read_partial_header(dir / "b/part-f-1.ftp").ok());
}

TEST(FarmCli, worker_exit_codes_for_bad_usage_and_bad_jobs) {
  TempDir dir;
  const std::string job = write_job(dir, "e", 8, 6, 16, 4);
  EXPECT_EQ(facetrace("worker --job " + job + " --out " + (dir / "p")).code, 2);  // no range
  EXPECT_EQ(facetrace("worker --job " + job + " --units 0:2 --index 1 --units-per-index 2").code, 2);
  EXPECT_EQ(facetrace("worker --job " + job + " --units 3:1").code, 2);
  EXPECT_EQ(facetrace("worker --job " + job + " --units 4:6 --out " + (dir / "p")).code, 2);  // past the 4 units
  EXPECT_EQ(facetrace("worker --job " + job + " --index-env FT_TEST_UNSET_VARIABLE --units-per-index 2").code, 2);
  EXPECT_EQ(facetrace("worker --job " + job + " --units 0:1 --bogus-flag").code, 2);
  // past the job's units through an array index: nothing to do (an array may be larger than the job)
  EXPECT_EQ(facetrace("worker -q --job " + job + " --index 9 --units-per-index 2 --out " + (dir / "p")).code, 0);
  std::ofstream(dir / "bad.json") << R"({"scene":"builtin:diamond","spp":8})";
  Result bad = facetrace("worker --job " + (dir / "bad.json") + " --units 0:1 --out " + (dir / "p"));
  EXPECT_EQ(bad.code, 42) << bad.out;
  EXPECT_NE(bad.out.find("unit_samples"), std::string::npos) << bad.out;
  std::ofstream(dir / "tier.json") << R"({"scene":{"tools":true},"spp":8,"unit_samples":4})";
  EXPECT_EQ(facetrace("worker --job " + (dir / "tier.json") + " --units 0:1 --out " + (dir / "p")).code, 42);
  // a job file that cannot be read is bad input, as render's scene is (docs/cli.md "Exit codes")
  Result missing = facetrace("worker --job " + (dir / "absent.json") + " --units 0:1 --out " + (dir / "p"));
  EXPECT_EQ(missing.code, 2) << missing.out;
  EXPECT_NE(missing.out.find("absent.json"), std::string::npos) << missing.out;
}

/// Starts `facetrace <argv>` as a child process; returns its pid.
pid_t spawn(const std::vector<std::string>& args) {
  std::vector<std::string> all = {FT_FACETRACE_EXE};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  EXPECT_EQ(posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

/// Units listed in the partial now (0 while it does not exist yet).
std::size_t units_in(const std::string& path) {
  auto h = read_partial_header(path);
  return h.ok() ? h->units.size() : 0;
}

/// Kills a worker with `sig` after its second unit, reruns it, merges: the same bits as an uninterrupted worker.
void kill_rerun_merge(int sig) {
  TempDir dir;
  const std::string job = write_job(dir, "k", 64, 48, 8 * 64, 64);  // 8 units of 64 samples
  const std::string parts = dir / "parts";
  const std::vector<std::string> args = {"worker", "-q", "--device", "cpu", "--threads", "1", "--job", job,
                                         "--units", "0:8", "--out", parts};
  const pid_t pid = spawn(args);
  ASSERT_GT(pid, 0);
  const std::string part = parts + "/part-k-0.ftp";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (units_in(part) < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_GE(units_in(part), 2u);
  ::kill(pid, sig);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  const std::size_t kept = units_in(part);
  if (sig == SIGTERM) {
    ASSERT_TRUE(WIFEXITED(st)) << "the worker did not handle SIGTERM";
    EXPECT_EQ(WEXITSTATUS(st), 143);
  } else {
    ASSERT_TRUE(WIFSIGNALED(st));
    EXPECT_EQ(WTERMSIG(st), sig);
  }
  EXPECT_GE(kept, 2u);
  EXPECT_LT(kept, 8u) << "the worker finished before the signal: make the units slower";
  auto h = read_partial_header(part);  // whatever the moment, the file is valid and its units intact
  ASSERT_TRUE(h.ok()) << h.status().what();
  for (std::size_t i = 0; i < h->units.size(); ++i) EXPECT_TRUE(read_partial_unit(part, *h, i).ok());

  Result rerun = facetrace("worker -q --device cpu --job " + job + " --units 0:8 --out " + parts);
  ASSERT_EQ(rerun.code, 0) << rerun.out;
  EXPECT_EQ(units_in(part), 8u);
  ASSERT_EQ(facetrace("worker -q --device cpu --job " + job + " --units 0:8 --out " + (dir / "clean")).code, 0);
  ASSERT_EQ(facetrace("merge -q " + parts + " --sums " + (dir / "resumed.ftsum")).code, 0);
  ASSERT_EQ(facetrace("merge -q " + (dir / "clean") + " --sums " + (dir / "clean.ftsum")).code, 0);
  const std::string a = slurp(dir / "resumed.ftsum"), b = slurp(dir / "clean.ftsum");
  EXPECT_EQ(a.size(), 64 + 64u * 48 * 3 * 8);
  EXPECT_TRUE(a == b) << "the resumed frame differs from the uninterrupted one";
}

TEST(FarmCli, sigterm_mid_run_keeps_the_finished_units_and_a_rerun_completes_identically) {
  kill_rerun_merge(SIGTERM);
}

TEST(FarmCli, sigkill_mid_run_leaves_a_valid_partial_and_a_rerun_completes_identically) {
  kill_rerun_merge(SIGKILL);
}

}  // namespace
}  // namespace facetrace::farm
