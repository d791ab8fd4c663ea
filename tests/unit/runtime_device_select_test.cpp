/// @file
/// Device selection and the "not supported" state without a GPU: --gpu-device / FACETRACE_GPU_DEVICE narrowing an
/// inherited CUDA_VISIBLE_DEVICES (by string, in the parent), FACETRACE_GPU_LOCAL_RANK in the child, the
/// kUnsupported state through the simulated executor, the backend and a real facetrace-gpud child, the
/// per-request decline reasons, the architecture list's wording, the device-listing text, and the child dying
/// with its parent (PR_SET_PDEATHSIG) but not with the thread that started it (docs/runtime.md
/// "Device selection").
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "exec/exec_internal.h"
#include "facetrace/runtime/backend.h"
#include "facetrace/runtime/op.h"
#include "facetrace/runtime/testing/ramp_workload.h"
#include "facetrace/runtime/testing/simulated_executor.h"
#include "log_guard.h"

namespace facetrace::runtime {
namespace {

using namespace std::chrono_literals;
using facetrace::testing::ExpectLogs;

/// Sets (or, with nullopt, unsets) an environment variable for the scope; restores the old value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

ExecutorOptions sim_child_options() {
  ExecutorOptions o;
  o.ring_bytes = 8ull << 20;
  o.transfer_bytes = 8ull << 20;
  o.simulate_child = true;
  o.start_deadline = 10s;
  o.control_deadline = 5s;
  return o;
}

// --- select_child_device: the parent's string-only narrowing ----------------------------------------------

TEST(SelectChildDevice, an_index_without_an_inherited_list_becomes_the_list) {
  auto s = select_child_device("1", std::nullopt);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->visible_devices, std::optional<std::string>("1"));
  EXPECT_TRUE(s->match_uuid.empty());
}

TEST(SelectChildDevice, an_index_selects_an_entry_of_the_inherited_list_instead_of_replacing_it) {
  auto s = select_child_device("1", std::string_view("4,6"));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->visible_devices, std::optional<std::string>("6"));
  auto spaced = select_child_device("0", std::string_view(" GPU-aa11 , 6"));
  ASSERT_TRUE(spaced.ok());
  EXPECT_EQ(spaced->visible_devices, std::optional<std::string>("GPU-aa11"));
}

TEST(SelectChildDevice, an_index_past_the_inherited_list_is_not_supported_and_names_the_list) {
  auto s = select_child_device("2", std::string_view("4,6"));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(is_unsupported_device(s.status())) << s.status().to_string();
  EXPECT_NE(s.status().what().find("CUDA_VISIBLE_DEVICES=4,6"), std::string::npos) << s.status().what();
  EXPECT_NE(s.status().what().find("lists 2 devices"), std::string::npos) << s.status().what();
  auto empty = select_child_device("0", std::string_view(""));
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().what().find("lists 0 devices"), std::string::npos) << empty.status().what();
}

TEST(SelectChildDevice, no_selector_leaves_the_inherited_list_alone) {
  auto s = select_child_device("", std::string_view("3,5"));
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->visible_devices.has_value());
  EXPECT_TRUE(s->match_uuid.empty());
}

TEST(SelectChildDevice, a_uuid_matches_an_inherited_uuid_or_its_prefix) {
  auto alone = select_child_device("MIG-5c1e-77", std::nullopt);
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(alone->visible_devices, std::optional<std::string>("MIG-5c1e-77"));
  auto longer = select_child_device("GPU-abc", std::string_view("GPU-123,GPU-abcdef"));
  ASSERT_TRUE(longer.ok());
  EXPECT_EQ(longer->visible_devices, std::optional<std::string>("GPU-abcdef"));
  auto shorter = select_child_device("GPU-abcdef", std::string_view("GPU-abc"));
  ASSERT_TRUE(shorter.ok());
  EXPECT_EQ(shorter->visible_devices, std::optional<std::string>("GPU-abcdef"));
}

