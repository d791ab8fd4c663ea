/// @file
/// The preset catalogue: lighting preset names (docs/design/tracer.md §2) and the built-in materials (docs/design/tracer.md §3), with
/// the name matching (fold_name, did_you_mean) their lookups and the scene-file reader share.
#include "scene/materials.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>
#include <string>
#include <utility>
#include <vector>

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
// Cauchy data (n = a + b/λ², λ in µm) are two-parameter fits from the reference renderer's table
// (suitable-name/indicatrix), solved from a gemmological n_D and its B–G dispersion × 0.579 (= n_F − n_C).
// Bands are Gaussian in wavelength: centre and σ in nm, peak α per model unit (girdle radius ≈ 1), the units of
// that table, so they carry over unconverted. Sources in full: docs/materials.md.

Material sellmeier3_material(std::string name, std::array<float, 3> b, std::array<float, 3> c,
                             CrystalSystem system) {
  Material m;
  m.name = std::move(name);
  m.dispersion.model = DispersionModel::kSellmeier3;
  for (int i = 0; i < 3; ++i) m.dispersion.b[i] = b[i], m.dispersion.c[i] = c[i];
  m.crystal_system = system;
  return m;
}

Dispersion sellmeier3(std::array<float, 3> b, std::array<float, 3> c) {
  Dispersion d;
  d.model = DispersionModel::kSellmeier3;
  for (int i = 0; i < 3; ++i) d.b[i] = b[i], d.c[i] = c[i];
  return d;
}

Dispersion cauchy(float a, float b) {
  Dispersion d;
  d.model = DispersionModel::kCauchy;
  d.b[0] = a;
  d.b[1] = b;
  return d;
}

/// A wavelength-domain band: centre and σ in nm, peak α per model unit.
AbsorptionBand nm_band(float centre_nm, float sigma_nm, float peak) {
  return {peak, centre_nm, sigma_nm, BandDomain::kWavelength};
}

using Bands = std::vector<AbsorptionBand>;

/// Uniaxial: o = ordinary (E ⊥ c), e = extraordinary (E ∥ c); Δ = n_e − n_o and the dispersion is n_o.
/// Biaxial: o = α, e = γ, beta = β; Δ = n_γ − n_α and the dispersion is n_β.
Material gem(std::string name, Dispersion d, OpticalCharacter character, CrystalSystem system, float delta,
             Bands o = {}, Bands e = {}, Bands beta = {}) {
  Material m;
  m.name = std::move(name);
  m.dispersion = d;
  m.optical_character = character;
  m.crystal_system = system;
  m.birefringence_delta = delta;
  m.o_ray = std::move(o);
  m.e_ray = std::move(e);
  m.beta_ray = std::move(beta);
  return m;
}

// Al2O3 ordinary ray, Malitson & Dodge (1972), 0.2–5.0 µm: n_o,D ≈ 1.768.
Dispersion corundum_o() {
  return sellmeier3({1.4313493f, 0.65054713f, 5.3414021f}, {0.0052799261f, 0.0142382647f, 325.017834f});
}

// Al2O3 extraordinary ray, the same paper: n_e,D ≈ 1.7600 (Δ_D = −0.0081, −0.0085 at 400 nm, −0.0080 at 700 nm).
Dispersion corundum_e() {
  return sellmeier3({1.5039759f, 0.55069141f, 6.5927379f}, {0.0054802632f, 0.0147994281f, 402.895140f});
}

// α-SiO2 ordinary ray, Ghosh (1999), 0.198–2.05 µm; the constant 0.28604141 is a pole at c = 0: n_o,D ≈ 1.5442.
Dispersion quartz_o() {
  return sellmeier3({0.28604141f, 1.07044083f, 1.10202242f}, {0.0f, 0.0100585997f, 100.0f});
}

// α-SiO2 extraordinary ray, the same paper: n_e,D ≈ 1.5533 (Δ_D = +0.0091, +0.0096 at 400 nm).
Dispersion quartz_e() {
  return sellmeier3({0.28851804f, 1.09509924f, 1.15662475f}, {0.0f, 0.0102101864f, 100.0f});
}

/// `m` with its extraordinary curve n_e(λ) (docs/design/tracer.md §7.7); Δ stays the value at 589.3 nm.
Material with_e(Material m, Dispersion e) {
  m.extraordinary_dispersion = e;
  return m;
}

constexpr auto kIso = OpticalCharacter::kIsotropic;
constexpr auto kUniPos = OpticalCharacter::kUniaxialPos;
constexpr auto kUniNeg = OpticalCharacter::kUniaxialNeg;
constexpr auto kBiPos = OpticalCharacter::kBiaxialPos;

