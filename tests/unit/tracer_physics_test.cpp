/// @file
/// Shared physics on the host: RNG (docs/design/tracer.md §9), spectra (§6, §8), dispersion (§3), Fresnel/Mueller (§7.3),
/// slab intersection (§4), white balance (§8).
#include <gtest/gtest.h>

#include <cfloat>
#include <vector>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "facetrace/tracer/scene.h"
#include "physics/transport.h"
#include "cpu/trace_params.h"

namespace ft = facetrace::tracer;
namespace ph = facetrace::tracer::physics;

namespace {

ph::DispersionCoeffs diamond_coeffs() {
  const ft::Material m = ft::diamond_material();
  ph::DispersionCoeffs d{static_cast<std::uint32_t>(m.dispersion.model), {}, {}};
  for (int i = 0; i < 3; ++i) {
    d.b[i] = m.dispersion.b[i];
    d.c[i] = m.dispersion.c[i];
  }
  return d;
}

/// Deterministic test inputs: uniform floats in [−1, 1) from a 32-bit LCG.
class Uniform {
 public:
  explicit Uniform(std::uint32_t seed) : state_(seed) {}
  float operator()() {
    state_ = state_ * 1664525u + 1013904223u;
    return static_cast<float>(state_ >> 8) / 16777216.0f * 2.0f - 1.0f;
  }

 private:
  std::uint32_t state_;
};

}  // namespace

TEST(Rng, hash_matches_the_spec_steps) {
  for (std::uint32_t x : {0u, 1u, 2u, 12345u, 0xDEADBEEFu, 0xFFFFFFFFu}) {
    std::uint64_t v = x;
    v = (v * 0x85EBCA6Bull) & 0xFFFFFFFFull;
    v ^= v >> 13;
    v = (v * 0xC2B2AE35ull) & 0xFFFFFFFFull;
    v ^= v >> 16;
    EXPECT_EQ(ph::hash_u32(x), static_cast<std::uint32_t>(v)) << x;
  }
  EXPECT_EQ(ph::hash_u32(0), 0u);
  EXPECT_NE(ph::hash_u32(1), ph::hash_u32(2));
}

TEST(Rng, radical_inverse_known_values) {
  EXPECT_EQ(ph::radical_inverse(2, 0), 0.0f);
  EXPECT_EQ(ph::radical_inverse(2, 1), 0.5f);
  EXPECT_EQ(ph::radical_inverse(2, 2), 0.25f);
  EXPECT_EQ(ph::radical_inverse(2, 3), 0.75f);
  EXPECT_EQ(ph::radical_inverse(3, 1), static_cast<float>(1.0 / 3.0));
  EXPECT_EQ(ph::radical_inverse(3, 5), static_cast<float>(7.0 / 9.0));    // 12₃ → 0.21₃
  EXPECT_EQ(ph::radical_inverse(5, 7), static_cast<float>(11.0 / 25.0));  // 12₅ → 0.21₅
  EXPECT_LT(ph::radical_inverse(2, 0xFFFFFFFFu), 1.0f);
  EXPECT_LT(ph::radical_inverse(5, 0xFFFFFFFFu), 1.0f);
  EXPECT_EQ(ph::bit_reverse_u32(1u), 0x80000000u);
  EXPECT_EQ(ph::bit_reverse_u32(0x12345678u), 0x1E6A2C48u);
}

