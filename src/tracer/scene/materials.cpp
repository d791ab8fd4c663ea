/// @file
/// The preset catalogue: lighting preset names (docs/design/tracer.md §2) and the built-in materials (docs/design/tracer.md §3), with
/// the name matching (fold_name, did_you_mean) their lookups and the scene-file reader share.
#include "scene/materials.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>

#include "facetrace/core/text.h"

namespace facetrace::tracer {
namespace {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

/// docs/design/tracer.md §2, in wire order.
const std::vector<std::string_view> kPresetNames = {
    "Daylight",  "Incandescent", "RingLights",     "DarkSpotlight", "IsoHemisphere",
    "LightTent", "DaylightDome", "UvLamp365",      "UvLamp395",     "DaylightSun",
    "Aset",      "ShopLights",   "WindowDaylight", "WhiteTray",     "IlluminantA"};

// Sellmeier data are the published fits (λ in µm, c = λ_i² in µm²), as tabulated on refractiveindex.info.

Material sellmeier3_material(std::string name, std::array<float, 3> b, std::array<float, 3> c,
                             CrystalSystem system) {
  Material m;
  m.name = std::move(name);
  m.dispersion.model = DispersionModel::kSellmeier3;
  for (int i = 0; i < 3; ++i) m.dispersion.b[i] = b[i], m.dispersion.c[i] = c[i];
  m.crystal_system = system;
  return m;
}

const std::array<MaterialPreset, 4> kMaterialPresets = {{
    {"diamond", [] { return diamond_material(); }},
    // MgAl2O4 spinel, Tropf & Thomas (1991), 0.35–5.5 µm: n_D ≈ 1.716.
    {"spinel",
     [] {
       return sellmeier3_material("Spinel", {1.8938f, 3.0755f, 0.0f}, {0.0098843f, 250.4622f, 0.0f},
                                  CrystalSystem::kCubic);
     }},
    // Y2O3-stabilised cubic zirconia, Wood & Nassau (1982), 0.36–5.1 µm: n_D ≈ 2.158.
    {"cubic_zirconia",
     [] {
       return sellmeier3_material("Cubic zirconia", {1.347091f, 2.117788f, 9.452943f},
                                  {0.0039116f, 0.0278019f, 591.4901f}, CrystalSystem::kCubic);
     }},
    // Sapphire (Al2O3), ordinary ray only, Malitson & Dodge (1972): n_o,D ≈ 1.768. Sapphire is uniaxial
    // (Δ ≈ −0.008); this preset deliberately ignores the birefringence (Δ = 0 keeps it in Tier 1).
    {"sapphire_iso",
     [] {
       return sellmeier3_material("Sapphire (ordinary ray, isotropic)", {1.4313493f, 0.65054713f, 5.3414021f},
                                  {0.0052799261f, 0.0142382647f, 325.017834f}, CrystalSystem::kTrigonal);
     }},
}};

std::string preset_key(std::string_view name) {
  std::string f = fold_name(name);
  if (f == "cz") return "cubiczirconia";
  return f;
}

}  // namespace

std::string fold_name(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '_' || c == '-' || c == ' ') continue;
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

std::string list_names(const std::vector<std::string_view>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + std::string(names[i]);
  return out;
}

std::string did_you_mean(std::string_view got, const std::vector<std::string_view>& known) {
  // a long value is no typo of a short name (and edit_distance is quadratic): no suggestion
  if (got.size() > 64) return {};
  std::string_view best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (auto k : known) {
    const std::size_t d = edit_distance(fold_name(got), fold_name(k));
    if (d < best_d) best_d = d, best = k;
  }
  if (best_d <= std::max<std::size_t>(2, got.size() / 3))
    return " (did you mean \"" + std::string(best) + "\"?)";
  return {};
}

const std::vector<std::string_view>& lighting_preset_names() { return kPresetNames; }

std::span<const MaterialPreset> material_presets() { return kMaterialPresets; }

Material diamond_material() {
  Material m;
  m.name = "Diamond";
  m.dispersion.model = DispersionModel::kSellmeier3;  // docs/design/tracer.md §3 Diamond
  m.dispersion.b[0] = 4.3356f;
  m.dispersion.b[1] = 0.3306f;
  m.dispersion.b[2] = 0.0f;
  m.dispersion.c[0] = 0.011236f;
  m.dispersion.c[1] = 0.030625f;
  m.dispersion.c[2] = 1.0f;
  m.optical_character = OpticalCharacter::kIsotropic;
  m.crystal_system = CrystalSystem::kCubic;
  return m;
}

std::vector<std::string> material_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kMaterialPresets) names.emplace_back(p.name);
  return names;
}

Expected<Material> material_preset(std::string_view name) {
  const std::string key = preset_key(name);
  for (const auto& p : kMaterialPresets)
    if (fold_name(p.name) == key) return p.make();
  std::vector<std::string_view> names;
  for (const auto& p : kMaterialPresets) names.push_back(p.name);
  return invalid_argument("unknown material preset \"" + core::printable(name) + "\"" +
                          did_you_mean(name, names) + "; expected one of: " + list_names(names) +
                          " (cz = cubic_zirconia)");
}

std::string_view lighting_preset_name(LightingPreset preset) {
  const auto i = static_cast<std::size_t>(preset);
  return i < kPresetNames.size() ? kPresetNames[i] : std::string_view("?");
}

Expected<LightingPreset> lighting_preset_from_name(std::string_view name) {
  for (std::size_t i = 0; i < kPresetNames.size(); ++i)
    if (fold_name(name) == fold_name(kPresetNames[i])) return static_cast<LightingPreset>(i);
  return invalid_argument("unknown lighting preset \"" + core::printable(name) + "\"" +
                          did_you_mean(name, kPresetNames) +
                          "; expected one of: " + list_names(kPresetNames));
}

bool lighting_preset_is_tier1(LightingPreset p) {
  return p == LightingPreset::kDaylight ||
         p == LightingPreset::kRingLights ||  // docs/design/tracer.md §1 Tier 1
         p == LightingPreset::kLightTent || p == LightingPreset::kIlluminantA;
}

}  // namespace facetrace::tracer
