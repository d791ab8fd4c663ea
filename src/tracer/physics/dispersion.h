/// @file
/// Refractive index models (docs/design/tracer.md §3): Sellmeier1, Sellmeier3, Cauchy; λ in µm; n floored at 1.
#pragma once

#include <cmath>
#include <cstdint>

#include "host_device.h"

namespace facetrace::tracer::physics {

/// Dispersion model ids, matching facetrace::tracer::DispersionModel (docs/design/tracer.md §3).
inline constexpr std::uint32_t kDispSellmeier1 = 0;  // docs/design/tracer.md §3
inline constexpr std::uint32_t kDispSellmeier3 = 1;  // docs/design/tracer.md §3
inline constexpr std::uint32_t kDispCauchy = 2;      // docs/design/tracer.md §3

/// Coefficients of one dispersion curve. Sellmeier1 uses b[0], c[0]; Cauchy uses a=b[0], b=b[1], c=b[2].
struct DispersionCoeffs {
  std::uint32_t model;
  float b[3];
  float c[3];
};
static_assert(sizeof(DispersionCoeffs) == 28, "DispersionCoeffs layout");

/// n(λ) with λ in nm (converted to µm), floored at 1 (docs/design/tracer.md §3). c is in µm².
FT_HD float refractive_index(const DispersionCoeffs& d, float lambda_nm) {
  const float l = lambda_nm * 1e-3f;
  const float l2 = l * l;
  float n;
  if (d.model == kDispCauchy) {
    // A zero C term (most two-term fits) adds +0 without dividing it (IEEE division's slow path on the GPU).
    n = d.b[0] + d.b[1] / l2 + (d.b[2] != 0.0f ? d.b[2] / (l2 * l2) : 0.0f);
  } else {
    float n2 = 1.0f + d.b[0] * l2 / (l2 - d.c[0]);
    if (d.model == kDispSellmeier3) {
      n2 += d.b[1] * l2 / (l2 - d.c[1]);
      if (d.b[2] != 0.0f) n2 += d.b[2] * l2 / (l2 - d.c[2]);
    }
    n = n2 > 1.0f ? sqrtf(n2) : 1.0f;
  }
  return n > 1.0f ? n : 1.0f;
}

}  // namespace facetrace::tracer::physics
