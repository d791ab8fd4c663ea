/// @file
/// bench_faces: YuNet 640×640 per image and embedder per face on the CPU, 1 thread and all threads. JSON lines on
/// stdout (style.md §10), a table on stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "facetrace/core/env.h"
#include "facetrace/core/logging.h"
#include "facetrace/faces/align.h"
#include "facetrace/faces/detector.h"
#include "facetrace/faces/embedder.h"
#include "facetrace/core/image.h"
#include "facetrace/faces/net.h"

namespace {

using namespace facetrace::faces;
using Clock = std::chrono::steady_clock;

struct Stats {
  double median, p10, p90;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)]; };
  return {at(0.5), at(0.1), at(0.9)};
}

template <class F>
Stats time_it(int warmup, int iters, F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return stats(ms);
}

void report(const char* cas, int threads, int warmup, int iters, const Stats& s, const char* unit) {
#ifdef NDEBUG
  const char* build = "release";
#else
  const char* build = "debug";
#endif
  std::printf("{\"bench\":\"faces\",\"case\":\"%s\",\"device\":\"cpu\",\"threads\":%d,\"driver\":null,\"cuda\":null,"
              "\"build\":\"%s\",\"iters\":%d,\"warmup\":%d,\"median_ms\":%.3f,\"p10_ms\":%.3f,\"p90_ms\":%.3f,"
              "\"%s\":%.2f,\"dispatches\":0,\"stalls\":0,\"peak_in_flight\":0}\n",
              cas, threads, build, iters, warmup, s.median, s.p10, s.p90, unit, 1000.0 / s.median);
  std::fflush(stdout);
  std::fprintf(stderr, "%-28s %7d %10.2f %10.2f %10.2f %12.1f %s\n", cas, threads, s.median, s.p10, s.p90,
               1000.0 / s.median, unit);
}

}  // namespace

/// Exit code when the test data is absent (ctest SKIP_RETURN_CODE).
constexpr int kExitSkipped = 77;

int main(int argc, char** argv) {
  facetrace::core::init_logging_from_env();
  std::string device = "cpu", data = FT_TEST_DATA_DIR;
  bool short_run = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--device") && i + 1 < argc) {
      device = argv[++i];
    } else if (!std::strcmp(argv[i], "--short")) {
      short_run = true;
    } else if (!std::strcmp(argv[i], "--data") && i + 1 < argc) {
      data = argv[++i];
    } else {
      std::fprintf(stderr, "usage: bench_faces [--device cpu] [--short] [--data DIR]\n");
      return 2;
    }
  }
  if (device != "cpu") {
    std::fprintf(stderr, "bench_faces: device '%s' is not available (only cpu in this build)\n", device.c_str());
    return 2;
  }
  if (auto env = facetrace::core::env_string("FACETRACE_TEST_DATA"); env && (data.empty() || !std::filesystem::is_directory(data)))
    data = *env;
  const std::string models = data + "/models/", images = data + "/images/";
  if (!std::filesystem::is_directory(images)) {
    std::fprintf(stderr, "bench_faces: no photos at %s (pass --data DIR or set FACETRACE_TEST_DATA); skipped\n",
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
  std::fprintf(stderr, "%-28s %7s %10s %10s %10s %12s\n", "case", "threads", "median_ms", "p10_ms", "p90_ms",
               "throughput");
  std::vector<float> input(3 * 640 * 640);
  letterbox_bgr(photo->rgb, photo->width, photo->height, 640, input);
  std::vector<int> counts{1};
  if (all > 1) counts.push_back(all);
  for (int t : counts) {
    Net yunet = det->net();
    yunet.set_threads(t);
    report("yunet_640_network", t, warmup, iters, time_it(warmup, iters, [&] { (void)yunet.run(input); }),
           "images_per_s");
    std::this_thread::sleep_for(std::chrono::milliseconds(short_run ? 0 : 300));
    if (!emb) continue;
    Net mfn = emb->net();
    mfn.set_threads(t);
    auto x = emb->preprocess(*aligned);
    report("mobilefacenet_112_per_face", t, warmup, iters * 2, time_it(warmup, iters * 2, [&] { (void)mfn.run(*x); }),
           "faces_per_s");
    std::this_thread::sleep_for(std::chrono::milliseconds(short_run ? 0 : 300));
  }
  return 0;
}
