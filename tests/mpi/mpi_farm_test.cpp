/// @file
/// facetrace-mpi end to end (farm.md §2, §3; ctest label mpi): `mpirun -np 1, 2, 4` canonical merges equal,
/// bit for bit, a single-process render of the same units summed in ascending order into f64 (computed here
/// with the CPU tracer alone, no farm code); reduce agrees to 1e-12; checkpoints resume; the exit codes 42
/// and 43.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "facetrace/runtime/executor.h"
#include "mpi_test_support.h"

namespace {

using namespace mpi_test;
namespace fs = std::filesystem;

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
  const pid_t pid = spawn(d, {mpi_exe(), "render", "job.json", "--backend=cpu", "--threads", "1",
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

TEST(MpiFarm, partials_interoperate_with_facetrace_worker_and_merge) {
  const std::vector<double> want = reference_sums();
  const std::string d = fresh_dir("interop");
  // `facetrace worker` renders units 1 and 3 into parts/; facetrace-mpi resumes from them and renders the rest.
  ProcessRun r = wait_for(d, spawn(d, {FT_FACETRACE_EXE, "worker", "--job", "job.json", "--units", "1:2",
                                       "--out", "parts", "--device", "cpu", "--quiet"}));
  ASSERT_EQ(r.rc, 0) << describe(r);
  r = wait_for(d, spawn(d, {FT_FACETRACE_EXE, "worker", "--job", "job.json", "--units", "3:4", "--out",
                            "parts", "--device", "cpu", "--quiet"}));
  ASSERT_EQ(r.rc, 0) << describe(r);
  r = mpi(d, 2, {"--backend=cpu", "--checkpoint", "parts", "--sums", "mpi.ftsum"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  EXPECT_NE(r.err.find("2 checkpointed, 3 to render"), std::string::npos) << describe(r);
  expect_bit_identical(want, read_sums(d + "/mpi.ftsum"), "worker partials + facetrace-mpi");
  // Every partial in parts/ (the workers' and the ranks') merged by `facetrace merge`: the same bits again.
  r = wait_for(d, spawn(d, {FT_FACETRACE_EXE, "merge", "parts", "--sums", "merge.ftsum", "--quiet"}));
  ASSERT_EQ(r.rc, 0) << describe(r);
  EXPECT_TRUE(slurp(d + "/merge.ftsum") == slurp(d + "/mpi.ftsum"));
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