TEST(Rng, draws_stay_in_range_and_depend_on_every_input) {
  for (std::uint32_t p = 0; p < 64; ++p) {
    for (std::uint32_t s = 0; s < 64; ++s) {
      const ph::PixelSample ps = ph::pixel_sample(p, s);
      ASSERT_GE(ps.jx, -0.5f);
      ASSERT_LT(ps.jx, 0.5f);
      ASSERT_GE(ps.jy, -0.5f);
      ASSERT_LT(ps.jy, 0.5f);
      ASSERT_GE(ps.u_hero, 0.0f);
      ASSERT_LT(ps.u_hero, 1.0f);
      const std::uint32_t seed = ph::sample_seed(p, s);
      for (std::uint32_t b = 0; b < 4; ++b) {
        const float u = ph::stream_uniform(seed, b, ph::kStreamFresnel);
        ASSERT_GE(u, 0.0f);
        ASSERT_LE(u, 1.0f);
      }
    }
  }
  EXPECT_NE(ph::sample_seed(3, 4), ph::sample_seed(4, 3));
  const std::uint32_t seed = ph::sample_seed(7, 9);
  EXPECT_NE(ph::stream_uniform(seed, 0, ph::kStreamFresnel),
            ph::stream_uniform(seed, 0, ph::kStreamRoulette));
  EXPECT_NE(ph::stream_uniform(seed, 0, ph::kStreamFresnel), ph::stream_uniform(seed, 1, ph::kStreamFresnel));
  // u = 1 is possible: h = 0xFFFFFFFF rounds to 2^32 / 2^32.
  EXPECT_EQ(static_cast<float>(0xFFFFFFFFu) / static_cast<float>(0xFFFFFFFFu), 1.0f);
}

TEST(Rng, hero_sequence_is_stratified_per_pixel) {
  // Φ5 over 125 consecutive samples hits every 1/125 stratum once (before the rotation).
  int hist[125] = {};
  for (std::uint32_t s = 0; s < 125; ++s) ++hist[static_cast<int>(ph::radical_inverse(5, s) * 125.0f)];
  for (int h : hist) EXPECT_EQ(h, 1);
}

TEST(Spectra, cmf_and_d65_tables_are_the_cie_values) {
  double x = 0, y = 0, z = 0, wx = 0, wy = 0, wz = 0;
  for (int i = 0; i < ph::kSpectralTableSize; ++i) {
    x += ph::cmf_x_table()[i];
    y += ph::cmf_y_table()[i];
    z += ph::cmf_z_table()[i];
    wx += ph::cmf_x_table()[i] * ph::d65_table()[i];
    wy += ph::cmf_y_table()[i] * ph::d65_table()[i];
    wz += ph::cmf_z_table()[i] * ph::d65_table()[i];
  }
  EXPECT_NEAR(y * 5.0, 106.856, 0.01);  // docs/design/tracer.md §8
  EXPECT_NEAR(x * 5.0, 106.857, 0.01);  // equal-energy white
  EXPECT_NEAR(z * 5.0, 106.857, 0.01);
  EXPECT_NEAR(wx / wy, 0.95047, 2e-4);  // D65 white point
  EXPECT_NEAR(wz / wy, 1.08883, 2e-4);
  EXPECT_FLOAT_EQ(ph::cmf_xyz(555.0f).y, 1.0f);
  EXPECT_FLOAT_EQ(ph::cmf_xyz(557.5f).x, 0.5f * (0.512050f + 0.594500f));
  EXPECT_FLOAT_EQ(ph::d65_spectrum(560.0f), 1.0f);
  EXPECT_NEAR(ph::planck_spectrum(560.0f, 2856.0f), 1.0f, 1e-6f);
  EXPECT_LT(ph::planck_spectrum(400.0f, 2856.0f), 0.3f);
  EXPECT_GT(ph::planck_spectrum(700.0f, 2856.0f), 1.5f);
  EXPECT_EQ(ph::planck_spectrum(380.0f, 300.0f), 0.01f);  // clamped
}

TEST(Spectra, channels_wrap_within_the_visible_range) {
  EXPECT_FLOAT_EQ(ph::channel_lambda(380.0f, 0), 380.0f);
  EXPECT_FLOAT_EQ(ph::channel_lambda(380.0f, 7), 730.0f);
  EXPECT_FLOAT_EQ(ph::channel_lambda(700.0f, 2), 400.0f);
  for (int k = 0; k < 8; ++k) {
    const float l = ph::channel_lambda(779.9f, k);
    EXPECT_GE(l, 380.0f);
    EXPECT_LT(l, 780.0f);
  }
}

