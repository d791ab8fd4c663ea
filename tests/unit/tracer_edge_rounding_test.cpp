/// @file
/// Edge rounding (docs/design/tracer.md §4.1): the facet normal itself at radius 0 and away from edges,
/// the reference's formula next to one edge (re-derived here in double), the bisector from both facets on an
/// edge, monotone rotation towards it, continuity across the edges and inside the facets of the round
/// brilliant, unit length, corners and the neighbour cap.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "facetrace/tracer/scene.h"
#include "physics/edge_rounding.h"
#include "physics/geometry.h"

namespace ft = facetrace::tracer;
namespace ph = facetrace::tracer::physics;
using ph::FacetPlane;
using ph::Vec3;

namespace {

constexpr double kPi = 3.14159265358979323846;

/// Deterministic uniform floats in [−1, 1) from a 32-bit LCG.
class Uniform {
 public:
  explicit Uniform(std::uint32_t seed) : state_(seed) {}
  float operator()() {
    state_ = state_ * 1664525u + 1013904223u;
    return static_cast<float>(state_ >> 8) / 16777216.0f * 2.0f - 1.0f;
  }
  Vec3 unit() {
    for (;;) {
      const Vec3 v{(*this)(), (*this)(), (*this)()};
      const float l2 = ph::dot(v, v);
      if (l2 > 1e-4f && l2 <= 1.0f) return v * (1.0f / std::sqrt(l2));
    }
  }

