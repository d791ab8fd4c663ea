/// @file
/// The Tier 2 lighting presets (docs/design/tracer.md §6.2) on the CPU tracer, against values derived here by hand
/// from the model definitions of §6.2:
/// - each lit model's radiance at chosen directions (the key, the zenith, the ground, the horizon, the
///   observer, a spark light), and the Studio configurations of Incandescent and DarkSpotlight;
/// - the sun disc's NEE density integrates to 1 over the disc and its draws lie in the disc, uniformly;
/// - DaylightSun with NEE on and off (the frosted lobe alone) estimate the same image of a frosted cube;
/// - every traced Tier 2 preset renders finite, non-black images, a uniaxial stone under DaylightSun too;
/// - the UV lamps are refused on both tracers, the message naming fluorescence;
/// - the Tier 1 presets keep their Studio path (their bits are pinned by the golden of tracer_cpu_tracer_test).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cpu/trace_params.h"
#include "facetrace/tracer/cpu_tracer.h"
#include "facetrace/tracer/scene.h"
#include "physics/environment.h"
#include "physics/preset_environment.h"
#include "physics/transport.h"
#include "tracer_shapes.h"

namespace ft = facetrace::tracer;
namespace ph = facetrace::tracer::physics;
using facetrace::Code;

namespace {

constexpr double kDegToRad = 3.14159265358979323846 / 180.0;

/// The built-in scene under `preset`: camera yaw 0.3, pitch 0.7; key light yaw 0.85, pitch 0.95; exposure 1.
ft::Scene preset_scene(ft::LightingPreset preset) {
  ft::Scene s = ft::builtin_diamond_scene();
  s.width = s.height = 16;
  s.lighting_preset = preset;
  return s;
}

/// The radiance a path of unit intensity sees in direction w at λ (channel 0 of hero λ), via PresetEnv.
double radiance(const ph::TraceParams& p, ph::Vec3 w, float lambda, std::uint32_t bounce = 1) {
  const ph::PresetEnv env{0u};
  return env.radiance(p, env.miss(p, w, bounce), 1.0f, lambda, 0);
}

ph::Vec3 unit(double x, double y, double z) {
  const double l = std::sqrt(x * x + y * y + z * z);
  return ph::Vec3{float(x / l), float(y / l), float(z / l)};
}

/// (cos p·sin y, sin p, cos p·cos y) (docs/design/tracer.md §2).
ph::Vec3 orbit(double yaw, double pitch) {
  return unit(std::cos(pitch) * std::sin(yaw), std::sin(pitch), std::cos(pitch) * std::cos(yaw));
}

constexpr double kSinKey = 0.81341550478937;  // sin 0.95, the key's ω_y

void expect_rel(double got, double want, double rel, const char* what) {
  EXPECT_NEAR(got, want, rel * std::fabs(want) + 1e-7) << what;
}

/// Image-mean XYZ of a film.
double film_mean_y(const ft::Film& f) {
  double m = 0.0;
  for (std::size_t p = 0; p < f.pixels(); ++p) m += f.xyz[p * 3 + 1] / double(f.samples[p]);
  return m / double(f.pixels());
}

using facetrace::tracer::test::frosted_cube;

}  // namespace

