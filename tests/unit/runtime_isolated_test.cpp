/// @file
/// IsolatedExecutor against a real facetrace-gpud child serving a simulated device (no GPU needed): protocol
/// end to end, shared arena, residents, loss by report / crash (EOF) / watchdog, respawn, and the backend's
/// recovery through a new child while this process keeps running.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "facetrace/runtime/backend.h"
#include "facetrace/runtime/testing/fault.h"
#include "facetrace/runtime/testing/ramp_workload.h"
#include "log_guard.h"

namespace facetrace::runtime {
namespace {

using namespace std::chrono_literals;
using facetrace::testing::ExpectLogs;

ExecutorOptions sim_child_options() {
  ExecutorOptions o;
  o.ring_bytes = 8ull << 20;
  o.transfer_bytes = 8ull << 20;
  o.simulate_child = true;
  o.start_deadline = 10s;
  o.control_deadline = 5s;
  return o;
}

double resident_sum(Executor& ex, const std::string& name) {
  OpCall call;
  call.op = ops::kResidentSum;
  call.args = std::as_bytes(std::span(name.data(), name.size()));
  auto r = ex.invoke(call);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  double s = -1;
  if (r) {
    EXPECT_TRUE(r->get(s));
  }
  return s;
}

TEST(IsolatedExecutor, finds_facetrace_gpud) { EXPECT_FALSE(find_gpud(ExecutorOptions{}).empty()); }

// An executor that lives until exit (renderer.cpp's process-wide backend) receives its child's shutdown
// acknowledgement while static objects are destroyed, after the main thread's thread_local objects: the receive
// buffer must not be one of those (a use after free that glibc reported as "free(): corrupted unsorted chunks").
TEST(IsolatedExecutorDeathTest, an_executor_destroyed_at_exit_shuts_its_child_down_cleanly) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        static std::unique_ptr<Executor> ex = make_isolated_executor(sim_child_options());
        if (!ex->start().ok() || !ex->ping().ok()) std::_Exit(3);
        // Churn the heap the way a test run does, so that a write into a freed block is noticed by malloc.
        for (int i = 0; i < 64; ++i) static_cast<void>(std::make_unique<std::vector<char>>(70000 + i));
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(IsolatedExecutor, serves_ops_through_the_child_and_the_shared_arena) {
  auto ex = make_isolated_executor(sim_child_options());
  ASSERT_TRUE(ex->start().ok()) << ex->state_reason();
  EXPECT_EQ(ex->state(), ExecutorState::kReady);
  EXPECT_TRUE(ex->ping().ok());
  auto info = ex->info();
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->simulated);

