/// @file
/// ReadbackRing on a real GPU (docs/design/runtime.md §1–§2): round trip, wrap and reuse, fail closed, 8 submitters; the
/// built-in ops through the in-process executor.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <numeric>
#include <optional>
#include <thread>
#include <vector>

#include "facetrace/runtime/backend.h"
#include "facetrace/runtime/testing/ramp_workload.h"
#include "facetrace/runtime/readback_ring.h"
#include "gpu_skip.h"

namespace facetrace::runtime {
namespace {

using namespace std::chrono_literals;

#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

struct GpuRing : ::testing::Test {
  void* host = nullptr;
  std::size_t host_bytes = 64ull << 20;
  void SetUp() override {
    FT_REQUIRE_GPU();
    ASSERT_CUDA(cudaHostAlloc(&host, host_bytes, cudaHostAllocPortable));
  }
  void TearDown() override {
    if (host != nullptr) cudaFreeHost(host);
  }
  std::unique_ptr<ReadbackRing> make(std::uint32_t slots) {
    return std::make_unique<ReadbackRing>(std::span(static_cast<std::byte*>(host), host_bytes),
                                          RingOptions{host_bytes, slots}, make_cuda_copy_engine());
  }
};

auto deadline() { return std::chrono::steady_clock::now() + 5s; }

TEST_F(GpuRing, round_trips_device_bytes) {
  auto ring = make(8);
  std::vector<std::uint32_t> src(300000);
  std::iota(src.begin(), src.end(), 7u);
  void* dev = nullptr;
  ASSERT_CUDA(cudaMalloc(&dev, src.size() * 4));
  ASSERT_CUDA(cudaMemcpy(dev, src.data(), src.size() * 4, cudaMemcpyHostToDevice));
  auto t = ring->record_copy(dev, src.size() * 4, cudaStreamPerThread);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_TRUE(ring->wait(*t, deadline()).ok());
  std::vector<std::uint32_t> got(src.size());
  ASSERT_TRUE(ring->with_mapped(
                      *t, [&](std::span<const std::byte> b) { std::memcpy(got.data(), b.data(), b.size()); })
                  .ok());
  EXPECT_EQ(got, src);
  cudaFree(dev);
}

TEST_F(GpuRing, wraps_and_reuses_slots) {
  auto ring = make(4);
  void* dev = nullptr;
  ASSERT_CUDA(cudaMalloc(&dev, 4096));
  for (std::uint32_t i = 0; i < 200; ++i) {
    ASSERT_CUDA(cudaMemsetAsync(dev, static_cast<int>(i & 0xff), 4096, cudaStreamPerThread));
    auto t = ring->record_copy(dev, 4096, cudaStreamPerThread);
    ASSERT_TRUE(t.ok()) << i << ": " << t.status().to_string();
    ASSERT_TRUE(ring->wait(*t, deadline()).ok());
    ASSERT_TRUE(ring->with_mapped(*t,
                                  [&](std::span<const std::byte> b) {
                                    EXPECT_EQ(static_cast<unsigned>(b[4095]), i & 0xff);
                                  })
                    .ok());
  }
  const auto s = ring->stats();
  EXPECT_EQ(s.dispatches, 200u);
  EXPECT_LE(s.slots, 4u);
  cudaFree(dev);
}

// A render's chunk sizes follow its timing (docs/design/tracer.md §10.2): 300 copies of changing lengths, one in
// flight, through a 64 MiB ring; the classes' idle slots give their bytes back instead of filling the budget
// (docs/design/runtime.md §2 "Reclaiming").
TEST_F(GpuRing, serves_changing_lengths_past_the_budget_by_reclaiming) {
  auto ring = make(256);
  constexpr std::size_t kMaxWords = 4u << 20;  // 16 MiB
  std::vector<std::uint32_t> src(kMaxWords);
  std::iota(src.begin(), src.end(), 0u);
  void* dev = nullptr;
  ASSERT_CUDA(cudaMalloc(&dev, kMaxWords * 4));
  ASSERT_CUDA(cudaMemcpy(dev, src.data(), kMaxWords * 4, cudaMemcpyHostToDevice));
  std::optional<RingTicket> in_flight;
  std::size_t in_flight_words = 0;
  std::uint64_t state = 12345;
  for (int round = 0; round < 300; ++round) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const std::size_t words = (1u << 18) + (state >> 33) % (kMaxWords - (1u << 18));  // 1–16 MiB
    auto t = ring->record_copy(dev, words * 4, cudaStreamPerThread);
    ASSERT_TRUE(t.ok()) << "round " << round << ": " << t.status().to_string();
    if (in_flight) {
      ASSERT_TRUE(ring->wait(*in_flight, deadline()).ok());
      bool same = false;
      ASSERT_TRUE(ring->with_mapped(*in_flight, [&](std::span<const std::byte> b) {
                        same = b.size() == in_flight_words * 4 && std::memcmp(b.data(), src.data(), b.size()) == 0;
                      }).ok());
      ASSERT_TRUE(same) << "round " << round;
    }
    in_flight = *t;
    in_flight_words = words;
  }
  ASSERT_TRUE(ring->wait(*in_flight, deadline()).ok());
  ASSERT_TRUE(ring->with_mapped(*in_flight, [](auto) {}).ok());
  const RingStats st = ring->stats();
  EXPECT_EQ(st.stalls, 0u);
  EXPECT_GT(st.reclaimed, 0u);
  EXPECT_LE(st.pinned_bytes, host_bytes);
  cudaFree(dev);
}

TEST_F(GpuRing, fails_closed_on_uncollected_ready_slots) {
  auto ring = make(2);
  void* dev = nullptr;
  ASSERT_CUDA(cudaMalloc(&dev, 4096));
  auto a = ring->record_copy(dev, 100, cudaStreamPerThread);
  auto b = ring->record_copy(dev, 100, cudaStreamPerThread);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(ring->wait(*a, deadline()).ok());
  ASSERT_TRUE(ring->wait(*b, deadline()).ok());
  auto c = ring->record_copy(dev, 100, cudaStreamPerThread);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().what().find("READY and uncollected"), std::string::npos) << c.status().what();
  const auto s = ring->stats();
  EXPECT_EQ(s.stalls, 1u);
  EXPECT_EQ(s.peak_in_flight, 2u);
  ASSERT_TRUE(ring->with_mapped(*a, [](auto) {}).ok());
  EXPECT_TRUE(ring->record_copy(dev, 100, cudaStreamPerThread).ok());
  cudaFree(dev);
}

