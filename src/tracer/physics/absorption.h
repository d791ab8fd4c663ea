/// @file
/// Gaussian absorption bands (docs/design/tracer.md §3): α per model unit, in the wavelength or wavenumber domain.
#pragma once

#include <cmath>
#include <cstdint>

#include "host_device.h"

namespace facetrace::tracer::physics {

inline constexpr int kMaxBands =
    8;  // facetrace: bands kept in the trace parameters (docs/design/tracer.md §3)
inline constexpr std::uint32_t kBandWavelength = 0;  // docs/design/tracer.md §3: centre/width in nm
inline constexpr std::uint32_t kBandWavenumber = 1;  // docs/design/tracer.md §3: centre/width in cm⁻¹, on 1/λ
inline constexpr float kNmToInvCm = 1.0e7f;          // docs/design/tracer.md §3: 1/λ[cm⁻¹] = 1e7/λ[nm]

/// One band: α(λ) = peak·exp(−½((x − centre)/width)²), x = λ (nm) or 1e7/λ (cm⁻¹).
struct GaussianBand {
  float peak, centre, width;
  std::uint32_t domain;
};
static_assert(sizeof(GaussianBand) == 16, "GaussianBand layout");

/// α(λ) = Σ bands (docs/design/tracer.md §3), per model unit.
FT_HD float absorption_coefficient(const GaussianBand* bands, std::uint32_t count, float lambda_nm) {
  float alpha = 0.0f;
  for (std::uint32_t i = 0; i < count; ++i) {
    const float x = bands[i].domain == kBandWavenumber ? kNmToInvCm / lambda_nm : lambda_nm;
    const float z = (x - bands[i].centre) / bands[i].width;
    alpha += bands[i].peak * expf(-0.5f * z * z);
  }
  return alpha;
}

}  // namespace facetrace::tracer::physics
