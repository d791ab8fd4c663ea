/// @file
/// Edge rounding (Material::edge_rounding_radius, Tier 2): the shading normal near a facet edge
/// (docs/design/tracer.md §4.1). Not yet called by the transport.
///
/// The model follows the reference renderer, `suitable-name/indicatrix`,
/// `crates/indicatrix/src/optics/raytracer/intersect.rs` (`shading_normal_near_edge`, called for every facet
/// hit from `raytracer/transport/inner.rs`), written anew here. It is a shading-normal model: the stone stays
/// the sharp polyhedron for intersection, path length and the next origin; only the normal used at the
/// surface (frame rotation, Fresnel, refraction, reflection, frosted scattering) is bent near an edge. For a
/// hit at `pos` on facet h with outward normal n_h and a plane i at distance δᵢ = −(nᵢ·pos + dᵢ) ≥ 0 from the
/// hit point:
///
/// - a plane with δᵢ ≥ r does nothing; with no plane closer than r the result is n_h itself, bit for bit;
/// - one plane closer than r (an edge): with t = clamp(1 − δᵢ/r, 0, 1), s = t²(3 − 2t) (smoothstep) and the
///   bisector b = (n_h + nᵢ)/|n_h + nᵢ|, the normal is (1 − s)·n_h + s·b, normalised — the reference's
///   formula. It rotates monotonically from n_h at δᵢ = r to b on the edge, where both facets give the same
///   b;
/// - two or more planes closer than r (a corner, or a facet narrower than the zones) *(facetrace)*: the
///   reference blends towards the bisector with the nearest plane only, which makes a seam inside the facet
///   wherever the nearest plane changes (on the brilliant, e.g. along the middle of each pavilion main, where
///   both lower girdle planes are within r). Here every plane within r takes part, with weights that depend
///   only on the point: with s_h = 1 for the hit plane and Lᵢⱼ = |nᵢ + nⱼ|, plane i of the set P = {h} ∪
///   {planes within r} weighs Wᵢ = sᵢ·Πⱼ≠ᵢ (1 − sⱼ + sⱼ/Lᵢⱼ), and the normal is Σ Wᵢnᵢ normalised. With one
///   plane besides h this is the reference's vector in exact arithmetic (W_h = 1 − s + s/L, Wᵢ = s/L); a
///   plane entering the set starts at weight 0, so the normal is continuous inside each facet; and the set
///   and weights at a point on the edge of facets h and i are the same seen from either facet, so the normal
///   is continuous across every edge, corners included. At a vertex where all of P meet (every s = 1) it is
///   Σᵢ (Πⱼ≠ᵢ 1/Lᵢⱼ)·nᵢ, e.g. the cube corner (1, 1, 1)/√3.
///
/// The distance is to the neighbour's plane, not to its facet polygon (as in the reference): next to a nearly
/// coplanar neighbour the zone is wide (r/sin of the angle between the normals) and the rotation small.
#pragma once

#include <cmath>
#include <cstdint>

#include "host_device.h"
#include "chunk.h"
#include "geometry.h"
#include "vec3.h"

namespace facetrace::tracer::physics {

/// Planes besides the hit plane that take part in a corner blend *(facetrace, docs/design/tracer.md §4.1)*:
/// the nearest ones are kept (ties to the lower index). On the round brilliant at r = 0.02, 200 000 sampled
/// surface points had at most 8 planes within r; beyond the cap the farthest are dropped, the one place the
/// normal can jump.
inline constexpr std::uint32_t kMaxRoundingNeighbours = 8;  // docs/design/tracer.md §4.1
/// |nᵢ + nⱼ| is floored here *(facetrace)*, so that near-antiparallel normals (a knife edge) give a finite
/// weight instead of a division by zero.
inline constexpr float kMinBisectorLength = 1e-6f;  // docs/design/tracer.md §4.1

namespace detail {

/// The edge profile (docs/design/tracer.md §4.1): smoothstep of t = clamp(1 − dist/radius, 0, 1), 0 at dist ≥
/// radius, 1 at dist ≤ 0 (a hit point a rounding error outside the neighbour's plane). radius > 0.
FT_HD float edge_blend(float dist, float radius) {
  float t = 1.0f - dist / radius;
  t = t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t);
  return t * t * fmaf(-2.0f, t, 3.0f);
}

FT_HD Vec3 plane_normal(const FacetPlane& pl) { return Vec3{pl.nx, pl.ny, pl.nz}; }

/// One neighbour within r (docs/design/tracer.md §4.1): normalize((1 − s)·n_h + s·b), b the unit bisector of
/// n_h and n_i — the reference's formula. n_h itself when the bisector or the blend is degenerate.
FT_HD Vec3 edge_normal(Vec3 n_h, Vec3 n_i, float s) {
  const Vec3 sum = n_h + n_i;
  const float l2 = dot(sum, sum);
  if (!(l2 > kMinBisectorLength * kMinBisectorLength)) return n_h;
  const Vec3 bisector = sum * (1.0f / sqrtf(l2));
  const Vec3 m = n_h * (1.0f - s) + bisector * s;
  const float m2 = dot(m, m);
  return m2 > 0.0f ? m * (1.0f / sqrtf(m2)) : n_h;
}

/// The corner blend (docs/design/tracer.md §4.1) over the hit plane and `n` ≥ 1 neighbours `idx[0..n)` with
/// profiles `s[0..n)`: normalize(Σ Wᵢnᵢ), Wᵢ = sᵢ·Πⱼ≠ᵢ (1 − sⱼ + sⱼ/Lᵢⱼ), s = 1 for the hit plane.
/// Cost O((n + 1)²).
FT_HD Vec3 corner_normal(const FacetPlane* planes, std::uint32_t hit_plane, const std::uint32_t* idx,
                         const float* s, std::uint32_t n) {
  const Vec3 n_h = plane_normal(planes[hit_plane]);
  Vec3 sum{0.0f, 0.0f, 0.0f};
  for (std::uint32_t a = 0; a <= n; ++a) {  // member 0 is the hit plane, member a > 0 is idx[a − 1]
    const Vec3 na = a == 0 ? n_h : plane_normal(planes[idx[a - 1]]);
    float w = a == 0 ? 1.0f : s[a - 1];
    for (std::uint32_t c = 0; c <= n; ++c) {
      if (c == a) continue;
      const Vec3 nc = c == 0 ? n_h : plane_normal(planes[idx[c - 1]]);
      const float sc = c == 0 ? 1.0f : s[c - 1];
      const float l = fmaxf(length(na + nc), kMinBisectorLength);
      w *= fmaf(sc, 1.0f / l - 1.0f, 1.0f);  // 1 − s_c + s_c/L_ac
    }
    sum = sum + na * w;
  }
  const float m2 = dot(sum, sum);
  return m2 > 0.0f ? sum * (1.0f / sqrtf(m2)) : n_h;
}

}  // namespace detail