// §6.2: every Tier 2 preset but the UV lamps is traced by both tracers; the lit models get env mode kEnvPreset,
// the Studio configurations stay on the Studio rig, and the Tier 1 presets keep their rig and mode.
TEST(TracerPresets, presets_map_to_their_models) {
  struct Want {
    ft::LightingPreset preset;
    std::uint32_t env_kind, model;
  };
  const Want wants[] = {
      {ft::LightingPreset::kDaylight, ph::kEnvStudio, ph::kPresetNone},
      {ft::LightingPreset::kIncandescent, ph::kEnvStudio, ph::kPresetNone},
      {ft::LightingPreset::kRingLights, ph::kEnvStudio, ph::kPresetNone},
      {ft::LightingPreset::kDarkSpotlight, ph::kEnvStudio, ph::kPresetNone},
      {ft::LightingPreset::kIsoHemisphere, ph::kEnvPreset, ph::kPresetIsoHemisphere},
      {ft::LightingPreset::kLightTent, ph::kEnvStudio, ph::kPresetNone},
      {ft::LightingPreset::kDaylightDome, ph::kEnvPreset, ph::kPresetDome},
      {ft::LightingPreset::kDaylightSun, ph::kEnvPreset, ph::kPresetSun},
      {ft::LightingPreset::kAset, ph::kEnvPreset, ph::kPresetAset},
      {ft::LightingPreset::kShopLights, ph::kEnvPreset, ph::kPresetTent},
      {ft::LightingPreset::kWindowDaylight, ph::kEnvPreset, ph::kPresetTent},
      {ft::LightingPreset::kWhiteTray, ph::kEnvPreset, ph::kPresetTent},
      {ft::LightingPreset::kIlluminantA, ph::kEnvStudio, ph::kPresetNone},
  };
  for (const Want& w : wants) {
    SCOPED_TRACE(std::string(ft::lighting_preset_name(w.preset)));
    const ft::Scene s = preset_scene(w.preset);
    const ft::TierFeatures t = ft::tier_features(s);
    EXPECT_TRUE(t.status().ok()) << t.status().what();
    EXPECT_TRUE(t.gpu_status().ok()) << t.gpu_status().what();
    const ph::TraceParams p = ft::make_trace_params(s);
    EXPECT_EQ(p.env_kind, w.env_kind);
    EXPECT_EQ(p.preset_model, w.model);
    // The lit models are D65 without white balance (reference: identity white balance for the D65 presets).
    if (w.env_kind == ph::kEnvPreset) {
      EXPECT_EQ(p.illuminant_kind, 0u);
      EXPECT_EQ(p.white_balance, 0u);
    }
  }
  // An HDR map or the uniform environment is what the scene says, whatever the preset.
  ft::Scene u = preset_scene(ft::LightingPreset::kDaylightSun);
  u.environment = ft::EnvironmentKind::kUniform;
  EXPECT_EQ(ft::make_trace_params(u).env_kind, ph::kEnvUniform);
}

// The Tier 1 rigs are the ones they always were (docs/design/tracer.md §6 table, frozen by the goldens), and
// the two Tier 2 Studio configurations are §6.2's: Incandescent the IlluminantA rig under Planck 3200 K,
// DarkSpotlight RingLights' charcoal with Daylight's fill, the key × 2.4, Planck 6000 K.
TEST(TracerPresets, studio_configurations) {
  auto same = [](const ph::StudioRig& a, const ph::StudioRig& b) {
    return a.illuminant_kind == b.illuminant_kind && a.planck_kelvin == b.planck_kelvin &&
           a.floor_level == b.floor_level && a.ceiling_level == b.ceiling_level && a.key == b.key &&
           a.fill == b.fill && a.ring == b.ring && a.ring_elevation_deg == b.ring_elevation_deg &&
           a.ring_radius_deg == b.ring_radius_deg;
  };
  EXPECT_TRUE(same(ph::studio_rig(0), {0u, 6504.0f, 0.04f, 0.45f, 1.0f, 0.6f, 0.0f, 35.0f, 4.0f}));
  EXPECT_TRUE(same(ph::studio_rig(2), {0u, 6504.0f, 0.02f, 0.06f, 0.3f, 0.2f, 8.0f, 35.0f, 4.0f}));
  EXPECT_TRUE(same(ph::studio_rig(5), {0u, 6504.0f, 0.02f, 0.5f, 0.6f, 0.4f, 4.0f, 25.0f, 4.0f}));
  EXPECT_TRUE(same(ph::studio_rig(14), {1u, 2856.0f, 0.04f, 0.45f, 1.0f, 0.6f, 0.0f, 35.0f, 4.0f}));
  EXPECT_TRUE(same(ph::studio_rig(1), {1u, 3200.0f, 0.04f, 0.45f, 1.0f, 0.6f, 0.0f, 35.0f, 4.0f}));
  EXPECT_TRUE(same(ph::studio_rig(3), {1u, 6000.0f, 0.02f, 0.06f, 2.4f, 0.6f, 0.0f, 35.0f, 4.0f}));

  // DarkSpotlight along the key: floor + (ceiling − floor)·h² + 2.4·12·4 (the spot core) + the fill there.
  const ph::TraceParams p = ft::make_trace_params(preset_scene(ft::LightingPreset::kDarkSpotlight));
  EXPECT_EQ(p.illuminant_kind, 1u);
  EXPECT_EQ(p.planck_kelvin, 6000.0f);
  EXPECT_EQ(p.white_balance, 1u);
  const double h = 0.5 * (1.0 + kSinKey);
  const double key_fill_cos = std::cos(0.95) * std::cos(0.45) * std::cos(2.5) + kSinKey * std::sin(0.45);
  const double fill = key_fill_cos > 0 ? 0.6 * 4.5 * std::pow(key_fill_cos, 18) : 0.0;
  expect_rel(ph::studio_shape(p, p.key_dir), 0.02 + 0.04 * h * h + 2.4 * 12.0 * 4.0 + fill, 1e-5,
             "DarkSpotlight at the key");
  // Incandescent's shape is IlluminantA's in every direction; its spectrum is Planck 3200 K.
  const ph::TraceParams pa = ft::make_trace_params(preset_scene(ft::LightingPreset::kIlluminantA));
  const ph::TraceParams pi = ft::make_trace_params(preset_scene(ft::LightingPreset::kIncandescent));
  EXPECT_EQ(pi.planck_kelvin, 3200.0f);
  for (const ph::Vec3 w : {pa.key_dir, pa.fill_dir, unit(0, 1, 0), unit(1, -0.2, 0.3)})
    EXPECT_EQ(ph::studio_shape(pi, w), ph::studio_shape(pa, w));
}

