/// @file
/// The face networks on the real device runtime (docs/design/faces.md §4, §8; docs/design/runtime.md §6, §7): YuNet
/// through make_gpu_accelerator (the process-wide backend, an isolated facetrace-gpud child) and
/// Net::attach_checked agrees with the CPU within the fp32 bar, single and batched; and a genuine illegal-address
/// fault in the child in the middle of a batch leaves the batch to the CPU with the right results, after which the
/// runtime replaces the child and the net re-attaches after a fresh check. Each test runs in its own process.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "facetrace/faces/accelerator.h"
#include "facetrace/faces/detector.h"
#include "facetrace/faces/net.h"
#include "facetrace/runtime/backend.h"
#include "facetrace/runtime/executor.h"
#include "facetrace/runtime/cuda_errors.h"
#include "gpu/gpu_accelerator.h"
#include "gpu_skip.h"
#include "log_guard.h"

namespace facetrace::faces {
namespace {

using namespace std::chrono_literals;

Net yunet() {
  auto n = Net::create(builtin_yunet_onnx());
  EXPECT_TRUE(n.ok()) << n.status().to_string();
  return std::move(*n);
}

/// Deterministic BGR-like inputs in 0..255 (a smooth gradient plus a per-image xorshift texture).
std::vector<float> photo_like(std::size_t n, std::uint32_t seed) {
  std::vector<float> v(n);
  std::uint32_t x = seed * 2654435761u + 1u;
  for (std::size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    v[i] = std::fmod(static_cast<float>(i % 640) * 0.3f + static_cast<float>(x >> 24) * 0.5f, 255.0f);
  }
  return v;
}

/// Every output within the fp32 bar of docs/design/faces.md §4 of the CPU interpreter's.
void expect_within_bar(const std::vector<std::vector<NamedTensor>>& got,
                       const std::vector<std::vector<std::vector<float>>>& cpu, double* worst = nullptr) {
  ASSERT_EQ(got.size(), cpu.size());
  for (std::size_t b = 0; b < got.size(); ++b) {
    ASSERT_EQ(got[b].size(), cpu[b].size());
    for (std::size_t o = 0; o < cpu[b].size(); ++o) {
      ASSERT_EQ(got[b][o].data.size(), cpu[b][o].size());
      double max_cpu = 0.0, max_diff = 0.0;
      for (std::size_t i = 0; i < cpu[b][o].size(); ++i) {
        max_cpu = std::max(max_cpu, std::abs(static_cast<double>(cpu[b][o][i])));
        max_diff = std::max(max_diff, std::abs(static_cast<double>(got[b][o].data[i]) - cpu[b][o][i]));
      }
      EXPECT_LE(max_diff, 1e-4 + 1e-3 * max_cpu) << "image " << b << " output " << got[b][o].name;
      if (worst) *worst = std::max(*worst, max_diff / (1e-4 + 1e-3 * max_cpu));
    }
  }
}

std::vector<std::vector<std::vector<float>>> cpu_of(const Net& net,
                                                    const std::vector<std::vector<float>>& ims) {
  auto p = net.program(net.input_shape());
  std::vector<std::span<const float>> in(ims.begin(), ims.end());
  auto r = run_program_cpu(*p, in);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return std::move(*r);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

TEST(FacesAccelGpu, yunet_attaches_through_make_gpu_accelerator_and_agrees_with_the_cpu_single_and_batched) {
  FT_REQUIRE_GPU();
  auto acc = make_gpu_accelerator();
  ASSERT_TRUE(acc.ok()) << acc.status().to_string();
  Net net = yunet();
  const auto t0 = std::chrono::steady_clock::now();
  Status st = net.attach_checked(*acc);
  ASSERT_TRUE(st.ok()) << st.to_string();
  std::printf("[ attach ] %s: check (CPU + GPU plan + run) %.1f ms, resident %llu bytes\n",
              net.accelerator()->c_str(), ms_since(t0),
              static_cast<unsigned long long>((*acc)->resident_bytes()));
  // In the child by default; in this process under FACETRACE_GPU_ISOLATION=off (scripts/device_sanitize).
  const bool isolated = runtime::executor_mode_from_env() == runtime::ExecutorMode::kIsolated;
  EXPECT_NE(net.accelerator()->find(isolated ? "isolated" : "in-process"), std::string::npos) << *net.accelerator();
  EXPECT_GT((*acc)->resident_bytes(), 0u);
  const std::size_t n = static_cast<std::size_t>(3 * 640 * 640);
  std::vector<std::vector<float>> ims;
  for (std::uint32_t i = 0; i < 4; ++i) ims.push_back(photo_like(n, 10 + i));
  const auto cpu = cpu_of(net, ims);
  double worst = 0.0;
  for (std::size_t i = 0; i < ims.size(); ++i) {
    auto one = net.run(ims[i]);
    ASSERT_TRUE(one.ok()) << one.status().to_string();
    expect_within_bar({*one}, {cpu[i]}, &worst);
  }
  std::vector<std::span<const float>> in(ims.begin(), ims.end());
  auto batch = net.run_batch(in, net.input_shape());  // first batch of 4: plans B = 4
  ASSERT_TRUE(batch.ok()) << batch.status().to_string();
  expect_within_bar(*batch, cpu, &worst);
  const auto t1 = std::chrono::steady_clock::now();
  auto again = net.run_batch(in, net.input_shape());
  const double batch_ms = ms_since(t1);
  ASSERT_TRUE(again.ok());
  // fp32 is bit-for-bit deterministic from run to run.
  for (std::size_t b = 0; b < again->size(); ++b)
    for (std::size_t o = 0; o < (*again)[b].size(); ++o) EXPECT_EQ((*again)[b][o].data, (*batch)[b][o].data);
  const auto t2 = std::chrono::steady_clock::now();
  ASSERT_TRUE(net.run(ims[0]).ok());
  std::printf(
      "[ yunet ] worst |gpu-cpu| / bar = %.3g; warm batch of 4 %.2f ms, single %.2f ms (end to end)\n", worst,
      batch_ms, ms_since(t2));
  EXPECT_TRUE(net.accelerator().has_value());
}

TEST(FacesAccelGpu, a_real_fault_mid_batch_completes_on_the_cpu_and_the_net_reattaches_after_recovery) {
  FT_REQUIRE_GPU();
  runtime::ExecutorOptions eo = runtime::ExecutorOptions::from_env();
  eo.ring_bytes = 64ull << 20;
  eo.transfer_bytes = 64ull << 20;
  runtime::RecoveryConfig rc;
  rc.cool_down = std::chrono::duration<double>(0.5);
  auto backend = runtime::GpuBackend::with_executor(runtime::make_isolated_executor(eo),
                                                    runtime::SteadyClock::instance(), rc);
  ASSERT_EQ(backend->state(), runtime::BackendState::kReady) << backend->unavailable_reason().value_or("");
  auto acc = gpu::make_gpu_accelerator_on(*backend, GpuAcceleratorOptions::from_env());
  ASSERT_TRUE(acc.ok()) << acc.status().to_string();
  Net net = yunet();
  ASSERT_TRUE(net.attach_checked(*acc).ok());
  const std::uint64_t gen0 = (*acc)->generation();
  const std::size_t n = static_cast<std::size_t>(3 * 640 * 640);
  std::vector<std::vector<float>> ims;
  for (std::uint32_t i = 0; i < 4; ++i) ims.push_back(photo_like(n, 50 + i));
  const auto cpu = cpu_of(net, ims);
  std::vector<std::span<const float>> in(ims.begin(), ims.end());
  auto r0 = net.run_batch(in, net.input_shape());  // the first child plans B = 4 (its choices are kept)
  ASSERT_TRUE(r0.ok()) << r0.status().to_string();

  facetrace::testing::ExpectLogs logs;  // the loss and the recovery warn
  gpu::arm_fault(**acc, runtime::FaultKind::kIllegalAddress);
  auto r = net.run_batch(in, net.input_shape());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), cpu.size());
  for (std::size_t b = 0; b < cpu.size(); ++b)
    for (std::size_t o = 0; o < cpu[b].size(); ++o)
      EXPECT_EQ((*r)[b][o].data, cpu[b][o]);  // the CPU's own results
  EXPECT_TRUE(backend->is_lost());
  const std::string why = backend->last_lost_reason().value_or("");
  bool sticky = false;
  for (int code : {700, 702, 710, 714, 715, 716, 717, 718, 719, 911, 214, 999})
    sticky = sticky || why.find(std::string(runtime::cuda_error_name(code))) != std::string::npos;
  EXPECT_TRUE(sticky) << why;
  EXPECT_TRUE(net.accelerator().has_value());  // a loss the backend declined: still attached
  EXPECT_FALSE(runtime::process_cuda_poisoned());

