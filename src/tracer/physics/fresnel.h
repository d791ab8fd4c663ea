/// @file
/// Fresnel amplitudes and Mueller matrices (docs/design/tracer.md §7.3), TIR retarder (§7.2 step 6), frame rotation
/// (§7.2 step 3). Stokes vectors are float[4] (I, Q, U, V) with Q = s − p in the s/p frame.
#pragma once

#include <cmath>

#include "host_device.h"

namespace facetrace::tracer::physics {

/// cos t = √(1 − (n₁/n₂)²(1 − cos²i)); returns a negative value past the critical angle (docs/design/tracer.md §7.3).
FT_HD float cos_transmitted(float eta, float cos_i) {
  const float sin2t = eta * eta * (1.0f - cos_i * cos_i);
  return sin2t > 1.0f ? -1.0f : sqrtf(1.0f - sin2t);
}

/// Reflection amplitudes r_s, r_p (docs/design/tracer.md §7.3).
struct FresnelAmps {
  float rs, rp;
};
static_assert(sizeof(FresnelAmps) == 8, "FresnelAmps layout");

FT_HD FresnelAmps fresnel_amps(float n1, float n2, float cos_i, float cos_t) {
  const float a = n1 * cos_i, b = n2 * cos_t, c = n2 * cos_i, d = n1 * cos_t;
  return FresnelAmps{(a - b) / (a + b), (c - d) / (c + d)};  // docs/design/tracer.md §7.3
}

/// Unpolarised reflectance R = ½(r_s² + r_p²) (docs/design/tracer.md §7.2 step 7).
FT_HD float fresnel_reflectance(float n1, float n2, float cos_i, float cos_t) {
  const FresnelAmps r = fresnel_amps(n1, n2, cos_i, cos_t);
  return 0.5f * (r.rs * r.rs + r.rp * r.rp);
}

/// S ← M_R·S·scale, M_R = [[a,b,0,0],[b,a,0,0],[0,0,c,0],[0,0,0,c]] (docs/design/tracer.md §7.3).
FT_HD void apply_reflection(float* s, FresnelAmps r, float scale) {
  const float a = 0.5f * (r.rs * r.rs + r.rp * r.rp) * scale;
  const float b = 0.5f * (r.rs * r.rs - r.rp * r.rp) * scale;
  const float c = r.rs * r.rp * scale;
  const float i = s[0], q = s[1];
  s[0] = a * i + b * q;
  s[1] = b * i + a * q;
  s[2] *= c;
  s[3] *= c;
}

/// S ← M_T·S·scale, M_T = (n₂cos t/(n₁cos i))·[[a′,b′,0,0],[b′,a′,0,0],[0,0,c′,0],[0,0,0,c′]] (docs/design/tracer.md §7.3).
FT_HD void apply_transmission(float* s, float n1, float n2, float cos_i, float cos_t, float scale) {
  const float den_s = n1 * cos_i + n2 * cos_t;
  const float den_p = n2 * cos_i + n1 * cos_t;
  const float ts = 2.0f * n1 * cos_i / den_s;
  const float tp = 2.0f * n1 * cos_i / den_p;
  const float f = (n2 * cos_t) / (n1 * cos_i) * scale;
  const float a = 0.5f * (ts * ts + tp * tp) * f;
  const float b = 0.5f * (ts * ts - tp * tp) * f;
  const float c = ts * tp * f;
  const float i = s[0], q = s[1];
  s[0] = a * i + b * q;
  s[1] = b * i + a * q;
  s[2] *= c;
  s[3] *= c;
}

/// Total internal reflection: S ← M·S·scale with the retarder M = [[1,0,0,0],[0,1,0,0],[0,0,cos δ,sin δ],
/// [0,0,−sin δ,cos δ]], δ = 2·atan(cos i·√(n² sin²i − 1)/(n sin²i)), n = n₁/n₂ (docs/design/tracer.md §7.2 step 6).
FT_HD void apply_tir_retarder(float* s, float n, float cos_i, float scale) {
  const float sin2i = 1.0f - cos_i * cos_i;
  const float arg = n * n * sin2i - 1.0f;
  const float root = sqrtf(arg > 0.0f ? arg : 0.0f);
  // δ = 2·atan(x): cos δ = (1 − x²)/(1 + x²), sin δ = 2x/(1 + x²) (same δ, no transcendental calls).
  const float x = cos_i * root / (n * sin2i);
  const float inv = 1.0f / (1.0f + x * x);
  const float cd = (1.0f - x * x) * inv, sd = 2.0f * x * inv;
  const float u = s[2], v = s[3];
  s[0] *= scale;
  s[1] *= scale;
  s[2] = (cd * u + sd * v) * scale;
  s[3] = (-sd * u + cd * v) * scale;
}

/// Frame rotation R(ψ) = [[1,0,0,0],[0,cos2ψ,sin2ψ,0],[0,−sin2ψ,cos2ψ,0],[0,0,0,1]] with precomputed
/// cos 2ψ, sin 2ψ (docs/design/tracer.md §7.2 step 3).
FT_HD void apply_rotation(float* s, float c2, float s2) {
  const float q = s[1], u = s[2];
  s[1] = c2 * q + s2 * u;
  s[2] = -s2 * q + c2 * u;
}

}  // namespace facetrace::tracer::physics