// §6.2 IsoHemisphere: horizon(ω_y)·visibility; 1 at the zenith, 0 below, ½ on the girdle plane, 0 towards the
// observer (inside the 14° core of the head shadow), 1 again 20° away from it. D65(560 nm) = 1.
TEST(TracerPresets, iso_hemisphere_radiance) {
  const ph::TraceParams p = ft::make_trace_params(preset_scene(ft::LightingPreset::kIsoHemisphere));
  expect_rel(radiance(p, unit(0, 1, 0), 560.0f), 1.0, 1e-6, "zenith");
  expect_rel(radiance(p, unit(0, -1, 0), 560.0f), 0.0, 1e-6, "nadir");
  expect_rel(radiance(p, unit(0.6, 0, -0.8), 560.0f), 0.5, 1e-6, "horizon");
  expect_rel(radiance(p, p.view_dir, 560.0f), 0.0, 1e-6, "the observer");
  expect_rel(radiance(p, orbit(0.3, 0.7 - 20.0 * kDegToRad), 560.0f), 1.0, 1e-6, "20° below the observer");
  // D65 at 500 nm is 109.354/100 (CIE table).
  expect_rel(radiance(p, unit(0, 1, 0), 500.0f), 1.09354, 1e-5, "zenith, 500 nm");
  // exposure scales it; a camera ray that misses sees the backdrop × D65 (0.02 by default).
  ft::Scene s = preset_scene(ft::LightingPreset::kIsoHemisphere);
  s.exposure = 2.5f;
  expect_rel(radiance(ft::make_trace_params(s), unit(0, 1, 0), 560.0f), 2.5, 1e-6, "exposure 2.5");
  expect_rel(radiance(p, unit(0, 1, 0), 560.0f, 0), 0.02, 1e-6, "bounce-0 backdrop");
  // head_shadow_deg 0 turns the shadow off.
  s = preset_scene(ft::LightingPreset::kIsoHemisphere);
  s.head_shadow_deg = 0.0f;
  const ph::TraceParams q = ft::make_trace_params(s);
  expect_rel(radiance(q, q.view_dir, 560.0f), 1.0, 1e-6, "no head shadow");
}

