/// @file
/// bench_tracer: paths/s of the tracer on the built-in diamond (style.md §10), CPU and GPU in the same run
/// with the GPU/CPU ratio. JSON lines on stdout, a table on stderr. `--short` is a seconds-long smoke run.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "facetrace/core/logging.h"
#include "facetrace/runtime/executor.h"
#include "facetrace/tracer/cpu_tracer.h"
#include "facetrace/tracer/gpu_tracer.h"
#include "facetrace/tracer/renderer.h"
#include "facetrace/tracer/scene.h"

#ifndef FT_BUILD_TYPE
#define FT_BUILD_TYPE "unknown"
#endif

namespace tr = facetrace::tracer;
namespace rt = facetrace::runtime;

namespace {

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

struct Row {
  std::string device;
  std::string label;  // adapter or "N threads"
  unsigned threads = 0;
  unsigned spp = 0;
  double median = 0, p10 = 0, p90 = 0, paths_per_s = 0;
  std::uint64_t nonfinite = 0;
  rt::RingStats ring{};
};

void print_row(const Row& r, const tr::Scene& s, unsigned repeats, unsigned warmup, const char* extra) {
  char case_name[96];
  std::snprintf(case_name, sizeof case_name, "builtin_diamond_%ux%u_b%u_spp%u", s.width, s.height, s.max_bounces,
                r.spp);
  std::printf(
      "{\"bench\":\"tracer\",\"case\":\"%s\",\"device\":\"%s\",\"adapter\":\"%s\",\"build\":\"%s\","
      "\"threads\":%u,\"width\":%u,\"height\":%u,\"spp\":%u,\"bounces\":%u,\"iters\":%u,\"warmup\":%u,"
      "\"median_ms\":%.3f,\"p10_ms\":%.3f,\"p90_ms\":%.3f,\"paths_per_s\":%.1f,\"samples_per_s\":%.1f,"
      "\"nonfinite\":%llu,\"dispatches\":%llu,\"stalls\":%llu,\"peak_in_flight\":%llu%s}\n",
      case_name, r.device.c_str(), r.label.c_str(), FT_BUILD_TYPE, r.threads, s.width, s.height, r.spp,
      s.max_bounces, repeats, warmup, r.median, r.p10, r.p90, r.paths_per_s, r.paths_per_s,
      static_cast<unsigned long long>(r.nonfinite), static_cast<unsigned long long>(r.ring.dispatches),
      static_cast<unsigned long long>(r.ring.stalls), static_cast<unsigned long long>(r.ring.peak_in_flight),
      extra);
  std::fflush(stdout);
}

template <class F>
std::optional<Row> time_runs(unsigned warmup, unsigned repeats, double paths, F run) {
  Row r;
  std::vector<double> ms;
  for (unsigned i = 0; i < warmup + repeats; ++i) {
    std::uint64_t nf = 0;
    const auto t0 = std::chrono::steady_clock::now();
    if (!run(nf)) return std::nullopt;
    const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) ms.push_back(t), r.nonfinite += nf;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let clocks settle between runs
  }
  r.median = percentile(ms, 0.5);
  r.p10 = percentile(ms, 0.1);
  r.p90 = percentile(ms, 0.9);
  r.paths_per_s = paths / (r.median / 1e3);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  facetrace::core::init_logging_from_env();
  CLI::App app{"bench_tracer: tracer throughput on the built-in diamond (JSON lines on stdout, table on stderr)"};
  std::string device = "cpu";
  bool short_run = false;
  unsigned width = 0, height = 0, spp = 0, gpu_spp = 0, bounces = 12, repeats = 0, threads = 0;
  app.add_option("--device", device, "cpu, gpu, or all (GPU and CPU in the same run, with the ratio)");
  app.add_flag("--short", short_run, "CI smoke run: 64x64, 2 spp, 2 repeats");
  app.add_option("--width", width, "image width (default 1024; --short 64)");
  app.add_option("--height", height, "image height (default 1024; --short 64)");
  app.add_option("--spp", spp, "CPU samples per pixel per repeat (default 1; --short 2)")
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--gpu-spp", gpu_spp,
                 "GPU samples per pixel per repeat, one request (default 128: at 1024^2 on the H200 the size of "
                 "request the renderer issues, tracer.md 10.7 ~100 ms; --short 2)")
      ->check(CLI::Range(1u, 2048u));
  app.add_option("--bounces", bounces, "max bounces (default 12)")->check(CLI::Range(1u, 128u));
  app.add_option("--repeats", repeats, "timed repeats (default 5; --short 2)")->check(CLI::Range(1u, 10000u));
  app.add_option("--threads", threads, "CPU threads (default 0 = all cores)");
  std::uint32_t chunk_pixels = 0;
  app.add_option("--chunk-pixels", chunk_pixels,
                 "GPU: this many pixels per chunk, within the per-launch limit (default 0 = sized by the chunk "
                 "rule; for profiling a known chunk)");
  CLI11_PARSE(app, argc, argv);
  if (device != "cpu" && device != "gpu" && device != "all") {
    std::fprintf(stderr, "bench_tracer: --device %s: expected cpu, gpu or all\n", device.c_str());
    return 2;
  }
  if (width == 0) width = short_run ? 64 : 1024;
  if (height == 0) height = short_run ? 64 : 1024;
  if (spp == 0) spp = short_run ? 2 : 1;
  if (gpu_spp == 0) gpu_spp = short_run ? 2 : 128;
  if (repeats == 0) repeats = short_run ? 2 : 5;
  const unsigned warmup = 1;
  const unsigned nthreads = threads ? threads : std::max(1u, std::thread::hardware_concurrency());

  tr::Scene scene = tr::builtin_diamond_scene();
  scene.width = width;
  scene.height = height;
  scene.max_bounces = bounces;
  if (auto st = tr::validate_scene(scene); !st.ok()) {
    std::fprintf(stderr, "bench_tracer: %s\n", st.what().c_str());
    return 2;
  }
  const double pixels = static_cast<double>(width) * height;
  std::vector<Row> rows;

  if (device != "cpu") {
    auto& gpu = tr::shared_gpu_backend();
    if (auto why = gpu.unavailable_reason()) {
      std::fprintf(stderr, "bench_tracer: --device %s: no usable GPU: %s\n", device.c_str(), why->c_str());
      return 2;
    }
    tr::Film film(width, height);  // allocated once: a worker accumulates into its frame's film
    auto r = time_runs(warmup + 1, repeats, pixels * gpu_spp, [&](std::uint64_t& nf) {
      const std::uint64_t before = film.nonfinite;
      tr::GpuChunkOptions chunking;
      if (chunk_pixels > 0) {  // every chunk exactly chunk_pixels (the last one the rest), calibration included
        chunking.max_chunk_pixels = chunk_pixels;
        chunking.first_chunk_tuples = std::uint64_t{chunk_pixels} * gpu_spp;
        chunking.target_ms = 1e9;
      }
      tr::TraceWorkload w(scene, 0, gpu_spp, film, chunking);
      if (gpu.accumulate(w) != rt::Outcome::kDone) {
        std::fprintf(stderr, "bench_tracer: the GPU declined (%s)\n",
                     gpu.last_lost_reason().value_or("see the log").c_str());
        return false;
      }
      nf = film.nonfinite - before;
      return true;
    });
    if (!r) return 1;
    r->device = "gpu";
    r->label = gpu.adapter_label().value_or("GPU");
    r->spp = gpu_spp;
    if (auto* ex = gpu.executor())
      if (auto st = ex->ring_stats(); st.ok()) r->ring = *st;
    rows.push_back(*r);
    print_row(*r, scene, repeats, warmup + 1, "");
  }
  if (device != "gpu") {
    tr::CpuOptions opt;
    opt.threads = nthreads;
    tr::Film film(width, height);
    auto r = time_runs(warmup, repeats, pixels * spp, [&](std::uint64_t& nf) {
      const std::uint64_t before = film.nonfinite;
      if (auto st = tr::cpu_accumulate(scene, 0, spp, film, opt); !st.ok()) {
        std::fprintf(stderr, "bench_tracer: %s\n", st.to_string().c_str());
        return false;
      }
      nf = film.nonfinite - before;
      return true;
    });
    if (!r) return 1;
    r->device = "cpu";
    r->label = std::to_string(nthreads) + " threads";
    r->threads = nthreads;
    r->spp = spp;
    rows.push_back(*r);
    char extra[64] = "";
    if (rows.size() == 2) std::snprintf(extra, sizeof extra, ",\"gpu_over_cpu\":%.2f", rows[0].paths_per_s / r->paths_per_s);
    print_row(*r, scene, repeats, warmup, extra);
  }

  std::fprintf(stderr, "%-6s %-34s %5s %10s %10s %10s %12s\n", "device", "adapter", "spp", "median_ms", "p10_ms",
               "p90_ms", "M paths/s");
  for (const auto& r : rows)
    std::fprintf(stderr, "%-6s %-34s %5u %10.1f %10.1f %10.1f %12.2f\n", r.device.c_str(), r.label.c_str(), r.spp,
                 r.median, r.p10, r.p90, r.paths_per_s / 1e6);
  if (rows.size() == 2)
    std::fprintf(stderr, "GPU / CPU = %.1fx (%ux%u, %u bounces)\n", rows[0].paths_per_s / rows[1].paths_per_s,
                 width, height, bounces);
  return 0;
}
