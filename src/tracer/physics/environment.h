/// @file
/// Environments (docs/design/tracer.md §6): the Studio rig and the uniform environment. The Studio constants that the
/// spec leaves to facetrace (charcoal levels, fill direction, ring placement and size, spot profile) are
/// defined here, once, and frozen by the environment golden.
#pragma once

#include <cmath>
#include <cstdint>

#include "host_device.h"
#include "chunk.h"
#include "spectrum.h"
#include "vec3.h"

namespace facetrace::tracer::physics {

// Lobe shapes of the Studio rig (docs/design/tracer.md §6 table).
inline constexpr float kKeyGain = 12.0f;  // docs/design/tracer.md §6: key lobe 12·spot·max(0, ω·ℓ)^28
inline constexpr float kKeyExponent = 28.0f;  // docs/design/tracer.md §6
inline constexpr float kFillGain = 4.5f;  // docs/design/tracer.md §6: fill lobe 4.5·max(0, ω·ℓ_fill)^18
inline constexpr float kFillExponent = 18.0f;  // docs/design/tracer.md §6
inline constexpr int kRingLights = 16;         // docs/design/tracer.md §6: 16 ring lights

// facetrace choices (docs/design/tracer.md §6 "remaining Studio constants").
inline constexpr float kSpotCoreCos =
    0.99862953f;  // docs/design/tracer.md §6 (facetrace): spot core radius 3°
inline constexpr float kSpotCoreGain =
    4.0f;  // docs/design/tracer.md §6 (facetrace): spot = 4 in the core, else 1
inline constexpr float kFillYawOffset =
    2.5f;  // docs/design/tracer.md §6 (facetrace): fill yaw = key yaw + 2.5 rad
inline constexpr float kFillPitch = 0.45f;  // docs/design/tracer.md §6 (facetrace): fill pitch, rad

/// sin(r·π/8) for r = 0..4, as constants.
FT_HD float quarter_sin(int r) {
  return r == 0 ? 0.0f : r == 1 ? 0.38268343f : r == 2 ? 0.70710678f : r == 3 ? 0.92387953f : 1.0f;
}
/// sin and cos of the ring-light azimuth k·2π/16, k = 0..15 (docs/design/tracer.md §6 ring lights), by quarter-wave
/// symmetry from constants: no sinf/cosf on every escape, and bit-identical on the CPU and the GPU.
FT_HD float ring_sin(int k) {
  const int q = k >> 2, r = k & 3;
  const float v = (q & 1) ? quarter_sin(4 - r) : quarter_sin(r);
  return q >= 2 ? -v : v;
}
FT_HD float ring_cos(int k) { return ring_sin((k + 4) & 15); }

/// The ring light nearest in azimuth to (x, z): k = round(atan2(x, z)·16/2π) mod 16, found with two tangent
/// comparisons per quadrant instead of atan2f (ties at the exact sector edges go to the lower k).
inline constexpr float kTan1125 = 0.19891237f;  // tan(11.25°): sector edge
inline constexpr float kTan3375 = 0.66817864f;  // tan(33.75°): sector edge
FT_HD int ring_slot(float x, float z) {
  const float ax = fabsf(x), az = fabsf(z);
  int j;  // round(angle from the z axis within the quadrant / 22.5°), 0..4
  if (ax <= az * kTan1125)
    j = 0;
  else if (ax <= az * kTan3375)
    j = 1;
  else if (az <= ax * kTan1125)
    j = 4;
  else if (az <= ax * kTan3375)
    j = 3;
  else
    j = 2;
  if (x >= 0.0f) return z >= 0.0f ? j : 8 - j;
  return z >= 0.0f ? (16 - j) & 15 : 8 + j;
}

/// x^28 and x^18 by repeated squaring (docs/design/tracer.md §6 lobe exponents): exact IEEE products, so the CPU and the
/// GPU agree bit for bit (powf differs by ulps between libm and CUDA) and no transcendental call is made.
static_assert(kKeyExponent == 28.0f && kFillExponent == 18.0f, "pow28/pow18 implement the lobe exponents");
FT_HD float pow28(float x) {
  const float x2 = x * x, x4 = x2 * x2, x8 = x4 * x4, x16 = x8 * x8;
  return x16 * x8 * x4;
}
FT_HD float pow18(float x) {
  const float x2 = x * x, x4 = x2 * x2, x8 = x4 * x4, x16 = x8 * x8;
  return x16 * x2;
}

/// Per-preset configuration of the Studio rig (docs/design/tracer.md §6: "the preset chooses S(λ) and the rig's
/// configuration"). Levels are radiance multipliers before exposure·S(λ).
struct StudioRig {
  std::uint32_t illuminant_kind;  ///< IlluminantKind
  float planck_kelvin;
  float floor_level;    ///< charcoal backdrop at ω_y = −1
  float ceiling_level;  ///< charcoal backdrop at ω_y = +1 (quadratic blend in ½(1 + ω_y))
  float key, fill, ring;
  float ring_elevation_deg, ring_radius_deg;
};
static_assert(sizeof(StudioRig) == 36, "StudioRig layout");

/// The rig of a Studio preset by wire index: the Tier 1 ones (docs/design/tracer.md §1: Daylight 0, RingLights 2,
/// LightTent 5, IlluminantA 14) and the Tier 2 Studio configurations Incandescent 1 and DarkSpotlight 3
/// (docs/design/tracer.md §6.2); any other index gets the LightTent rig (the lit models of
/// preset_environment.h read only its illuminant, D65; the UV lamps are refused first).
inline constexpr StudioRig studio_rig(std::uint32_t preset) {
  switch (preset) {
    case 0:  // Daylight (docs/design/tracer.md §6, facetrace): D65 sky, sun-like key.
      return StudioRig{0u, 6504.0f, 0.04f, 0.45f, 1.0f, 0.6f, 0.0f, 35.0f, 4.0f};
    case 1:
      // Incandescent (docs/design/tracer.md §6.2): the IlluminantA rig under Planck 3200 K (the reference
      // renderer's temp_k 3200 and spot_mult 1.2, the same as its IlluminantA; indicatrix environment/mod.rs
      // LightingPreset::params).
      return StudioRig{1u, 3200.0f, 0.04f, 0.45f, 1.0f, 0.6f, 0.0f, 35.0f, 4.0f};
    case 3:
      // DarkSpotlight (docs/design/tracer.md §6.2): RingLights' dark charcoal, Daylight's fill and no ring, the
      // key × 2.4 (the reference's spot_mult 2.4 over Daylight's 1.0) under Planck 6000 K (its temp_k).
      return StudioRig{1u, 6000.0f, 0.02f, 0.06f, 2.4f, 0.6f, 0.0f, 35.0f, 4.0f};
    case 2:  // RingLights (facetrace): dark studio, 16 bright ring lights.
      return StudioRig{0u, 6504.0f, 0.02f, 0.06f, 0.3f, 0.2f, 8.0f, 35.0f, 4.0f};
    case 14:  // IlluminantA (facetrace): Daylight rig under Planck 2856 K.
      return StudioRig{1u, 2856.0f, 0.04f, 0.45f, 1.0f, 0.6f, 0.0f, 35.0f, 4.0f};
    default:  // LightTent (facetrace): bright diffuse tent, soft key, low ring of lights.
      return StudioRig{0u, 6504.0f, 0.02f, 0.5f, 0.6f, 0.4f, 4.0f, 25.0f, 4.0f};
  }
}

/// Wavelength-independent shape of the Studio rig in direction w, × exposure (docs/design/tracer.md §6); multiply by
/// S(λ) for radiance.
FT_HD float studio_shape(const TraceParams& p, Vec3 w) {
  if (dot(w, p.view_dir) > p.cos_head_shadow) return 0.0f;  // the observer's head
  const float h = 0.5f * (1.0f + w.y);
  float v = p.rig_floor + (p.rig_ceiling - p.rig_floor) * (h * h);
  const float ck = dot(w, p.key_dir);
  if (ck > 0.0f && p.rig_key > 0.0f) {
    const float spot = ck > kSpotCoreCos ? kSpotCoreGain : 1.0f;
    v += p.rig_key * kKeyGain * spot * pow28(ck);  // ck^kKeyExponent
  }
  const float cf = dot(w, p.fill_dir);
  if (cf > 0.0f && p.rig_fill > 0.0f) v += p.rig_fill * kFillGain * pow18(cf);  // cf^kFillExponent
  if (p.rig_ring > 0.0f) {
    const int k = ring_slot(w.x, w.z);
    const Vec3 ring{p.ring_cos_elev * ring_sin(k), p.ring_sin_elev, p.ring_cos_elev * ring_cos(k)};
    if (dot(w, ring) > p.ring_cos_radius) v += p.rig_ring;
  }
  return v * p.exposure;
}

/// Environment shape in direction w (× S(λ) gives radiance): exposure everywhere for the uniform environment,
/// the Studio rig otherwise (docs/design/tracer.md §6).
FT_HD float environment_shape(const TraceParams& p, Vec3 w) {
  return p.env_kind == kEnvUniform ? p.exposure : studio_shape(p, w);
}

/// Shape of a camera ray that misses at bounce 0 (docs/design/tracer.md §7.2 step 2): the backdrop in the Studio rig,
/// exposure in the uniform environment (the backdrop is ignored there).
FT_HD float bounce0_miss_shape(const TraceParams& p) {
  return p.env_kind == kEnvUniform ? p.exposure : p.backdrop;
}

}  // namespace facetrace::tracer::physics