// §6.2 tent model: walls (0.14 + 0.08·max(ω_y, 0))·walls, the key cone 1.4·spot at its axis, the spark 5·spot·spark
// at its axis, ground below; the cards are off in all three variants.
TEST(TracerPresets, tent_variants_radiance) {
  const double walls_at_key = 0.14 + 0.08 * kSinKey;  // 0.2050732
  {
    const ph::TraceParams p = ft::make_trace_params(preset_scene(ft::LightingPreset::kShopLights));
    expect_rel(radiance(p, p.key_dir, 560.0f), 3.0 * walls_at_key + 1.4, 1e-5, "ShopLights at the key");
    // The spark at the reference rig's fill: yaw 0.85 + 0.78π, pitch 0.65·0.95.
    const double sin_fp = std::sin(0.65 * 0.95);
    expect_rel(radiance(p, orbit(0.85 + 0.78 * 3.14159265358979, 0.65 * 0.95), 560.0f),
               3.0 * (0.14 + 0.08 * sin_fp) + 5.0, 1e-5, "ShopLights at the spark");
    expect_rel(radiance(p, unit(0, -1, 0), 560.0f), 0.05, 1e-6, "ShopLights ground");
    // Straight up the key cone (cos = sin 0.95 = 0.813 between cos 40° and cos 20°) is partly on:
    // t = (0.8134155 − 0.7660444)/(0.9396926 − 0.7660444) = 0.2727993, smoothstep t²(3 − 2t) = 0.1826552.
    expect_rel(radiance(p, unit(0, 1, 0), 560.0f), 3.0 * 0.22 + 1.4 * 0.1826552, 2e-5, "ShopLights zenith");
  }
  {
    const ph::TraceParams p = ft::make_trace_params(preset_scene(ft::LightingPreset::kWindowDaylight));
    expect_rel(radiance(p, p.key_dir, 560.0f), 0.4 * walls_at_key + 1.4, 1e-5, "WindowDaylight at the key");
    expect_rel(radiance(p, orbit(0.85 + 0.78 * 3.14159265358979, 0.65 * 0.95), 560.0f),
               0.4 * (0.14 + 0.08 * std::sin(0.65 * 0.95)), 1e-5, "WindowDaylight: no spark");
    expect_rel(radiance(p, unit(0, -1, 0), 560.0f), 0.03, 1e-6, "WindowDaylight ground");
  }
  {
    // WhiteTray: flat walls 0.18·5 = 0.9 at every elevation, no key, ground 0.8; the horizon blends them.
    const ph::TraceParams p = ft::make_trace_params(preset_scene(ft::LightingPreset::kWhiteTray));
    expect_rel(radiance(p, p.key_dir, 560.0f), 0.9, 1e-6, "WhiteTray at the key");
    expect_rel(radiance(p, unit(0.3, 0.2, -0.9), 560.0f), 0.9, 1e-6, "WhiteTray low");
    expect_rel(radiance(p, unit(0, -1, 0), 560.0f), 0.8, 1e-6, "WhiteTray ground");
    expect_rel(radiance(p, unit(0.6, 0, -0.8), 560.0f), 0.5 * 0.9 + 0.5 * 0.8, 1e-6, "WhiteTray horizon");
  }
}