/// The unit outward shading normal at `pos` on plane `hit_plane` of the stone `planes[0..count)` for edge
/// rounding radius `radius` (model units), docs/design/tracer.md §4.1. Exactly the plane's normal (the same
/// bits) when radius is not > 0 (0, negative or NaN) or no other plane lies within `radius` of `pos`.
///
/// `pos` is the hit point on that plane (hit origin + t·direction), `hit_plane` < `count` the plane the slab
/// test reported (geometry.h Hit::plane). One pass over the planes (three fmaf and two compares each); a
/// point near an edge adds two square roots, a corner with n neighbours (n + 1)·n more. Deterministic: the
/// same inputs give the same bits on every call; the f32 arithmetic is written out (no contraction needed).
/// The normal points out of the stone like the plane's; the transport orients it as it orients the plane
/// normal.
FT_HD Vec3 rounded_normal(const FacetPlane* planes, std::uint32_t count, std::uint32_t hit_plane, Vec3 pos,
                          float radius) {
  const Vec3 n_h = detail::plane_normal(planes[hit_plane]);
  if (!(radius > 0.0f)) return n_h;
  // The planes within `radius`, the nearest kMaxRoundingNeighbours of them kept (ties to the lower index).
  std::uint32_t idx[kMaxRoundingNeighbours];
  float dist[kMaxRoundingNeighbours];
  std::uint32_t n = 0;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (i == hit_plane) continue;
    const float di = -plane_side(planes[i], pos);
    if (!(di < radius)) continue;
    if (n < kMaxRoundingNeighbours) {
      idx[n] = i;
      dist[n] = di;
      ++n;
      continue;
    }
    std::uint32_t farthest = 0;  // the kept plane with the largest distance (the later index on a tie)
    for (std::uint32_t j = 1; j < kMaxRoundingNeighbours; ++j)
      if (!(dist[j] < dist[farthest])) farthest = j;
    if (di < dist[farthest]) {
      idx[farthest] = i;
      dist[farthest] = di;
    }
  }
  if (n == 0) return n_h;
  if (n == 1)
    return detail::edge_normal(n_h, detail::plane_normal(planes[idx[0]]),
                               detail::edge_blend(dist[0], radius));
  float s[kMaxRoundingNeighbours];
  for (std::uint32_t j = 0; j < n; ++j) s[j] = detail::edge_blend(dist[j], radius);
  return detail::corner_normal(planes, hit_plane, idx, s, n);
}

/// The normal the bounce uses at a hit of plane `hit_plane` by a ray along `dir` (docs/design/tracer.md §4.1): the
/// plane's, or with radius > 0 rounded_normal — kept only when it meets the ray from the same side as the plane
/// normal (dot products of one sign), else the plane's, so that near grazing incidence a bent normal never
/// turns a reflection or a refraction across the facet plane *(facetrace)*. Outward like the plane's.
FT_HD Vec3 surface_normal(const FacetPlane* planes, std::uint32_t count, std::uint32_t hit_plane, Vec3 pos,
                          Vec3 dir, float radius) {
  const Vec3 g = detail::plane_normal(planes[hit_plane]);
  if (!(radius > 0.0f)) return g;
  const Vec3 ns = rounded_normal(planes, count, hit_plane, pos, radius);
  return dot(ns, dir) * dot(g, dir) > 0.0f ? ns : g;
}

/// The reference's own rule, for comparison (docs/design/tracer.md §4.1): the one-neighbour formula with the
/// nearest other plane only (ties to the lower index), whatever the number of planes within `radius`. The
/// same as rounded_normal wherever at most one plane is within `radius`; elsewhere it has seams inside the
/// facet where the nearest plane changes. Not the model the transport is meant to use.
FT_HD Vec3 rounded_normal_nearest(const FacetPlane* planes, std::uint32_t count, std::uint32_t hit_plane,
                                  Vec3 pos, float radius) {
  const Vec3 n_h = detail::plane_normal(planes[hit_plane]);
  if (!(radius > 0.0f)) return n_h;
  std::uint32_t nearest = count;
  float nearest_dist = radius;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (i == hit_plane) continue;
    const float di = -plane_side(planes[i], pos);
    if (di < nearest_dist) {
      nearest_dist = di;
      nearest = i;
    }
  }
  if (nearest == count) return n_h;
  return detail::edge_normal(n_h, detail::plane_normal(planes[nearest]),
                             detail::edge_blend(nearest_dist, radius));
}

}  // namespace facetrace::tracer::physics