TEST(SelectChildDevice, a_uuid_absent_from_a_list_of_uuids_is_not_supported) {
  auto s = select_child_device("GPU-ffff", std::string_view("GPU-abc,GPU-def"));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(is_unsupported_device(s.status()));
  EXPECT_NE(s.status().what().find("GPU-ffff is not among CUDA_VISIBLE_DEVICES=GPU-abc,GPU-def"),
            std::string::npos)
      << s.status().what();
}

TEST(SelectChildDevice, a_uuid_among_inherited_indices_is_left_to_the_child) {
  auto s = select_child_device("GPU-ffff", std::string_view("0,1"));
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->visible_devices.has_value());
  EXPECT_EQ(s->match_uuid, "GPU-ffff");
}

TEST(SelectChildDevice, a_malformed_selector_is_bad_input) {
  for (const char* bad : {"x1", "-1", "1,2", "GPU-", "gpu-abc", "12345678"}) {
    EXPECT_EQ(validate_gpu_selector(bad).code(), Code::kInvalidArgument) << bad;
    EXPECT_EQ(select_child_device(bad, std::nullopt).status().code(), Code::kInvalidArgument) << bad;
  }
  EXPECT_NE(validate_gpu_selector("x1").what().find("'x1'"), std::string::npos);
  for (const char* good : {"", "0", "7", "GPU-8d4c", "MIG-1f2e"})
    EXPECT_TRUE(validate_gpu_selector(good).ok());
}

TEST(ExecutorOptions, read_the_gpu_device_and_the_local_rank_from_the_environment) {
  ScopedEnv d("FACETRACE_GPU_DEVICE", "GPU-12ab");
  ScopedEnv r("FACETRACE_GPU_LOCAL_RANK", "3");
  const ExecutorOptions o = ExecutorOptions::from_env();
  EXPECT_EQ(o.gpu_device, "GPU-12ab");
  EXPECT_EQ(o.local_rank, 3);
}

// --- the architecture list, the listing text ---------------------------------------------------------------

TEST(BuiltArchitectures, name_sass_as_sm_and_ptx_as_compute) {
  EXPECT_EQ(format_cuda_architectures("80-real;86-real;89-real;90-real;100-real;120-real;120-virtual"),
            "sm_80, sm_86, sm_89, sm_90, sm_100, sm_120, compute_120");
  EXPECT_EQ(format_cuda_architectures("90-real,90-virtual"), "sm_90, compute_90");
  EXPECT_EQ(format_cuda_architectures("86"), "sm_86, compute_86");
  EXPECT_EQ(format_cuda_architectures(""), "none");
  EXPECT_FALSE(built_cuda_architectures().empty());
}