// §6.2 sky: (0.10 + 0.08·(1 − max(ω_y, 0)) + 0.30·max(ω·ℓ, 0)⁸)·horizon·visibility + 0.04·(1 − horizon); DaylightSun
// adds 40 000 inside the 0.27° disc about ℓ (horizon(ℓ) = 1 for the key at 54°).
TEST(TracerPresets, daylight_sky_and_sun_radiance) {
  const ph::TraceParams dome = ft::make_trace_params(preset_scene(ft::LightingPreset::kDaylightDome));
  const ph::TraceParams sun = ft::make_trace_params(preset_scene(ft::LightingPreset::kDaylightSun));
  const double sky_at_key = 0.10 + 0.08 * (1.0 - kSinKey) + 0.30;  // 0.4149268
  expect_rel(radiance(dome, dome.key_dir, 560.0f), sky_at_key, 1e-5, "dome at the key");
  expect_rel(radiance(sun, sun.key_dir, 560.0f), 40000.0 + sky_at_key, 1e-6, "sun at its centre");
  // On the horizon at right angles to ℓ: horizon ½, sky 0.18, no aureole: 0.09 + 0.02.
  const ph::Vec3 side = unit(std::cos(0.85), 0.0, -std::sin(0.85));
  expect_rel(radiance(dome, side, 560.0f), 0.11, 1e-5, "dome horizon");
  expect_rel(radiance(sun, side, 560.0f), 0.11, 1e-5, "sun preset horizon");
  expect_rel(radiance(dome, unit(0, -1, 0), 560.0f), 0.04, 1e-6, "dome ground");
  // Just inside (0.25°) and outside (0.30°) the disc edge: the sun is a hard-edged disc of radius 0.27°.
  for (double deg : {0.25, 0.30}) {
    const ph::Vec3 w = orbit(0.85, 0.95 + deg * kDegToRad);
    const double c = std::cos(deg * kDegToRad);
    const double wy = std::sin(0.95 + deg * kDegToRad);
    const double sky = 0.10 + 0.08 * (1.0 - wy) + 0.30 * std::pow(c, 8);
    expect_rel(radiance(sun, w, 560.0f), sky + (deg < 0.27 ? 40000.0 : 0.0), 1e-5, "near the disc edge");
  }
  // The sun is not head-shadowed and fades with the key's own horizon blend: a key at 1° elevation
  // (ω_y = 0.017452, t = 0.674524, smoothstep 0.751155) gives 40 000·0.751155.
  ft::Scene low = preset_scene(ft::LightingPreset::kDaylightSun);
  low.light_pitch = float(1.0 * kDegToRad);
  const ph::TraceParams pl = ft::make_trace_params(low);
  const ph::PresetEnv env{1u};
  const ph::PresetLookup l = env.nee_at(pl, pl.key_dir);
  expect_rel(l.sun, 40000.0 * 0.751155, 1e-4, "sun at 1° elevation");
}

// §6.2 Aset: green 0–45°, red 45–75°, blue above, one Gaussian band (σ = 20 nm FWHM) each with gains 5, 8, 16;
// 20 nm off a band's centre is 1/16 of its peak (FWHM 20 nm: exp(−½·(20/σ)²) = 2⁻⁴).
TEST(TracerPresets, aset_radiance) {
  const ph::TraceParams p = ft::make_trace_params(preset_scene(ft::LightingPreset::kAset));
  const ph::Vec3 low = unit(std::sqrt(0.75), 0.5, 0.0);                // 30°
  const ph::Vec3 mid = unit(std::sqrt(1.0 - 0.85 * 0.85), 0.85, 0.0);  // 58°
  const ph::Vec3 high = unit(0.0, 1.0, 0.0);                           // 90°
  expect_rel(radiance(p, low, 540.0f), 5.0, 1e-5, "green zone at 540");
  expect_rel(radiance(p, low, 560.0f), 5.0 / 16.0, 1e-4, "green zone at 560");
  expect_rel(radiance(p, mid, 610.0f), 8.0, 1e-5, "red zone at 610");
  expect_rel(radiance(p, high, 460.0f), 16.0, 1e-5, "blue zone at 460");
  expect_rel(radiance(p, high, 480.0f), 1.0, 1e-4, "blue zone at 480");
  expect_rel(radiance(p, unit(0, -1, 0), 540.0f), 0.0, 1e-6, "black below");
  // The observer is not shadowed (the blue cap is the head zone).
  expect_rel(radiance(p, p.view_dir, 540.0f), 5.0, 1e-5, "observer (ω_y = sin 0.7, green)");
  // The backdrop of a camera ray that misses is × D65, as in the Studio rig.
  expect_rel(radiance(p, high, 560.0f, 0), 0.02, 1e-6, "bounce-0 backdrop");
}

