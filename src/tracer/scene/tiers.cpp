/// @file
/// tier_features: the one answer to "which tier does this scene need, and why" (docs/design/tracer.md §1).
#include <algorithm>
#include <cmath>
#include <string>

#include "facetrace/tracer/scene.h"

namespace facetrace::tracer {
namespace {

constexpr double kAnisotropyMin = 1e-4;  // docs/design/tracer.md §3: |Δ| > 1e-4 counts as anisotropic

}  // namespace

TierFeatures tier_features(const Scene& s) {
  const Material& m = s.material;
  const bool anisotropic =
      m.crystal_system != CrystalSystem::kCubic && std::fabs(m.birefringence_delta) > kAnisotropyMin;
  const bool biaxial = m.optical_character == OpticalCharacter::kBiaxialPos ||
                       m.optical_character == OpticalCharacter::kBiaxialNeg;
  TierFeatures t;
  auto need = [&t](int tier, std::string feature, bool on_cpu = false) {
    t.tier = std::max(t.tier, tier);
    if (!on_cpu) t.not_on_cpu.push_back(feature);
    t.features.push_back(std::move(feature));
  };
  // docs/design/tracer.md §1 Tier 2 / Tier 3, in the order the messages list them.
  // The Tier 2 presets are traced by both tracers (§6.2) but the UV lamps: a UV lamp lights a stone by its
  // fluorescence (Tier 3), which neither tracer implements.
  const bool uv_lamp =
      s.lighting_preset == LightingPreset::kUvLamp365 || s.lighting_preset == LightingPreset::kUvLamp395;
  if (uv_lamp) {
    need(2, "lighting preset " + std::string(lighting_preset_name(s.lighting_preset)) +
                " (Tier 2; a UV lamp needs fluorescence, Tier 3)");
  } else if (!lighting_preset_is_tier1(s.lighting_preset)) {
    need(2, "lighting preset " + std::string(lighting_preset_name(s.lighting_preset)) + " (Tier 2)", true);
  }
  if (s.environment == EnvironmentKind::kHdr) {
    need(2, "HDR environment (Tier 2)", true);  // docs/design/tracer.md §6.1: on the CPU
    t.hdr_environment = true;
  }
  if (anisotropic && biaxial) need(3, "biaxial birefringence (material.optical_character, Tier 3)");
  if (anisotropic && !biaxial) {
    need(2, "uniaxial birefringence (material.birefringence_delta, Tier 2)", true);  // §7.7: both tracers
    t.uniaxial = true;
  }
  if (m.scattering_sigma_s > 0.0f)
    need(2, "inclusions (material.scattering_sigma_s, Tier 2)", true);  // §7.7: both tracers
  if (m.edge_rounding_radius > 0.0f)
    need(2, "edge rounding (material.edge_rounding_radius, Tier 2)", true);  // §4.1: both tracers
  if (m.fluorescence) need(3, "fluorescence (Tier 3)");
  if (s.tools) need(3, "tools (Tier 3)");
  return t;
}

namespace {

std::string join(const std::vector<std::string>& items) {
  std::string list;
  for (const std::string& f : items) list += (list.empty() ? "" : ", ") + f;
  return list;
}

// The one refusal both tracers give (they implement the same features, docs/design/tracer.md §1).
Status refusal(const std::vector<std::string>& not_implemented, const char* tracer) {
  if (not_implemented.empty()) return {};
  return not_supported("the scene needs " + join(not_implemented) + "; the " + tracer +
                       " tracer implements Tier 1, the Tier 2 lighting presets but the UV lamps, HDR "
                       "environments, uniaxial stones, inclusions and edge rounding");
}

}  // namespace

Status TierFeatures::status() const { return refusal(not_on_cpu, "CPU"); }

Status TierFeatures::gpu_status() const { return refusal(not_on_cpu, "GPU"); }

}  // namespace facetrace::tracer
