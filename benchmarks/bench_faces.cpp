/// @file
/// bench_faces: YuNet 640×640 per image and embedder per face on the CPU, 1 thread and all threads. JSON lines on
/// stdout (docs/design/style.md §10, through bench_common.h; "gpu" is null: no runtime here), a table on stderr.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "facetrace/core/env.h"
#include "facetrace/core/image.h"
#include "facetrace/core/logging.h"
#include "facetrace/faces/align.h"
#include "facetrace/faces/detector.h"
#include "facetrace/faces/embedder.h"
#include "facetrace/faces/net.h"

namespace {

using namespace facetrace::faces;
namespace bench = facetrace::bench;

/// Times `run` and reports one case: a JSON line with `unit` = runs per second, and a table row. False when a
/// run failed (reported here).
template <class F>
bool measure(const char* cas, int threads, int warmup, int iters, const char* unit,
             const bench::RunContext& context, bench::Table& table, F&& run) {
  auto ms = bench::time_runs(warmup, iters, run);
  if (!ms) {
    std::fprintf(stderr, "bench_faces: %s: a run failed\n", cas);
    return false;
  }
  const bench::Stats s = bench::summarize(*ms);
  const double per_s = 1000.0 / s.median_ms;
  bench::Json j = bench::line("faces", cas);
  j["device"] = "cpu";
  j["threads"] = threads;
  bench::add_stats(j, s, iters, warmup);
  j[unit] = bench::rounded(per_s, 2);
  j["dispatches"] = 0;
  j["stalls"] = 0;
  j["peak_in_flight"] = 0;
  bench::emit(std::move(j), context);
  table.add({cas, std::to_string(threads), bench::cell("%.2f", s.median_ms), bench::cell("%.2f", s.p10_ms),
             bench::cell("%.2f", s.p90_ms), bench::cell("%.1f", per_s) + " " + unit});
  return true;
}

}  // namespace

/// Exit code when the test data is absent (ctest SKIP_RETURN_CODE).
constexpr int kExitSkipped = 77;

int main(int argc, char** argv) {
  facetrace::core::init_logging_from_env();
  CLI::App app{"bench_faces: YuNet and embedder times on the CPU (JSON lines on stdout, table on stderr)"};
  std::string device = "cpu", data = FT_TEST_DATA_DIR;
  bool short_run = false;
  app.add_option("--device", device, "cpu (the only device of this build; default cpu)");
  app.add_flag("--short", short_run, "CI smoke run: 1 warm-up, 3 timed runs, no pauses");
  app.add_option("--data", data,
                 "test data folder with images/ (and optionally models/; default the repository's "
                 "tests/data, or $FACETRACE_TEST_DATA when that is not a folder)");
  CLI11_PARSE(app, argc, argv);
  if (device != "cpu") {
    std::fprintf(stderr, "bench_faces: device '%s' is not available (only cpu in this build)\n",
                 device.c_str());
    return 2;
  }
  if (auto env = facetrace::core::env_string("FACETRACE_TEST_DATA");
      env && (data.empty() || !std::filesystem::is_directory(data)))
    data = *env;
  const std::string models = data + "/models/", images = data + "/images/";
  if (!std::filesystem::is_directory(images)) {
    std::fprintf(stderr,
                 "bench_faces: no photos at %s (pass --data DIR or set FACETRACE_TEST_DATA); skipped\n",
                 images.c_str());
    return kExitSkipped;
  }
  auto det = Detector::builtin();
  if (!det) {
    std::fprintf(stderr, "bench_faces: %s\n", det.status().to_string().c_str());
    return 1;
  }
  // No embedder ships (models/SOURCES.md): the MobileFaceNet case runs only when DIR/models holds the file.
  const std::string mfn_path = models + "mobilefacenet_foamliu_128d.onnx";
  std::optional<Embedder> emb;
  if (std::filesystem::exists(mfn_path)) {
    auto e = Embedder::load(mfn_path);
    if (!e) {
      std::fprintf(stderr, "bench_faces: %s\n", e.status().to_string().c_str());
      return 1;
    }
    emb = std::move(*e);
  } else {
    std::fprintf(stderr, "bench_faces: no %s; the MobileFaceNet case is skipped\n", mfn_path.c_str());
  }
  auto photo = facetrace::core::load_image(images + "obama_portrait_2012.jpg");
  if (!photo) {
    std::fprintf(stderr, "bench_faces: %s\n", photo.status().to_string().c_str());
    return 1;
  }
  auto faces = det->detect(*photo);
  if (!faces || faces->empty()) {
    std::fprintf(stderr, "bench_faces: no face in the benchmark photo\n");
    return 1;
  }
  auto aligned = align_face(*photo, (*faces)[0].landmarks);
  auto yin = det->net().program({1, 3, 640, 640});
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int warmup = short_run ? 1 : 3, iters = short_run ? 3 : 15;
  std::fprintf(stderr, "YuNet %.0f M MACs, MobileFaceNet %.0f M MACs, %d hardware threads\n",
               static_cast<double>(yin->macs()) / 1e6,
               emb ? static_cast<double>(emb->net().program({1, 3, 112, 112})->macs()) / 1e6 : 0.0, all);
  std::fprintf(stderr, "%s\n", cpu_kernel_info().c_str());
  const bench::RunContext context = bench::run_context();  // no runtime linked: "gpu" is null
  bench::Table table({"case", "threads", "median_ms", "p10_ms", "p90_ms", "throughput"});
  std::vector<float> input(3 * 640 * 640);
  letterbox_bgr(photo->rgb, photo->width, photo->height, 640, input);
  std::vector<int> counts{1};
  if (all > 1) counts.push_back(all);
  const auto settle = std::chrono::milliseconds(short_run ? 0 : 300);
  for (int t : counts) {
    Net yunet = det->net();
    yunet.set_threads(t);
    if (!measure("yunet_640_network", t, warmup, iters, "images_per_s", context, table,
                 [&] { return yunet.run(input).ok(); }))
      return 1;
    std::this_thread::sleep_for(settle);
    if (!emb) continue;
    Net mfn = emb->net();
    mfn.set_threads(t);
    auto x = emb->preprocess(*aligned);
    if (!x) {
      std::fprintf(stderr, "bench_faces: %s\n", x.status().to_string().c_str());
      return 1;
    }
    if (!measure("mobilefacenet_112_per_face", t, warmup, iters * 2, "faces_per_s", context, table,
                 [&] { return mfn.run(*x).ok(); }))
      return 1;
    std::this_thread::sleep_for(settle);
  }
  table.print();
  return 0;
}
