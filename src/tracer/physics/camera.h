/// @file
/// Orbit pinhole camera (docs/design/tracer.md §5).
#pragma once

#include <cstdint>

#include "host_device.h"
#include "chunk.h"
#include "vec3.h"

namespace facetrace::tracer::physics {

inline constexpr float kVerticalFovDeg = 42.0f;  // docs/design/tracer.md §5: fixed vertical field of view
inline constexpr float kMaxPitchDeg = 89.9f;     // docs/design/tracer.md §5: |pitch| ≤ 89.9°

/// Primary ray direction through pixel (x, y) with jitter (jx, jy) ∈ [−0.5, 0.5) (docs/design/tracer.md §5); the origin
/// is p.eye. Pixel centres sit at integer x/W.
FT_HD Vec3 camera_direction(const TraceParams& p, std::uint32_t x, std::uint32_t y, float jx, float jy) {
  const float u =
      ((static_cast<float>(x) + jx) / static_cast<float>(p.width) - 0.5f) * 2.0f * p.aspect * p.tan_half_fov;
  const float v =
      (0.5f - (static_cast<float>(y) + jy) / static_cast<float>(p.height)) * 2.0f * p.tan_half_fov;
  return normalize(p.forward + p.right * u + p.up * v);
}

}  // namespace facetrace::tracer::physics