// §6.2 the sun's NEE: the density 1/Ω inside the disc integrates to 1 (a cone of 1° sampled uniformly in solid
// angle, in double), and 200 000 draws lie in the disc, uniform in 1 − cos θ (half of them inside 1 − cos ≤ ½·max).
TEST(TracerPresets, sun_nee_density_and_draws) {
  const ph::TraceParams p = ft::make_trace_params(preset_scene(ft::LightingPreset::kDaylightSun));
  const ph::PresetEnv env{1u};
  const double kx = p.key_dir.x, ky = p.key_dir.y, kz = p.key_dir.z;
  // A frame about ℓ in double.
  double tx = 1.0 - kx * kx, ty = -kx * ky, tz = -kx * kz;
  const double tl = std::sqrt(tx * tx + ty * ty + tz * tz);
  tx /= tl, ty /= tl, tz /= tl;
  const double bx = ky * tz - kz * ty, by = kz * tx - kx * tz, bz = kx * ty - ky * tx;
  const double big_omc = 1.0 - std::cos(1.0 * kDegToRad);
  const double big_omega = 2.0 * 3.14159265358979323846 * big_omc;
  const int n = 400000;
  double integral = 0.0;
  for (int i = 0; i < n; ++i) {
    const double u0 = (i + 0.5) / n, u1 = std::fmod(i * 0.6180339887498949, 1.0);
    const double omc = u0 * big_omc, ct = 1.0 - omc, st = std::sqrt(omc * (2.0 - omc));
    const double ph_ = 2.0 * 3.14159265358979323846 * u1;
    const double c = st * std::cos(ph_), s = st * std::sin(ph_);
    const ph::Vec3 w = unit(tx * c + bx * s + kx * ct, ty * c + by * s + ky * ct, tz * c + bz * s + kz * ct);
    integral += env.nee_pdf(p, w) * big_omega / n;
  }
  std::printf("[ measure  ] sun NEE density over a 1° cone: %.5f\n", integral);
  EXPECT_NEAR(integral, 1.0, 0.002);

  int inside = 0, inner_half = 0, outside_cone = 0;
  const int draws = 200000;
  for (int i = 0; i < draws; ++i) {
    const float u0 = float((i + 0.5) / draws), u1 = float(std::fmod(i * 0.7548776662466927, 1.0));
    const ph::Vec3 w = env.nee_sample(p, u0, u1);
    // 1 − cos of the angle to ℓ as ½|ω − ℓ|², in double (free of the float dot product's quantisation).
    const double dx = double(w.x) - kx, dy = double(w.y) - ky, dz = double(w.z) - kz;
    const double omc = 0.5 * (dx * dx + dy * dy + dz * dz);
    inside += env.nee_pdf(p, w) > 0.0f ? 1 : 0;
    if (!(omc <= 1.0 - std::cos(0.275 * kDegToRad))) ++outside_cone;
    inner_half += omc <= 0.5 * ph::kSunOneMinusCos ? 1 : 0;
    if (std::fabs(std::sqrt(double(w.x) * w.x + double(w.y) * w.y + double(w.z) * w.z) - 1.0) > 1e-6)
      ++outside_cone;
  }
  const double frac_inside = double(inside) / draws, frac_half = double(inner_half) / draws;
  std::printf("[ measure  ] sun draws inside the disc: %.5f, inside half its 1 − cos: %.4f\n", frac_inside,
              frac_half);
  EXPECT_EQ(outside_cone, 0) << "draws further than 0.275° from the key";
  EXPECT_GE(frac_inside, 0.999);
  EXPECT_NEAR(frac_half, 0.5, 0.005);
  EXPECT_NEAR(ph::kSunSolidAngle, 2.0 * 3.14159265358979 * ph::kSunOneMinusCos, 1e-10);
  EXPECT_NEAR(1.0 - ph::kSunDiscCos, ph::kSunOneMinusCos, 1e-9);
}

