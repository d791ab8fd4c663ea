/// @file
/// The CPU reference tracer: std::thread workers over 16×16 pixel tiles, each pixel summing its samples in
/// ascending s onto the film's running sums (tracer.md §9 G2/G3), so results do not depend on threads.
#include "facetrace/tracer/cpu_tracer.h"

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "tracer/physics/transport.h"
#include "tracer/trace_params.h"

namespace facetrace::tracer {
namespace {

constexpr std::uint32_t kTile = 16;  // facetrace: tile edge in pixels

}  // namespace

Status cpu_accumulate(const Scene& scene, std::uint64_t first_sample, std::uint32_t samples, Film& film,
                      const CpuOptions& options) {
  FT_TRY(check_tier1(scene));
  if (film.width != scene.width || film.height != scene.height || film.xyz.size() != film.pixels() * 3 ||
      film.samples.size() != film.pixels()) {
    return invalid_argument("film: size " + std::to_string(film.width) + "x" + std::to_string(film.height) +
                            " does not match the scene " + std::to_string(scene.width) + "x" +
                            std::to_string(scene.height));
  }
  if (samples == 0) return {};

  const physics::TraceParams params = make_trace_params(scene);
  const std::vector<physics::GpuPlane> planes = make_gpu_planes(scene);
  const physics::GpuPlane* plane_ptr = planes.empty() ? nullptr : planes.data();

  const std::uint32_t tiles_x = (scene.width + kTile - 1) / kTile;
  const std::uint32_t tiles_y = (scene.height + kTile - 1) / kTile;
  const std::uint32_t tile_count = tiles_x * tiles_y;
  unsigned threads = options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, tile_count);

  std::atomic<std::uint32_t> next_tile{0};
  std::atomic<std::uint32_t> done_tiles{0};
  std::atomic<std::uint64_t> nonfinite{0};
  std::atomic<bool> cancelled{false};

  auto worker = [&]() {
    std::uint64_t local_nonfinite = 0;
    for (;;) {
      if (options.cancel && options.cancel->load(std::memory_order_relaxed)) {
        cancelled.store(true, std::memory_order_relaxed);
        break;
      }
      const std::uint32_t tile = next_tile.fetch_add(1, std::memory_order_relaxed);
      if (tile >= tile_count) break;
      const std::uint32_t x0 = (tile % tiles_x) * kTile, y0 = (tile / tiles_x) * kTile;
      const std::uint32_t x1 = std::min(x0 + kTile, scene.width), y1 = std::min(y0 + kTile, scene.height);
      for (std::uint32_t y = y0; y < y1; ++y) {
        for (std::uint32_t x = x0; x < x1; ++x) {
          const std::size_t pix = std::size_t{y} * scene.width + x;
          float sx = film.xyz[pix * 3], sy = film.xyz[pix * 3 + 1], sz = film.xyz[pix * 3 + 2];
          for (std::uint32_t i = 0; i < samples; ++i) {
            // tracer.md §9: s is the absolute sample index; u32 arithmetic wraps.
            const auto s = static_cast<std::uint32_t>(first_sample + i);
            const physics::SampleXyz v = physics::trace_sample(params, plane_ptr, x, y, s);
            sx += v.x;
            sy += v.y;
            sz += v.z;
            local_nonfinite += v.finite ? 0u : 1u;
          }
          film.xyz[pix * 3] = sx;
          film.xyz[pix * 3 + 1] = sy;
          film.xyz[pix * 3 + 2] = sz;
          film.samples[pix] += samples;
        }
      }
      const std::uint32_t done = done_tiles.fetch_add(1, std::memory_order_relaxed) + 1;
      if (options.progress) options.progress(static_cast<double>(done) / static_cast<double>(tile_count));
    }
    nonfinite.fetch_add(local_nonfinite, std::memory_order_relaxed);
  };

  if (threads <= 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    pool.reserve(threads);
    for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
    for (std::thread& t : pool) t.join();
  }
  film.nonfinite += nonfinite.load();
  if (cancelled.load()) return {Code::kCancelled, "cpu_accumulate: cancelled between tiles"};
  return {};
}

}  // namespace facetrace::tracer