TEST(Dispersion, diamond_index_and_abbe_number) {
  const ph::DispersionCoeffs d = diamond_coeffs();
  const double nd = ph::refractive_index(d, 589.3f);
  const double nf = ph::refractive_index(d, 486.1f);
  const double nc = ph::refractive_index(d, 656.3f);
  EXPECT_NEAR(nd, 2.41726, 1e-4);
  EXPECT_NEAR((nd - 1.0) / (nf - nc), 55.27, 0.05);
  EXPECT_NEAR(ph::refractive_index(d, 380.0f), 2.4741, 2e-4);
  EXPECT_NEAR(ph::refractive_index(d, 780.0f), 2.4011, 2e-4);
}

TEST(Dispersion, models_and_floor_at_one) {
  const ph::DispersionCoeffs cauchy{ph::kDispCauchy, {1.5f, 0.004f, 0.0f}, {0, 0, 0}};
  EXPECT_NEAR(ph::refractive_index(cauchy, 500.0f), 1.5f + 0.004f / 0.25f, 1e-6);
  const ph::DispersionCoeffs low{ph::kDispCauchy, {0.5f, 0.0f, 0.0f}, {0, 0, 0}};
  EXPECT_EQ(ph::refractive_index(low, 500.0f), 1.0f);
  const ph::DispersionCoeffs s1{ph::kDispSellmeier1, {1.0f, 0, 0}, {0.01f, 0, 0}};
  EXPECT_NEAR(ph::refractive_index(s1, 500.0f), std::sqrt(1.0 + 0.25 / (0.25 - 0.01)), 1e-6);
}

TEST(Fresnel, normal_incidence_reflectance) {
  for (float n : {1.5f, 2.41726f, 1.7f}) {
    const float expected = ((n - 1) / (n + 1)) * ((n - 1) / (n + 1));
    EXPECT_NEAR(ph::fresnel_reflectance(1.0f, n, 1.0f, ph::cos_transmitted(1.0f / n, 1.0f)), expected, 1e-6f);
    EXPECT_NEAR(ph::fresnel_reflectance(n, 1.0f, 1.0f, ph::cos_transmitted(n, 1.0f)), expected, 1e-6f);
  }
}

TEST(Fresnel, critical_angle_of_diamond) {
  const float n = ph::refractive_index(diamond_coeffs(), 589.3f);
  double lo = 0.0, hi = 1.5;  // angle of incidence from inside, rad
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    (ph::cos_transmitted(n, static_cast<float>(std::cos(mid))) < 0.0f ? hi : lo) = mid;
  }
  EXPECT_NEAR(lo, std::asin(1.0 / n), 1e-4);
  EXPECT_NEAR(lo, 0.42652, 1e-4);  // ≈ 24.44°
}

TEST(Fresnel, mueller_matrices_conserve_energy_for_unpolarised_light) {
  const float n1 = 1.0f, n2 = 2.4f;
  for (float ci : {1.0f, 0.9f, 0.6f, 0.3f, 0.05f}) {
    const float ct = ph::cos_transmitted(n1 / n2, ci);
    float r[4] = {1, 0, 0, 0}, t[4] = {1, 0, 0, 0};
    ph::apply_reflection(r, ph::fresnel_amps(n1, n2, ci, ct), 1.0f);
    ph::apply_transmission(t, n1, n2, ci, ct, 1.0f);
    EXPECT_NEAR(r[0] + t[0], 1.0f, 1e-5f) << ci;
    EXPECT_NEAR(r[0], ph::fresnel_reflectance(n1, n2, ci, ct), 1e-6f);
    if (ci < 1.0f) {
      EXPECT_GT(r[1], 0.0f) << "reflection polarises towards s";
    }
  }
}