 private:
  std::uint32_t state_;
};

std::vector<FacetPlane> brilliant() {
  std::vector<FacetPlane> out;
  for (const ft::Plane& p : ft::round_brilliant_planes())
    out.push_back(FacetPlane{p.normal[0], p.normal[1], p.normal[2], p.d});
  return out;
}

/// The cube [−0.5, 0.5]³: +x, −x, +y, −y, +z, −z.
std::vector<FacetPlane> cube() {
  return {{1, 0, 0, -0.5f},  {-1, 0, 0, -0.5f}, {0, 1, 0, -0.5f},
          {0, -1, 0, -0.5f}, {0, 0, 1, -0.5f},  {0, 0, -1, -0.5f}};
}

/// Two planes meeting along the line x = 1, y = 1 at angle θ between their normals: A is y = 1 (n = +y), B
/// has n = (sin θ, cos θ, 0). The point (1 − u, 1, z) of A is sin θ · u from B.
std::vector<FacetPlane> wedge(double theta) {
  const float s = static_cast<float>(std::sin(theta)), c = static_cast<float>(std::cos(theta));
  return {{0, 1, 0, -1}, {s, c, 0, -(s + c)}};
}

Vec3 normal_of(const FacetPlane& p) { return Vec3{p.nx, p.ny, p.nz}; }

bool same_bits(Vec3 a, Vec3 b) { return std::memcmp(&a, &b, sizeof a) == 0; }

double angle(Vec3 a, Vec3 b) {
  const double d = double{a.x} * b.x + double{a.y} * b.y + double{a.z} * b.z;
  const double la = std::sqrt(double{a.x} * a.x + double{a.y} * a.y + double{a.z} * a.z);
  const double lb = std::sqrt(double{b.x} * b.x + double{b.y} * b.y + double{b.z} * b.z);
  return std::acos(std::clamp(d / (la * lb), -1.0, 1.0));
}

double diff(Vec3 a, Vec3 b) {
  return std::max({std::fabs(double{a.x} - b.x), std::fabs(double{a.y} - b.y), std::fabs(double{a.z} - b.z)});
}

/// Distance of x from plane p (≥ 0 inside), in double.
double dist(const FacetPlane& p, Vec3 x) {
  return -(double{p.nx} * x.x + double{p.ny} * x.y + double{p.nz} * x.z + double{p.d});
}

struct SurfaceHit {
  std::uint32_t plane;
  Vec3 pos;
};

/// Hits of rays from a sphere of radius 3 aimed at random points of the stone's box.
std::vector<SurfaceHit> surface_hits(const std::vector<FacetPlane>& planes, int n, std::uint32_t seed) {
  Uniform u(seed);
  std::vector<SurfaceHit> out;
  while (static_cast<int>(out.size()) < n) {
    const Vec3 o = u.unit() * 3.0f;
    const Vec3 target{u(), 0.9f * u(), u()};
    const Vec3 dir = ph::normalize(target - o);
    const ph::Hit h =
        ph::intersect_polyhedron(planes.data(), static_cast<std::uint32_t>(planes.size()), o, dir);
    if (h.plane < 0) continue;
    out.push_back({static_cast<std::uint32_t>(h.plane), o + dir * h.t});
  }
  return out;
}

Vec3 rounded(const std::vector<FacetPlane>& planes, std::uint32_t hit, Vec3 pos, float r) {
  return ph::rounded_normal(planes.data(), static_cast<std::uint32_t>(planes.size()), hit, pos, r);
}
Vec3 nearest_rule(const std::vector<FacetPlane>& planes, std::uint32_t hit, Vec3 pos, float r) {
  return ph::rounded_normal_nearest(planes.data(), static_cast<std::uint32_t>(planes.size()), hit, pos, r);
}

/// The point of the line where planes a and b meet nearest x, in double.
Vec3 edge_point(const FacetPlane& a, const FacetPlane& b, Vec3 x) {
  const double c = double{a.nx} * b.nx + double{a.ny} * b.ny + double{a.nz} * b.nz;
  const double ra = dist(a, x), rb = dist(b, x);  // x + α n_a + β n_b lies on both planes
  const double det = 1.0 - c * c;
  const double alpha = (ra - c * rb) / det, beta = (rb - c * ra) / det;
  return Vec3{static_cast<float>(x.x + alpha * a.nx + beta * b.nx),
              static_cast<float>(x.y + alpha * a.ny + beta * b.ny),
              static_cast<float>(x.z + alpha * a.nz + beta * b.nz)};
}

/// The reference's formula (docs/design/tracer.md §4.1) in double: the normal at distance d from the one
/// neighbour with normal n_i.
Vec3 reference_edge(Vec3 n_h, Vec3 n_i, double d, double r) {
  const double t = std::clamp(1.0 - d / r, 0.0, 1.0);
  const double s = t * t * (3.0 - 2.0 * t);
  double b[3] = {double{n_h.x} + n_i.x, double{n_h.y} + n_i.y, double{n_h.z} + n_i.z};
  const double lb = std::sqrt(b[0] * b[0] + b[1] * b[1] + b[2] * b[2]);
  const double m[3] = {(1 - s) * n_h.x + s * b[0] / lb, (1 - s) * n_h.y + s * b[1] / lb,
                       (1 - s) * n_h.z + s * b[2] / lb};
  const double lm = std::sqrt(m[0] * m[0] + m[1] * m[1] + m[2] * m[2]);
  return Vec3{static_cast<float>(m[0] / lm), static_cast<float>(m[1] / lm), static_cast<float>(m[2] / lm)};
}

}  // namespace

TEST(EdgeRounding, radius_zero_gives_the_facet_normal_bit_for_bit) {
  const auto planes = brilliant();
  const float radii[] = {0.0f, -0.0f, -0.01f, std::numeric_limits<float>::quiet_NaN()};
  for (const SurfaceHit& h : surface_hits(planes, 4000, 11u)) {
    for (float r : radii) {
      ASSERT_TRUE(same_bits(rounded(planes, h.plane, h.pos, r), normal_of(planes[h.plane]))) << h.plane;
      ASSERT_TRUE(same_bits(nearest_rule(planes, h.plane, h.pos, r), normal_of(planes[h.plane])));
    }
  }
  // On an edge too.
  const auto w = wedge(kPi / 3);
  EXPECT_TRUE(same_bits(rounded(w, 0, Vec3{1, 1, 0}, 0.0f), normal_of(w[0])));
}