TEST(DeviceListing, round_trips_through_the_childs_text) {
  DeviceListing a;
  a.index = 1;
  a.uuid = "GPU-8d4c0f5e-1111-2222-3333-444455556666";
  a.pci_bus_id = "00000000:4E:00.0";
  a.name = "NVIDIA A100-SXM4-80GB";
  a.cc_major = 8;
  a.cc_minor = 0;
  a.total_memory = 85899345920ull;
  a.status = "not supported: no kernel image for sm_80 (built for sm_90, compute_90)";
  const std::string text = encode_device_listing(std::vector<DeviceListing>{a, a});
  auto back = decode_device_listing(text);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[1].uuid, a.uuid);
  EXPECT_EQ((*back)[1].pci_bus_id, a.pci_bus_id);
  EXPECT_EQ((*back)[1].name, a.name);
  EXPECT_EQ((*back)[1].cc_major, 8);
  EXPECT_EQ((*back)[1].total_memory, a.total_memory);
  EXPECT_EQ((*back)[1].status, a.status);

  auto err = decode_device_listing(encode_device_listing(Status(Code::kNotSupported, "no GPU: none here")));
  ASSERT_FALSE(err.ok());
  EXPECT_EQ(err.status().code(), Code::kNotSupported);
  EXPECT_EQ(err.status().what(), "no GPU: none here");
  EXPECT_EQ(decode_device_listing("1\tGPU-x\n").status().code(), Code::kInternal);
  auto none = decode_device_listing("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

// --- the not-supported state ------------------------------------------------------------------------------

TEST(UnsupportedGpu, is_its_own_executor_state_and_is_never_retried) {
  EXPECT_EQ(executor_state_name(ExecutorState::kUnsupported), "not supported");
  auto ex = make_simulated_executor();
  ex->set_unsupported("no kernel image for sm_86 (built for sm_90, compute_90)");
  const Status st = ex->start();
  EXPECT_EQ(st.code(), Code::kNotSupported);
  EXPECT_TRUE(is_unsupported_device(st));
  EXPECT_EQ(ex->state(), ExecutorState::kUnsupported);
  EXPECT_EQ(ex->state_reason(), "not supported: no kernel image for sm_86 (built for sm_90, compute_90)");
  EXPECT_EQ(ex->restart().code(), Code::kNotSupported);
  EXPECT_EQ(ex->ping().code(), Code::kNotSupported);
  EXPECT_EQ(ex->restarts(), 0);
  EXPECT_FALSE(is_unsupported_device(Status(Code::kNotSupported, "no GPU: none")));
}

TEST(UnsupportedGpu, the_backend_warns_once_and_declines_every_request_saying_why) {
  auto ex = make_simulated_executor();
  ex->set_unsupported(
      "driver too old (CUDA runtime 13.0 needs driver ≥ 580; the installed driver supports CUDA 12.4)");
  std::unique_ptr<GpuBackend> b;
  {
    ExpectLogs logs;
    b = GpuBackend::with_executor(std::move(ex));
    ASSERT_EQ(logs.messages().size(), 1u);
    EXPECT_TRUE(logs.contains("GPU not supported: driver too old (CUDA runtime 13.0 needs driver ≥ 580"));
  }
  EXPECT_EQ(b->state(), BackendState::kUnsupported);
  ASSERT_TRUE(b->unavailable_reason().has_value());
  EXPECT_TRUE(b->unavailable_reason()->starts_with("not supported: driver too old"));
  std::vector<float> out(10, 0.0f);
  RampWorkload w(out, 1, 1, 4);
  Status why;
  EXPECT_EQ(b->accumulate(w, nullptr, &why), Outcome::kDeclined);  // no further warning
  EXPECT_EQ(why.code(), Code::kNotSupported);
  EXPECT_TRUE(why.what().starts_with("not supported: driver too old")) << why.what();
  EXPECT_FALSE(b->try_recover());
}

TEST(UnsupportedGpu, a_child_that_reports_it_makes_the_isolated_executor_not_supported) {
  ScopedEnv why("FACETRACE_SIMULATED_GPU_UNSUPPORTED",
                "no kernel image for sm_75 (built for sm_80, compute_80)");
  auto ex = make_isolated_executor(sim_child_options());
  const Status st = ex->start();
  EXPECT_TRUE(is_unsupported_device(st)) << st.to_string();
  EXPECT_EQ(ex->state(), ExecutorState::kUnsupported);
  EXPECT_EQ(ex->state_reason(), "not supported: no kernel image for sm_75 (built for sm_80, compute_80)");
}

// --- decline reasons --------------------------------------------------------------------------------------

/// The ramp workload, refused by can_run.
class RefusedWorkload final : public Workload {
 public:
  Status can_run(const DeviceInfo&) override { return {Code::kDeclined, "needs Tier 3"}; }
  std::size_t scratch_bytes() const override { return 4; }
  void seed_scratch(std::span<std::byte>) override {}
  Expected<bool> run_chunk(Executor&, std::span<std::byte>) override { return false; }
  void commit(std::span<const std::byte>) override {}
};

TEST(DeclineReasons, name_a_refused_request_and_a_device_loss_apart) {
  ManualClock clock;
  auto ex = make_simulated_executor();
  SimulatedExecutor* sim = ex.get();
  auto b = GpuBackend::with_executor(std::move(ex), clock);
  RefusedWorkload refused;
  Status why;
  EXPECT_EQ(b->accumulate(refused, nullptr, &why), Outcome::kDeclined);
  EXPECT_EQ(why.code(), Code::kDeclined);
  EXPECT_EQ(why.what(), "needs Tier 3");

  std::vector<float> out(64, 0.0f);
  RampWorkload w(out, 1, 1, 8);
  sim->arm_loss_on_invoke(2);
  ExpectLogs logs;  // the loss is logged at warn
  Status lost;
  EXPECT_EQ(b->accumulate(w, nullptr, &lost), Outcome::kDeclined);
  EXPECT_EQ(lost.code(), Code::kDeviceLost);
  EXPECT_NE(lost.what().find("GPU lost"), std::string::npos) << lost.what();
  // Still lost (the replacement does not start): the next request is declined for the same reason, before
  // any chunk.
  sim->set_restart_fails(true);
  RampWorkload w2(out, 1, 1, 8);
  Status again;
  EXPECT_EQ(b->accumulate(w2, nullptr, &again), Outcome::kDeclined);
  EXPECT_EQ(again.code(), Code::kDeviceLost);
  // Done leaves `why` alone.
  sim->set_restart_fails(false);
  clock.advance(1h);
  RampWorkload w3(out, 1, 1, 8);
  Status untouched(Code::kInternal, "sentinel");
  EXPECT_EQ(b->accumulate(w3, nullptr, &untouched), Outcome::kDone);
  EXPECT_EQ(untouched.what(), "sentinel");
}

// --- the isolated child on its selected device ------------------------------------------------------------

TEST(IsolatedSelection, the_child_sees_one_entry_of_the_inherited_list) {
  ScopedEnv cvd("CUDA_VISIBLE_DEVICES", "3,5,7");
  ExecutorOptions o = sim_child_options();
  o.gpu_device = "1";
  auto ex = make_isolated_executor(o);
  ASSERT_TRUE(ex->start().ok()) << ex->state_reason();
  auto info = ex->info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->visible_devices, "5");
  EXPECT_EQ(info->ordinal, 0);
}