TEST(Fresnel, tir_retarder_keeps_intensity_and_degree_of_polarisation) {
  float s[4] = {1.0f, 0.2f, 0.5f, 0.1f};
  ph::apply_tir_retarder(s, 2.4f, std::cos(0.8f), 1.0f);
  EXPECT_FLOAT_EQ(s[0], 1.0f);
  EXPECT_FLOAT_EQ(s[1], 0.2f);
  EXPECT_NEAR(s[2] * s[2] + s[3] * s[3], 0.26f, 1e-6f);
  EXPECT_GT(std::fabs(s[3] - 0.1f), 1e-3f) << "a phase is applied";
  float r[4] = {1.0f, 0.3f, 0.4f, 0.0f};
  ph::apply_rotation(r, std::cos(1.0f), std::sin(1.0f));
  EXPECT_NEAR(r[1] * r[1] + r[2] * r[2], 0.25f, 1e-6f);
  EXPECT_EQ(r[0], 1.0f);
}

TEST(Geometry, slab_intersection_of_a_cube) {
  ph::FacetPlane cube[6] = {{1, 0, 0, -1},  {-1, 0, 0, -1}, {0, 1, 0, -1},
                            {0, -1, 0, -1}, {0, 0, 1, -1},  {0, 0, -1, -1}};
  ph::Hit h = ph::intersect_polyhedron(cube, 6, {0, 0, 5}, {0, 0, -1});
  EXPECT_EQ(h.plane, 4);
  EXPECT_FLOAT_EQ(h.t, 4.0f);
  h = ph::intersect_polyhedron(cube, 6, {0, 0, 0}, {0, 0, -1});  // from inside: t_far
  EXPECT_EQ(h.plane, 5);
  EXPECT_FLOAT_EQ(h.t, 1.0f);
  h = ph::intersect_polyhedron(cube, 6, {0, 2, 5}, {0, 0, -1});  // parallel to ±y planes, outside
  EXPECT_EQ(h.plane, -1);
  h = ph::intersect_polyhedron(cube, 6, {0, 0, 5}, {0, 0, 1});  // pointing away
  EXPECT_EQ(h.plane, -1);
  h = ph::intersect_polyhedron(cube, 0, {0, 0, 5}, {0, 0, -1});  // empty scene
  EXPECT_EQ(h.plane, -1);
}

/// The plain §4 slab test, with one division per plane: the reference for the division-free form.
ph::Hit slab_reference(const std::vector<ph::FacetPlane>& planes, ph::Vec3 o, ph::Vec3 d) {
  float tn = -FLT_MAX, tf = FLT_MAX;
  int in = -1, inf = -1;
  for (std::size_t i = 0; i < planes.size(); ++i) {
    const auto& p = planes[i];
    const double den = double{p.nx} * d.x + double{p.ny} * d.y + double{p.nz} * d.z;
    const double side = double{p.nx} * o.x + double{p.ny} * o.y + double{p.nz} * o.z + p.d;
    if (std::fabs(den) <= 1e-7) {
      if (side > 0) return {-1, 0};
      continue;
    }
    const float t = static_cast<float>(-side / den);
    if (den < 0 && t > tn) tn = t, in = static_cast<int>(i);
    if (den > 0 && t < tf) tf = t, inf = static_cast<int>(i);
  }
  if (tn > tf) return {-1, 0};
  if (tn > 1e-4f && in >= 0) return {in, tn};
  if (tf > 1e-4f && inf >= 0) return {inf, tf};
  return {-1, 0};
}