// §6.2 the sun's NEE at one frosted bounce: a path of unit intensity on every channel leaving a horizontal facet
// upwards gains, on average over the disc, Σ_k ȳ(λ_k)·S(λ_k)·(50/106.856) · 40 000·Ω·cos θ_sun/π (the disc's
// irradiance on the facet over π; w_nee = 1 − O(10⁻⁹)), here with θ_sun = 90° − 0.95 rad; the escape's MIS weight
// scales the sun's part of the radiance only, never the sky's.
TEST(TracerPresets, sun_nee_estimates_the_disc_irradiance_and_weights_only_the_sun) {
  ft::Scene s = preset_scene(ft::LightingPreset::kDaylightSun);
  s.planes = frosted_cube();
  const ph::TraceParams p = ft::make_trace_params(s);
  const std::vector<ph::FacetPlane> planes = ft::make_facet_planes(s);
  const ph::PresetEnv env{1u};
  ph::PathState ps;
  ph::path_begin(ps, p, 0, 0, 0);
  ps.hero = 560.0f;
  ps.b = 1;
  for (int k = 0; k < ph::kChannels; ++k) {
    ps.st[k][0] = 1.0f;
    ps.st[k][1] = ps.st[k][2] = ps.st[k][3] = 0.0f;
    ps.pdf[k] = 1.0f;
  }
  const int n = 20000;
  double y = 0.0;
  for (int i = 0; i < n; ++i) {
    ps.seed = ph::sample_seed(7, std::uint32_t(i));
    ph::EnvPathState es{{0.0f, 0.0f, 0.0f}, 0.0f};
    ph::env_next_event(ps, p, planes.data(), env, es, ph::Vec3{0.1f, 0.6f, -0.2f}, ph::Vec3{0.0f, 1.0f, 0.0f},
                       0xFFu);
    y += es.xyz[1] / n;
  }
  double ybar = 0.0;  // Σ_k ȳ(λ_k)·D65(λ_k)/100·50/106.856 for λ_k = 560 + 50k mod 400
  for (int k = 0; k < ph::kChannels; ++k) {
    const float l = ph::channel_lambda(560.0f, k);
    ybar += double(ph::cmf_xyz(l).y) * ph::d65_spectrum(l) * (50.0 / 106.856);
  }
  const double want = ybar * 40000.0 * 6.965831e-5 * kSinKey / 3.14159265358979;
  std::printf("[ measure  ] sun NEE at a facet facing up: Y %.6f, irradiance/π says %.6f\n", y, want);
  expect_rel(y, want, 2e-4, "NEE mean");

  // The escape of a frosted bounce into the disc: weight w on the sun only.
  ph::PresetLookup l = env.miss(p, p.key_dir, 2);
  const float sky = l.shape;
  ph::PresetEnv::scale_nee(l, 0.25f);
  EXPECT_EQ(l.shape, sky);
  expect_rel(env.radiance(p, l, 1.0f, 560.0f, 0), sky + 0.25 * 40000.0, 1e-6, "weighted escape");
}

// §6.2: DaylightSun with NEE of the disc (power heuristic) and with the frosted lobe alone estimate the same
// image of a cube with every face frosted; NEE lowers the spread; and the sun is a large part of the image
// (DaylightDome is the same sky without it: the same paths, so its mean is the sky's share exactly).
TEST(TracerPresets, daylight_sun_nee_on_and_off_agree_statistically) {
  ft::Scene s = ft::builtin_diamond_scene();
  s.width = s.height = 4;
  s.distance = 2.2f;
  s.planes = frosted_cube();
  s.lighting_preset = ft::LightingPreset::kDaylightSun;
  ASSERT_TRUE(ft::validate_scene(s).ok()) << ft::validate_scene(s).what();
  const int batches = 16, spp = 8192;
  double mean[3] = {0, 0, 0}, var[3] = {0, 0, 0};
  for (int run = 0; run < 3; ++run) {  // 0: NEE off, 1: NEE on, 2: DaylightDome
    ft::CpuOptions o;
    o.hdr_nee = run == 1;
    ft::Scene r = s;
    if (run == 2) r.lighting_preset = ft::LightingPreset::kDaylightDome;
    std::vector<double> y;
    for (int b = 0; b < batches; ++b) {
      ft::Film f(r.width, r.height);
      ASSERT_TRUE(ft::cpu_accumulate(r, std::uint64_t(b) * spp, spp, f, o).ok());
      EXPECT_EQ(f.nonfinite, 0u);
      y.push_back(film_mean_y(f));
    }
    for (double v : y) mean[run] += v / batches;
    for (double v : y) var[run] += (v - mean[run]) * (v - mean[run]) / (batches - 1);
  }
  const double se = std::sqrt(var[0] / batches + var[1] / batches);
  std::printf(
      "[ measure  ] frosted cube under DaylightSun, Y: NEE off %.5f (batch sd %.5f), NEE on %.5f (batch sd "
      "%.5f), difference %.2f standard errors; the sky alone %.5f\n",
      mean[0], std::sqrt(var[0]), mean[1], std::sqrt(var[1]), (mean[1] - mean[0]) / se, mean[2]);
  EXPECT_NEAR(mean[1], mean[0], 4 * se);
  EXPECT_LT(var[1], var[0]) << "NEE should lower the variance of a 0.27° sun";
  EXPECT_GT(mean[1] - mean[2], 10.0 * std::sqrt(var[1] / batches)) << "the sun should light the cube";
}