TEST(IsolatedSelection, the_local_rank_picks_rank_mod_count_in_the_child_and_keeps_the_list) {
  ScopedEnv cvd("CUDA_VISIBLE_DEVICES", "3,5,7");
  ScopedEnv fd("FACETRACE_GPU_DEVICE", "2");  // inherited by the child: it must not apply it a second time
  ExecutorOptions o = sim_child_options();
  o.local_rank = 4;
  auto ex = make_isolated_executor(o);
  ASSERT_TRUE(ex->start().ok()) << ex->state_reason();
  auto info = ex->info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->visible_devices, "3,5,7");
  EXPECT_EQ(info->ordinal, 1);  // 4 mod 3
}

TEST(IsolatedSelection, an_explicit_device_wins_over_the_local_rank) {
  ScopedEnv cvd("CUDA_VISIBLE_DEVICES", "3,5,7");
  ExecutorOptions o = sim_child_options();
  o.gpu_device = "2";
  o.local_rank = 1;
  auto ex = make_isolated_executor(o);
  ASSERT_TRUE(ex->start().ok()) << ex->state_reason();
  auto info = ex->info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->visible_devices, "7");
  EXPECT_EQ(info->ordinal, 0);
}

TEST(IsolatedSelection, a_uuid_among_inherited_indices_is_matched_by_the_child) {
  ScopedEnv cvd("CUDA_VISIBLE_DEVICES", "0,1");
  ExecutorOptions o = sim_child_options();
  o.gpu_device = "GPU-8d4c";
  auto ex = make_isolated_executor(o);
  ASSERT_TRUE(ex->start().ok()) << ex->state_reason();
  auto info = ex->info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->visible_devices, "0,1");
  EXPECT_EQ(info->uuid, "GPU-8d4c");
}

