/// @file
/// The CPU reference tracer: 16×16 pixel tiles on the library's one parallel loop (core::parallel_for), each
/// pixel summing its samples in ascending s onto the film's running sums (docs/design/tracer.md §9 G2/G3), so results do
/// not depend on the threads or the order the tiles run in.
#include "facetrace/tracer/cpu_tracer.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "facetrace/core/parallel.h"

#include "physics/medium.h"
#include "physics/transport.h"
#include "cpu/trace_params.h"

namespace facetrace::tracer {
namespace {

constexpr std::uint32_t kTile = 16;  // facetrace: tile edge in pixels

}  // namespace

namespace detail {

// An FMA clone and a baseline clone of the tile loop, picked at load time. The physics uses fmaf explicitly
// and nothing is contracted implicitly (-ffp-contract=off), so both clones compute identical bits: fmaf is
// exactly rounded whether it is one instruction or a libm call. Not under ThreadSanitizer: GCC instruments the
// clones' ifunc resolver, which the dynamic loader runs before the TSan runtime is up (a crash at start-up).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define FT_CPU_CLONES __attribute__((target_clones("fma", "default"), flatten))
#else
#define FT_CPU_CLONES
#endif

/// The loop of trace_tile for one environment: `sample(x, y, s)` traces one sample.
template <class Sample>
[[gnu::always_inline]] inline std::uint64_t tile_loop(const Sample& sample, std::uint32_t x0,
                                                      std::uint32_t x1, std::uint32_t y0, std::uint32_t y1,
                                                      std::uint32_t width, std::uint64_t first_sample,
                                                      std::uint32_t samples, float* xyz) {
  std::uint64_t nonfinite = 0;
  for (std::uint32_t y = y0; y < y1; ++y) {
    for (std::uint32_t x = x0; x < x1; ++x) {
      float* px = xyz + (std::size_t{y} * width + x) * 3;
      float sx = px[0], sy = px[1], sz = px[2];
      for (std::uint32_t i = 0; i < samples; ++i) {
        // docs/design/tracer.md §9: s is the absolute sample index; u32 arithmetic wraps.
        const auto s = static_cast<std::uint32_t>(first_sample + i);
        const physics::SampleXyz v = sample(x, y, s);
        sx += v.x;
        sy += v.y;
        sz += v.z;
        nonfinite += v.finite ? 0u : 1u;
      }
      px[0] = sx;
      px[1] = sy;
      px[2] = sz;
    }
  }
  return nonfinite;
}

/// Adds samples [first_sample, first_sample + samples) of the pixels [x0, x1) × [y0, y1) to `xyz` (3 floats
/// per pixel, row stride `width`), each pixel in ascending sample order. Returns the non-finite count.
/// `hdr` and `preset` null: the analytic environments (physics::trace_sample); else the HDR map or the lit
/// model (trace_sample_env). `medium` null: a clear isotropic stone; else the Tier 2 transport of
/// physics/medium.h.
FT_CPU_CLONES std::uint64_t trace_tile(const physics::TraceParams& params,
                                       const physics::MediumParams* medium, const physics::FacetPlane* planes,
                                       const physics::EnvMapView* hdr, const physics::PresetEnv* preset,
                                       std::uint32_t x0, std::uint32_t x1, std::uint32_t y0, std::uint32_t y1,
                                       std::uint32_t width, std::uint64_t first_sample, std::uint32_t samples,
                                       float* xyz) {
  if (medium != nullptr) {
    const physics::MediumParams& m = *medium;
    auto run = [&](const auto& env) {
      if (m.kind == physics::kMediumUniaxial) {
        return tile_loop(
            [&](std::uint32_t x, std::uint32_t y, std::uint32_t s) {
              return physics::trace_sample_medium<physics::kMediumUniaxial>(params, m, planes, env, x, y, s);
            },
            x0, x1, y0, y1, width, first_sample, samples, xyz);
      }
      return tile_loop(
          [&](std::uint32_t x, std::uint32_t y, std::uint32_t s) {
            return physics::trace_sample_medium<physics::kMediumIsotropic>(params, m, planes, env, x, y, s);
          },
          x0, x1, y0, y1, width, first_sample, samples, xyz);
    };
    if (hdr != nullptr) return run(physics::HdrEnv{*hdr});
    if (preset != nullptr) return run(*preset);
    return run(physics::AnalyticEnv{});
  }
  if (preset != nullptr) {
    const physics::PresetEnv env = *preset;
    return tile_loop([&](std::uint32_t x, std::uint32_t y,
                         std::uint32_t s) { return physics::trace_sample_env(params, planes, env, x, y, s); },
                     x0, x1, y0, y1, width, first_sample, samples, xyz);
  }
  if (hdr != nullptr) {
    const physics::HdrEnv env{*hdr};
    return tile_loop([&](std::uint32_t x, std::uint32_t y,
                         std::uint32_t s) { return physics::trace_sample_env(params, planes, env, x, y, s); },
                     x0, x1, y0, y1, width, first_sample, samples, xyz);
  }
  return tile_loop([&](std::uint32_t x, std::uint32_t y,
                       std::uint32_t s) { return physics::trace_sample(params, planes, x, y, s); },
                   x0, x1, y0, y1, width, first_sample, samples, xyz);
}

}  // namespace detail

Status cpu_accumulate(const Scene& scene, std::uint64_t first_sample, std::uint32_t samples, Film& film,
                      const CpuOptions& options) {
  FT_TRY(validate_scene(scene));
  FT_TRY(tier_features(scene).status());
  if (film.width != scene.width || film.height != scene.height || film.xyz.size() != film.pixels() * 3 ||
      film.samples.size() != film.pixels()) {
    return invalid_argument("film: size " + std::to_string(film.width) + "x" + std::to_string(film.height) +
                            " does not match the scene " + std::to_string(scene.width) + "x" +
                            std::to_string(scene.height));
  }
  if (samples == 0) return {};

  const physics::TraceParams params = make_trace_params(scene);
  const physics::MediumParams medium = make_medium_params(scene);
  const physics::MediumParams* medium_ptr = physics::needs_medium_transport(medium) ? &medium : nullptr;
  const std::vector<physics::FacetPlane> planes = make_facet_planes(scene);
  const physics::FacetPlane* plane_ptr = planes.empty() ? nullptr : planes.data();
  physics::EnvMapView hdr_view{};
  const physics::EnvMapView* hdr = nullptr;
  if (scene.environment == EnvironmentKind::kHdr) {  // validate_scene checked environment_light
    hdr_view = env_map_view(*scene.environment_light, scene.exposure, options.hdr_nee);
    hdr = &hdr_view;
  }
  // A lit model (docs/design/tracer.md §6.2): NEE of the DaylightSun disc, off with hdr_nee only to test it.
  const physics::PresetEnv preset_env{params.preset_model == physics::kPresetSun && options.hdr_nee ? 1u
                                                                                                    : 0u};
  const physics::PresetEnv* preset = params.env_kind == physics::kEnvPreset ? &preset_env : nullptr;

  const std::uint32_t tiles_x = (scene.width + kTile - 1) / kTile;
  const std::uint32_t tiles_y = (scene.height + kTile - 1) / kTile;
  const std::uint32_t tile_count = tiles_x * tiles_y;

  std::atomic<std::uint32_t> done_tiles{0};
  std::atomic<std::uint64_t> nonfinite{0};
  std::atomic<bool> cancelled{false};
  // One index per tile; every pixel belongs to one tile, so no two calls touch the same sums.
  core::parallel_for(
      tile_count, static_cast<int>(options.threads),
      [&](std::int64_t index) {
        if (cancelled.load(std::memory_order_relaxed)) return;
        if (options.cancel && options.cancel->load(std::memory_order_relaxed)) {
          cancelled.store(true, std::memory_order_relaxed);
          return;
        }
        const auto tile = static_cast<std::uint32_t>(index);
        const std::uint32_t x0 = (tile % tiles_x) * kTile, y0 = (tile / tiles_x) * kTile;
        const std::uint32_t x1 = std::min(x0 + kTile, scene.width), y1 = std::min(y0 + kTile, scene.height);
        nonfinite.fetch_add(detail::trace_tile(params, medium_ptr, plane_ptr, hdr, preset, x0, x1, y0, y1,
                                               scene.width, first_sample, samples, film.xyz.data()),
                            std::memory_order_relaxed);
        for (std::uint32_t y = y0; y < y1; ++y)
          for (std::uint32_t x = x0; x < x1; ++x) film.samples[std::size_t{y} * scene.width + x] += samples;
        const std::uint32_t done = done_tiles.fetch_add(1, std::memory_order_relaxed) + 1;
        if (options.progress) options.progress(static_cast<double>(done) / static_cast<double>(tile_count));
      },
      options.idle_priority ? core::Priority::kIdle : core::Priority::kNormal);
  film.nonfinite += nonfinite.load();
  if (cancelled.load()) return {Code::kCancelled, "cpu_accumulate: cancelled between tiles"};
  return {};
}

}  // namespace facetrace::tracer
