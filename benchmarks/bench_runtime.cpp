/// @file
/// bench_runtime: readback-ring D2H throughput vs raw cudaMemcpyAsync, 4 KiB pipelined per-item cost, command
/// round trip in-process vs isolated, and recovery time after an injected fault (docs/design/runtime.md §5). JSON lines on
/// stdout, a table on stderr (both through bench_common.h); each row carries its baseline from the same run. It
/// includes the CUDA runtime itself: the raw cudaMemcpyAsync / event loops are the baselines it measures against.
#include <CLI/CLI.hpp>
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

#include "bench_common.h"
#include "facetrace/core/logging.h"
#include "facetrace/runtime/backend.h"
#include "facetrace/runtime/testing/ramp_workload.h"
#include "facetrace/runtime/readback_ring.h"
#include "facetrace/runtime/testing/fault.h"

using namespace facetrace;
using namespace facetrace::runtime;
namespace bench = facetrace::bench;
using HostClock = std::chrono::steady_clock;

namespace {

using Summary = bench::Stats;
using bench::summarize;

bench::RunContext g_context;
std::string g_device;
/// The stderr table: case, unit, value, baseline (same run), target.
bench::Table g_table({"case", "unit", "value", "baseline (same run)", "target"});

/// One JSON line: the case, its statistics (6 decimals: sub-millisecond cases), `extra` and the ring stats.
void emit(const std::string& cas, int iters, int warmup, const Summary& ms, const bench::Json& extra,
          const RingStats* stats) {
  bench::Json j = bench::line("bench_runtime", cas);
  j["device"] = g_device;
  bench::add_stats(j, ms, iters, warmup, /*fine=*/true);
  for (const auto& [k, v] : extra.items()) j[k] = v;
  if (stats != nullptr) {
    j["dispatches"] = stats->dispatches;
    j["stalls"] = stats->stalls;
    j["peak_in_flight"] = stats->peak_in_flight;
  }
  bench::emit(std::move(j), g_context);
}

std::string fmt(const char* f, double v) { return bench::cell(f, v); }
double r3(double v) { return bench::rounded(v, 3); }

void pause() { std::this_thread::sleep_for(std::chrono::milliseconds(200)); }

#define CK(call)                                                              \
  do {                                                                        \
    if (cudaError_t e_ = (call); e_ != cudaSuccess) {                         \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

int kRuns = 10;  // --runs

// --- ring throughput --------------------------------------------------------------------------------------
void bench_throughput(void* dev, std::byte* ring_host, std::size_t ring_bytes, void* raw_host) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (std::size_t size : {std::size_t{4} << 10, std::size_t{64} << 10, std::size_t{1} << 20,
                           std::size_t{8} << 20, std::size_t{64} << 20}) {
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
    const double raw_gbs = bytes / (rs.median_ms * 1e6), ring_gbs = bytes / (gs.median_ms * 1e6);
    const RingStats st = ring.stats();
    const std::string label =
        size >= (1u << 20) ? std::to_string(size >> 20) + "MiB" : std::to_string(size >> 10) + "KiB";
    emit("ring_d2h_" + label, iters, 2, gs,
         {{"gb_per_s", r3(ring_gbs)}, {"baseline_gb_per_s", r3(raw_gbs)}, {"in_flight", k}}, &st);
    g_table.add({"ring D2H " + label, "GB/s", fmt("%.1f", ring_gbs), fmt("%.1f raw", raw_gbs),
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
    if (r >= 0)
      sync_us.push_back(std::chrono::duration<double, std::micro>(HostClock::now() - t0).count() / n);
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
      CK(cudaMemcpyAsync(static_cast<std::byte*>(raw_host) + (i % depth) * size, dev, size,
                         cudaMemcpyDeviceToHost, s));
      CK(cudaEventRecord(e, s));
    }
    CK(cudaStreamSynchronize(s));
    if (r >= 0)
      raw_us.push_back(std::chrono::duration<double, std::micro>(HostClock::now() - t0).count() / n);
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
    if (r >= 0)
      ring_us.push_back(std::chrono::duration<double, std::micro>(HostClock::now() - t0).count() / n);
  }
  const auto a = summarize(ring_us), b = summarize(raw_us), c = summarize(sync_us);
  const RingStats st = ring.stats();
  emit("readback_4KiB_pipelined_depth" + std::to_string(depth), n, 2,
       {a.median_ms / 1000, a.p10_ms / 1000, a.p90_ms / 1000},
       {{"us_per_item", r3(a.median_ms)},
        {"baseline_raw_pipelined_us", r3(b.median_ms)},
        {"baseline_sync_us", r3(c.median_ms)},
        {"in_flight", depth}},
       &st);
  g_table.add({"4 KiB readback, " + std::to_string(depth) + " in flight", "us/item", fmt("%.2f", a.median_ms),
               fmt("%.2f raw", b.median_ms) + ", " + fmt("%.2f sync", c.median_ms), "<= 3"});
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
  emit("command_round_trip_ping", 2000, 2, {p_iso.median_ms / 1000, p_iso.p10_ms / 1000, p_iso.p90_ms / 1000},
       {{"us_isolated", r3(p_iso.median_ms)}, {"baseline_us_in_process", r3(p_in.median_ms)}}, nullptr);
  g_table.add({"command round trip (ping)", "us", fmt("%.2f isolated", p_iso.median_ms),
               fmt("%.3f in-process", p_in.median_ms), "<= 20"});
  const auto f_in = time_fill(*in, 500), f_iso = time_fill(*iso, 500);
  auto st = iso->ring_stats();
  emit("op_fill4KiB_collect", 500, 2, {f_iso.median_ms / 1000, f_iso.p10_ms / 1000, f_iso.p90_ms / 1000},
       {{"us_isolated", r3(f_iso.median_ms)}, {"baseline_us_in_process", r3(f_in.median_ms)}},
       st ? &*st : nullptr);
  g_table.add({"op fill 4 KiB + collect (3 msgs)", "us", fmt("%.2f isolated", f_iso.median_ms),
               fmt("%.2f in-process", f_in.median_ms), "-"});
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
    auto backend =
        GpuBackend::with_executor(make_isolated_executor(small_options()), SteadyClock::instance(), c);
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
       {{"cool_down_s", 0}, {"baseline_child_start_ms", r3(b.median_ms)}}, nullptr);
  g_table.add({"recovery: fault -> first GPU Done", "ms", fmt("%.1f", a.median_ms),
               fmt("%.1f child start", b.median_ms), "<= 1000"});
}

}  // namespace

int main(int argc, char** argv) {
  core::init_logging_from_env();
  CLI::App app{
      "bench_runtime: readback ring, command round trip and recovery on the GPU (JSON lines on stdout, "
      "table on stderr)"};
  app.add_option("--runs", kRuns, "timed runs per case (default 10)")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  int dev_count = 0;
  if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
    std::fprintf(stderr, "bench_runtime: no GPU\n");
    return 0;
  }
  {  // The GPU facts through the runtime's public device info; the executor is gone before the first case.
    auto probe = make_in_process_executor(small_options());
    if (Status st = probe->start(); !st.ok()) {
      std::fprintf(stderr, "bench_runtime: the executor did not start: %s\n", st.to_string().c_str());
      return 1;
    }
    auto info = probe->info();
    if (!info) {
      std::fprintf(stderr, "bench_runtime: %s\n", info.status().to_string().c_str());
      return 1;
    }
    g_device = info->name;
    g_context = bench::run_context(bench::gpu_facts(*info));
  }

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
               g_context.gpu->driver.c_str(), g_context.gpu->cuda.c_str(), kRuns);
  g_table.print();
  cudaFree(dev);
  cudaFreeHost(raw_host);
  cudaFreeHost(ring_host);
  return 0;
}