  // Input through the arena.
  std::vector<float> v(1000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  auto block = ex->arena().allocate(v.size() * 4);
  ASSERT_TRUE(block.ok());
  std::memcpy(block->bytes().data(), v.data(), v.size() * 4);
  OpCall call;
  call.op = ops::kSumFloats;
  call.in = ArenaRange{block->range().offset, v.size() * 4};
  auto r = ex->invoke(call);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  double sum = 0;
  ASSERT_TRUE(r->get(sum));
  EXPECT_EQ(sum, 999.0 * 1000.0 / 2.0);

  // Results through a ring slot in the arena, read in place.
  FillRampArgs f{10, 100, 1.0f, 2.0f, 0, 0};
  OpCall fill;
  fill.op = ops::kFillRamp;
  fill.args = std::as_bytes(std::span(&f, 1));
  auto fr = ex->invoke(fill);
  ASSERT_TRUE(fr.ok()) << fr.status().to_string();
  ASSERT_EQ(fr->tickets.size(), 1u);
  std::vector<float> got;
  ASSERT_TRUE(ex->collect(fr->tickets[0], 1s, [&](std::span<const std::byte> b) {
                  got.resize(b.size() / 4);
                  std::memcpy(got.data(), b.data(), b.size());
                }).ok());
  ASSERT_EQ(got.size(), 100u);
  EXPECT_EQ(got[0], 21.0f);
  EXPECT_EQ(got[99], 1.0f + 2.0f * 109.0f);
  EXPECT_FALSE(ex->collect(fr->tickets[0], 1s, [](auto) {}).ok());  // already collected

  // Unknown ops fail this call only.
  OpCall unknown;
  unknown.op = 0x7777;
  EXPECT_EQ(ex->invoke(unknown).status().code(), Code::kNotSupported);
  EXPECT_EQ(ex->state(), ExecutorState::kReady);
}

TEST(IsolatedExecutor, a_reported_loss_kills_the_child_and_restart_reuploads_residents) {
  auto ex = make_isolated_executor(sim_child_options());
  ASSERT_TRUE(ex->start().ok()) << ex->state_reason();
  std::vector<float> w = {1, 2, 3};
  ASSERT_TRUE(ex->put_resident("w", std::as_bytes(std::span(w))).ok());
  EXPECT_EQ(resident_sum(*ex, "w"), 6.0);
  {
    ExpectLogs logs;
    EXPECT_EQ(ex->inject_fault(FaultKind::kSimulatedLoss).code(), Code::kDeviceLost);
  }
  EXPECT_EQ(ex->state(), ExecutorState::kLost);
  EXPECT_NE(ex->state_reason().find("simulated device loss"), std::string::npos) << ex->state_reason();
  EXPECT_NE(ex->state_reason().find("exited with code 3"), std::string::npos) << ex->state_reason();
  EXPECT_EQ(ex->ping().code(), Code::kDeviceLost);
  ASSERT_TRUE(ex->restart().ok());
  EXPECT_EQ(ex->state(), ExecutorState::kReady);
  EXPECT_EQ(resident_sum(*ex, "w"), 6.0);
}

TEST(IsolatedExecutor, detects_a_crashed_child_by_eof) {
  auto ex = make_isolated_executor(sim_child_options());
  ASSERT_TRUE(ex->start().ok());
  OpCall crash;
  crash.op = ops::kSimCrash;
  ExpectLogs logs;
  EXPECT_EQ(ex->invoke(crash).status().code(), Code::kDeviceLost);
  EXPECT_NE(ex->state_reason().find("EOF"), std::string::npos) << ex->state_reason();
  EXPECT_NE(ex->state_reason().find("exited with code 9"), std::string::npos) << ex->state_reason();
  EXPECT_TRUE(ex->restart().ok());
  EXPECT_TRUE(ex->ping().ok());
}

TEST(IsolatedExecutor, the_watchdog_kills_a_hung_child) {
  auto ex = make_isolated_executor(sim_child_options());
  ASSERT_TRUE(ex->start().ok());
  std::uint32_t ms = 5000;
  OpCall spin;
  spin.op = ops::kSpin;
  spin.args = std::as_bytes(std::span(&ms, 1));
  spin.deadline = 200ms;
  ExpectLogs logs;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(ex->invoke(spin).status().code(), Code::kDeviceLost);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_NE(ex->state_reason().find("deadline"), std::string::npos) << ex->state_reason();
  EXPECT_TRUE(ex->restart().ok());
}

/// The pids of this process's children (every thread's), from /proc.
std::vector<pid_t> child_pids() {
  std::vector<pid_t> pids;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(task.path() / "children");
    for (pid_t p; in >> p;) pids.push_back(p);
  }
  return pids;
}

TEST(IsolatedExecutor, a_stopped_child_is_killed_at_once_not_after_its_deadline) {
  const std::vector<pid_t> before = child_pids();
  auto ex = make_isolated_executor(sim_child_options());
  ASSERT_TRUE(ex->start().ok()) << ex->state_reason();
  pid_t child = -1;
  for (pid_t p : child_pids())
    if (std::find(before.begin(), before.end(), p) == before.end()) child = p;
  ASSERT_GT(child, 0) << "the GPU child is not among this process's children";
  ASSERT_EQ(::kill(child, SIGSTOP), 0);  // our own child's pid only
  std::uint32_t ms = 1;
  OpCall spin;
  spin.op = ops::kSpin;
  spin.args = std::as_bytes(std::span(&ms, 1));
  spin.deadline = 30s;
  ExpectLogs logs;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(ex->invoke(spin).status().code(), Code::kDeviceLost);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  EXPECT_NE(ex->state_reason().find("stopped"), std::string::npos) << ex->state_reason();
  EXPECT_NE(::kill(child, 0), 0);  // killed and reaped
  EXPECT_TRUE(ex->restart().ok());
  EXPECT_TRUE(ex->ping().ok());
}

TEST(IsolatedExecutor, backend_recovers_through_a_new_child) {
  RecoveryConfig c;
  c.cool_down = std::chrono::duration<double>(0.0);
  auto backend =
      GpuBackend::with_executor(make_isolated_executor(sim_child_options()), SteadyClock::instance(), c);
  ASSERT_EQ(backend->state(), BackendState::kReady);
  std::vector<float> out(256, 0.0f);
  RampWorkload w(out, 1, 1, 32);
  EXPECT_EQ(backend->accumulate(w), Outcome::kDone);
  EXPECT_EQ(out[255], 256.0f);
  ExpectLogs logs;
  ASSERT_EQ(backend->executor()->inject_fault(FaultKind::kSimulatedLoss).code(), Code::kDeviceLost);
  std::vector<float> out2(256, 0.0f);
  RampWorkload w2(out2, 1, 1, 32);
  EXPECT_EQ(backend->accumulate(w2), Outcome::kDeclined);
  EXPECT_EQ(out2, std::vector<float>(256, 0.0f));
  RampWorkload w3(out2, 1, 1, 32);
  EXPECT_EQ(backend->accumulate(w3), Outcome::kDone);
  EXPECT_EQ(out2[255], 256.0f);
  EXPECT_FALSE(backend->is_lost());
}

TEST(IsolatedExecutor, a_missing_gpud_means_no_gpu) {
  ExecutorOptions o = sim_child_options();
  o.gpud_path = "/nonexistent/facetrace-gpud";
  auto backend = GpuBackend::with_executor(make_isolated_executor(o));
  EXPECT_EQ(backend->state(), BackendState::kNone);
  EXPECT_NE(backend->unavailable_reason()->find("facetrace-gpud not found"), std::string::npos);
}

}  // namespace
}  // namespace facetrace::runtime
