/// @file
/// bench_tracer: paths/s of the tracer on the built-in diamond (style.md §10). JSON lines on stdout, a table
/// on stderr. `--short` is a seconds-long smoke run for CI.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "facetrace/core/logging.h"
#include "facetrace/tracer/cpu_tracer.h"
#include "facetrace/tracer/scene.h"

#ifndef FT_BUILD_TYPE
#define FT_BUILD_TYPE "unknown"
#endif

namespace tr = facetrace::tracer;

namespace {

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

}  // namespace

int main(int argc, char** argv) {
  facetrace::core::init_logging_from_env();
  CLI::App app{
      "bench_tracer: tracer throughput on the built-in diamond (JSON lines on stdout, table on stderr)"};
  std::string device = "cpu";
  bool short_run = false;
  unsigned width = 0, height = 0, spp = 0, bounces = 12, repeats = 0, threads = 0;
  app.add_option("--device", device, "cpu (the GPU tracer is not built yet)");
  app.add_flag("--short", short_run, "CI smoke run: 64x64, 2 spp, 2 repeats");
  app.add_option("--width", width, "image width (default 1024; --short 64)");
  app.add_option("--height", height, "image height (default 1024; --short 64)");
  app.add_option("--spp", spp, "samples per pixel per repeat (default 1; --short 2)")
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--bounces", bounces, "max bounces (default 12)")->check(CLI::Range(1u, 128u));
  app.add_option("--repeats", repeats, "timed repeats (default 5; --short 2)")->check(CLI::Range(1u, 10000u));
  app.add_option("--threads", threads, "CPU threads (default 0 = all cores)");
  CLI11_PARSE(app, argc, argv);

  if (device != "cpu") {
    std::fprintf(stderr,
                 "bench_tracer: --device %s: no GPU tracer available in this build; use --device cpu\n",
                 device.c_str());
    return 2;
  }
  if (width == 0) width = short_run ? 64 : 1024;
  if (height == 0) height = short_run ? 64 : 1024;
  if (spp == 0) spp = short_run ? 2 : 1;
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

  tr::CpuOptions opt;
  opt.threads = nthreads;
  std::vector<double> ms;
  std::uint64_t nonfinite = 0;
  for (unsigned i = 0; i < warmup + repeats; ++i) {
    tr::Film film(width, height);
    const auto t0 = std::chrono::steady_clock::now();
    if (auto st = tr::cpu_accumulate(scene, 0, spp, film, opt); !st.ok()) {
      std::fprintf(stderr, "bench_tracer: %s\n", st.to_string().c_str());
      return 1;
    }
    const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) ms.push_back(t), nonfinite += film.nonfinite;
  }

  const double median = percentile(ms, 0.5), p10 = percentile(ms, 0.1), p90 = percentile(ms, 0.9);
  const double paths = static_cast<double>(width) * height * spp;  // one camera path per pixel sample
  const double paths_per_s = paths / (median / 1e3);
  const double frame_spp_per_s = spp / (median / 1e3);
  char case_name[96];
  std::snprintf(case_name, sizeof case_name, "builtin_diamond_%ux%u_b%u_spp%u", width, height, bounces, spp);

  std::printf(
      "{\"bench\":\"tracer\",\"case\":\"%s\",\"device\":\"cpu\",\"driver\":null,\"cuda\":null,\"build\":\"%"
      "s\","
      "\"threads\":%u,\"width\":%u,\"height\":%u,\"spp\":%u,\"bounces\":%u,\"iters\":%u,\"warmup\":%u,"
      "\"median_ms\":%.3f,\"p10_ms\":%.3f,\"p90_ms\":%.3f,\"paths_per_s\":%.1f,\"samples_per_s\":%.1f,"
      "\"frame_spp_per_s\":%.4f,\"nonfinite\":%llu,\"dispatches\":0,\"stalls\":0,\"peak_in_flight\":0}\n",
      case_name, FT_BUILD_TYPE, nthreads, width, height, spp, bounces, repeats, warmup, median, p10, p90,
      paths_per_s, paths_per_s, frame_spp_per_s, static_cast<unsigned long long>(nonfinite));
  std::fflush(stdout);

  std::fprintf(stderr, "%-36s %-6s %7s %10s %10s %10s %12s %12s\n", "case", "device", "threads", "median_ms",
               "p10_ms", "p90_ms", "M paths/s", "frame-spp/s");
  std::fprintf(stderr, "%-36s %-6s %7u %10.1f %10.1f %10.1f %12.3f %12.3f\n", case_name, "cpu", nthreads,
               median, p10, p90, paths_per_s / 1e6, frame_spp_per_s);
  return 0;
}