TEST(Geometry, division_free_slab_test_matches_the_plain_definition) {
  const auto planes = ft::make_facet_planes(ft::builtin_diamond_scene());
  Uniform uni(12345u);
  int same = 0, n = 0, hits = 0;
  for (int i = 0; i < 200000; ++i) {
    const float scale = i % 2 ? 0.4f : 3.0f;  // half the origins inside the stone, half outside
    const ph::Vec3 o{uni() * scale, uni() * scale * 0.5f, uni() * scale};
    ph::Vec3 d{uni(), uni(), uni()};
    const float len = std::sqrt(d.x * d.x + d.y * d.y + d.z * d.z);
    if (len < 1e-3f) continue;
    d = ph::Vec3{d.x / len, d.y / len, d.z / len};
    const ph::Hit a =
        ph::intersect_polyhedron(planes.data(), static_cast<std::uint32_t>(planes.size()), o, d);
    const ph::Hit b = slab_reference(planes, o, d);
    ++n;
    hits += b.plane >= 0;
    if (a.plane == b.plane && (a.plane < 0 || std::fabs(a.t - b.t) <= 1e-5f * std::max(1.0f, b.t))) ++same;
  }
  EXPECT_GT(hits, n / 4);
  EXPECT_GE(static_cast<double>(same) / n, 0.9999) << same << " of " << n << " agree";
}

TEST(Geometry, exit_from_inside_gives_the_general_result_or_declines) {
  const ft::Scene scene = ft::builtin_diamond_scene();
  const auto planes = ft::make_facet_planes(scene);
  const auto params = ft::make_trace_params(scene);
  const auto count = static_cast<std::uint32_t>(planes.size());
  Uniform uni(4242u);
  int taken = 0, declined = 0, on_facet = 0;
  for (int i = 0; i < 200000; ++i) {
    ph::Vec3 d{uni(), uni(), uni()};
    const float len = std::sqrt(ph::dot(d, d));
    if (len < 1e-3f) continue;
    d = d * (1.0f / len);
    ph::Vec3 o{uni() * 0.6f, uni() * 0.4f, uni() * 0.6f};
    if (i % 3 == 0) {
      // As the tracer starts a bounce: a point on a facet (the general test's hit), then 1e-4 along a new
      // direction — inside, or by rounding or a grazing direction just outside some facet.
      const ph::Hit h = ph::intersect_polyhedron(planes.data(), count, o, d);
      if (h.plane < 0) continue;
      const ph::Vec3 pos = o + d * h.t;
      ph::Vec3 nd{uni(), uni(), uni()};
      const float nl = std::sqrt(ph::dot(nd, nd));
      if (nl < 1e-3f) continue;
      nd = nd * (1.0f / nl);
      o = pos + nd * ph::kRayOffset;
      d = nd;
      ++on_facet;
    }
    bool outside = false;  // some side > 0, computed as every slab test does
    for (const auto& pl : planes)
      outside = outside || std::fmaf(pl.nx, o.x, std::fmaf(pl.ny, o.y, std::fmaf(pl.nz, o.z, pl.d))) > 0.0f;
    const ph::Hit general = ph::intersect_polyhedron(planes.data(), count, o, d);
    ph::Hit fast{-7, 7.0f};
    const bool ok = ph::exit_from_inside(planes.data(), count, params.bound_radius2, o, d, fast);
    ASSERT_EQ(ok, !outside) << "origin (" << o.x << ", " << o.y << ", " << o.z << ")";
    if (!ok) {
      EXPECT_EQ(fast.plane, -7);  // left alone
      ++declined;
      continue;
    }
    ++taken;
    ASSERT_EQ(fast.plane, general.plane);
    ASSERT_EQ(std::memcmp(&fast.t, &general.t, sizeof(float)), 0) << fast.t << " vs " << general.t;
  }
  EXPECT_GT(on_facet, 30000);
  EXPECT_GT(taken, 100000);
  EXPECT_GT(declined, 1000);  // origins outside a facet (the fallback) were exercised too
  // A direction that is not finite is declined, so the general test decides.
  ph::Hit h{-7, 0.0f};
  EXPECT_FALSE(ph::exit_from_inside(planes.data(), count, params.bound_radius2, {0, 0, 0}, {NAN, 0, 0}, h));
  EXPECT_FALSE(
      ph::exit_from_inside(planes.data(), count, params.bound_radius2, {0, 0, 0}, {INFINITY, 0, 0}, h));
  EXPECT_EQ(h.plane, -7);
}