TEST(IsolatedSelection, an_index_past_the_inherited_list_makes_the_backend_not_supported) {
  ScopedEnv cvd("CUDA_VISIBLE_DEVICES", "3,5");
  ExecutorOptions o = sim_child_options();
  o.gpu_device = "2";
  ExpectLogs logs;
  auto b = GpuBackend::with_executor(make_isolated_executor(o));
  EXPECT_EQ(b->state(), BackendState::kUnsupported);
  EXPECT_NE(b->unavailable_reason()->find("GPU device 2 requested, but CUDA_VISIBLE_DEVICES=3,5 lists 2"),
            std::string::npos)
      << *b->unavailable_reason();
  EXPECT_TRUE(logs.contains("GPU not supported: GPU device 2"));
}

// --- the child's lifetime ---------------------------------------------------------------------------------

/// The pids of every child of this process (any thread's).
std::vector<pid_t> children_of_self() {
  std::vector<pid_t> out;
  for (const auto& t : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(t.path() / "children");
    for (pid_t p; in >> p;) out.push_back(p);
  }
  return out;
}

TEST(GpuChild, outlives_the_thread_that_started_it) {
  auto ex = make_isolated_executor(sim_child_options());
  std::thread starter([&] { ASSERT_TRUE(ex->start().ok()) << ex->state_reason(); });
  starter.join();
  std::this_thread::sleep_for(200ms);  // a PDEATHSIG tied to the starter thread would have fired by now
  EXPECT_TRUE(ex->ping().ok());
  EXPECT_EQ(ex->state(), ExecutorState::kReady);
}

TEST(GpuChild, dies_when_its_parent_is_killed) {
  // This test process adopts orphans, so it can reap the grandchild itself.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t parent = ::fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {  // the "parent": start a child, keep it busy, report its pid, die without any clean-up
    ::close(fds[0]);
    auto ex = make_isolated_executor(sim_child_options());
    pid_t gpud = -1;
    if (ex->start().ok()) {
      const auto kids = children_of_self();
      if (kids.size() == 1) gpud = kids[0];
    }
    // The child spins for 10 s and does not read its socket meanwhile: only PR_SET_PDEATHSIG can end it early.
    std::thread([&] {
      std::uint32_t ms = 10000;
      OpCall spin;
      spin.op = ops::kSpin;
      spin.args = std::as_bytes(std::span(&ms, 1));
      static_cast<void>(ex->invoke(spin));
    }).detach();
    std::this_thread::sleep_for(300ms);
    if (::write(fds[1], &gpud, sizeof gpud) != static_cast<ssize_t>(sizeof gpud)) std::_Exit(2);
    ::kill(::getpid(), SIGKILL);
    std::_Exit(3);
  }
  ::close(fds[1]);
  pid_t gpud = -1;
  ASSERT_EQ(::read(fds[0], &gpud, sizeof gpud), static_cast<ssize_t>(sizeof gpud));
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(parent, &status, 0), parent);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  ASSERT_GT(gpud, 0) << "the forked parent did not start facetrace-gpud";
  // Orphaned, the child was re-parented to us; it must end by SIGKILL (PR_SET_PDEATHSIG), long before its spin.
  const auto deadline = std::chrono::steady_clock::now() + 4s;
  pid_t r = 0;
  while ((r = ::waitpid(gpud, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  if (r == 0) {
    ::kill(gpud, SIGKILL);  // our adopted child only
    ::waitpid(gpud, &status, 0);
    FAIL() << "facetrace-gpud " << gpud << " outlived its parent";
  }
  ASSERT_EQ(r, gpud);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "wait status " << status;
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 0), 0);
}

}  // namespace
}  // namespace facetrace::runtime