TEST(EdgeRounding, far_from_edges_gives_the_facet_normal_bit_for_bit) {
  const auto planes = brilliant();
  EXPECT_TRUE(
      same_bits(rounded(planes, 0, Vec3{0.0f, 0.32f, 0.0f}, 0.02f), normal_of(planes[0])));  // table centre
  const auto c = cube();
  EXPECT_TRUE(
      same_bits(rounded(c, 0, Vec3{0.5f, 0.0f, 0.0f}, 0.45f), normal_of(c[0])));  // 0.5 from the others
  int far = 0;
  for (const SurfaceHit& h : surface_hits(planes, 20000, 12u)) {
    double nearest = 1e30;
    for (std::uint32_t i = 0; i < planes.size(); ++i)
      if (i != h.plane) nearest = std::min(nearest, dist(planes[i], h.pos));
    if (nearest < 0.02 + 1e-6) continue;  // clear of the f32 rounding of the distances
    ++far;
    ASSERT_TRUE(same_bits(rounded(planes, h.plane, h.pos, 0.02f), normal_of(planes[h.plane]))) << h.plane;
  }
  EXPECT_GT(far, 2000);
}

TEST(EdgeRounding, matches_the_reference_formula_next_to_one_edge) {
  for (double deg : {5.0, 20.0, 45.0, 90.0, 135.0}) {
    const double theta = deg * kPi / 180.0;
    const auto w = wedge(theta);
    const float r = 0.05f;
    for (int k = 0; k <= 40; ++k) {
      const double d = r * k / 40.0;  // distance from B
      const Vec3 p{static_cast<float>(1.0 - d / std::sin(theta)), 1.0f, 0.3f};
      const Vec3 got = rounded(w, 0, p, r);
      const Vec3 want = reference_edge(normal_of(w[0]), normal_of(w[1]), dist(w[1], p), r);
      EXPECT_LT(diff(got, want), 2e-6) << deg << " deg, d = " << d;
      EXPECT_TRUE(same_bits(got, nearest_rule(w, 0, p, r)));  // one neighbour: the reference's own rule
    }
  }
}

TEST(EdgeRounding, corner_blend_with_one_neighbour_is_the_edge_formula) {
  Uniform u(5u);
  for (int k = 0; k < 2000; ++k) {
    const Vec3 a = u.unit(), b = u.unit();
    if (ph::dot(a, b) < -0.9f) continue;
    const FacetPlane pl[2] = {{a.x, a.y, a.z, -1}, {b.x, b.y, b.z, -1}};
    const std::uint32_t idx[1] = {1};
    const float s[1] = {0.5f * (u() + 1.0f)};
    EXPECT_LT(diff(ph::detail::corner_normal(pl, 0, idx, s, 1), ph::detail::edge_normal(a, b, s[0])), 2e-6);
  }
}

TEST(EdgeRounding, both_facets_give_the_bisector_on_an_edge) {
  for (double deg : {5.0, 20.0, 45.0, 90.0, 135.0}) {
    const auto w = wedge(deg * kPi / 180.0);
    const Vec3 p{1.0f, 1.0f, -0.7f};
    const Vec3 from_a = rounded(w, 0, p, 0.02f), from_b = rounded(w, 1, p, 0.02f);
    const Vec3 bisector = ph::normalize(normal_of(w[0]) + normal_of(w[1]));
    EXPECT_LT(diff(from_a, from_b), 1e-6) << deg;
    EXPECT_LT(diff(from_a, bisector), 1e-6) << deg;
  }
  const auto c = cube();  // an edge of the cube, 0.4 from the corners
  const Vec3 p{0.5f, 0.5f, 0.1f};
  const Vec3 bisector{static_cast<float>(std::sqrt(0.5)), static_cast<float>(std::sqrt(0.5)), 0.0f};
  EXPECT_LT(diff(rounded(c, 0, p, 0.1f), bisector), 1e-6);
  EXPECT_LT(diff(rounded(c, 2, p, 0.1f), bisector), 1e-6);
}

