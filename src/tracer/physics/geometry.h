/// @file
/// Slab intersection of a ray with a convex polyhedron (docs/design/tracer.md §4).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "host_device.h"
#include "chunk.h"
#include "vec3.h"

namespace facetrace::tracer::physics {

inline constexpr float kParallelEps = 1e-7f;  // docs/design/tracer.md §4 step 2
inline constexpr float kHitEps = 1e-4f;       // docs/design/tracer.md §4 step 5
inline constexpr float kRayOffset = 1e-4f;    // docs/design/tracer.md §7.2 step 9

/// A hit: plane index (−1 = miss) and distance along the ray.
struct Hit {
  int plane;
  float t;
};
static_assert(sizeof(Hit) == 8, "Hit layout");

/// True when the ray o + t·D (t ≥ 0, D unit) misses the sphere |x|² ≤ r2 and starts outside it: then it misses
/// the stone, and the slab test can be skipped (most camera rays that miss the stone end here).
FT_HD bool misses_bound(float r2, Vec3 o, Vec3 dir) {
  const float c = dot(o, o) - r2;
  if (c <= 0.0f) return false;  // starts inside the sphere
  const float b = dot(o, dir);
  return b >= 0.0f || b * b < c;  // moving away, or the closest approach is outside
}

/// n·D and n·o + d of one plane, the one form both slab tests use. Explicit fmaf (tracer.md conventions): the
/// same rounding on the CPU and the GPU, and FMA speed on both.
FT_HD float plane_den(const FacetPlane& pl, Vec3 dir) {
  return fmaf(pl.nx, dir.x, fmaf(pl.ny, dir.y, pl.nz * dir.z));
}
FT_HD float plane_side(const FacetPlane& pl, Vec3 o) {
  return fmaf(pl.nx, o.x, fmaf(pl.ny, o.y, fmaf(pl.nz, o.z, pl.d)));
}

/// The slab test's last step (docs/design/tracer.md §4 steps 4–5) from the kept near and far candidates.
FT_HD Hit slab_result(int i_near, float near_num, float near_den, int i_far, float far_num, float far_den) {
  const float t_near = i_near >= 0 ? near_num / near_den : -FLT_MAX;
  const float t_far = i_far >= 0 ? far_num / far_den : FLT_MAX;
  if (t_near > t_far) return Hit{-1, 0.0f};                         // step 4
  if (t_near > kHitEps && i_near >= 0) return Hit{i_near, t_near};  // step 5
  if (t_far > kHitEps && i_far >= 0) return Hit{i_far, t_far};
  return Hit{-1, 0.0f};
}

/// The slab test for an origin inside the polyhedron *(facetrace)*: returns false, leaving `hit` alone, when
/// some plane has the origin strictly outside (side > 0), or the origin is outside the bounding sphere |x|² ≤ r2,
/// or the direction is not finite; otherwise sets `hit` to exactly what intersect_polyhedron returns.
///
/// With no side > 0 the general test keeps no entering candidate (each needs side > 0) and takes no early
/// exit (each needs side > 0), so only its exit-candidate updates remain, made here in the same plane order with
/// the same comparisons. The "no candidate yet" state is the fraction 1/0 (+∞), which every candidate a/den
/// beats (a·0 < 1·den), as the general test's i_far < 0 does: an origin in the sphere and a finite direction
/// keep a = −side and den > 0 finite. The loop has no data-dependent branch — a warp's lanes, whose rays point
/// different ways, stay converged — and does about half the general loop's work per plane. Rays inside the
/// stone take it; the rare origin that rounding put just outside a facet falls back to the general test.
FT_HD bool exit_from_inside(const FacetPlane* planes, std::uint32_t count, float r2, Vec3 o, Vec3 dir,
                            Hit& hit) {
  // x − x is 0 for finite x, NaN otherwise (no fast-math on tracer targets); a NaN origin fails the sphere test.
  if (!(dot(o, o) <= r2 && dir.x - dir.x == 0.0f && dir.y - dir.y == 0.0f && dir.z - dir.z == 0.0f))
    return false;
  float far_num = 1.0f, far_den = 0.0f;
  int i_far = -1;
  float side_max = 0.0f;  // > 0 exactly when some side > 0 (a NaN side never wins the selection)
  FT_UNROLL2 for (std::uint32_t i = 0; i < count; ++i) {
    const FacetPlane pl = planes[i];
    const float den = plane_den(pl, dir);
    const float side = plane_side(pl, o);
    side_max = side > side_max ? side : side_max;
    const float a = -side;
    const bool take = den > kParallelEps && a * far_den < far_num * den;
    far_num = take ? a : far_num;
    far_den = take ? den : far_den;
    i_far = take ? static_cast<int>(i) : i_far;
  }
  if (side_max > 0.0f) return false;
  hit = slab_result(-1, 0.0f, 1.0f, i_far, far_num, far_den);
  return true;
}

/// Slab test of o + t·D against planes[0, count) (docs/design/tracer.md §4). The normal of the hit is the outward
/// normal of `plane`; the caller flips it to face the ray.
///
/// Division-free form *(facetrace)*: each candidate t = num/den with den > 0 is kept as a fraction and
/// compared by cross-multiplication (a/b > c/d ⇔ a·d > c·b for b, d > 0), so a bounce costs two divisions
/// instead of one per plane. A plane the ray starts outside of and moves away from is a miss at once (its
/// t ≤ 0 makes both t_near > t_far or t_far ≤ 1e-4 true), which ends most missing camera rays early.
FT_HD Hit intersect_polyhedron(const FacetPlane* planes, std::uint32_t count, Vec3 o, Vec3 dir) {
  float near_num = 0.0f, near_den = 1.0f;  // t_near = near_num / near_den, valid when i_near ≥ 0
  float far_num = 0.0f, far_den = 1.0f;    // t_far = far_num / far_den, valid when i_far ≥ 0
  int i_near = -1;
  int i_far = -1;
  FT_UNROLL2 for (std::uint32_t i = 0; i < count; ++i) {
    const FacetPlane pl = planes[i];
    const float den = plane_den(pl, dir);
    const float side = plane_side(pl, o);
    if (fabsf(den) <= kParallelEps) {
      if (side > 0.0f) return Hit{-1, 0.0f};  // parallel and outside: miss (step 2)
      continue;
    }
    if (den < 0.0f) {
      // Entering plane: t = side / |den|. A plane the origin is not outside of gives t ≤ 0, which can never
      // be the hit (step 5 needs t_near > 1e-4) nor turn a hit into a miss (step 4 then needs t_far < t_near
      // ≤ 0, which fails step 5 anyway), so it is skipped.
      const float b = -den;
      if (side > 0.0f && (i_near < 0 || side * near_den > near_num * b)) {
        near_num = side;
        near_den = b;
        i_near = static_cast<int>(i);
      }
    } else {
      if (side > 0.0f) return Hit{-1, 0.0f};  // outside and leaving: t ≤ 0 for the exit slab
      // Exiting plane: t = −side / den.
      const float a = -side;
      if (i_far < 0 || a * far_den < far_num * den) {
        far_num = a;
        far_den = den;
        i_far = static_cast<int>(i);
      }
    }
  }
  return slab_result(i_near, near_num, near_den, i_far, far_num, far_den);
}

}  // namespace facetrace::tracer::physics
