/// @file
/// Slab intersection of a ray with a convex polyhedron (tracer.md §4).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "hd.h"
#include "params.h"
#include "vec3.h"

namespace facetrace::tracer::physics {

inline constexpr float kParallelEps = 1e-7f;  // tracer.md §4 step 2
inline constexpr float kHitEps = 1e-4f;       // tracer.md §4 step 5
inline constexpr float kRayOffset = 1e-4f;    // tracer.md §7.2 step 9

/// A hit: plane index (−1 = miss) and distance along the ray.
struct Hit {
  int plane;
  float t;
};
static_assert(sizeof(Hit) == 8, "Hit layout");

/// Slab test of o + t·D against planes[0, count) (tracer.md §4). The normal of the hit is the outward
/// normal of `plane`; the caller flips it to face the ray.
FT_HD Hit intersect_polyhedron(const GpuPlane* planes, std::uint32_t count, Vec3 o, Vec3 dir) {
  float t_near = -FLT_MAX;
  float t_far = FLT_MAX;
  int i_near = -1;
  int i_far = -1;
  for (std::uint32_t i = 0; i < count; ++i) {
    const GpuPlane pl = planes[i];
    const float den = pl.nx * dir.x + pl.ny * dir.y + pl.nz * dir.z;
    const float side = pl.nx * o.x + pl.ny * o.y + pl.nz * o.z + pl.d;
    if (fabsf(den) <= kParallelEps) {
      if (side > 0.0f) return Hit{-1, 0.0f};  // parallel and outside: miss (step 2)
      continue;
    }
    const float t = -side / den;
    if (den < 0.0f) {
      if (t > t_near) {
        t_near = t;
        i_near = static_cast<int>(i);
      }
    } else if (t < t_far) {
      t_far = t;
      i_far = static_cast<int>(i);
    }
  }
  if (t_near > t_far) return Hit{-1, 0.0f};                        // step 4
  if (t_near > kHitEps && i_near >= 0) return Hit{i_near, t_near};  // step 5
  if (t_far > kHitEps && i_far >= 0) return Hit{i_far, t_far};
  return Hit{-1, 0.0f};
}

}  // namespace facetrace::tracer::physics
