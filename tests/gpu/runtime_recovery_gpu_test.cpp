/// @file
/// Device loss on a real GPU (docs/design/runtime.md §7): a genuine illegal-address fault in the isolated child declines
/// to the CPU, and after a short cool-down a new child serves GPU work while this process keeps running; the
/// in-process executor reports lost and keeps declining. Each test runs in its own process (ctest).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <optional>
#include <thread>

#include "facetrace/runtime/backend.h"
#include "facetrace/runtime/cuda_errors.h"
#include "facetrace/runtime/testing/fault.h"
#include "facetrace/runtime/testing/ramp_workload.h"
#include "gpu_skip.h"
#include "log_guard.h"

namespace facetrace::runtime {
namespace {

using namespace std::chrono_literals;

ExecutorOptions small() {
  ExecutorOptions o;
  o.ring_bytes = 16ull << 20;
  o.transfer_bytes = 16ull << 20;
  return o;
}

bool sticky_name(const std::string& s) {
  for (int code : {700, 702, 710, 714, 715, 716, 717, 718, 719, 911, 214, 999})
    if (s.find(std::string(cuda_error_name(code))) != std::string::npos) return true;
  return false;
}

/// A backend whose device took a genuine fault, with the warnings of the loss expected from then on.
struct FaultedBackend {
  std::unique_ptr<GpuBackend> backend;
  std::optional<facetrace::testing::ExpectLogs> logs;
};

/// Starts a backend over `executor` (recovery cool-down `cool_down_s` seconds), runs one ramp request of `n`
/// floats in chunks of `chunk` to Done, then injects an illegal-address fault: reported as a loss that names
/// a sticky CUDA error.
void fault_after_one_request(FaultedBackend& f, std::unique_ptr<Executor> executor, double cool_down_s,
                             std::size_t n, std::uint64_t chunk) {
  RecoveryConfig c;
  c.cool_down = std::chrono::duration<double>(cool_down_s);
  f.backend = GpuBackend::with_executor(std::move(executor), SteadyClock::instance(), c);
  ASSERT_EQ(f.backend->state(), BackendState::kReady) << f.backend->unavailable_reason().value_or("");
  std::vector<float> out(n, 0.0f);
  RampWorkload w(out, 1, 1, chunk);
  ASSERT_EQ(f.backend->accumulate(w), Outcome::kDone);
  EXPECT_EQ(out[n - 1], static_cast<float>(n));
  f.logs.emplace();
  const Status fault = f.backend->executor()->inject_fault(FaultKind::kIllegalAddress);
  EXPECT_EQ(fault.code(), Code::kDeviceLost);
  EXPECT_TRUE(sticky_name(fault.what())) << fault.what();
}

TEST(IsolatedGpu, a_real_fault_declines_then_a_new_child_serves_again) {
  FT_REQUIRE_GPU();
  FaultedBackend f;
  ASSERT_NO_FATAL_FAILURE(fault_after_one_request(f, make_isolated_executor(small()), 0.5, 50000, 8192));
  const auto& backend = f.backend;
  std::vector<float> out2(50000, 0.0f);
  RampWorkload w2(out2, 1, 1, 8192);
  EXPECT_EQ(backend->accumulate(w2), Outcome::kDeclined);  // the CPU takes it
  EXPECT_EQ(out2, std::vector<float>(50000, 0.0f));
  EXPECT_TRUE(backend->is_lost());
  // The first replacement after a loss starts at once (the cool-down spaces attempts, docs/design/tracer.md §10.5).
  RampWorkload w4(out2, 1, 1, 8192);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(backend->accumulate(w4), Outcome::kDone);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, 5000.0);
  EXPECT_EQ(out2[49999], 50000.0f);
  EXPECT_FALSE(backend->is_lost());
  EXPECT_TRUE(sticky_name(backend->last_lost_reason().value_or(""))) << *backend->last_lost_reason();
  std::printf("[ recovery ] first GPU request after the loss took %.1f ms (includes the child start)\n",
              ms);
  // This process never touched CUDA: still no sticky state here.
  EXPECT_FALSE(process_cuda_poisoned());
}

TEST(InProcessGpu, a_real_fault_leaves_the_process_lost_and_declining) {
  FT_REQUIRE_GPU();
  FaultedBackend f;
  ASSERT_NO_FATAL_FAILURE(fault_after_one_request(f, make_in_process_executor(small()), 0.0, 10000, 4096));
  const auto& backend = f.backend;
  EXPECT_TRUE(process_cuda_poisoned());
  for (int i = 0; i < 3; ++i) {
    std::vector<float> o2(10000, 0.0f);
    RampWorkload w2(o2, 1, 1, 4096);
    EXPECT_EQ(backend->accumulate(w2), Outcome::kDeclined);
    EXPECT_EQ(o2, std::vector<float>(10000, 0.0f));
  }
  EXPECT_FALSE(backend->try_recover());
  EXPECT_EQ(backend->state(), BackendState::kLost);
  const Status again = backend->executor()->restart();
  EXPECT_EQ(again.code(), Code::kDeviceLost);
  EXPECT_NE(again.what().find("poisoned"), std::string::npos) << again.what();
  // The H200 fact behind the design (docs/design/runtime.md §5): CUDA in this process stays dead.
  void* p = nullptr;
  const cudaError_t m = cudaMalloc(&p, 1024);
  EXPECT_NE(m, cudaSuccess);
  EXPECT_EQ(classify_cuda_error(static_cast<int>(m)), ErrorClass::kSticky) << cudaGetErrorName(m);
  std::printf("[ in-process ] cudaMalloc after the fault: %s (%d)\n", cudaGetErrorName(m),
              static_cast<int>(m));
}

}  // namespace
}  // namespace facetrace::runtime
