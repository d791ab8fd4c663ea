/// @file
/// bench_runtime: readback-ring D2H throughput vs raw cudaMemcpyAsync, 4 KiB pipelined per-item cost, command
/// round trip in-process vs isolated, and recovery time after an injected fault (runtime.md §5). JSON lines on
/// stdout, a table on stderr; each row carries its baseline from the same run.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "facetrace/core/logging.h"
#include "facetrace/runtime/backend.h"
#include "facetrace/runtime/testing/ramp_workload.h"
#include "facetrace/runtime/readback_ring.h"

using namespace facetrace;
using namespace facetrace::runtime;
using HostClock = std::chrono::steady_clock;

namespace {

struct Summary {
  double median = 0, p10 = 0, p90 = 0;
};
Summary summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)]; };
  return {at(0.5), at(0.1), at(0.9)};
}

std::string g_device, g_driver, g_cuda;
struct Row {
  std::string cas, metric, value, baseline, target;
};
std::vector<Row> g_rows;

void emit(const std::string& cas, int iters, int warmup, const Summary& ms, const std::string& extra,
          const RingStats* stats) {
  std::printf("{\"bench\":\"bench_runtime\",\"case\":\"%s\",\"device\":\"%s\",\"driver\":\"%s\",\"cuda\":\"%s\","
              "\"build\":\"%s\",\"iters\":%d,\"warmup\":%d,\"median_ms\":%.6f,\"p10_ms\":%.6f,\"p90_ms\":%.6f%s",
              cas.c_str(), g_device.c_str(), g_driver.c_str(), g_cuda.c_str(),
#ifdef NDEBUG
              "release",
#else
              "debug",
#endif
              iters, warmup, ms.median, ms.p10, ms.p90, extra.c_str());
  if (stats != nullptr)
    std::printf(",\"dispatches\":%llu,\"stalls\":%llu,\"peak_in_flight\":%llu",
                static_cast<unsigned long long>(stats->dispatches), static_cast<unsigned long long>(stats->stalls),
                static_cast<unsigned long long>(stats->peak_in_flight));
  std::printf("}\n");
  std::fflush(stdout);
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

void pause() { std::this_thread::sleep_for(std::chrono::milliseconds(200)); }

#define CK(call)                                                                          \
  do {                                                                                    \
    if (cudaError_t e_ = (call); e_ != cudaSuccess) {                                     \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_));             \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

constexpr int kRuns = 10;

// --- ring throughput --------------------------------------------------------------------------------------
void bench_throughput(void* dev, std::byte* ring_host, std::size_t ring_bytes, void* raw_host) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (std::size_t size : {std::size_t{4} << 10, std::size_t{64} << 10, std::size_t{1} << 20, std::size_t{8} << 20,
                           std::size_t{64} << 20}) {
    const int iters = static_cast<int>(std::clamp<std::size_t>((512ull << 20) / size, 16, 4096));
    // Raw: back-to-back cudaMemcpyAsync into pinned memory, timed with events.
    std::vector<double> raw_ms;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int r = -2; r < kRuns; ++r) {
      CK(cudaEventRecord(e0, s));
      for (int i = 0; i < iters; ++i) CK(cudaMemcpyAsync(raw_host, dev, size, cudaMemcpyDeviceToHost, s));
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (r >= 0) raw_ms.push_back(ms);
    }
    // Ring: up to K copies in flight, collect the oldest when full; host clock around the whole loop.
    RingOptions ro;
    ro.budget_bytes = ring_bytes;
    ro.max_slots_per_class = 256;
    ReadbackRing ring(std::span(ring_host, ring_bytes), ro, make_cuda_copy_engine());
    const std::size_t k = std::min<std::size_t>({8, ring_bytes / (*ReadbackRing::size_class(size)), 256});
    std::vector<double> ring_ms;
    for (int r = -2; r < kRuns; ++r) {
      std::deque<RingTicket> inflight;
      const auto t0 = HostClock::now();
      for (int i = 0; i < iters; ++i) {
        if (inflight.size() == k) {
          (void)ring.wait(inflight.front(), HostClock::now() + std::chrono::seconds(10));
          (void)ring.with_mapped(inflight.front(), [](auto) {});
          inflight.pop_front();
        }
        auto t = ring.record_copy(dev, size, s);
        if (!t) {
          std::fprintf(stderr, "record_copy: %s\n", t.status().to_string().c_str());
          std::exit(1);
        }
        inflight.push_back(*t);
      }
      while (!inflight.empty()) {
        (void)ring.wait(inflight.front(), HostClock::now() + std::chrono::seconds(10));
        (void)ring.with_mapped(inflight.front(), [](auto) {});
        inflight.pop_front();
      }
      const double ms = std::chrono::duration<double, std::milli>(HostClock::now() - t0).count();
      if (r >= 0) ring_ms.push_back(ms);
    }
    const auto rs = summarize(raw_ms), gs = summarize(ring_ms);
    const double bytes = static_cast<double>(size) * iters;
    const double raw_gbs = bytes / (rs.median * 1e6), ring_gbs = bytes / (gs.median * 1e6);
    const RingStats st = ring.stats();
    const std::string label = size >= (1u << 20) ? std::to_string(size >> 20) + "MiB" : std::to_string(size >> 10) + "KiB";
    emit("ring_d2h_" + label, iters, 2, gs,
         ",\"gb_per_s\":" + fmt("%.3f", ring_gbs) + ",\"baseline_gb_per_s\":" + fmt("%.3f", raw_gbs) +
             ",\"in_flight\":" + std::to_string(k),
         &st);
    g_rows.push_back({"ring D2H " + label, "GB/s", fmt("%.1f", ring_gbs), fmt("%.1f raw", raw_gbs),
                      size >= (8u << 20) ? ">= 50" : "-"});
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    pause();
  }
  CK(cudaStreamDestroy(s));
}