// Every traced Tier 2 preset renders finite, non-black images on the CPU tracer (frosted girdle, so NEE runs
// under DaylightSun), and so does a uniaxial stone (emerald) under DaylightSun (physics/medium.h).
TEST(TracerPresets, every_traced_preset_renders_finite_and_not_black) {
  for (auto preset :
       {ft::LightingPreset::kIncandescent, ft::LightingPreset::kDarkSpotlight,
        ft::LightingPreset::kIsoHemisphere, ft::LightingPreset::kDaylightDome,
        ft::LightingPreset::kDaylightSun, ft::LightingPreset::kAset, ft::LightingPreset::kShopLights,
        ft::LightingPreset::kWindowDaylight, ft::LightingPreset::kWhiteTray}) {
    for (const char* material : {"diamond", "emerald"}) {
      if (std::string(material) == "emerald" && preset != ft::LightingPreset::kDaylightSun) continue;
      SCOPED_TRACE(std::string(ft::lighting_preset_name(preset)) + ", " + material);
      ft::Scene s = preset_scene(preset);
      s.material = ft::material_preset(material).value();
      s.girdle_frosted = true;
      ft::Film f(s.width, s.height);
      ASSERT_TRUE(ft::cpu_accumulate(s, 0, 8, f).ok());
      EXPECT_EQ(f.nonfinite, 0u);
      double y = 0.0;
      bool finite = true;
      for (float v : f.xyz) finite = finite && std::isfinite(v);
      for (std::size_t p = 0; p < f.pixels(); ++p) y += f.xyz[p * 3 + 1];
      EXPECT_TRUE(finite);
      EXPECT_GT(y, 0.0);
      // Deterministic and additive like every CPU render (§9).
      ft::Film g(s.width, s.height);
      ASSERT_TRUE(ft::cpu_accumulate(s, 0, 3, g).ok());
      ASSERT_TRUE(ft::cpu_accumulate(s, 3, 5, g).ok());
      EXPECT_EQ(g.xyz, f.xyz);
    }
  }
}

// The UV lamps need fluorescence (Tier 3): both tracers refuse them and say so.
TEST(TracerPresets, uv_lamps_are_refused_naming_fluorescence) {
  for (auto preset : {ft::LightingPreset::kUvLamp365, ft::LightingPreset::kUvLamp395}) {
    const ft::Scene s = preset_scene(preset);
    const ft::TierFeatures t = ft::tier_features(s);
    EXPECT_EQ(t.tier, 2);
    for (const facetrace::Status& st : {t.status(), t.gpu_status()}) {
      EXPECT_EQ(st.code(), Code::kNotSupported);
      EXPECT_NE(st.what().find("fluorescence"), std::string::npos) << st.what();
      EXPECT_NE(st.what().find(std::string(ft::lighting_preset_name(preset))), std::string::npos)
          << st.what();
    }
    ft::Film f(s.width, s.height);
    EXPECT_EQ(ft::cpu_accumulate(s, 0, 1, f).code(), Code::kNotSupported);
  }
}