TEST(TraceParams, bounding_sphere_holds_the_stone_and_culls_only_misses) {
  const ft::Scene s = ft::builtin_diamond_scene();
  const auto p = ft::make_trace_params(s);
  const auto planes = ft::make_facet_planes(s);
  // Round brilliant: girdle radius ≈ 1 (the 16 girdle planes are 1/cos(π/16) out at their corners), culet at
  // y ≈ −0.88; the farthest vertex lies on the girdle.
  EXPECT_GT(p.bound_radius2, 1.0f);
  EXPECT_LT(p.bound_radius2, 1.2f);
  Uniform uni(99u);
  int culled = 0;
  for (int i = 0; i < 20000; ++i) {
    const ph::Vec3 o{uni() * 4, uni() * 4, uni() * 4};
    ph::Vec3 d{uni(), uni(), uni()};
    const float len = std::sqrt(ph::dot(d, d));
    if (len < 1e-3f) continue;
    d = d * (1.0f / len);
    if (ph::misses_bound(p.bound_radius2, o, d)) {
      ++culled;
      EXPECT_EQ(
          ph::intersect_polyhedron(planes.data(), static_cast<std::uint32_t>(planes.size()), o, d).plane, -1);
    }
  }
  EXPECT_GT(culled, 5000);
}

TEST(Environment, ring_slot_matches_the_atan2_definition) {
  Uniform uni(7u);
  int checked = 0;
  for (int i = 0; i < 100000; ++i) {
    const float x = uni(), z = uni();
    const double a = std::atan2(double{x}, double{z}) * 16.0 / (2.0 * 3.14159265358979323846);
    if (std::fabs(a - std::floor(a) - 0.5) < 1e-4) continue;  // too close to a sector edge to call
    const int expected = ((static_cast<int>(std::floor(a + 0.5)) % 16) + 16) % 16;
    ASSERT_EQ(ph::ring_slot(x, z), expected) << "x " << x << " z " << z;
    ++checked;
  }
  EXPECT_GT(checked, 99000);
  EXPECT_EQ(ph::ring_slot(0.0f, 0.0f), 0);
  EXPECT_EQ(ph::ring_slot(0.0f, -1.0f), 8);
  EXPECT_EQ(ph::ring_slot(-1.0f, 0.0f), 12);
  EXPECT_EQ(ph::ring_slot(1.0f, 0.0f), 4);
}

TEST(Environment, lobe_powers_and_ring_trig_match_the_library) {
  for (float x : {0.0f, 0.3f, 0.5f, 0.9f, 0.99f, 1.0f}) {
    EXPECT_NEAR(ph::pow28(x), std::pow(x, 28.0f), 4e-6f * std::pow(x, 28.0f) + 1e-30f);
    EXPECT_NEAR(ph::pow18(x), std::pow(x, 18.0f), 4e-6f * std::pow(x, 18.0f) + 1e-30f);
  }
  for (int k = 0; k < 16; ++k) {
    const double phi = k * 2.0 * 3.14159265358979323846 / 16.0;
    EXPECT_NEAR(ph::ring_sin(k), std::sin(phi), 1e-7);
    EXPECT_NEAR(ph::ring_cos(k), std::cos(phi), 1e-7);
  }
}

TEST(TraceParams, frosted_finish_goes_into_the_plane_mask) {
  ft::Scene s = ft::builtin_diamond_scene();
  s.planes[3].finish = ft::Finish::kFrosted;
  auto p = ft::make_trace_params(s);
  EXPECT_EQ(p.frosted_mask[0], 1u << 3);
  s.girdle_frosted = true;  // the 16 vertical girdle planes become frosted too
  p = ft::make_trace_params(s);
  int bits = 0;
  for (auto m : p.frosted_mask) bits += __builtin_popcount(m);
  EXPECT_EQ(bits, 17);
}