TEST(EdgeRounding, rotates_monotonically_towards_the_edge) {
  for (double deg : {10.0, 60.0, 120.0}) {
    const double theta = deg * kPi / 180.0;
    const auto w = wedge(theta);
    const float r = 0.05f;
    double previous = 0.0;
    for (int k = 0; k <= 400; ++k) {
      const double d = 1.5 * r * (1.0 - k / 400.0);  // from 1.5 r to the edge
      const Vec3 p{static_cast<float>(1.0 - d / std::sin(theta)), 1.0f, 0.0f};
      const Vec3 n = rounded(w, 0, p, r);
      if (dist(w[1], p) >= r + 1e-6) {
        ASSERT_TRUE(same_bits(n, normal_of(w[0]))) << d;
        continue;
      }
      const double a = angle(n, normal_of(w[0]));
      EXPECT_GE(a, previous - 1e-6) << deg << " deg, d = " << d;  // non-decreasing up to f32 rounding
      previous = a;
    }
    EXPECT_NEAR(previous, theta / 2, 1e-5) << deg;  // the bisector on the edge
  }
}

TEST(EdgeRounding, is_a_unit_outward_vector_on_the_round_brilliant) {
  const auto planes = brilliant();
  const auto hits = surface_hits(planes, 20000, 13u);
  for (float r : {0.005f, 0.02f, 0.05f, 0.08f}) {
    int bent = 0;
    for (const SurfaceHit& h : hits) {
      const Vec3 n = rounded(planes, h.plane, h.pos, r);
      const Vec3 nh = normal_of(planes[h.plane]);
      ASSERT_TRUE(std::isfinite(n.x) && std::isfinite(n.y) && std::isfinite(n.z));
      ASSERT_NEAR(ph::length(n), 1.0f, 2e-6f);
      // Inside the cone of the normals that take part: never further from n_h than the furthest of them.
      double widest = 0.0;
      for (std::uint32_t i = 0; i < planes.size(); ++i)
        if (i != h.plane && dist(planes[i], h.pos) < r)
          widest = std::max(widest, angle(nh, normal_of(planes[i])));
      ASSERT_LE(angle(n, nh), widest + 1e-5) << h.plane;
      bent += same_bits(n, nh) ? 0 : 1;
    }
    EXPECT_GT(bent, 100) << r;
  }
}

TEST(EdgeRounding, is_continuous_across_every_edge_of_the_round_brilliant) {
  const auto planes = brilliant();
  const float r = 0.02f;
  int edges = 0, corners = 0;
  for (const SurfaceHit& h : surface_hits(planes, 20000, 14u)) {
    std::uint32_t b = 0;
    double nearest = 1e30;
    for (std::uint32_t i = 0; i < planes.size(); ++i)
      if (i != h.plane && dist(planes[i], h.pos) < nearest) nearest = dist(planes[i], h.pos), b = i;
    if (!(nearest < r)) continue;
    const Vec3 q = edge_point(planes[h.plane], planes[b], h.pos);
    bool on_stone = true;  // the line point is on the real edge, not on the planes' line beyond the facets
    int within = 0;
    for (std::uint32_t i = 0; i < planes.size(); ++i) {
      on_stone = on_stone && dist(planes[i], q) > -1e-6;
      within += (i != h.plane && i != b && dist(planes[i], q) < r) ? 1 : 0;
    }
    if (!on_stone) continue;
    ++edges;
    corners += within > 0 ? 1 : 0;
    const Vec3 from_a = rounded(planes, h.plane, q, r), from_b = rounded(planes, b, q, r);
    ASSERT_LT(diff(from_a, from_b), 2e-5)
        << "planes " << h.plane << " and " << b << ", " << within << " more within r";
  }
  EXPECT_GT(edges, 2000);
  EXPECT_GT(corners, 200);  // edges that pass a third plane within r: the corner blend
}