const std::array<MaterialPreset, 22> kMaterialPresets = {{
    {"diamond", [] { return diamond_material(); }},
    // 6H-SiC ordinary ray, Wang et al. (2013), 0.436–2.325 µm: n² = 6.57232 + 0.1401/(λ² − 0.03178) − 0.02153λ²,
    // as Sellmeier3 (the reference renderer's encoding): constant 1.163887 at c = 0, the pole term
    // 0.1401/0.03178 = 4.408433, the λ² term as a far pole 21.53 at c = 1000. n_o,D ≈ 2.6474; Δ = +0.0415 from
    // the same paper's e-ray fit. Colourless.
    {"moissanite",
     [] {
       return gem("Moissanite (6H-SiC)",
                  sellmeier3({1.163887f, 4.408433f, 21.53f}, {0.0f, 0.03178f, 1000.0f}), kUniPos,
                  CrystalSystem::kHexagonal, 0.0415f);
     }},
    // Rutile (TiO2), DeVore, J. Opt. Soc. Am. 41, 416 (1951), 0.43–1.5 µm: n_o² = 5.913 + 0.2441/(λ² − 0.0803),
    // as Sellmeier3 like moissanite: constant 5.913 − 1 − 0.2441/0.0803 = 1.873149 at c = 0 and the pole term
    // 0.2441/0.0803 = 3.039851. n_o,D ≈ 2.6129; Δ = +0.2957 = n_e − n_o at 589.3 nm from the same paper's
    // n_e² = 7.197 + 0.3322/(λ² − 0.0843) (n_e,D ≈ 2.9087), traced as its own curve: constant
    // 7.197 − 1 − 0.3322/0.0843 = 2.256312 at c = 0 and the pole term 0.3322/0.0843 = 3.940688. Colourless
    // (synthetic rutile).
    {"rutile",
     [] {
       return with_e(gem("Rutile (TiO2)", sellmeier3({1.873149f, 3.039851f, 0.0f}, {0.0f, 0.0803f, 1.0f}),
                         kUniPos, CrystalSystem::kTetragonal, 0.2957f),
                     sellmeier3({2.256312f, 3.940688f, 0.0f}, {0.0f, 0.0843f, 1.0f}));
     }},
    // Y2O3-stabilised cubic zirconia, Wood & Nassau (1982), 0.36–5.1 µm: n_D ≈ 2.158.
    {"cubic_zirconia",
     [] {
       return sellmeier3_material("Cubic zirconia", {1.347091f, 2.117788f, 9.452943f},
                                  {0.0039116f, 0.0278019f, 591.4901f}, CrystalSystem::kCubic);
     }},
    // MgAl2O4 spinel, Tropf & Thomas (1991), 0.35–5.5 µm: n_D ≈ 1.716. Colourless.
    {"spinel",
     [] {
       return sellmeier3_material("Spinel", {1.8938f, 3.0755f, 0.0f}, {0.0098843f, 250.4622f, 0.0f},
                                  CrystalSystem::kCubic);
     }},
    // Red spinel: the Tropf & Thomas fit above plus the Cr3+ band at 540 nm (Nassau 2001; σ and peak from the
    // reference renderer's table).
    {"red_spinel",
     [] {
       Material m = sellmeier3_material("Red spinel", {1.8938f, 3.0755f, 0.0f}, {0.0098843f, 250.4622f, 0.0f},
                                        CrystalSystem::kCubic);
       m.o_ray = {nm_band(540.0f, 55.0f, 2.4f)};
       return m;
     }},
    // Garnet = almandine Fe3Al2(SiO4)3, reference renderer's Cauchy (n_D 1.790, B–G 0.024); the Fe2+
    // 505/520/573 nm lines (centres gemmological, σ and peaks from the table).
    {"garnet",
     [] {
       return gem("Garnet (almandine)", cauchy(1.769057f, 0.007274f), kIso, CrystalSystem::kCubic, 0.0f,
                  {nm_band(505.0f, 20.0f, 1.3f), nm_band(520.0f, 20.0f, 1.5f), nm_band(573.0f, 20.0f, 1.3f)});
     }},
    // Pyrope Mg3Al2(SiO4)3, reference renderer's Cauchy (n_D 1.714, B–G 0.022); Cr3+ 505 nm and Fe2+ 570 nm.
    {"pyrope",
     [] {
       return gem("Garnet (pyrope)", cauchy(1.694804f, 0.006668f), kIso, CrystalSystem::kCubic, 0.0f,
                  {nm_band(505.0f, 35.0f, 1.2f), nm_band(570.0f, 45.0f, 1.4f)});
     }},
    // Emerald (beryl:Cr,V), reference renderer's Cauchy (n_o,D 1.579, B–G 0.014), Δ = −0.006; Cr3+ bands at
    // 430 and 600 nm (GIA). No dichroic split is published there: e = o.
    {"emerald",
     [] {
       const Bands bands = {nm_band(430.0f, 30.0f, 2.8f), nm_band(600.0f, 40.0f, 2.6f)};
       return gem("Emerald", cauchy(1.566794f, 0.004273f), kUniNeg, CrystalSystem::kHexagonal, -0.0060f,
                  bands, bands);
     }},
    // Aquamarine (beryl:Fe2+): emerald's Cauchy b with a retargeted to n_o,D 1.577, Δ = −0.006; the Fe2+ band
    // at 830 nm whose tail reaches the red. e = o.
    {"aquamarine",
     [] {
       const Bands bands = {nm_band(830.0f, 110.0f, 1.0f)};
       return gem("Aquamarine", cauchy(1.564698f, 0.004273f), kUniNeg, CrystalSystem::kHexagonal, -0.0060f,
                  bands, bands);
     }},
    // Ruby (Al2O3:Cr): Malitson & Dodge o- and e-ray curves (Δ_D = −0.0081); Cr3+ 4A2→4T1/4T2 bands,
    // pleochroic per Mandarino (1959): o at 410/556 nm, e at 400/550 nm.
    {"ruby",
     [] {
       return with_e(gem("Ruby", corundum_o(), kUniNeg, CrystalSystem::kTrigonal, -0.0081f,
                         {nm_band(410.0f, 30.0f, 3.0f), nm_band(556.0f, 45.0f, 2.5f)},
                         {nm_band(400.0f, 30.0f, 2.9f), nm_band(550.0f, 45.0f, 1.4f)}),
                     corundum_e());
     }},
    // Blue sapphire (Al2O3:Fe,Ti): Malitson & Dodge o- and e-ray curves (Δ_D = −0.0081); the Fe2+–Ti4+ IVCT band at 580 nm for
    // E ⊥ c and 700 nm for E ∥ c (Emmett et al. 2020).
    {"sapphire",
     [] {
       return with_e(gem("Sapphire (blue)", corundum_o(), kUniNeg, CrystalSystem::kTrigonal, -0.0081f,
                         {nm_band(580.0f, 90.0f, 3.0f)}, {nm_band(700.0f, 95.0f, 2.1f)}),
                     corundum_e());
     }},
    // Sapphire (Al2O3), ordinary ray only, Malitson & Dodge (1972): n_o,D ≈ 1.768. Sapphire is uniaxial
    // (Δ ≈ −0.008); this preset deliberately ignores the birefringence (Δ = 0 keeps it in Tier 1).
    {"sapphire_iso",
     [] {
       return sellmeier3_material("Sapphire (ordinary ray, isotropic)", {1.4313493f, 0.65054713f, 5.3414021f},
                                  {0.0052799261f, 0.0142382647f, 325.017834f}, CrystalSystem::kTrigonal);
     }},
    // Tourmaline (elbaite), reference renderer's Cauchy (n_D 1.6394, B–G 0.017), Δ = −0.021 (IGS n_o 1.644,
    // n_e 1.623); Fe bands at 720 and 430 nm, the o-ray three times the e-ray (Mattson & Rossman 1987).
    {"tourmaline",
     [] {
       return gem("Tourmaline", cauchy(1.624481f, 0.005183f), kUniNeg, CrystalSystem::kTrigonal, -0.0210f,
                  {nm_band(720.0f, 55.0f, 3.0f), nm_band(430.0f, 45.0f, 1.8f)},
                  {nm_band(720.0f, 55.0f, 1.0f), nm_band(430.0f, 45.0f, 0.6f)});
     }},
    // High zircon ZrSiO4, reference renderer's Cauchy (n_o,D 1.925, B–G 0.039), Δ = +0.059 (n_e 1.984); the U4+
    // lines at 537/562/589/653/691 nm (Nasdala et al. 2003). e = o.
    {"zircon",
     [] {
       const Bands bands = {nm_band(537.0f, 6.0f, 0.5f), nm_band(562.0f, 6.0f, 0.5f),
                            nm_band(589.0f, 6.0f, 0.5f), nm_band(653.0f, 8.0f, 2.4f),
                            nm_band(691.0f, 6.0f, 0.5f)};
       return gem("Zircon", cauchy(1.890963f, 0.011820f), kUniPos, CrystalSystem::kTetragonal, 0.0590f, bands,
                  bands);
     }},
    // Rock crystal: Ghosh (1999) o- and e-ray curves (Δ_D = +0.0091). Colourless.
    {"quartz",
     [] {
       return with_e(gem("Quartz", quartz_o(), kUniPos, CrystalSystem::kTrigonal, 0.0091f), quartz_e());
     }},
    // Amethyst: quartz plus the Fe colour-centre band at 545 nm. e bands = o bands.
    {"amethyst",
     [] {
       const Bands bands = {nm_band(545.0f, 55.0f, 1.8f)};
       return with_e(gem("Amethyst", quartz_o(), kUniPos, CrystalSystem::kTrigonal, 0.0091f, bands, bands),
                     quartz_e());
     }},
    // Citrine: quartz plus the Fe3+ absorption edge, a band at 400 nm whose tail takes the violet-blue. e bands
    // = o bands.
    {"citrine",
     [] {
       const Bands bands = {nm_band(400.0f, 70.0f, 1.6f)};
       return with_e(gem("Citrine", quartz_o(), kUniPos, CrystalSystem::kTrigonal, 0.0091f, bands, bands),
                     quartz_e());
     }},
    // Peridot (Fo~90 olivine): n_α 1.654, n_β 1.669, n_γ 1.690 (Deer, Howie & Zussman), Δ = 0.036; the reference
    // renderer's Cauchy b (B–G 0.020) with a retargeted to n_β (its a puts n_D at n_α). The Fe2+ 450/475/495 nm
    // triplet, on all three rays.
    {"peridot",
     [] {
       const Bands bands = {nm_band(450.0f, 25.0f, 1.0f), nm_band(475.0f, 25.0f, 1.3f),
                            nm_band(495.0f, 25.0f, 1.0f)};
       return gem("Peridot", cauchy(1.651544f, 0.006062f), kBiPos, CrystalSystem::kOrthorhombic, 0.036f,
                  bands, bands, bands);
     }},
    // Blue topaz, reference renderer's Cauchy (n_β,D 1.627, B–G 0.014), Δ = 0.008; the irradiation colour-centre
    // band at 620 nm (Nassau 1994), on all three rays.
    {"topaz",
     [] {
       const Bands bands = {nm_band(620.0f, 70.0f, 1.6f)};
       return gem("Topaz (blue)", cauchy(1.614872f, 0.004273f), kBiPos, CrystalSystem::kOrthorhombic, 0.0080f,
                  bands, bands, bands);
     }},
    // Unheated tanzanite (zoisite:V): n_α 1.6915, n_β 1.6935, n_γ 1.7020 (Hurlbut 1969), Δ = 0.0105; the reference
    // renderer's Cauchy b (B–G 0.030) with a retargeted to n_β. V3+ bands at 595/528 nm and the γ-only Fe–Ti band
    // at 455 nm (Anderson via Hurlbut); α red, β blue, γ yellow-green.
    {"tanzanite",
     [] {
       return gem("Tanzanite (unheated)", cauchy(1.667230f, 0.009123f), kBiPos, CrystalSystem::kOrthorhombic,
                  0.0105f, {nm_band(595.0f, 45.0f, 1.3f), nm_band(528.0f, 35.0f, 1.8f)},
                  {nm_band(595.0f, 45.0f, 1.6f), nm_band(528.0f, 35.0f, 1.0f), nm_band(455.0f, 40.0f, 2.6f)},
                  {nm_band(595.0f, 45.0f, 3.2f), nm_band(528.0f, 35.0f, 2.8f)});
     }},
    // Alexandrite (chrysoberyl:Cr), Walling et al. (1980) n_β curve n² = 1.78522 + 1.21202λ²/(λ² − 0.01262)
    // − 0.01681λ² (constant at c = 0, the λ² term as a far pole 16.81 at c = 1000); Δ = n_γ − n_α = 0.0076 from
    // the same paper's three curves. Cr3+ trichroism per Farrell & Newnham (1965): α (E ∥ c) red, β (E ∥ a)
    // yellow, γ (E ∥ b) green.
    {"alexandrite",
     [] {
       return gem("Alexandrite", sellmeier3({0.78522f, 1.21202f, 16.81f}, {0.0f, 0.01262f, 1000.0f}), kBiPos,
                  CrystalSystem::kOrthorhombic, 0.0076f,
                  {nm_band(565.0f, 40.0f, 1.9f), nm_band(420.0f, 32.0f, 1.8f)},
                  {nm_band(595.0f, 40.0f, 3.1f), nm_band(430.0f, 32.0f, 1.5f)},
                  {nm_band(560.0f, 40.0f, 0.65f), nm_band(422.0f, 32.0f, 3.5f)});
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
