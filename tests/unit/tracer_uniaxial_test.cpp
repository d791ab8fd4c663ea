/// @file
/// Uniaxial birefringence (docs/design/tracer.md §7.6): n(θ), walk-off, the closed-form entry and internal
/// facet, per-mode TIR, the scalar fallback of tracer.md §7.5 and pleochroism. Each expected value is computed here
/// independently (isotropic Fresnel, the textbook walk-off formula, Snell's law along the surface).
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include "physics/uniaxial.h"

namespace ph = facetrace::tracer::physics;
using ph::Vec3;

namespace {

/// Deterministic uniform floats in [−1, 1) from a 32-bit LCG.
class Uniform {
 public:
  explicit Uniform(std::uint32_t seed) : state_(seed) {}
  float operator()() {
    state_ = state_ * 1664525u + 1013904223u;
    return static_cast<float>(state_ >> 8) / 16777216.0f * 2.0f - 1.0f;
  }
  float in(float lo, float hi) { return lo + (hi - lo) * 0.5f * ((*this)() + 1.0f); }
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

float abs2(ph::Complexf a) { return a.re * a.re + a.im * a.im; }

/// Isotropic Fresnel power reflectances in double (an independent reference).
struct IsoR {
  double rs2, rp2;
};
IsoR iso_reflectance(double n1, double n2, double cos_i) {
  const double sin2t = (n1 / n2) * (n1 / n2) * (1.0 - cos_i * cos_i);
  if (sin2t >= 1.0) return {1.0, 1.0};
  const double cos_t = std::sqrt(1.0 - sin2t);
  const double rs = (n1 * cos_i - n2 * cos_t) / (n1 * cos_i + n2 * cos_t);
  const double rp = (n2 * cos_i - n1 * cos_t) / (n2 * cos_i + n1 * cos_t);
  return {rs * rs, rp * rp};
}

/// Stokes vector of unit linear polarisation along v in the frame (ŝ, k̂ × ŝ).
void linear_stokes(Vec3 v, Vec3 k, Vec3 s, float* out) {
  const float as = ph::dot(v, s), ap = ph::dot(v, ph::cross(k, s));
  out[0] = as * as + ap * ap;
  out[1] = as * as - ap * ap;
  out[2] = 2.0f * as * ap;
  out[3] = 0.0f;
}

float entry_rs_total(const ph::UniaxialEntry& e) { return abs2(e.r[0]) + abs2(e.r[2]); }
float entry_rp_total(const ph::UniaxialEntry& e) { return abs2(e.r[1]) + abs2(e.r[3]); }
float entry_ts_total(const ph::UniaxialEntry& e) {
  return abs2(ph::entry_transmission_amplitude(e, 0)) + abs2(ph::entry_transmission_amplitude(e, 2));
}
float entry_tp_total(const ph::UniaxialEntry& e) {
  return abs2(ph::entry_transmission_amplitude(e, 1)) + abs2(ph::entry_transmission_amplitude(e, 3));
}

bool finite(Vec3 v) { return std::isfinite(v.x) && std::isfinite(v.y) && std::isfinite(v.z); }
bool finite(ph::Complexf c) { return std::isfinite(c.re) && std::isfinite(c.im); }

/// The solution and both modes' directions (g: ph::entry_geometry).
bool all_finite(const ph::UniaxialEntry& e, const ph::EntryGeometry& g) {
  bool ok = std::isfinite(e.cos_i);
  for (int m = 0; m < 2; ++m) ok = ok && finite(g.k[m]) && finite(g.ray[m]);
  for (int i = 0; i < 4; ++i) ok = ok && finite(e.r[i]) && finite(ph::entry_transmission_amplitude(e, i));
  return ok;
}

/// The solution and every direction formed from it (g: ph::internal_geometry).
bool all_finite(const ph::UniaxialInternal& w, const ph::InternalGeometry& g) {
  bool ok = finite(g.k_out) && std::isfinite(w.cos_i);
  for (int m = 0; m < 2; ++m) {
    ok = ok && finite(g.k_reflected[m]) && finite(g.ray_reflected[m]) && std::isfinite(w.r_power[m]) &&
         finite(ph::internal_transmitted_amplitude(w, m));
  }
  return ok;
}

constexpr Vec3 kUp{0.0f, 1.0f, 0.0f};                      // facet normal, out of the stone
constexpr Vec3 kHint{0.0f, 0.0f, 1.0f};                    // s axis at normal incidence

/// The transmitted modes' directions of the entry e = ph::uniaxial_entry(k, n, c, …, kHint).
ph::EntryGeometry entry_dirs(const ph::UniaxialEntry& e, Vec3 k, Vec3 n, Vec3 c, float n_o, float n_e) {
  return ph::entry_geometry(e, ph::facet_frame(k, n, true, c, kHint), c, n_o, n_e);
}
constexpr float kCalciteO = 1.6584f, kCalciteE = 1.4864f;  // calcite at 589 nm (Ghosh 1999)
constexpr float kQuartzO = 1.5442f, kQuartzE = 1.5533f;    // quartz at 589 nm (Ghosh 1999, docs/materials.md)

// (a) Optic axis along the normal, normal incidence: both modes are n_o and T is isotropic Fresnel at n_o.
TEST(Uniaxial, AxisAlongNormalIsIsotropicAtNo) {
  const float n_o = 1.7681f, n_e = 1.7600f;  // ruby (docs/materials.md)
  const Vec3 c = kUp;
  const double t_iso = 1.0 - iso_reflectance(1.0, n_o, 1.0).rs2;
  // Exactly normal: k ∥ c, the scalar fallback.
  const ph::UniaxialEntry e = ph::uniaxial_entry(Vec3{0.0f, -1.0f, 0.0f}, kUp, c, 1.0f, n_o, n_e, kHint);
  EXPECT_EQ(e.degenerate, 1u);
  const ph::EntryGeometry ed = entry_dirs(e, Vec3{0.0f, -1.0f, 0.0f}, kUp, c, n_o, n_e);
  EXPECT_EQ(ph::length(ed.k[0] - ed.k[1]), 0.0f);  // both modes along the o wave normal
  EXPECT_EQ(ph::length(ed.ray[1] - ed.k[0]), 0.0f);
  EXPECT_NEAR(entry_ts_total(e), t_iso, 1e-6);
  EXPECT_NEAR(entry_tp_total(e), t_iso, 1e-6);
  // Slightly off normal (|k × c|² = 1e-4, the full solve): the same to O(θ²).
  const float th = 0.01f;
  const Vec3 k{std::sin(th), -std::cos(th), 0.0f};
  const ph::UniaxialEntry f = ph::uniaxial_entry(k, kUp, c, 1.0f, n_o, n_e, kHint);
  EXPECT_EQ(f.degenerate, 0u);
  const IsoR r = iso_reflectance(1.0, n_o, std::cos(th));
  EXPECT_NEAR(entry_ts_total(f), 1.0 - r.rs2, 2e-5);
  EXPECT_NEAR(entry_tp_total(f), 1.0 - r.rp2, 2e-5);
  float unpol[4] = {1.0f, 0.0f, 0.0f, 0.0f};
  EXPECT_NEAR(ph::entry_mode_power(f, ph::kModeOrdinary, unpol) +
                  ph::entry_mode_power(f, ph::kModeExtraordinary, unpol),
              1.0 - 0.5 * (r.rs2 + r.rp2), 2e-5);
}

// (b) Optic axis in the surface, normal incidence: two independent slabs of n_o and n_e, orthogonal polarisations.
TEST(Uniaxial, AxisInSurfaceSplitsIntoNoAndNe) {
  const Vec3 k{0.0f, -1.0f, 0.0f};
  for (float az : {0.0f, 0.5236f, 1.2f}) {
    for (const float* n : {&kCalciteO, &kQuartzO}) {
      const float n_o = *n, n_e = n == &kCalciteO ? kCalciteE : kQuartzE;
      const Vec3 c{std::cos(az), 0.0f, std::sin(az)};
      const ph::UniaxialEntry e = ph::uniaxial_entry(k, kUp, c, 1.0f, n_o, n_e, kHint);
      ASSERT_EQ(e.degenerate, 0u);
      const ph::EntryGeometry ed = entry_dirs(e, k, kUp, c, n_o, n_e);
      EXPECT_NEAR(ph::dot(ed.k[1], c), 0.0f, 1e-6);  // both normals along −N, ⊥ c: the e wave sees n_e
      EXPECT_NEAR(ph::dot(ed.k[0], k), 1.0f, 1e-6);
      EXPECT_NEAR(ph::dot(ed.k[1], k), 1.0f, 1e-6);
      const Vec3 pol_o = ph::mode_polarisation(ph::kModeOrdinary, ed.k[0], c, n_o, n_e);
      const Vec3 pol_e = ph::mode_polarisation(ph::kModeExtraordinary, ed.k[1], c, n_o, n_e);
      EXPECT_NEAR(ph::dot(pol_o, pol_e), 0.0f, 1e-6);
      EXPECT_NEAR(std::fabs(ph::dot(pol_e, c)), 1.0f, 1e-6);  // e: E ∥ c
      EXPECT_NEAR(ph::dot(pol_o, c), 0.0f, 1e-6);             // o: E ⊥ c
      const double t_o = 1.0 - iso_reflectance(1.0, n_o, 1.0).rs2;
      const double t_e = 1.0 - iso_reflectance(1.0, n_e, 1.0).rs2;
      float so[4], se[4];
      const Vec3 s_axis = ph::facet_frame(k, kUp, true, c, kHint).f.s;
      linear_stokes(pol_o, k, s_axis, so);
      linear_stokes(pol_e, k, s_axis, se);
      EXPECT_NEAR(ph::entry_mode_power(e, ph::kModeOrdinary, so), t_o, 2e-6);
      EXPECT_NEAR(ph::entry_mode_power(e, ph::kModeExtraordinary, so), 0.0, 2e-6);
      EXPECT_NEAR(ph::entry_mode_power(e, ph::kModeExtraordinary, se), t_e, 2e-6);
      EXPECT_NEAR(ph::entry_mode_power(e, ph::kModeOrdinary, se), 0.0, 2e-6);
      // Unpolarised light: half into each slab, p_o = T_o/(T_o + T_e).
      const float unpol[4] = {1.0f, 0.0f, 0.0f, 0.0f};
      const float po = ph::entry_mode_power(e, ph::kModeOrdinary, unpol);
      const float pe = ph::entry_mode_power(e, ph::kModeExtraordinary, unpol);
      EXPECT_NEAR(po, 0.5 * t_o, 2e-6);
      EXPECT_NEAR(pe, 0.5 * t_e, 2e-6);
      EXPECT_NEAR(ph::mode_split_probability(po, pe), t_o / (t_o + t_e), 2e-6);
      EXPECT_NEAR(ph::entry_reflected_power(e, unpol), 1.0 - 0.5 * (t_o + t_e), 2e-6);
    }
  }
  // The clamp of tracer.md §7.5.
  EXPECT_FLOAT_EQ(ph::mode_split_probability(1.0f, 0.0f), 0.98f);
  EXPECT_FLOAT_EQ(ph::mode_split_probability(0.0f, 1.0f), 0.02f);
  EXPECT_FLOAT_EQ(ph::mode_split_probability(0.0f, 0.0f), 0.5f);
}

/// A random incident direction into the stone (k·N < 0), a quarter of them within a few degrees of grazing.
Vec3 random_entry_dir(Uniform& u, Vec3 n, int i) {
  Vec3 t = ph::normalize(ph::cross(n, u.unit()));
  const float cos_i = (i % 4 == 0) ? u.in(1e-3f, 0.05f) : u.in(0.0f, 1.0f);
  return ph::normalize(t * std::sqrt(1.0f - cos_i * cos_i) - n * cos_i);
}

/// A random facet and stone for the statistical checks: normal, optic axis, n_o, n_e = n_o ± 0.2, the outside
/// index (a third of them in [1, 2]) and an entry direction.
struct RandomFacet {
  Vec3 n, c, k;
  float n_o, n_e, n1;
};
RandomFacet random_facet(Uniform& u, int i) {
  RandomFacet g;
  g.n = u.unit();
  g.c = u.unit();
  g.n_o = u.in(1.45f, 2.65f);
  g.n_e = g.n_o + u.in(-0.2f, 0.2f);
  g.n1 = (i % 3 == 0) ? u.in(1.0f, 2.0f) : 1.0f;
  g.k = random_entry_dir(u, g.n, i);
  return g;
}

/// A wave normal ki of mode `mode` meeting g's facet from inside (false when its ray S leaves the facet instead)
/// and the outside index n2 (a fifth of them in [1, 1.6]).
bool random_inside(Uniform& u, const RandomFacet& g, std::uint32_t mode, int i, Vec3& ki, float& n2) {
  ki = -random_entry_dir(u, g.n, i + 1);
  if (ph::dot(ph::mode_ray(mode, ki, g.c, g.n_o, g.n_e), g.n) <= 0.0f) return false;
  n2 = (i % 5 == 0) ? u.in(1.0f, 1.6f) : 1.0f;
  return true;
}

// (c) R + T = 1 for each incident polarisation at entry and for each incident mode inside, to 1e-5.
TEST(Uniaxial, EnergyConservation) {
  Uniform u(14u);
  int solved = 0, internal_solved = 0, tir_seen = 0;
  float worst = 0.0f, worst_internal = 0.0f, worst_internal_grazing = 0.0f;
  for (int i = 0; i < 20000; ++i) {
    const RandomFacet g = random_facet(u, i);
    const Vec3 n = g.n, c = g.c, k = g.k;
    const float n_o = g.n_o, n_e = g.n_e, n1 = g.n1;
    const ph::UniaxialEntry e = ph::uniaxial_entry(k, n, c, n1, n_o, n_e, kHint);
    solved += e.degenerate == 0u;
    const float es = entry_rs_total(e) + entry_ts_total(e) - 1.0f;
    const float ep = entry_rp_total(e) + entry_tp_total(e) - 1.0f;
    worst = std::fmax(worst, std::fmax(std::fabs(es), std::fabs(ep)));
    ASSERT_NEAR(es, 0.0f, 1e-5f) << "entry s, i=" << i;
    ASSERT_NEAR(ep, 0.0f, 1e-5f) << "entry p, i=" << i;

    // Inside: a mode whose ray reaches the facet (S·N > 0).
    const std::uint32_t mode = static_cast<std::uint32_t>(i & 1);
    Vec3 ki;
    float n2 = 1.0f;
    if (!random_inside(u, g, mode, i, ki, n2)) continue;
    const ph::UniaxialInternal w = ph::uniaxial_internal(ki, mode, n, c, n_o, n_e, n2, kHint);
    internal_solved += w.degenerate == 0u;
    tir_seen += w.tir_out != 0u;
    const float sum = ph::internal_reflected_power(w, 0) + ph::internal_reflected_power(w, 1) +
                      ph::internal_transmitted_power(w) - 1.0f;
    // Inside, the f32 boundary solve is less well conditioned than at entry (the incident and the same-mode
    // reflected wave differ only in the sign of q): measured worst 4.0e-5 for cos i >= 0.1 and 1.1e-5/cos i
    // near grazing (seed 14, 20 000 draws; 3.6e-5 and 1.3e-5 with the earlier 4 × 4 elimination), so the bound
    // here is 5e-5 and 2e-5/cos i, not 1e-5.
    const float tol = std::fmax(5e-5f, 2e-5f / w.cos_i);
    if (w.cos_i >= 0.1f) worst_internal = std::fmax(worst_internal, std::fabs(sum));
    worst_internal_grazing = std::fmax(worst_internal_grazing, std::fabs(sum) * w.cos_i);
    ASSERT_NEAR(sum, 0.0f, tol) << "internal, i=" << i << " mode " << mode << " cos_i " << w.cos_i;
    if (w.tir_out) {
      EXPECT_EQ(ph::internal_transmitted_power(w), 0.0f);
    }
    if (w.tir_reflected[0]) {
      EXPECT_EQ(ph::internal_reflected_power(w, 0), 0.0f);
    }
    if (w.tir_reflected[1]) {
      EXPECT_EQ(ph::internal_reflected_power(w, 1), 0.0f);
    }
  }
  EXPECT_GT(solved, 19000);
  EXPECT_GT(internal_solved, 5000);
  EXPECT_GT(tir_seen, 1000);
  RecordProperty("worst_entry_energy_error", std::to_string(worst));
  std::printf(
      "worst |R + T - 1|: entry %.3g (all angles), internal %.3g (cos i >= 0.1), internal near grazing "
      "%.3g/cos i; %d entry, %d internal solved, %d exit TIR\n",
      worst, worst_internal, worst_internal_grazing, solved, internal_solved, tir_seen);
}

// (d) Snell along the surface: n·(k × N) is continuous for every wave, and each e normal satisfies n = n(θ).
TEST(Uniaxial, TangentialWaveVectorContinuous) {
  Uniform u(4u);
  for (int i = 0; i < 5000; ++i) {
    const Vec3 n = u.unit(), c = u.unit();
    const float n_o = u.in(1.45f, 2.65f), n_e = n_o + u.in(-0.2f, 0.2f);
    const Vec3 k = random_entry_dir(u, n, i);
    const ph::UniaxialEntry e = ph::uniaxial_entry(k, n, c, 1.0f, n_o, n_e, kHint);
    if (e.degenerate) continue;
    const ph::EntryGeometry ed = entry_dirs(e, k, n, c, n_o, n_e);
    const Vec3 kt = ph::cross(k, n);
    for (int m = 0; m < 2; ++m) {
      // Snell along the surface with the index the dispersion relation gives the mode's normal.
      const Vec3 d =
          ph::cross(ed.k[m], n) * ph::mode_index(static_cast<std::uint32_t>(m), ed.k[m], c, n_o, n_e) - kt;
      ASSERT_LT(ph::length(d), 2e-5f) << "entry mode " << m << " i=" << i;
      ASSERT_LT(ph::dot(ed.k[m], n), 0.0f);     // transmitted into the stone
      ASSERT_LT(ph::dot(ed.ray[m], n), 1e-6f);  // energy flows into the stone
    }
    const std::uint32_t mode = static_cast<std::uint32_t>(i & 1);
    const Vec3 ki = -random_entry_dir(u, n, i + 1);
    if (ph::dot(ph::mode_ray(mode, ki, c, n_o, n_e), n) <= 0.0f) continue;
    const ph::UniaxialInternal w = ph::uniaxial_internal(ki, mode, n, c, n_o, n_e, 1.0f, kHint);
    if (w.degenerate) continue;
    const ph::InternalGeometry g =
        ph::internal_geometry(w, ph::facet_frame(ki, n, false, c, kHint), ki, c, n_o, n_e, 1.0f);
    const Vec3 kti = ph::cross(ki, n) * ph::mode_index(mode, ki, c, n_o, n_e);
    for (int m = 0; m < 2; ++m) {
      if (w.tir_reflected[m]) continue;
      const float n_m = ph::mode_index(static_cast<std::uint32_t>(m), g.k_reflected[m], c, n_o, n_e);
      ASSERT_LT(ph::length(ph::cross(g.k_reflected[m], n) * n_m - kti), 2e-5f);
      ASSERT_LT(ph::dot(g.ray_reflected[m], n), 1e-5f);  // the reflected energy goes back in
    }
    if (!w.tir_out) {
      ASSERT_LT(ph::length(ph::cross(g.k_out, n) - kti), 2e-5f);
      ASSERT_GT(ph::dot(g.k_out, n), 0.0f);
    }
  }
}

// (e) Walk-off against the textbook formula. With θ the angle of k to c, the ray satisfies tan θ_S = (n_o²/n_e²) tan θ
// (Born & Wolf, Principles of Optics, section 15.3; Yariv & Yeh, Optical Waves in Crystals, section 4.3), so
// tan ρ = tan(θ_S − θ) = (n_o²/n_e² − 1)·tan θ / (1 + (n_o²/n_e²)·tan²θ).
TEST(Uniaxial, WalkOffMatchesTextbook) {
  const Vec3 c{0.0f, 0.0f, 1.0f};
  for (int which = 0; which < 2; ++which) {
    const double n_o = which ? kQuartzO : kCalciteO, n_e = which ? kQuartzE : kCalciteE;
    for (double deg : {5.0, 20.0, 45.0, 60.0, 85.0}) {
      const double th = deg * M_PI / 180.0;
      const Vec3 k{static_cast<float>(std::sin(th)), 0.0f, static_cast<float>(std::cos(th))};
      const Vec3 s = ph::extraordinary_ray(k, c, static_cast<float>(n_o), static_cast<float>(n_e));
      const double rho = std::atan2(s.x, s.z) - th;
      const double r2 = (n_o * n_o) / (n_e * n_e);
      const double expect = std::atan((r2 - 1.0) * std::tan(th) / (1.0 + r2 * std::tan(th) * std::tan(th)));
      EXPECT_NEAR(rho, expect, 2e-6) << "θ = " << deg << " n_o " << n_o;
      // S ⊥ E for the extraordinary mode.
      const Vec3 e = ph::mode_polarisation(ph::kModeExtraordinary, k, c, static_cast<float>(n_o),
                                           static_cast<float>(n_e));
      EXPECT_NEAR(ph::dot(s, e), 0.0f, 1e-5f);
    }
  }
  // Calcite's published maximum walk-off, 6.2° near θ = 45° (e.g. Hecht, Optics, section 8.4.1).
  const Vec3 k{std::sqrt(0.5f), 0.0f, std::sqrt(0.5f)};
  const Vec3 s = ph::extraordinary_ray(k, c, kCalciteO, kCalciteE);
  EXPECT_NEAR(std::acos(ph::dot(s, k)) * 180.0 / M_PI, 6.2, 0.1);
  // n(θ): n_o on the axis, n_e across it.
  EXPECT_FLOAT_EQ(ph::extraordinary_index(1.0f, kCalciteO, kCalciteE), kCalciteO);
  EXPECT_FLOAT_EQ(ph::extraordinary_index(0.0f, kCalciteO, kCalciteE), kCalciteE);
  const double c45 = std::sqrt(0.5);
  EXPECT_NEAR(ph::extraordinary_index(static_cast<float>(c45), kCalciteO, kCalciteE),
              1.0 / std::sqrt(0.5 / (kCalciteO * kCalciteO) + 0.5 / (kCalciteE * kCalciteE)), 1e-6);
}

// (f) TIR per mode at that mode's critical angle, entering from a dense medium and leaving to air.
TEST(Uniaxial, TirPerModeAtItsCriticalAngle) {
  const Vec3 c{0.0f, 0.0f, 1.0f};  // in the surface, ⊥ the plane of incidence: e sees n_e at every angle
  const float n1 = 1.9f;
  const double crit_o = std::asin(kCalciteO / n1), crit_e = std::asin(kCalciteE / n1);
  for (double d : {-1e-3, 1e-3}) {
    for (int m = 0; m < 2; ++m) {
      const double i = (m == 0 ? crit_o : crit_e) + d;
      const Vec3 k{static_cast<float>(std::sin(i)), static_cast<float>(-std::cos(i)), 0.0f};
      const ph::UniaxialEntry e = ph::uniaxial_entry(k, kUp, c, n1, kCalciteO, kCalciteE, kHint);
      ASSERT_EQ(e.degenerate, 0u);
      EXPECT_EQ(e.tir[m], d > 0 ? 1u : 0u) << "mode " << m << " d " << d;
      EXPECT_EQ(e.tir[1 - m], m == 0 ? 1u : 0u);  // past o's angle e is already TIR; below e's, o is not
      if (e.tir[m]) {
        float unpol[4] = {1.0f, 0.0f, 0.0f, 0.0f};
        EXPECT_EQ(ph::entry_mode_power(e, static_cast<std::uint32_t>(m), unpol), 0.0f);
      }
    }
  }
  {  // Both past: total reflection of both polarisations.
    const double i = crit_o + 0.05;
    const Vec3 k{static_cast<float>(std::sin(i)), static_cast<float>(-std::cos(i)), 0.0f};
    const ph::UniaxialEntry e = ph::uniaxial_entry(k, kUp, c, n1, kCalciteO, kCalciteE, kHint);
    EXPECT_NEAR(entry_rs_total(e), 1.0f, 1e-5f);
    EXPECT_NEAR(entry_rp_total(e), 1.0f, 1e-5f);
  }
  // Leaving to air: each incident mode at its own critical angle asin(1/n).
  for (int m = 0; m < 2; ++m) {
    const double crit = std::asin(1.0 / (m == 0 ? kCalciteO : kCalciteE));
    for (double d : {-1e-3, 1e-3}) {
      const double i = crit + d;
      const Vec3 k{static_cast<float>(std::sin(i)), static_cast<float>(std::cos(i)), 0.0f};
      const ph::UniaxialInternal w =
          ph::uniaxial_internal(k, static_cast<std::uint32_t>(m), kUp, c, kCalciteO, kCalciteE, 1.0f, kHint);
      ASSERT_EQ(w.degenerate, 0u);
      EXPECT_EQ(w.tir_out, d > 0 ? 1u : 0u) << "mode " << m;
      if (w.tir_out) {
        EXPECT_NEAR(ph::internal_reflected_power(w, 0) + ph::internal_reflected_power(w, 1), 1.0f, 1e-5f);
      } else {
        EXPECT_GT(ph::internal_transmitted_power(w), 0.01f);
      }
    }
  }
  // A reflected mode of its own: an e wave of calcite (n_e < n_o) never makes o evanescent, but in a positive
  // crystal (n_e > n_o) the reflected o goes evanescent once k_t = n_e sin i passes n_o.
  const float po = 1.50f, pe = 1.70f;
  const double crit_r = std::asin(po / pe);
  for (double d : {-1e-3, 1e-3}) {
    const double i = crit_r + d;
    const Vec3 k{static_cast<float>(std::sin(i)), static_cast<float>(std::cos(i)), 0.0f};
    const Vec3 tilted = ph::normalize(Vec3{0.3f, 0.2f, 1.0f});  // couples o and e
    const ph::UniaxialInternal w0 =
        ph::uniaxial_internal(k, ph::kModeExtraordinary, kUp, c, po, pe, 1.0f, kHint);
    EXPECT_EQ(w0.tir_reflected[0], d > 0 ? 1u : 0u);
    const ph::UniaxialInternal w1 =
        ph::uniaxial_internal(k, ph::kModeOrdinary, kUp, tilted, po, pe, 1.0f, kHint);
    EXPECT_EQ(w1.tir_reflected[0], 0u);  // the same mode's reflection always propagates
  }
}

// (g) The scalar fallback of tracer.md §7.5 when |k × c|² ≤ 1e-6.
TEST(Uniaxial, DegenerateFallsBackToScalarFresnelAtNo) {
  const float n_o = 1.6584f, n_e = 1.4864f;
  const double i = 0.7;
  const Vec3 k{static_cast<float>(std::sin(i)), static_cast<float>(-std::cos(i)), 0.0f};
  const IsoR r = iso_reflectance(1.0, n_o, std::cos(i));
  {
    const ph::UniaxialEntry e = ph::uniaxial_entry(k, kUp, k, 1.0f, n_o, n_e, kHint);  // c = k
    EXPECT_EQ(e.degenerate, 1u);
    EXPECT_NEAR(entry_rs_total(e), r.rs2, 1e-6);
    EXPECT_NEAR(entry_rp_total(e), r.rp2, 1e-6);
    EXPECT_NEAR(entry_ts_total(e), 1.0 - r.rs2, 1e-6);
    EXPECT_NEAR(entry_tp_total(e), 1.0 - r.rp2, 1e-6);
    const ph::EntryGeometry ed = entry_dirs(e, k, kUp, k, n_o, n_e);
    EXPECT_LT(ph::length(ed.k[0] - ed.k[1]), 1e-7f);
  }
  // Just inside the threshold (|k × c|² = 0.9e-6) and just outside (1.1e-6).
  for (float x2 : {0.9e-6f, 1.1e-6f}) {
    const Vec3 perp{std::cos(static_cast<float>(i)), std::sin(static_cast<float>(i)), 0.0f};
    const Vec3 c = ph::normalize(k + perp * std::sqrt(x2 / (1.0f - x2)));
    const Vec3 x = ph::cross(k, c);
    ASSERT_NEAR(ph::dot(x, x), x2, 1e-8f);
    const ph::UniaxialEntry e = ph::uniaxial_entry(k, kUp, c, 1.0f, n_o, n_e, kHint);
    EXPECT_EQ(e.degenerate, x2 <= ph::kUniaxialDegenerate ? 1u : 0u);
    EXPECT_EQ(ph::uniaxial_degenerate(k, c), x2 <= ph::kUniaxialDegenerate);
  }
  // A refracted o normal along c is degenerate too (the o field k × c vanishes).
  {
    const ph::UniaxialEntry e0 = ph::uniaxial_entry(k, kUp, Vec3{0.0f, 0.0f, 1.0f}, 1.0f, n_o, n_e, kHint);
    const Vec3 k0 = entry_dirs(e0, k, kUp, Vec3{0.0f, 0.0f, 1.0f}, n_o, n_e).k[0];
    const ph::UniaxialEntry e = ph::uniaxial_entry(k, kUp, k0, 1.0f, n_o, n_e, kHint);
    EXPECT_EQ(e.degenerate, 1u);
    EXPECT_NEAR(entry_ts_total(e), 1.0 - r.rs2, 1e-6);
  }
  // Inside: k ∥ c reflects and refracts as an isotropic stone of n_o, unpolarised.
  {
    const Vec3 ki{static_cast<float>(std::sin(0.4)), static_cast<float>(std::cos(0.4)), 0.0f};
    const IsoR ri = iso_reflectance(n_o, 1.0, std::cos(0.4));
    const ph::UniaxialInternal w =
        ph::uniaxial_internal(ki, ph::kModeExtraordinary, kUp, ki, n_o, n_e, 1.0f, kHint);
    EXPECT_EQ(w.degenerate, 1u);
    EXPECT_NEAR(ph::internal_reflected_power(w, 0), 0.5 * (ri.rs2 + ri.rp2), 1e-6);
    EXPECT_NEAR(ph::internal_transmitted_power(w), 1.0 - 0.5 * (ri.rs2 + ri.rp2), 1e-6);
    const Vec3 k_out = ph::internal_exit_k(w, ph::facet_frame(ki, kUp, false, ki, kHint), ki, n_o, 1.0f);
    EXPECT_NEAR(ph::length(ph::cross(k_out, kUp)), n_o * std::sin(0.4), 1e-6);
  }
}

// (h) Pleochroism: α = eᵀAe. The o mode sees α_o in every direction; the e mode along k ⟂ c sees α_e.
TEST(Uniaxial, PleochroicAbsorption) {
  Uniform u(8u);
  const float ao = 3.0f, ae = 1.4f;  // ruby's 556 nm band peaks, o and e (docs/materials.md)
  for (int i = 0; i < 1000; ++i) {
    const Vec3 k = u.unit(), c = u.unit();
    if (ph::uniaxial_degenerate(k, c)) continue;
    const Vec3 eo = ph::mode_polarisation(ph::kModeOrdinary, k, c, 1.7681f, 1.7600f);
    EXPECT_NEAR(ph::pleochroic_absorption(eo, c, ao, ae), ao, 1e-5f);
    const Vec3 ee = ph::mode_polarisation(ph::kModeExtraordinary, k, c, 1.7681f, 1.7600f);
    const float a = ph::pleochroic_absorption(ee, c, ao, ae);
    EXPECT_GE(a, ae - 1e-5f);
    EXPECT_LE(a, ao + 1e-5f);
    // k ⟂ c: E_e ∥ c.
    const Vec3 kp = ph::normalize(ph::cross(c, k));
    const Vec3 ep = ph::mode_polarisation(ph::kModeExtraordinary, kp, c, 1.7681f, 1.7600f);
    EXPECT_NEAR(ph::pleochroic_absorption(ep, c, ao, ae), ae, 1e-5f);
  }
  // The tensor itself: eᵀ(α_o(I − ccᵀ) + α_e ccᵀ)e for a hand-picked e at 60° to c.
  const Vec3 c{0.0f, 1.0f, 0.0f};
  const Vec3 e{std::sin(1.0471976f), std::cos(1.0471976f), 0.0f};
  EXPECT_NEAR(ph::pleochroic_absorption(e, c, ao, ae), ao * 0.75f + ae * 0.25f, 1e-5f);
}

// The isotropic limit (n_e = n_o) reproduces fresnel.h: the reflected Mueller matrix at entry and the transmitted
// Stokes vector at exit, which pins the (ŝ, k̂ × ŝ) frame and the signs of U and V.
TEST(Uniaxial, IsotropicLimitMatchesFresnel) {
  Uniform u(21u);
  for (int i = 0; i < 500; ++i) {
    const Vec3 n = u.unit(), c = u.unit();
    const float nn = u.in(1.4f, 2.5f);
    const Vec3 k = random_entry_dir(u, n, i + 1);
    const ph::UniaxialEntry e = ph::uniaxial_entry(k, n, c, 1.0f, nn, nn, kHint);
    if (e.degenerate) continue;
    const float cos_t = ph::cos_transmitted(1.0f / nn, e.cos_i);
    const ph::FresnelAmps a = ph::fresnel_amps(1.0f, nn, e.cos_i, cos_t);
    float s1[4] = {1.0f, u(), u(), u()}, s2[4];
    for (int j = 0; j < 4; ++j) s2[j] = s1[j];
    ph::apply_reflection(s1, a, 1.0f);
    ph::apply_jones(s2, e.r, 1.0f);
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(s1[j], s2[j], 2e-5f) << "component " << j;

    const Vec3 ki = -random_entry_dir(u, n, i + 1);
    const ph::UniaxialInternal w = ph::uniaxial_internal(ki, ph::kModeOrdinary, n, c, nn, nn, 1.0f, kHint);
    if (w.degenerate || w.tir_out) continue;
    float sin_[4], sout[4];
    linear_stokes(ph::mode_polarisation(ph::kModeOrdinary, ki, c, nn, nn), ki,
                  ph::facet_frame(ki, n, false, c, kHint).f.s, sin_);
    const float ct = ph::cos_transmitted(nn, w.cos_i);
    ph::apply_transmission(sin_, nn, 1.0f, w.cos_i, ct, 1.0f);
    ph::internal_transmitted_stokes(w, 1.0f, sout);
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(sout[j], sin_[j], 2e-5f) << "component " << j;
  }
}

// (i) No NaN or Inf for random and degenerate inputs.
TEST(Uniaxial, FiniteForDegenerateInputs) {
  Uniform u(99u);
  const Vec3 axes[6] = {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {-1, 0, 0}, {0, -1, 0}, {0, 0, -1}};
  int count = 0;
  for (int i = 0; i < 20000; ++i) {
    Vec3 n = u.unit(), c = u.unit(), k = u.unit();
    switch (i % 8) {
      case 0:
        n = axes[i % 6];
        c = n;
        k = -n;
        break;  // normal incidence along the axis
      case 1:
        n = axes[i % 6];
        c = axes[(i / 6) % 6];
        k = -n;
        break;               // normal incidence, axis in the surface
      case 2: c = k; break;  // k ∥ c
      case 3: c = -k; break;
      case 4: k = ph::normalize(ph::cross(n, c)); break;  // exactly grazing
      case 5:
        k = ph::normalize(k - n * ph::dot(k, n));
        c = n;
        break;
      default: break;
    }
    const float n_o = u.in(1.0f, 3.0f), n_e = (i % 7 == 0) ? n_o : u.in(1.0f, 3.0f);
    const Vec3 kin = ph::dot(k, n) > 0.0f ? -k : k;
    const ph::UniaxialEntry e = ph::uniaxial_entry(kin, n, c, (i % 3 == 0) ? 2.0f : 1.0f, n_o, n_e, kHint);
    ASSERT_TRUE(all_finite(e, entry_dirs(e, kin, n, c, n_o, n_e))) << "entry i=" << i;
    for (std::uint32_t m = 0; m < 2; ++m) {
      const ph::UniaxialInternal w = ph::uniaxial_internal(-kin, m, n, c, n_o, n_e, 1.0f, kHint);
      const ph::InternalGeometry g =
          ph::internal_geometry(w, ph::facet_frame(-kin, n, false, c, kHint), -kin, c, n_o, n_e, 1.0f);
      ASSERT_TRUE(all_finite(w, g)) << "internal i=" << i << " mode " << m;
      float s[4];
      ph::internal_transmitted_stokes(w, 1.0f, s);
      for (float v : s) ASSERT_TRUE(std::isfinite(v));
    }
    const float unpol[4] = {1.0f, 0.0f, 0.0f, 0.0f};
    const float p =
        ph::mode_split_probability(ph::entry_mode_power(e, 0, unpol), ph::entry_mode_power(e, 1, unpol));
    ASSERT_TRUE(p >= 0.02f && p <= 0.98f);
    ASSERT_TRUE(finite(ph::extraordinary_ray(kin, c, n_o, n_e)));
    ++count;
  }
  EXPECT_EQ(count, 20000);
}

// (j) The facet solutions against an independent double-precision oracle: the full boundary system of
// docs/design/tracer.md §7.6 (four waves' tangential E and H = k × E along t̂ and ŝ, four unknowns, Gaussian
// elimination with partial pivoting in std::complex<double>, fluxes Re(E × H*)·ẑ taken directly), the same
// field conventions (o: E ∥ k × c; e: E ∥ n_o² c − (k·c) k; s: E = ŝ; p: E = k × ŝ/n; each |E| = 1). The
// library eliminates the isotropic side's amplitudes in closed form and solves 2 × 2 in f32; every Jones entry
// must match the oracle's, phase included.
namespace oracle {

using C = std::complex<double>;
struct V {
  C x, y, z;
};
V cv(Vec3 a) { return V{a.x, a.y, a.z}; }
V operator+(V a, V b) { return V{a.x + b.x, a.y + b.y, a.z + b.z}; }
V operator*(V a, C s) { return V{a.x * s, a.y * s, a.z * s}; }
C dot(V a, V b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
V cross(V a, V b) { return V{a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x}; }
V conj(V a) { return V{std::conj(a.x), std::conj(a.y), std::conj(a.z)}; }
V unit(V a) {
  const double n = std::sqrt(std::norm(a.x) + std::norm(a.y) + std::norm(a.z));
  return a * C(n > 0.0 ? 1.0 / n : 0.0);
}

/// A plane wave's four tangential components (E·t̂, E·ŝ, H·t̂, H·ŝ) and its normal flux per unit |E|².
struct Tan {
  C c[4];
  double flux;
};
Tan tangential(V k, V e, V t, V s, V z, bool propagating) {
  e = unit(e);
  const V h = cross(k, e);
  return Tan{{dot(e, t), dot(e, s), dot(h, t), dot(h, s)},
             propagating ? std::fabs(dot(cross(e, conj(h)), z).real()) : 0.0};
}

/// Solves Σ_j x_j·col_j = rhs (4 × 4) by Gaussian elimination with partial pivoting.
bool solve4(const Tan* cols[4], const C rhs[4], C x[4]) {
  C m[4][5];
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) m[i][j] = cols[j]->c[i];
    m[i][4] = rhs[i];
  }
  for (int j = 0; j < 4; ++j) {
    int p = j;
    for (int i = j + 1; i < 4; ++i) {
      if (std::abs(m[i][j]) > std::abs(m[p][j])) p = i;
    }
    if (std::abs(m[p][j]) < 1e-12) return false;
    for (int l = 0; l < 5; ++l) std::swap(m[j][l], m[p][l]);
    for (int i = j + 1; i < 4; ++i) {
      const C f = m[i][j] / m[j][j];
      for (int l = j; l < 5; ++l) m[i][l] -= f * m[j][l];
    }
  }
  for (int j = 3; j >= 0; --j) {
    C acc = m[j][4];
    for (int l = j + 1; l < 4; ++l) acc -= m[j][l] * x[l];
    x[j] = acc / m[j][j];
  }
  return true;
}

/// The roots of the extraordinary quadratic A q² + 2B q + C = 0 (tracer.md §7.6) in double: the one carrying
/// energy along sign·ẑ, or the evanescent one decaying on that side.
C extraordinary_root(double n_o, double n_e, double kt, double al, double ga, double sign, bool& prop) {
  const double de = n_e * n_e - n_o * n_o;
  const double a = n_o * n_o + de * ga * ga, b = de * kt * al * ga;
  const double c = kt * kt * (n_o * n_o + de * al * al) - n_o * n_o * n_e * n_e;
  const double disc = b * b - a * c;
  prop = disc >= 0.0;
  return prop ? C((-b + sign * std::sqrt(disc)) / a) : C(-b / a, sign * std::sqrt(-disc) / a);
}
C iso_root(double n, double kt, double sign, bool& prop) {
  const double d = n * n - kt * kt;
  prop = d >= 0.0;
  return prop ? C(sign * std::sqrt(d)) : C(0.0, sign * std::sqrt(-d));
}

V ordinary_e(V k, V c) { return cross(k, c); }
V extraordinary_e(V k, V c, double n_o) { return c * C(n_o * n_o) + k * (-dot(k, c)); }

struct Frame {
  V t, s, z;
  double kt;
};
Frame frame(Vec3 k, Vec3 n, Vec3 s_axis, bool entering, double n_k) {
  Frame f;
  f.z = cv(entering ? -n : n);
  f.s = cv(s_axis);
  f.t = entering ? cross(f.s, f.z) : cross(f.z, f.s);
  f.kt = n_k * dot(cv(k), f.t).real();
  return f;
}
V wave_vector(const Frame& f, C q) { return f.t * C(f.kt) + f.z * q; }

/// Entry Jones matrices [ss, sp, ps, pp] and [os, op, es, ep] (power amplitudes).
bool entry(Vec3 k, Vec3 n, Vec3 c, double n1, double n_o, double n_e, Vec3 s_axis, C r[4], C t[4]) {
  const Frame f = frame(k, n, s_axis, true, n1);
  const double q1 = n1 * std::fabs(dot(cv(k), f.z).real());
  const V cc = cv(c);
  bool po, pe, unused;
  const C qo = iso_root(n_o, f.kt, 1.0, po);
  const C qe = extraordinary_root(n_o, n_e, f.kt, dot(cc, f.t).real(), dot(cc, f.z).real(), 1.0, pe);
  const V ki = wave_vector(f, q1), kr = wave_vector(f, -q1), ko = wave_vector(f, qo), ke = wave_vector(f, qe);
  (void)unused;
  const Tan is = tangential(ki, f.s, f.t, f.s, f.z, true);
  const Tan ip = tangential(ki, cross(ki, f.s), f.t, f.s, f.z, true);
  const Tan rs = tangential(kr, f.s, f.t, f.s, f.z, true);
  const Tan rp = tangential(kr, cross(kr, f.s), f.t, f.s, f.z, true);
  const Tan wo = tangential(ko, ordinary_e(ko, cc), f.t, f.s, f.z, po);
  const Tan we = tangential(ke, extraordinary_e(ke, cc, n_o), f.t, f.s, f.z, pe);
  // incident + x₀ rs + x₁ rp = x₂ o + x₃ e, i.e. x₀ rs + x₁ rp − x₂ o − x₃ e = −incident.
  Tan no = wo, ne = we;
  for (int i = 0; i < 4; ++i) no.c[i] = -wo.c[i], ne.c[i] = -we.c[i];
  const Tan* cols[4] = {&rs, &rp, &no, &ne};
  for (int in = 0; in < 2; ++in) {
    const Tan& inc = in == 0 ? is : ip;
    const C rhs[4] = {-inc.c[0], -inc.c[1], -inc.c[2], -inc.c[3]};
    C x[4];
    if (!solve4(cols, rhs, x)) return false;
    r[in] = x[0] * std::sqrt(rs.flux / inc.flux);
    r[2 + in] = x[1] * std::sqrt(rp.flux / inc.flux);
    t[in] = x[2] * std::sqrt(wo.flux / inc.flux);
    t[2 + in] = x[3] * std::sqrt(we.flux / inc.flux);
  }
  return true;
}

/// Internal facet: reflected [o, e] and transmitted (s, p) power amplitudes.
bool internal(Vec3 k, std::uint32_t mode, Vec3 n, Vec3 c, double n_o, double n_e, double n2, Vec3 s_axis,
              C r[2], C t[2]) {
  const V cc = cv(c);
  const double kc = ph::dot(k, c);
  const double n_in =
      mode == 0 ? n_o : n_o * n_e / std::sqrt(n_e * n_e * kc * kc + n_o * n_o * (1.0 - kc * kc));
  const Frame f = frame(k, n, s_axis, false, n_in);
  const double q_in = n_in * dot(cv(k), f.z).real();
  bool po = true, pe = true, pt;
  C qo, qe;
  const double al = dot(cc, f.t).real(), ga = dot(cc, f.z).real();
  if (mode == 0) {
    qo = -q_in;
    qe = extraordinary_root(n_o, n_e, f.kt, al, ga, -1.0, pe);
  } else {
    qo = iso_root(n_o, f.kt, -1.0, po);
    qe = extraordinary_root(n_o, n_e, f.kt, al, ga, -1.0, pe);
  }
  const C q2 = iso_root(n2, f.kt, 1.0, pt);
  const V ki = wave_vector(f, q_in), ko = wave_vector(f, qo), ke = wave_vector(f, qe),
          k2 = wave_vector(f, q2);
  const Tan inc =
      tangential(ki, mode == 0 ? ordinary_e(ki, cc) : extraordinary_e(ki, cc, n_o), f.t, f.s, f.z, true);
  const Tan wo = tangential(ko, ordinary_e(ko, cc), f.t, f.s, f.z, po);
  const Tan we = tangential(ke, extraordinary_e(ke, cc, n_o), f.t, f.s, f.z, pe);
  const Tan ts = tangential(k2, f.s, f.t, f.s, f.z, pt);
  const Tan tp = tangential(k2, cross(k2, f.s) * C(1.0 / n2), f.t, f.s, f.z, pt);
  Tan ns = ts, np = tp;
  for (int i = 0; i < 4; ++i) ns.c[i] = -ts.c[i], np.c[i] = -tp.c[i];
  const Tan* cols[4] = {&wo, &we, &ns, &np};
  const C rhs[4] = {-inc.c[0], -inc.c[1], -inc.c[2], -inc.c[3]};
  C x[4];
  if (!solve4(cols, rhs, x)) return false;
  r[0] = x[0] * std::sqrt(wo.flux / inc.flux);
  r[1] = x[1] * std::sqrt(we.flux / inc.flux);
  t[0] = x[2] * std::sqrt(ts.flux / inc.flux);
  t[1] = x[3] * std::sqrt(tp.flux / inc.flux);
  return true;
}

double diff(ph::Complexf a, C b) { return std::abs(C(a.re, a.im) - b); }

}  // namespace oracle

TEST(Uniaxial, FacetSolutionsMatchDoublePrecisionOracle) {
  Uniform u(23u);
  double worst_entry = 0.0, worst_internal = 0.0, worst_internal_grazing = 0.0;
  int entries = 0, internals = 0, evanescent = 0;
  for (int i = 0; i < 20000; ++i) {
    const RandomFacet g = random_facet(u, i);
    const Vec3 n = g.n, c = g.c, k = g.k;
    const float n_o = g.n_o, n_e = g.n_e, n1 = g.n1;
    const ph::UniaxialEntry e = ph::uniaxial_entry(k, n, c, n1, n_o, n_e, kHint);
    oracle::C r[4], t[4];
    // Measured (seed 23): worst 3.9e-5, the same for the library's earlier 4 × 4 f32 elimination.
    const Vec3 s_entry = ph::facet_frame(k, n, true, c, kHint).f.s;
    if (e.degenerate == 0u && e.cos_i >= 0.01f && oracle::entry(k, n, c, n1, n_o, n_e, s_entry, r, t)) {
      ++entries;
      for (int j = 0; j < 4; ++j) {
        const double d =
            std::fmax(oracle::diff(e.r[j], r[j]), oracle::diff(ph::entry_transmission_amplitude(e, j), t[j]));
        worst_entry = std::fmax(worst_entry, d);
        ASSERT_LT(d, 1e-4) << "entry i=" << i << " entry " << j << " cos_i " << e.cos_i;
      }
    }
    const std::uint32_t mode = static_cast<std::uint32_t>(i & 1);
    Vec3 ki;
    float n2 = 1.0f;
    if (!random_inside(u, g, mode, i, ki, n2)) continue;
    const ph::UniaxialInternal w = ph::uniaxial_internal(ki, mode, n, c, n_o, n_e, n2, kHint);
    oracle::C ri[2], ti[2];
    const Vec3 s_internal = ph::facet_frame(ki, n, false, c, kHint).f.s;
    if (w.degenerate != 0u || !oracle::internal(ki, mode, n, c, n_o, n_e, n2, s_internal, ri, ti)) continue;
    const float s_dot_n = ph::dot(ph::mode_ray(mode, ki, c, n_o, n_e), n);
    double d = 0.0;
    // A reflected path goes on as one mode's intensity, so the solution keeps the reflected powers only: their
    // square roots against the oracle's |r| (|√P − |r_oracle|| ≤ |r − r_oracle|, the same bound); the transmitted
    // Jones vector with its phases.
    for (int j = 0; j < 2; ++j) {
      const double mag = std::sqrt(static_cast<double>(w.r_power[j]));
      d = std::fmax(d, std::fmax(std::fabs(mag - std::abs(ri[j])),
                                 oracle::diff(ph::internal_transmitted_amplitude(w, j), ti[j])));
    }
    // Within 1 % of grazing (S·N < 0.01) the e mode's two roots merge and the rounding of the inputs decides
    // whether its reflected wave propagates; measured from there on (seed 23): worst 2.9e-5 for S·N >= 0.1 and
    // 1.8e-5/(S·N) nearer grazing, the same for the library's earlier 4 × 4 f32 elimination.
    if (s_dot_n < 0.01f) continue;
    ++internals;
    evanescent += (w.tir_reflected[0] | w.tir_reflected[1] | w.tir_out) != 0u;
    if (s_dot_n >= 0.1f) worst_internal = std::fmax(worst_internal, d);
    worst_internal_grazing = std::fmax(worst_internal_grazing, d * s_dot_n);
    ASSERT_LT(d, std::fmax(5e-5, 4e-5 / s_dot_n))
        << "internal i=" << i << " mode " << mode << " S.N " << s_dot_n;
  }
  EXPECT_GT(entries, 18000);
  EXPECT_GT(internals, 5000);
  EXPECT_GT(evanescent, 1000);
  std::printf(
      "worst |Jones - oracle|: entry %.3g (cos i >= 0.01), internal %.3g (S.N >= 0.1), internal near grazing "
      "%.3g/(S.N); %d entries, %d internal (%d with an evanescent wave)\n",
      worst_entry, worst_internal, worst_internal_grazing, entries, internals, evanescent);
}

}  // namespace
