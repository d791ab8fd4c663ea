/// @file
/// The Tier 2 lit lighting models (docs/design/tracer.md §6.2): IsoHemisphere, the light-tent model of ShopLights,
/// WindowDaylight and WhiteTray, DaylightDome, DaylightSun (sky plus a 0.27° sun disc sampled by next-event
/// estimation) and the Aset contrast view. Translated from the reference renderer's lighting models
/// (suitable-name/indicatrix, crates/indicatrix/src/optics/raytracer/environment/rig.rs and mod.rs), written
/// anew; every constant cites it. The environment policy PresetEnv plugs them into path_step_env (transport.h)
/// next to AnalyticEnv and HdrEnv.
#pragma once

#include <cmath>
#include <cstdint>

#include "chunk.h"
#include "host_device.h"
#include "spectrum.h"
#include "vec3.h"

namespace facetrace::tracer::physics {

// Model ids (TraceParams::preset_model, docs/design/tracer.md §6.2); 0 = not a lit model (Studio, uniform, HDR).
inline constexpr std::uint32_t kPresetNone = 0;           // docs/design/tracer.md §6.2
inline constexpr std::uint32_t kPresetIsoHemisphere = 1;  // docs/design/tracer.md §6.2
inline constexpr std::uint32_t kPresetTent = 2;           // docs/design/tracer.md §6.2
inline constexpr std::uint32_t kPresetDome = 3;           // docs/design/tracer.md §6.2
inline constexpr std::uint32_t kPresetAset = 4;           // docs/design/tracer.md §6.2
inline constexpr std::uint32_t kPresetSun = 5;            // docs/design/tracer.md §6.2

// Horizon blend: 0 below the girdle plane, 1 above, over ω_y ∈ [−0.05, 0.05] (reference rig.rs horizon_blend).
inline constexpr float kHorizonLo = -0.05f;  // indicatrix rig.rs horizon_blend
inline constexpr float kHorizonHi = 0.05f;   // indicatrix rig.rs horizon_blend

// Light-tent model (reference rig.rs light_tent_lighting and its cone constants).
inline constexpr float kTentWallBase = 0.14f;          // indicatrix rig.rs: walls 0.14 at the girdle plane
inline constexpr float kTentWallRise = 0.08f;          // indicatrix rig.rs: + 0.08·max(ω_y, 0)
inline constexpr float kTentWallFlat = 0.18f;          // indicatrix rig.rs: the gradient's value at 30°
inline constexpr float kTentCardDepth = 0.9f;          // indicatrix rig.rs: a card cuts the walls to a tenth
inline constexpr float kTentKeyGain = 1.4f;            // indicatrix rig.rs: overhead softbox 1.4·spot_mult
inline constexpr float kTentSparkGain = 5.0f;          // indicatrix rig.rs: spark 5·spot_mult
inline constexpr float kTentKeyOuterCos = 0.7660444f;  // indicatrix rig.rs TENT_KEY_OUTER_COS: cos 40°
inline constexpr float kTentKeyInnerCos = 0.9396926f;  // indicatrix rig.rs TENT_KEY_INNER_COS: cos 20°
inline constexpr float kSparkOuterCos = 0.9961947f;    // indicatrix rig.rs SPARK_OUTER_COS: cos 5°
inline constexpr float kSparkInnerCos = 0.9993908f;    // indicatrix rig.rs SPARK_INNER_COS: cos 2°
inline constexpr float kCardOuterCos = 0.898794f;      // indicatrix rig.rs CARD_OUTER_COS: cos 26°
inline constexpr float kCardInnerCos = 0.9612617f;     // indicatrix rig.rs CARD_INNER_COS: cos 16°

// Daylight sky (reference rig.rs daylight_dome_lighting).
inline constexpr float kSkyBase = 0.10f;    // indicatrix rig.rs: sky = 0.10 + 0.08·(1 − max(ω_y, 0))
inline constexpr float kSkyRise = 0.08f;    // indicatrix rig.rs
inline constexpr float kAureole = 0.30f;    // indicatrix rig.rs: aureole 0.30·max(ω·ℓ, 0)⁸
inline constexpr float kSkyGround = 0.04f;  // indicatrix rig.rs: ground 0.04 below the horizon

// The sun disc (reference rig.rs SUN_* constants and their derivation): 0.27° radius about ℓ.
inline constexpr float kSunDiscCos = 0.9999889f;  // indicatrix rig.rs SUN_DISC_COS = 1 − 186·2⁻²⁴
inline constexpr float kSunOneMinusCos = 1.1086464e-5f;  // indicatrix rig.rs SUN_ONE_MINUS_COS = 186·2⁻²⁴
inline constexpr float kSunSolidAngle = 6.965831e-5f;  // indicatrix rig.rs SUN_SOLID_ANGLE = 2π·(1 − cos)
inline constexpr float kSunRadiance = 40000.0f;        // indicatrix rig.rs SUN_RADIANCE (82 % direct share)
inline constexpr float kSunTwoPi = 6.28318530717958647692f;

// Aset contrast view (reference rig.rs ASET_* constants).
inline constexpr float kAsetRedNm = 610.0f;         // indicatrix rig.rs ASET_RED_NM
inline constexpr float kAsetGreenNm = 540.0f;       // indicatrix rig.rs ASET_GREEN_NM
inline constexpr float kAsetBlueNm = 460.0f;        // indicatrix rig.rs ASET_BLUE_NM
inline constexpr float kAsetSigmaNm = 8.493218f;    // indicatrix rig.rs ASET_SIGMA_NM: 20 nm FWHM
inline constexpr float kAsetRedGain = 8.0f;         // indicatrix rig.rs ASET_RED_GAIN
inline constexpr float kAsetGreenGain = 5.0f;       // indicatrix rig.rs ASET_GREEN_GAIN
inline constexpr float kAsetBlueGain = 16.0f;       // indicatrix rig.rs ASET_BLUE_GAIN
inline constexpr float kAsetEdge45Lo = 0.6871068f;  // indicatrix rig.rs ASET_EDGE_45_LO: sin 45° − 0.02
inline constexpr float kAsetEdge45Hi = 0.7271068f;  // indicatrix rig.rs ASET_EDGE_45_HI: sin 45° + 0.02
inline constexpr float kAsetEdge75Lo = 0.9459258f;  // indicatrix rig.rs ASET_EDGE_75_LO: sin 75° − 0.02
inline constexpr float kAsetEdge75Hi = 0.9859258f;  // indicatrix rig.rs ASET_EDGE_75_HI: sin 75° + 0.02

/// The per-preset knobs of the light-tent model (reference mod.rs TentParams) and its spot multiplier.
struct TentConfig {
  float spot_mult, walls, cards, spark, ground, flat;
};

/// The lit model of a preset by wire index (docs/design/tracer.md §6.2): IsoHemisphere 4, DaylightDome 6,
/// DaylightSun 9, Aset 10, the tent variants ShopLights 11, WindowDaylight 12, WhiteTray 13 (reference mod.rs
/// LightingPreset::model). Every other preset is kPresetNone: the Studio rig (environment.h) or refused.
inline constexpr std::uint32_t preset_model(std::uint32_t preset) {
  switch (preset) {
    case 4: return kPresetIsoHemisphere;
    case 6: return kPresetDome;
    case 9: return kPresetSun;
    case 10: return kPresetAset;
    case 11:
    case 12:
    case 13: return kPresetTent;
    default: return kPresetNone;
  }
}

/// The tent configuration of a tent variant (reference mod.rs LightingPreset::params); the others get zeros.
inline constexpr TentConfig tent_config(std::uint32_t preset) {
  switch (preset) {
    case 11:  // ShopLights: bright diffuse walls, overhead spot, pinpoint spark, no cards, lit floor.
      return TentConfig{1.0f, 3.0f, 0.0f, 1.0f, 0.05f, 0.0f};
    case 12:  // WindowDaylight: a dim room lit by one broad soft source (the key cone); no cards, no spark.
      return TentConfig{1.0f, 0.4f, 0.0f, 0.0f, 0.03f, 0.0f};
    case 13:  // WhiteTray: uniform walls (flat 1: 0.18·5 = 0.9), bright ground, no key, no spark.
      return TentConfig{0.0f, 5.0f, 0.0f, 0.0f, 0.8f, 1.0f};
    default: return TentConfig{0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  }
}

/// smoothstep(e0, e1, x) = t²(3 − 2t), t = clamp((x − e0)/(e1 − e0), 0, 1) (reference rig.rs smoothstep).
FT_HD float preset_smoothstep(float e0, float e1, float x) {
  float t = (x - e0) / (e1 - e0);
  t = t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t);
  return t * t * fmaf(-2.0f, t, 3.0f);
}

/// 0 below the girdle plane, 1 above (reference rig.rs horizon_blend).
FT_HD float horizon_blend(Vec3 w) { return preset_smoothstep(kHorizonLo, kHorizonHi, w.y); }

/// 1 where w looks past the observer, falling to 0 inside the head-shadow cone about the view direction
/// (reference rig.rs observer_visibility; the cosines from TraceParams::shadow_outer / shadow_inner).
FT_HD float observer_visibility(const TraceParams& p, Vec3 w) {
  return 1.0f - preset_smoothstep(p.shadow_outer, p.shadow_inner, dot(w, p.view_dir));
}

/// The sun's radiance factor: kSunRadiance faded by the horizon blend at ℓ, uniform over the disc and not
/// head-shadowed (reference rig.rs sun_radiance_factor).
FT_HD float sun_radiance_factor(const TraceParams& p) { return kSunRadiance * horizon_blend(p.key_dir); }

/// True when unit w lies in the sun disc, ω·ℓ ≥ cos 0.27° (reference rig.rs), tested as ½|ω − ℓ|² ≤ 1 − cos 0.27°
/// (the same for unit vectors): the float dot product is quantised at 2⁻²⁴ near 1, half a percent of the disc's
/// 1 − cos, while |ω − ℓ|² keeps float precision, so the disc the radiance shows is the cone sun_direction draws
/// from to 10⁻⁵ (docs/design/tracer.md §6.2).
FT_HD bool in_sun_disc(const TraceParams& p, Vec3 w) {
  const Vec3 d = w - p.key_dir;
  return 0.5f * dot(d, d) <= kSunOneMinusCos;
}

/// The solid-angle density of sun_direction at w: 1/Ω inside the disc, else 0 (reference rig.rs sun_nee_pdf).
FT_HD float sun_pdf(const TraceParams& p, Vec3 w) { return in_sun_disc(p, w) ? 1.0f / kSunSolidAngle : 0.0f; }

/// A direction uniform over the sun's cone about ℓ from two uniforms (equal-area cone sampling,
/// 1 − cos θ = u0·(1 − cos θ_max), sin θ from (1 − cos)(1 + cos) with 1 − cos kept exact; reference rig.rs
/// sun_cone_direction, with its frame: t ⟂ ℓ from x̂, or ŷ when |ℓ_x| > 0.9).
FT_HD Vec3 sun_direction(const TraceParams& p, float u0, float u1) {
  const Vec3 l = p.key_dir;
  const float omc = u0 * kSunOneMinusCos;
  const float cos_t = 1.0f - omc;
  const float s2 = omc * (2.0f - omc);
  const float sin_t = sqrtf(s2 > 0.0f ? s2 : 0.0f);
  const float phi = kSunTwoPi * u1;
  const Vec3 a = fabsf(l.x) > 0.9f ? Vec3{0.0f, 1.0f, 0.0f} : Vec3{1.0f, 0.0f, 0.0f};
  const Vec3 t = normalize(a - l * dot(l, a));
  const Vec3 b = cross(l, t);
  return normalize(t * (sin_t * cosf(phi)) + b * (sin_t * sinf(phi)) + l * cos_t);
}

/// One direction's lighting under a lit model, before exposure is applied by radiance: `shape`·S(λ) plus the
/// sun's `sun`·S(λ), or for Aset (banded) three zone amplitudes lit by one narrow band each.
struct PresetLookup {
  float shape;    ///< wavelength-independent factor × exposure, × S(λ)
  float sun;      ///< DaylightSun only: the disc's factor × exposure (the part NEE samples), × S(λ)
  float zone[3];  ///< Aset only: red, green, blue zone amplitudes × exposure
  std::uint32_t banded;
};

/// The light-tent model in direction w (reference rig.rs light_tent_lighting): tent walls 0.14 + 0.08·max(ω_y, 0)
/// (× walls, blended to 0.18·walls by flat), cut to a tenth inside the three black cards, an overhead softbox
/// smoothstep(cos 40°, cos 20°, ω·ℓ)·1.4·spot, a spark smoothstep(cos 5°, cos 2°, ω·ℓ_spark)·5·spot·spark,
/// all × horizon × head shadow, plus ground·(1 − horizon).
FT_HD float tent_shape(const TraceParams& p, Vec3 w) {
  const float horizon = horizon_blend(w);
  float walls = fmaf(kTentWallRise, w.y > 0.0f ? w.y : 0.0f, kTentWallBase) * p.tent_walls;
  if (p.tent_flat > 0.0f)
    walls = fmaf(kTentWallFlat * p.tent_walls, p.tent_flat, walls * (1.0f - p.tent_flat));
  float card = 0.0f;
  for (int i = 0; i < 3; ++i) {
    const float c = preset_smoothstep(kCardOuterCos, kCardInnerCos, dot(w, p.card_dir[i]));
    card = c > card ? c : card;
  }
  walls *= fmaf(card * p.tent_cards, -kTentCardDepth, 1.0f);
  const float key =
      preset_smoothstep(kTentKeyOuterCos, kTentKeyInnerCos, dot(w, p.key_dir)) * (kTentKeyGain * p.spot_mult);
  const float spark = preset_smoothstep(kSparkOuterCos, kSparkInnerCos, dot(w, p.spark_dir)) *
                      (kTentSparkGain * p.spot_mult) * p.tent_spark;
  const float above = ((walls + key) + spark) * (horizon * observer_visibility(p, w));
  return above + p.tent_ground * (1.0f - horizon);
}

/// The clear sky of DaylightDome and DaylightSun in direction w (reference rig.rs daylight_dome_lighting):
/// (0.10 + 0.08·(1 − max(ω_y, 0)) + 0.30·max(ω·ℓ, 0)⁸) × horizon × head shadow, plus 0.04·(1 − horizon).
FT_HD float sky_shape(const TraceParams& p, Vec3 w) {
  const float horizon = horizon_blend(w);
  const float sky = fmaf(kSkyRise, 1.0f - (w.y > 0.0f ? w.y : 0.0f), kSkyBase);
  const float c = dot(w, p.key_dir);
  const float g = c > 0.0f ? c : 0.0f;
  const float g2 = g * g, g4 = g2 * g2;
  const float aureole = (g4 * g4) * kAureole;
  const float above = (sky + aureole) * (horizon * observer_visibility(p, w));
  return above + kSkyGround * (1.0f - horizon);
}

/// Unit-peak Gaussian band of the Aset view (reference rig.rs aset_band).
FT_HD float aset_band(float lambda_nm, float centre_nm) {
  const float z = (lambda_nm - centre_nm) / kAsetSigmaNm;
  return expf(-0.5f * z * z);
}

/// The lit models' lookup in direction w (docs/design/tracer.md §6.2), wavelength-independent parts only.
FT_HD PresetLookup preset_lookup(const TraceParams& p, Vec3 w) {
  PresetLookup l{0.0f, 0.0f, {0.0f, 0.0f, 0.0f}, 0u};
  switch (p.preset_model) {
    case kPresetIsoHemisphere:  // reference rig.rs iso_hemisphere_lighting
      l.shape = horizon_blend(w) * observer_visibility(p, w) * p.exposure;
      break;
    case kPresetTent: l.shape = tent_shape(p, w) * p.exposure; break;
    case kPresetDome: l.shape = sky_shape(p, w) * p.exposure; break;
    case kPresetSun:  // reference rig.rs daylight_sun_radiance: the sky plus the hard-edged disc
      l.shape = sky_shape(p, w) * p.exposure;
      l.sun = in_sun_disc(p, w) ? sun_radiance_factor(p) * p.exposure : 0.0f;
      break;
    case kPresetAset: {  // reference rig.rs aset_radiance: zones by elevation, no head shadow
      const float horizon = horizon_blend(w);
      const float s45 = preset_smoothstep(kAsetEdge45Lo, kAsetEdge45Hi, w.y);
      const float s75 = preset_smoothstep(kAsetEdge75Lo, kAsetEdge75Hi, w.y);
      l.zone[0] = (s45 * (1.0f - s75)) * horizon * p.exposure;
      l.zone[1] = (1.0f - s45) * horizon * p.exposure;
      l.zone[2] = s75 * horizon * p.exposure;
      l.banded = 1u;
      break;
    }
    default: break;
  }
  return l;
}

/// The spectral radiance of a lookup at λ: Aset's bands ((r·B₆₁₀·8 + g·B₅₄₀·5) + b·B₄₆₀·16), else
/// (shape + sun)·S(λ) with the preset's illuminant (D65 for every lit model).
FT_HD float preset_spectrum(const TraceParams& p, const PresetLookup& l, float lambda_nm) {
  if (l.banded) {
    const float r = (l.zone[0] * aset_band(lambda_nm, kAsetRedNm)) * kAsetRedGain;
    const float g = (l.zone[1] * aset_band(lambda_nm, kAsetGreenNm)) * kAsetGreenGain;
    const float b = (l.zone[2] * aset_band(lambda_nm, kAsetBlueNm)) * kAsetBlueGain;
    return (r + g) + b;
  }
  return (l.shape + l.sun) * illuminant(p.illuminant_kind, p.planck_kelvin, lambda_nm);
}

/// The lit models as transport sees them (docs/design/tracer.md §6.2): the environment policy of path_step_env
/// (transport.h) for TraceParams::env_kind kEnvPreset. A camera ray that misses sees the backdrop × S(λ)
/// (§7.2 step 2, as in the Studio rig). NEE (`nee` 1) samples the DaylightSun disc only, with the HDR NEE
/// streams (§9: a scene has either a map or a preset, never both) and the power heuristic of §6.1; the MIS
/// weight of a frosted bounce's escape applies to the sun's part of the radiance only (the sky is never
/// light-sampled).
struct PresetEnv {
  static constexpr bool kNee = true;
  std::uint32_t nee;  ///< 1: NEE of the sun disc (DaylightSun only)
  using Lookup = PresetLookup;
  FT_HD bool nee_enabled() const { return nee != 0u; }
  FT_HD Lookup at(const TraceParams& p, Vec3 w) const { return preset_lookup(p, w); }
  FT_HD Lookup miss(const TraceParams& p, Vec3 w, std::uint32_t b) const {
    if (b == 0) return Lookup{p.backdrop, 0.0f, {0.0f, 0.0f, 0.0f}, 0u};
    return preset_lookup(p, w);
  }
  FT_HD static void scale(Lookup& l, float s) {
    l.shape *= s;
    l.sun *= s;
    l.zone[0] *= s;
    l.zone[1] *= s;
    l.zone[2] *= s;
  }
  /// The NEE technique: the sun disc's radiance (sky excluded), its MIS weight on the sun's part only.
  FT_HD Lookup nee_at(const TraceParams& p, Vec3) const {
    return Lookup{0.0f, sun_radiance_factor(p) * p.exposure, {0.0f, 0.0f, 0.0f}, 0u};
  }
  FT_HD static void scale_nee(Lookup& l, float s) { l.sun *= s; }
  FT_HD Vec3 nee_sample(const TraceParams& p, float u0, float u1) const { return sun_direction(p, u0, u1); }
  FT_HD float nee_pdf(const TraceParams& p, Vec3 w) const { return sun_pdf(p, w); }
  FT_HD float radiance(const TraceParams& p, const Lookup& l, float ik, float hero, int k) const {
    return ik * preset_spectrum(p, l, channel_lambda(hero, k));
  }
};

}  // namespace facetrace::tracer::physics