// --- 4 KiB pipelined per-item cost ---------------------------------------------------------------------------
void bench_small(void* dev, std::byte* ring_host, std::size_t ring_bytes, void* raw_host, std::size_t depth) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int n = 2000;
  const std::size_t size = 4096;
  // Synchronous baseline: copy + synchronise per item.
  std::vector<double> sync_us, raw_us, ring_us;
  for (int r = -2; r < kRuns; ++r) {
    const auto t0 = HostClock::now();
    for (int i = 0; i < n; ++i) {
      CK(cudaMemcpyAsync(raw_host, dev, size, cudaMemcpyDeviceToHost, s));
      CK(cudaStreamSynchronize(s));
    }
    if (r >= 0) sync_us.push_back(std::chrono::duration<double, std::micro>(HostClock::now() - t0).count() / n);
  }
  // Raw pipelined baseline: copy + event per item, 8 in flight, completion by cudaEventQuery.
  std::vector<cudaEvent_t> ev(depth);
  for (auto& e : ev) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  for (int r = -2; r < kRuns; ++r) {
    const auto t0 = HostClock::now();
    for (int i = 0; i < n; ++i) {
      cudaEvent_t e = ev[i % depth];
      if (static_cast<std::size_t>(i) >= depth)
        while (cudaEventQuery(e) == cudaErrorNotReady) {
        }
      CK(cudaMemcpyAsync(static_cast<std::byte*>(raw_host) + (i % depth) * size, dev, size, cudaMemcpyDeviceToHost, s));
      CK(cudaEventRecord(e, s));
    }
    CK(cudaStreamSynchronize(s));
    if (r >= 0) raw_us.push_back(std::chrono::duration<double, std::micro>(HostClock::now() - t0).count() / n);
  }
  // Ring, 8 in flight, collection by poll (cudaEventQuery) + with_mapped.
  RingOptions ro;
  ro.budget_bytes = ring_bytes;
  ReadbackRing ring(std::span(ring_host, ring_bytes), ro, make_cuda_copy_engine());
  for (int r = -2; r < kRuns; ++r) {
    std::deque<RingTicket> inflight;
    const auto t0 = HostClock::now();
    for (int i = 0; i < n; ++i) {
      if (inflight.size() == depth) {
        while (*ring.poll(inflight.front()) == PollResult::kPending) {
        }
        (void)ring.with_mapped(inflight.front(), [](auto) {});
        inflight.pop_front();
      }
      inflight.push_back(*ring.record_copy(dev, size, s));
    }
    while (!inflight.empty()) {
      while (*ring.poll(inflight.front()) == PollResult::kPending) {
      }
      (void)ring.with_mapped(inflight.front(), [](auto) {});
      inflight.pop_front();
    }
    if (r >= 0) ring_us.push_back(std::chrono::duration<double, std::micro>(HostClock::now() - t0).count() / n);
  }
  const auto a = summarize(ring_us), b = summarize(raw_us), c = summarize(sync_us);
  const RingStats st = ring.stats();
  emit("readback_4KiB_pipelined_depth" + std::to_string(depth), n, 2, {a.median / 1000, a.p10 / 1000, a.p90 / 1000},
       ",\"us_per_item\":" + fmt("%.3f", a.median) + ",\"baseline_raw_pipelined_us\":" + fmt("%.3f", b.median) +
           ",\"baseline_sync_us\":" + fmt("%.3f", c.median) + ",\"in_flight\":" + std::to_string(depth),
       &st);
  g_rows.push_back({"4 KiB readback, " + std::to_string(depth) + " in flight", "us/item", fmt("%.2f", a.median),
                    fmt("%.2f raw", b.median) + ", " + fmt("%.2f sync", c.median), "<= 3"});
  for (auto& e : ev) CK(cudaEventDestroy(e));
  CK(cudaStreamDestroy(s));
  pause();
}