TEST(EdgeRounding, is_continuous_inside_a_facet_where_the_reference_has_a_seam) {
  // Pavilion main 49 (φ = 0) between lower girdles 57 and 58, which mirror each other in z: on the facet's
  // centre line z = 0 both are equally near, so the nearest-plane rule of the reference switches there.
  const auto planes = brilliant();
  const float r = 0.02f;
  const FacetPlane& pm = planes[49];
  ASSERT_EQ(pm.nz, 0.0f);
  Vec3 centre{0, 0, 0};
  bool found = false;
  for (int k = 0; k < 1000 && !found; ++k) {
    const double x = 0.9 * k / 1000.0;
    const double y = (x * pm.nx + pm.d) / -pm.ny;  // on the plane
    centre = Vec3{static_cast<float>(x), static_cast<float>(y), 0.0f};
    const double d57 = dist(planes[57], centre);
    bool inside = true;
    for (const FacetPlane& p : planes) inside = inside && dist(p, centre) > -1e-6;
    found = inside && d57 > 0.25 * r && d57 < 0.75 * r;
  }
  ASSERT_TRUE(found);
  double max_step = 0.0, max_step_nearest = 0.0;
  Vec3 last{}, last_nearest{};
  const int steps = 2000;
  for (int k = 0; k <= steps; ++k) {
    const Vec3 p{centre.x, centre.y, static_cast<float>(0.004 * (2.0 * k / steps - 1.0))};  // across z = 0
    const Vec3 n = rounded(planes, 49, p, r), m = nearest_rule(planes, 49, p, r);
    if (k > 0) {
      max_step = std::max(max_step, diff(n, last));
      max_step_nearest = std::max(max_step_nearest, diff(m, last_nearest));
    }
    last = n;
    last_nearest = m;
  }
  EXPECT_LT(max_step, 1e-5);                    // 4e-6 per step along the line: no jump
  EXPECT_GT(max_step_nearest, 100 * max_step);  // the reference's seam at z = 0
}

TEST(EdgeRounding, gives_the_symmetric_normal_at_a_cube_corner) {
  const auto c = cube();
  const float third = static_cast<float>(1.0 / std::sqrt(3.0));
  const Vec3 corner{0.5f, 0.5f, 0.5f};
  for (std::uint32_t face : {0u, 2u, 4u})
    EXPECT_LT(diff(rounded(c, face, corner, 0.1f), Vec3{third, third, third}), 1e-6);
  // Along an edge into the corner region, and across the edge, both faces agree.
  for (int k = 0; k <= 20; ++k) {
    const Vec3 p{0.5f, 0.5f, 0.5f - 0.15f * k / 20.0f};
    EXPECT_LT(diff(rounded(c, 0, p, 0.1f), rounded(c, 2, p, 0.1f)), 1e-6) << p.z;
  }
}

TEST(EdgeRounding, keeps_the_nearest_planes_beyond_the_cap) {
  // Near the apex of a 12-sided pyramid every side is within r of a point on any one of them: 11 neighbours,
  // more than kMaxRoundingNeighbours.
  std::vector<FacetPlane> pyramid;
  for (int i = 0; i < 12; ++i) {
    const double phi = 2 * kPi * i / 12, tilt = 50 * kPi / 180;
    pyramid.push_back({static_cast<float>(std::sin(tilt) * std::cos(phi)), static_cast<float>(std::cos(tilt)),
                       static_cast<float>(std::sin(tilt) * std::sin(phi)), -0.5f});
  }
  static_assert(ph::kMaxRoundingNeighbours < 11);
  const Vec3 near_apex{0.0f, static_cast<float>(0.5 / std::cos(50 * kPi / 180)) - 0.01f, 0.0f};
  for (std::uint32_t face = 0; face < 12; ++face) {
    const Vec3 pos =
        near_apex + normal_of(pyramid[face]) * static_cast<float>(-dist(pyramid[face], near_apex));
    const Vec3 n = rounded(pyramid, face, pos, 0.2f);
    EXPECT_NEAR(ph::length(n), 1.0f, 2e-6f);
    EXPECT_GT(ph::dot(n, normal_of(pyramid[face])), 0.5f);
    EXPECT_TRUE(same_bits(n, rounded(pyramid, face, pos, 0.2f)));  // deterministic
  }
}