  std::this_thread::sleep_for(600ms);  // past the cool-down
  const auto t0 = std::chrono::steady_clock::now();
  auto r2 = net.run_batch(in, net.input_shape());
  const double ms = ms_since(t0);
  ASSERT_TRUE(r2.ok()) << r2.status().to_string();
  expect_within_bar(*r2, cpu);
  // The new child planned with the old one's conv choices (docs/design/faces.md §8.2): the same bits as before.
  for (std::size_t b = 0; b < r0->size(); ++b)
    for (std::size_t o = 0; o < (*r0)[b].size(); ++o)
      EXPECT_EQ((*r2)[b][o].data, (*r0)[b][o].data) << "image " << b << ", output " << o;
  EXPECT_EQ((*acc)->generation(), gen0 + 1);
  EXPECT_FALSE(backend->is_lost());
  ASSERT_TRUE(net.accelerator().has_value()) << net.detach_reason().value_or("");
  EXPECT_FALSE(net.detach_reason().has_value());
  auto stats = backend->executor()->ring_stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_GE(stats->dispatches, 2u);  // the new child ran the re-check and the batch
  std::printf(
      "[ recovery ] batch after the cool-down %.1f ms (new child, residents re-uploaded, re-check, plan)\n",
      ms);
}

/// A render stand-in: requests of `chunks` device busy-waits of `ms` each (the runtime's spin op), in turns.
class SpinWorkload final : public runtime::Workload {
 public:
  SpinWorkload(int chunks, std::uint32_t ms) : left_(chunks), ms_(ms) {}
  std::size_t scratch_bytes() const override { return 8; }
  void seed_scratch(std::span<std::byte>) override {}
  Expected<bool> run_chunk(runtime::Executor& ex, std::span<std::byte>) override {
    runtime::OpCall call;
    call.op = runtime::ops::kSpin;
    call.args = std::as_bytes(std::span(&ms_, 1));
    auto r = ex.invoke(call);
    if (!r) return r.status();
    return --left_ > 0;
  }
  void commit(std::span<const std::byte>) override {}