// --- command round trip ---------------------------------------------------------------------------------------
Summary time_pings(Executor& ex, int n) {
  std::vector<double> us;
  for (int r = -2; r < kRuns; ++r) {
    const auto t0 = HostClock::now();
    for (int i = 0; i < n; ++i) (void)ex.ping();
    if (r >= 0) us.push_back(std::chrono::duration<double, std::micro>(HostClock::now() - t0).count() / n);
  }
  return summarize(us);
}

Summary time_fill(Executor& ex, int n) {
  std::vector<double> us;
  FillRampArgs f{0, 1024, 1.0f, 1.0f, 0, 0};
  OpCall call;
  call.op = ops::kFillRamp;
  call.args = std::as_bytes(std::span(&f, 1));
  for (int r = -2; r < kRuns; ++r) {
    const auto t0 = HostClock::now();
    for (int i = 0; i < n; ++i) {
      auto rep = ex.invoke(call);
      if (!rep) {
        std::fprintf(stderr, "invoke: %s\n", rep.status().to_string().c_str());
        std::exit(1);
      }
      (void)ex.collect(rep->tickets[0], std::chrono::seconds(5), [](auto) {});
    }
    if (r >= 0) us.push_back(std::chrono::duration<double, std::micro>(HostClock::now() - t0).count() / n);
  }
  return summarize(us);
}

ExecutorOptions small_options() {
  ExecutorOptions o = ExecutorOptions::from_env();
  o.ring_bytes = 32ull << 20;
  o.transfer_bytes = 32ull << 20;
  return o;
}

void bench_round_trip() {
  auto in = make_in_process_executor(small_options());
  auto iso = make_isolated_executor(small_options());
  if (!in->start().ok() || !iso->start().ok()) {
    std::fprintf(stderr, "round trip: executors did not start: %s / %s\n", in->state_reason().c_str(),
                 iso->state_reason().c_str());
    return;
  }
  const auto p_in = time_pings(*in, 2000), p_iso = time_pings(*iso, 2000);
  emit("command_round_trip_ping", 2000, 2, {p_iso.median / 1000, p_iso.p10 / 1000, p_iso.p90 / 1000},
       ",\"us_isolated\":" + fmt("%.3f", p_iso.median) + ",\"baseline_us_in_process\":" + fmt("%.3f", p_in.median),
       nullptr);
  g_rows.push_back({"command round trip (ping)", "us", fmt("%.2f isolated", p_iso.median),
                    fmt("%.3f in-process", p_in.median), "<= 20"});
  const auto f_in = time_fill(*in, 500), f_iso = time_fill(*iso, 500);
  auto st = iso->ring_stats();
  emit("op_fill4KiB_collect", 500, 2, {f_iso.median / 1000, f_iso.p10 / 1000, f_iso.p90 / 1000},
       ",\"us_isolated\":" + fmt("%.3f", f_iso.median) + ",\"baseline_us_in_process\":" + fmt("%.3f", f_in.median),
       st ? &*st : nullptr);
  g_rows.push_back({"op fill 4 KiB + collect (3 msgs)", "us", fmt("%.2f isolated", f_iso.median),
                    fmt("%.2f in-process", f_in.median), "-"});
  pause();
}

