/// @file
/// The CPU reference tracer: multithreaded over pixel tiles, deterministic (docs/design/tracer.md §9).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

#include "facetrace/core/status.h"
#include "facetrace/tracer/film.h"
#include "facetrace/tracer/scene.h"

namespace facetrace::tracer {

struct CpuOptions {
  unsigned threads = 0;                       ///< 0 = all hardware threads
  const std::atomic<bool>* cancel = nullptr;  ///< polled between tiles
  /// Helpers from the idle-priority pool (core::Priority::kIdle): only cores nothing else wants (the render's
  /// hybrid lane next to the GPU, docs/design/tracer.md §10.7).
  bool idle_priority = false;
  std::function<void(double fraction)>
      progress;  ///< called from worker threads (thread-safe caller); must not throw
  /// Next-event estimation of an HDR map, and of the DaylightSun disc, at frosted facets, with MIS against the
  /// facet's own sampling (docs/design/tracer.md §6.1, §6.2). Off only to test that both estimators agree;
  /// results differ in noise only.
  bool hdr_nee = true;
};

/// Adds samples [first_sample, first_sample + samples) of every pixel to `film`, each pixel in ascending
/// sample order (continuing its running sum). `film` must match the scene size. Traces Tier 1 and the Tier 2
/// features (HDR maps, the lighting presets but the UV lamps, uniaxial stones, inclusions, edge rounding:
/// tier_features(scene).status()). Errors: kInvalidArgument (bad scene / film size), kNotSupported (a UV lamp,
/// or Tier 3), kCancelled (film then partially updated: callers that need all-or-nothing render into a copy).
Status cpu_accumulate(const Scene& scene, std::uint64_t first_sample, std::uint32_t samples, Film& film,
                      const CpuOptions& options = {});

}  // namespace facetrace::tracer