TEST_F(GpuRing, serves_eight_concurrent_submitters) {
  auto ring = make(64);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 8; ++k) {
    threads.emplace_back([&, k] {
      cudaStream_t s = nullptr;
      void* dev = nullptr;
      if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
          cudaMalloc(&dev, 65536) != cudaSuccess) {
        ++bad;
        return;
      }
      for (int i = 0; i < 200; ++i) {
        const int value = (k * 31 + i) & 0xff;
        if (cudaMemsetAsync(dev, value, 65536, s) != cudaSuccess) ++bad;
        auto t = ring->record_copy(dev, 65536, s);
        if (!t) {
          ++bad;
          continue;
        }
        if (!ring->wait(*t, deadline()).ok()) ++bad;
        if (!ring->with_mapped(*t,
                               [&](std::span<const std::byte> b) {
                                 if (static_cast<int>(b[0]) != value || static_cast<int>(b[65535]) != value)
                                   ++bad;
                               })
                 .ok())
          ++bad;
      }
      cudaStreamSynchronize(s);
      cudaFree(dev);
      cudaStreamDestroy(s);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  const auto s = ring->stats();
  EXPECT_EQ(s.dispatches, 1600u);
  EXPECT_GE(s.peak_in_flight, 1u);
  EXPECT_LE(s.slots, 64u);
}

TEST(InProcessGpu, runs_the_test_workload_and_sums) {
  FT_REQUIRE_GPU();
  ExecutorOptions o;
  o.ring_bytes = 16ull << 20;
  o.transfer_bytes = 16ull << 20;
  auto backend = GpuBackend::with_executor(make_in_process_executor(o));
  ASSERT_EQ(backend->state(), BackendState::kReady) << backend->unavailable_reason().value_or("");
  std::vector<float> out(100000, 1.0f);
  RampWorkload w(out, 0.5f, 0.25f, 4096);
  ASSERT_EQ(backend->accumulate(w), Outcome::kDone);
  for (std::size_t i = 0; i < out.size(); i += 997)
    ASSERT_EQ(out[i], 1.0f + (0.5f + 0.25f * static_cast<float>(i))) << i;
  auto& ex = *backend->executor();
  std::vector<float> v(1 << 20, 1.0f);
  auto block = ex.arena().allocate(v.size() * 4);
  ASSERT_TRUE(block.ok());
  std::memcpy(block->bytes().data(), v.data(), v.size() * 4);
  OpCall call;
  call.op = ops::kSumFloats;
  call.in = block->range();
  auto r = ex.invoke(call);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  double sum = 0;
  ASSERT_TRUE(r->get(sum));
  EXPECT_EQ(sum, static_cast<double>(v.size()));
  auto stats = ex.ring_stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_GT(stats->dispatches, 0u);
  EXPECT_GE(stats->peak_in_flight, 1u);
}

}  // namespace
}  // namespace facetrace::runtime