// --- recovery -----------------------------------------------------------------------------------------------
void bench_recovery() {
  std::vector<double> rec_ms, start_ms;
  for (int r = 0; r < 3; ++r) {
    const auto s0 = HostClock::now();
    auto probe = make_isolated_executor(small_options());
    if (!probe->start().ok()) {
      std::fprintf(stderr, "recovery: child did not start: %s\n", probe->state_reason().c_str());
      return;
    }
    start_ms.push_back(std::chrono::duration<double, std::milli>(HostClock::now() - s0).count());
  }
  for (int r = 0; r < 5; ++r) {
    RecoveryConfig c;
    c.cool_down = std::chrono::duration<double>(0.0);
    auto backend = GpuBackend::with_executor(make_isolated_executor(small_options()), SteadyClock::instance(), c);
    std::vector<float> out(4096);
    RampWorkload warm(out, 1, 1, 4096);
    if (backend->accumulate(warm) != Outcome::kDone) {
      std::fprintf(stderr, "recovery: warm-up request declined\n");
      return;
    }
    const auto t0 = HostClock::now();
    (void)backend->executor()->inject_fault(FaultKind::kIllegalAddress);
    for (int k = 0; k < 100; ++k) {
      RampWorkload w(out, 1, 1, 4096);
      if (backend->accumulate(w) == Outcome::kDone) break;
    }
    rec_ms.push_back(std::chrono::duration<double, std::milli>(HostClock::now() - t0).count());
  }
  const auto a = summarize(rec_ms), b = summarize(start_ms);
  emit("recovery_fault_to_first_gpu_request", static_cast<int>(rec_ms.size()), 1, a,
       ",\"cool_down_s\":0,\"baseline_child_start_ms\":" + fmt("%.3f", b.median), nullptr);
  g_rows.push_back({"recovery: fault -> first GPU Done", "ms", fmt("%.1f", a.median),
                    fmt("%.1f child start", b.median), "<= 1000"});
}

}  // namespace

int main() {
  core::init_logging_from_env();
  int dev_count = 0;
  if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
    std::fprintf(stderr, "bench_runtime: no GPU\n");
    return 0;
  }
  cudaDeviceProp p{};
  CK(cudaGetDeviceProperties(&p, 0));
  int drv = 0, rt = 0;
  CK(cudaDriverGetVersion(&drv));
  CK(cudaRuntimeGetVersion(&rt));
  g_device = p.name;
  g_driver = std::to_string(drv / 1000) + "." + std::to_string((drv % 1000) / 10);
  g_cuda = std::to_string(rt / 1000) + "." + std::to_string((rt % 1000) / 10);

  const std::size_t ring_bytes = 256ull << 20;
  std::byte* ring_host = nullptr;
  void* raw_host = nullptr;
  void* dev = nullptr;
  CK(cudaHostAlloc(reinterpret_cast<void**>(&ring_host), ring_bytes, cudaHostAllocPortable));
  CK(cudaHostAlloc(&raw_host, 64ull << 20, cudaHostAllocPortable));
  CK(cudaMalloc(&dev, 64ull << 20));
  CK(cudaMemset(dev, 1, 64ull << 20));
  bench_throughput(dev, ring_host, ring_bytes, raw_host);
  for (std::size_t depth : {8, 32}) bench_small(dev, ring_host, ring_bytes, raw_host, depth);
  bench_round_trip();
  bench_recovery();

  std::fprintf(stderr, "\nbench_runtime on %s (driver %s, CUDA %s), median of %d runs\n", g_device.c_str(),
               g_driver.c_str(), g_cuda.c_str(), kRuns);
  std::fprintf(stderr, "| %-36s | %-8s | %-16s | %-28s | %-8s |\n", "case", "unit", "value", "baseline (same run)",
               "target");
  std::fprintf(stderr, "|%s|%s|%s|%s|%s|\n", std::string(38, '-').c_str(), std::string(10, '-').c_str(),
               std::string(18, '-').c_str(), std::string(30, '-').c_str(), std::string(10, '-').c_str());
  for (const auto& r : g_rows)
    std::fprintf(stderr, "| %-36s | %-8s | %-16s | %-28s | %-8s |\n", r.cas.c_str(), r.metric.c_str(),
                 r.value.c_str(), r.baseline.c_str(), r.target.c_str());
  cudaFree(dev);
  cudaFreeHost(raw_host);
  cudaFreeHost(ring_host);
  return 0;
}