 private:
  int left_;
  std::uint32_t ms_;
};

TEST(FacesAccelGpu, pace_keeps_a_concurrent_render_near_one_minus_share_of_the_gpu) {
  FT_REQUIRE_GPU();
  auto acc = make_gpu_accelerator();
  ASSERT_TRUE(acc.ok()) << acc.status().to_string();
  Net net = yunet();
  ASSERT_TRUE(net.attach_checked(*acc).ok());
  const std::size_t n = static_cast<std::size_t>(3 * 640 * 640);
  std::vector<std::vector<float>> ims;
  for (std::uint32_t i = 0; i < 4; ++i) ims.push_back(photo_like(n, 90 + i));
  std::vector<std::span<const float>> in(ims.begin(), ims.end());
  ASSERT_TRUE(net.run_batch(in, net.input_shape()).ok());  // plan B = 4 before measuring
  runtime::GpuBackend& gpu = runtime::shared_backend();
  constexpr auto kWindow = 1500ms;
  auto render_chunks = [&] {
    int chunks = 0;
    const auto end = std::chrono::steady_clock::now() + kWindow;
    while (std::chrono::steady_clock::now() < end) {
      SpinWorkload w(10, 4);
      if (gpu.accumulate(w) != runtime::Outcome::kDone) return -1;
      chunks += 10;
    }
    return chunks;
  };
  const int alone = render_chunks();
  ASSERT_GT(alone, 0);
  const double share = 0.25;
  set_pace(1, share);
  std::atomic<bool> stop{false};
  std::atomic<int> faces{0};
  std::thread face_stream([&] {
    while (!stop.load()) {
      auto r = net.run_batch(in, net.input_shape());
      if (!r.ok()) return;
      faces += static_cast<int>(in.size());
    }
  });
  const int shared = render_chunks();
  stop = true;
  face_stream.join();
  set_pace(1 << 20, 1.0);
  const double kept = static_cast<double>(shared) / alone;
  std::printf(
      "[ pace ] render stand-in alone %d chunks, with a YuNet batch-4 stream at share %.2f %d chunks "
      "(kept %.3f of the GPU); faces %.0f images/s\n",
      alone, share, shared, kept, faces.load() / std::chrono::duration<double>(kWindow).count());
  EXPECT_GE(kept, 1.0 - share - 0.1);  // the render keeps about 1 − share (turn granularity: ±0.1)
  EXPECT_GT(faces.load(), 0);
  EXPECT_TRUE(net.accelerator().has_value());
}

}  // namespace
}  // namespace facetrace::faces