TEST(WhiteBalance, identity_for_d65_and_maps_illuminant_a_to_d65) {
  float m[9];
  ft::bradford_to_d65(0, 0.0f, m);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(m[i], i % 4 == 0 ? 1.0f : 0.0f);
  ft::bradford_to_d65(1, 2856.0f, m);
  double a[3] = {0, 0, 0};
  for (int i = 0; i < ph::kSpectralTableSize; ++i) {
    const float s = ph::planck_spectrum(380.0f + 5.0f * i, 2856.0f);
    a[0] += s * ph::cmf_x_table()[i];
    a[1] += s * ph::cmf_y_table()[i];
    a[2] += s * ph::cmf_z_table()[i];
  }
  double out[3];
  for (int r = 0; r < 3; ++r) out[r] = (m[r * 3] * a[0] + m[r * 3 + 1] * a[1] + m[r * 3 + 2] * a[2]) / a[1];
  EXPECT_NEAR(out[0], 0.9504, 1e-3);
  EXPECT_NEAR(out[1], 1.0, 1e-4);
  EXPECT_NEAR(out[2], 1.0888, 1e-3);
}

TEST(Absorption, gaussian_bands_in_both_domains) {
  const ph::GaussianBand bands[2] = {{2.0f, 500.0f, 10.0f, ph::kBandWavelength},
                                     {1.0f, 1.0e7f / 600.0f, 500.0f, ph::kBandWavenumber}};
  EXPECT_NEAR(ph::absorption_coefficient(bands, 1, 500.0f), 2.0f, 1e-6f);
  EXPECT_NEAR(ph::absorption_coefficient(bands, 1, 510.0f), 2.0f * std::exp(-0.5f), 1e-5f);
  EXPECT_NEAR(ph::absorption_coefficient(bands + 1, 1, 600.0f), 1.0f, 1e-5f);
  EXPECT_LT(ph::absorption_coefficient(bands + 1, 1, 450.0f), 1e-3f);
}

TEST(TraceParams, builtin_scene_camera_basis_is_orthonormal) {
  const ft::Scene s = ft::builtin_diamond_scene();
  const ph::TraceParams p = ft::make_trace_params(s);
  EXPECT_NEAR(ph::dot(p.forward, p.right), 0.0f, 1e-6f);
  EXPECT_NEAR(ph::dot(p.forward, p.up), 0.0f, 1e-6f);
  EXPECT_NEAR(ph::length(p.up), 1.0f, 1e-6f);
  EXPECT_NEAR(ph::length(p.eye), s.distance, 1e-5f);
  EXPECT_GT(p.up.y, 0.0f);
  EXPECT_NEAR(p.tan_half_fov, std::tan(21.0 * 3.14159265358979 / 180.0), 1e-7);
  EXPECT_EQ(p.plane_count, 74u);
  EXPECT_EQ(p.env_kind, ph::kEnvStudio);
  // The centre pixel looks at the origin.
  const ph::Vec3 d = ph::camera_direction(p, s.width / 2, s.height / 2, 0.0f, 0.0f);
  EXPECT_NEAR(ph::dot(d, p.forward), 1.0f, 1e-6f);
}

TEST(TraceSample, is_deterministic_and_finite) {
  const ft::Scene s = ft::builtin_diamond_scene();
  const ph::TraceParams p = ft::make_trace_params(s);
  const auto planes = ft::make_facet_planes(s);
  for (std::uint32_t i = 0; i < 200; ++i) {
    const ph::SampleXyz a = ph::trace_sample(p, planes.data(), 200 + i % 100, 250 + i / 10, i);
    const ph::SampleXyz b = ph::trace_sample(p, planes.data(), 200 + i % 100, 250 + i / 10, i);
    ASSERT_EQ(a.finite, 1u);
    ASSERT_EQ(std::memcmp(&a, &b, sizeof a), 0);
    ASSERT_GE(a.x, 0.0f);
    ASSERT_GE(a.y, 0.0f);
    ASSERT_GE(a.z, 0.0f);
  }
}
