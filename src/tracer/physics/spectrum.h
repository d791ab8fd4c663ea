/// @file
/// Spectral functions (docs/design/tracer.md §6, §8): table interpolation, CIE CMF and D65 lookups, Planck illuminant.
#pragma once

#include <cmath>
#include <cstdint>

#include "host_device.h"
#include "spectral_tables.h"
#include "vec3.h"

namespace facetrace::tracer::physics {

inline constexpr float kLambdaMinNm = 380.0f;     // docs/design/tracer.md §7.1: λ range 380–780 nm
inline constexpr float kLambdaSpanNm = 400.0f;    // docs/design/tracer.md §7.1
inline constexpr int kChannels = 8;               // docs/design/tracer.md §7.1: k = 0..7
inline constexpr float kChannelStepNm = 50.0f;    // docs/design/tracer.md §7.1: 400 nm / 8 channels
inline constexpr float kCmfYIntegral = 106.856f;  // docs/design/tracer.md §8: ∫ȳ dλ
inline constexpr float kPlanckRefNm = 560.0f;  // docs/design/tracer.md §6: Planck normalised to 1 at 560 nm
inline constexpr float kPlanckMin = 0.01f;     // docs/design/tracer.md §6: clamp [0.01, 20]
inline constexpr float kPlanckMax = 20.0f;     // docs/design/tracer.md §6
inline constexpr float kPlanckC2NmK =
    1.438777e7f;  // docs/design/tracer.md §6: second radiation constant hc/k in nm·K

/// Illuminant spectrum kinds (docs/design/tracer.md §6).
enum class IlluminantKind : std::uint32_t { kD65 = 0, kPlanck = 1 };

/// Linear interpolation in an 81-entry 5 nm table starting at 380 nm (docs/design/tracer.md §8); clamps outside.
FT_HD float table_lookup(const float* table, float lambda_nm) {
  float t = (lambda_nm - kSpectralTableStartNm) * (1.0f / kSpectralTableStepNm);
  if (!(t > 0.0f)) return table[0];
  if (t >= static_cast<float>(kSpectralTableSize - 1)) return table[kSpectralTableSize - 1];
  const int i = static_cast<int>(t);
  const float f = t - static_cast<float>(i);
  return table[i] + (table[i + 1] - table[i]) * f;
}

/// CIE 1931 2° (x̄, ȳ, z̄) at λ (docs/design/tracer.md §8), linear interpolation.
FT_HD Vec3 cmf_xyz(float lambda_nm) {
  return Vec3{table_lookup(cmf_x_table(), lambda_nm), table_lookup(cmf_y_table(), lambda_nm),
              table_lookup(cmf_z_table(), lambda_nm)};
}

/// CIE D65 / 100 at λ (docs/design/tracer.md §6).
FT_HD float d65_spectrum(float lambda_nm) { return table_lookup(d65_table(), lambda_nm) * 0.01f; }

/// Planck's law normalised to 1 at 560 nm, clamped to [0.01, 20] (docs/design/tracer.md §6).
FT_HD float planck_spectrum(float lambda_nm, float temperature_k) {
  const float ratio = kPlanckRefNm / lambda_nm;
  const float r2 = ratio * ratio;
  const float num = expf(kPlanckC2NmK / (kPlanckRefNm * temperature_k)) - 1.0f;
  const float den = expf(kPlanckC2NmK / (lambda_nm * temperature_k)) - 1.0f;
  const float v = r2 * r2 * ratio * (num / den);
  return fminf(fmaxf(v, kPlanckMin), kPlanckMax);
}

/// The illuminant S(λ) of an environment (docs/design/tracer.md §6).
FT_HD float illuminant(std::uint32_t kind, float temperature_k, float lambda_nm) {
  return kind == static_cast<std::uint32_t>(IlluminantKind::kPlanck)
             ? planck_spectrum(lambda_nm, temperature_k)
             : d65_spectrum(lambda_nm);
}

/// Channel wavelength λ_k = 380 + ((λ_h − 380) + 50k) mod 400 (docs/design/tracer.md §7.1).
FT_HD float channel_lambda(float hero_nm, int k) {
  float off = (hero_nm - kLambdaMinNm) + kChannelStepNm * static_cast<float>(k);
  if (off >= kLambdaSpanNm) off -= kLambdaSpanNm;
  return kLambdaMinNm + off;
}

}  // namespace facetrace::tracer::physics
