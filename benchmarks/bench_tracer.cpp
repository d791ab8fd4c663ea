/// @file
/// bench_tracer: paths/s of the tracer on the built-in diamond and the Tier 2 scenes of --scenes
/// (docs/design/style.md §10), CPU and GPU in the same run with the GPU/CPU ratio per scene. JSON lines on stdout, a table on stderr. `--short` is a seconds-long smoke run.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "facetrace/core/logging.h"
#include "facetrace/runtime/executor.h"
#include "facetrace/tracer/cpu_tracer.h"
#include "facetrace/tracer/env_map.h"
#include "facetrace/tracer/gpu_tracer.h"
#include "facetrace/tracer/renderer.h"
#include "facetrace/tracer/scene.h"

namespace tr = facetrace::tracer;
namespace rt = facetrace::runtime;
namespace bench = facetrace::bench;

namespace {

struct Row {
  std::string device;
  std::string mode = "request";  // "request": one TraceWorkload per run; "render": tracer::render per run
  std::string label;             // adapter or "N threads"
  unsigned threads = 0;
  unsigned spp = 0;
  unsigned warmup = 0;
  bench::Stats ms;
  double paths_per_s = 0;
  std::uint64_t nonfinite = 0;
  rt::RingStats ring{};
  double first_ms = 0, first_paths_per_s = 0;  // render rows: the first render (no size hint yet)
  double over_request = 0;                     // render rows: paths/s over the request row's
};

void print_row(const Row& r, const std::string& scene_name, const tr::Scene& s, unsigned repeats,
               const bench::RunContext& context, std::optional<double> gpu_over_cpu) {
  char case_name[160];
  std::snprintf(case_name, sizeof case_name, "%s_%ux%u_b%u_spp%u%s",
                scene_name == "diamond" ? "builtin_diamond" : scene_name.c_str(), s.width, s.height,
                s.max_bounces, r.spp, r.mode == "render" ? "_render" : "");
  bench::Json j = bench::line("tracer", case_name);
  j["scene"] = scene_name;
  j["material"] = s.material.name;
  j["device"] = r.device;
  j["mode"] = r.mode;
  j["adapter"] = r.label;
  j["threads"] = r.threads;
  j["width"] = s.width;
  j["height"] = s.height;
  j["spp"] = r.spp;
  j["bounces"] = s.max_bounces;
  bench::add_stats(j, r.ms, static_cast<int>(repeats), static_cast<int>(r.warmup));
  j["paths_per_s"] = bench::rounded(r.paths_per_s, 1);
  j["samples_per_s"] = bench::rounded(r.paths_per_s, 1);
  j["nonfinite"] = r.nonfinite;
  j["dispatches"] = r.ring.dispatches;
  j["stalls"] = r.ring.stalls;
  j["peak_in_flight"] = r.ring.peak_in_flight;
  if (gpu_over_cpu) j["gpu_over_cpu"] = bench::rounded(*gpu_over_cpu, 2);
  if (r.mode == "render") {
    j["first_ms"] = bench::rounded(r.first_ms, 3);
    j["first_paths_per_s"] = bench::rounded(r.first_paths_per_s, 1);
    if (r.over_request > 0) j["render_over_request"] = bench::rounded(r.over_request, 4);
  }
  bench::emit(std::move(j), context);
}

/// Times `run` (which adds the non-finite samples of its render to its argument) and fills the row's statistics;
/// nullopt when a run failed. Non-finite samples count the timed runs only.
template <class F>
std::optional<Row> time_runs(unsigned warmup, unsigned repeats, double paths, F run) {
  std::vector<std::uint64_t> nonfinite;
  auto ms = bench::time_runs(
      static_cast<int>(warmup), static_cast<int>(repeats),
      [&] {
        std::uint64_t nf = 0;
        if (!run(nf)) return false;
        nonfinite.push_back(nf);
        return true;
      },
      std::chrono::milliseconds(50));  // let clocks settle between runs
  if (!ms) return std::nullopt;
  Row r;
  r.warmup = warmup;
  r.ms = bench::summarize(*ms);
  r.first_ms = ms->empty() ? 0.0 : ms->front();
  r.nonfinite = std::accumulate(nonfinite.begin() + warmup, nonfinite.end(), std::uint64_t{0});
  r.paths_per_s = paths / (r.ms.median_ms / 1e3);
  return r;
}

/// The GPU row: `gpu_spp` samples per pixel per request, one warm-up more than the CPU (the first request
/// also calibrates the chunk size). `chunk_pixels` > 0 pins every chunk to that many pixels.
std::optional<Row> bench_gpu(rt::GpuBackend& gpu, const tr::Scene& scene, unsigned warmup, unsigned repeats,
                             unsigned gpu_spp, std::uint32_t chunk_pixels) {
  const double pixels = static_cast<double>(scene.width) * scene.height;
  tr::Film film(scene.width, scene.height);  // allocated once: a worker accumulates into its frame's film
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
  if (!r) return std::nullopt;
  r->device = "gpu";
  r->label = gpu.adapter_label().value_or("GPU");
  r->spp = gpu_spp;
  if (auto* ex = gpu.executor())
    if (auto st = ex->ring_stats(); st.ok()) r->ring = *st;
  return r;
}

/// The render row: the product's render loop (tracer::render, --device gpu: adaptive requests, chained batches)
/// over `spp` samples per pixel per run, on the backend the request rows already started, so GPU start-up is
/// not in it. The first run has no size hint from an earlier render of this scene (a fresh `facetrace render`);
/// later runs have one (a worker's next unit). No warm-up, so that first run is measured.
std::optional<Row> bench_render(rt::GpuBackend& gpu, const tr::Scene& scene, unsigned repeats, unsigned spp) {
  const double paths = static_cast<double>(scene.width) * scene.height * spp;
  tr::Film film(scene.width, scene.height);
  std::uint64_t gpu_samples = 0;
  auto r = time_runs(0, repeats, paths, [&](std::uint64_t& nf) {
    const std::uint64_t before = film.nonfinite;
    tr::RenderOptions opt;
    opt.device = tr::RenderDevice::kGpu;
    opt.backend = &gpu;
    auto report = tr::render(scene, 0, spp, film, opt);
    if (!report.ok()) {
      std::fprintf(stderr, "bench_tracer: render: %s\n", report.status().to_string().c_str());
      return false;
    }
    gpu_samples += report->gpu_samples;
    nf = film.nonfinite - before;
    return true;
  });
  if (!r) return std::nullopt;
  if (gpu_samples != std::uint64_t{spp} * repeats) {
    std::fprintf(stderr, "bench_tracer: render: %llu of %llu samples per pixel ran on the CPU\n",
                 static_cast<unsigned long long>(std::uint64_t{spp} * repeats - gpu_samples),
                 static_cast<unsigned long long>(std::uint64_t{spp} * repeats));
    return std::nullopt;
  }
  r->device = "gpu";
  r->mode = "render";
  r->label = gpu.adapter_label().value_or("GPU");
  r->spp = spp;
  r->first_paths_per_s = paths / (r->first_ms / 1e3);
  return r;
}

/// The CPU row: `spp` samples per pixel per run on `nthreads` threads.
std::optional<Row> bench_cpu(const tr::Scene& scene, unsigned warmup, unsigned repeats, unsigned spp,
                             unsigned nthreads) {
  const double pixels = static_cast<double>(scene.width) * scene.height;
  tr::CpuOptions opt;
  opt.threads = nthreads;
  tr::Film film(scene.width, scene.height);
  auto r = time_runs(warmup, repeats, pixels * spp, [&](std::uint64_t& nf) {
    const std::uint64_t before = film.nonfinite;
    if (auto st = tr::cpu_accumulate(scene, 0, spp, film, opt); !st.ok()) {
      std::fprintf(stderr, "bench_tracer: %s\n", st.to_string().c_str());
      return false;
    }
    nf = film.nonfinite - before;
    return true;
  });
  if (!r) return std::nullopt;
  r->device = "cpu";
  r->label = std::to_string(nthreads) + " threads";
  r->threads = nthreads;
  r->spp = spp;
  return r;
}

/// The scenes --scenes names (docs/design/tracer.md §7.7; the Tier 2 rows): the built-in diamond, uniaxial
/// emerald and tourmaline, ruby with inclusions (σ_s 1.5, g 0.3), the diamond under the example HDR map.
constexpr const char* kSceneNames = "diamond, emerald, tourmaline, ruby_inclusions, diamond_hdr";
constexpr const char* kStudioMapSha256 = "1ee8846551d9f2df56fae3b7ff7f74750760a32b3d2c740c3d24755b5730ba85";

std::optional<tr::Scene> named_scene(const std::string& name, const std::string& hdr_map) {
  tr::Scene s = tr::builtin_diamond_scene();
  auto material = [&](const char* preset) {
    auto m = tr::material_preset(preset);
    if (m.ok()) s.material = *m;
    return m.ok();
  };
  if (name == "diamond") return s;
  if (name == "emerald" || name == "tourmaline") {
    if (!material(name.c_str())) return std::nullopt;
    return s;
  }
  if (name == "ruby_inclusions") {
    if (!material("ruby")) return std::nullopt;
    s.material.scattering_sigma_s = 1.5f;
    s.material.scattering_g = 0.3f;
    return s;
  }
  if (name == "diamond_hdr") {
    s.environment = tr::EnvironmentKind::kHdr;
    s.environment_map = hdr_map;
    s.environment_map_sha256 = kStudioMapSha256;
    if (auto st = tr::load_environment_light(s); !st.ok()) {
      std::fprintf(stderr, "bench_tracer: diamond_hdr: %s\n", st.what().c_str());
      return std::nullopt;
    }
    return s;
  }
  std::fprintf(stderr, "bench_tracer: unknown scene \"%s\" (expected one of: %s)\n", name.c_str(),
               kSceneNames);
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  facetrace::core::init_logging_from_env();
  CLI::App app{
      "bench_tracer: tracer throughput on the built-in diamond (JSON lines on stdout, table on stderr)"};
  std::string device = "cpu";
  bool short_run = false;
  unsigned width = 0, height = 0, spp = 0, gpu_spp = 0, bounces = 12, repeats = 0, threads = 0;
  app.add_option("--device", device, "cpu, gpu, or all (GPU and CPU in the same run, with the ratio)");
  app.add_flag("--short", short_run, "CI smoke run: 64x64, 2 spp, 2 repeats");
  app.add_option("--width", width, "image width (default 1024; --short 64)");
  app.add_option("--height", height, "image height (default 1024; --short 64)");
  app.add_option("--spp", spp, "CPU samples per pixel per repeat (default 1; --short 2)")
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option(
         "--gpu-spp", gpu_spp,
         "GPU samples per pixel per repeat, one request (default 128: at 1024^2 on the H200 the size of "
         "request the renderer issues, tracer.md 10.7 ~100 ms; --short 2)")
      ->check(CLI::Range(1u, 2048u));
  app.add_option("--bounces", bounces, "max bounces (default 12)")->check(CLI::Range(1u, 128u));
  app.add_option("--repeats", repeats, "timed repeats (default 5; --short 2)")->check(CLI::Range(1u, 10000u));
  app.add_option("--threads", threads, "CPU threads (default 0 = all cores)");
  std::uint32_t chunk_pixels = 0;
  app.add_option(
      "--chunk-pixels", chunk_pixels,
      "GPU: this many pixels per chunk, within the per-launch limit (default 0 = sized by the chunk "
      "rule; for profiling a known chunk)");
  unsigned render_spp = 0, render_repeats = 3;
  app.add_option(
         "--render-spp", render_spp,
         "GPU: also time the product's render loop (tracer::render, as `facetrace render --device gpu` "
         "runs it, without the GPU start-up) over this many samples per pixel (default 0: off)")
      ->check(CLI::Range(0u, 1u << 20));
  app.add_option("--render-repeats", render_repeats,
                 "runs of the render row (default 3; the first has no size hint)")
      ->check(CLI::Range(1u, 1000u));
  std::vector<std::string> scene_names{"diamond"};
  app.add_option("--scenes", scene_names,
                 std::string("scenes to time, each with its GPU and CPU rows and ratio (default diamond): ") +
                     kSceneNames)
      ->delimiter(',');
  std::string hdr_map = "examples/maps/studio_small.hdr";
  app.add_option("--hdr-map", hdr_map,
                 "diamond_hdr: the example map (default examples/maps/studio_small.hdr)");
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

  std::vector<Row> rows;
  std::vector<Row> render_rows;  // not in the GPU/CPU ratio
  std::vector<std::string> row_scenes;
  std::vector<double> ratios;  // per scene with both rows: GPU / CPU
  // The GPU facts only when this run uses the GPU: a CPU run starts no executor.
  bench::RunContext context = bench::run_context();
  for (const std::string& name : scene_names) {
    std::optional<tr::Scene> named = named_scene(name, hdr_map);
    if (!named) return 2;
    tr::Scene scene = *named;
    scene.width = width;
    scene.height = height;
    scene.max_bounces = bounces;
    if (auto st = tr::validate_scene(scene); !st.ok()) {
      std::fprintf(stderr, "bench_tracer: %s: %s\n", name.c_str(), st.what().c_str());
      return 2;
    }
    std::optional<double> gpu_rate;
    if (device != "cpu") {
      auto& gpu = tr::shared_gpu_backend();
      if (auto why = gpu.unavailable_reason()) {
        std::fprintf(stderr, "bench_tracer: --device %s: no usable GPU: %s\n", device.c_str(), why->c_str());
        return 2;
      }
      if (auto info = gpu.device_info()) context.gpu = bench::gpu_facts(*info);
      auto r = bench_gpu(gpu, scene, warmup, repeats, gpu_spp, chunk_pixels);
      if (!r) return 1;
      rows.push_back(*r);
      row_scenes.push_back(name);
      gpu_rate = r->paths_per_s;
      print_row(*r, name, scene, repeats, context, std::nullopt);
      if (render_spp > 0) {
        auto rr = bench_render(gpu, scene, render_repeats, render_spp);
        if (!rr) return 1;
        rr->over_request = rr->paths_per_s / r->paths_per_s;
        print_row(*rr, name, scene, render_repeats, context, std::nullopt);
        render_rows.push_back(*rr);
      }
    }
    if (device != "gpu") {
      auto r = bench_cpu(scene, warmup, repeats, spp, nthreads);
      if (!r) return 1;
      rows.push_back(*r);
      row_scenes.push_back(name);
      std::optional<double> ratio;
      if (gpu_rate) ratio = *gpu_rate / r->paths_per_s;
      if (ratio) ratios.push_back(*ratio);
      print_row(*r, name, scene, repeats, context, ratio);
    }
  }

  bench::Table table({"scene", "device", "adapter", "spp", "median_ms", "p10_ms", "p90_ms", "M paths/s"});
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    table.add({row_scenes[i], r.device, r.label, std::to_string(r.spp), bench::cell("%.1f", r.ms.median_ms),
               bench::cell("%.1f", r.ms.p10_ms), bench::cell("%.1f", r.ms.p90_ms),
               bench::cell("%.2f", r.paths_per_s / 1e6)});
  }
  for (const auto& r : render_rows)
    table.add({"", "gpu render", r.label, std::to_string(r.spp), bench::cell("%.1f", r.ms.median_ms),
               bench::cell("%.1f", r.ms.p10_ms), bench::cell("%.1f", r.ms.p90_ms),
               bench::cell("%.2f", r.paths_per_s / 1e6)});
  table.print();
  for (std::size_t i = 0; i < ratios.size(); ++i)
    std::fprintf(stderr, "%s: GPU / CPU = %.1fx (%ux%u, %u bounces)\n", scene_names[i].c_str(), ratios[i],
                 width, height, bounces);
  for (const auto& r : render_rows)
    std::fprintf(stderr, "render / request = %.3f (first render %.2f M paths/s, %u spp)\n", r.over_request,
                 r.first_paths_per_s / 1e6, r.spp);
  return 0;
}
