/// @file
/// Scene JSON: every field, presets, round trip, and an error naming the field for each kind of bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <cstdint>
#include <filesystem>
#include <fstream>

#include "facetrace/tracer/scene.h"
#include "facetrace/tracer/scene_json.h"

namespace ft = facetrace::tracer;
using facetrace::Code;

namespace {

ft::Scene parse_ok(const std::string& text) {
  auto r = ft::scene_from_json(text);
  EXPECT_TRUE(r.ok()) << r.status().what();
  return r.ok() ? r.value() : ft::Scene{};
}

/// Parses `text`, expects kInvalidArgument, returns the message.
std::string parse_error(const std::string& text) {
  auto r = ft::scene_from_json(text, "test.json");
  EXPECT_FALSE(r.ok()) << "accepted: " << text;
  if (r.ok()) return {};
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().what().rfind("test.json", 0), 0u) << r.status().what();
  return r.status().what();
}

#define EXPECT_MESSAGE_HAS(msg, needle) EXPECT_NE((msg).find(needle), std::string::npos) << (msg)

double refractive_index(const ft::Dispersion& d, double lambda_nm) {
  const double l2 = (lambda_nm / 1000) * (lambda_nm / 1000);
  switch (d.model) {
    case ft::DispersionModel::kSellmeier1: return std::sqrt(1 + d.b[0] * l2 / (l2 - d.c[0]));
    case ft::DispersionModel::kSellmeier3: {
      double n2 = 1;
      for (int i = 0; i < 3; ++i) n2 += d.b[i] * l2 / (l2 - d.c[i]);
      return std::sqrt(n2);
    }
    case ft::DispersionModel::kCauchy: return d.b[0] + d.b[1] / l2 + d.b[2] / (l2 * l2);
  }
  return 0;
}
double abbe(const ft::Dispersion& d) {
  return (refractive_index(d, 589.3) - 1) / (refractive_index(d, 486.1) - refractive_index(d, 656.3));
}

}  // namespace

TEST(SceneJson, empty_object_gives_the_builtin_scene) {
  const ft::Scene s = parse_ok("{}");
  EXPECT_EQ(ft::scene_to_json(s), ft::scene_to_json(ft::builtin_diamond_scene()));
  EXPECT_EQ(s.planes.size(), 74u);
  EXPECT_EQ(s.material.name, "Diamond");
}

TEST(SceneJson, reads_every_top_level_field) {
  const ft::Scene s = parse_ok(R"({
    "version": 1, "description": "every field",
    "width": 320, "height": 200, "yaw": 0.4, "pitch": 0.3, "distance": 3.5,
    "light_yaw": 0.5, "light_pitch": 0.9, "exposure": 1.5, "max_bounces": 6,
    "lighting_preset": "RingLights", "environment": "studio", "material": "spinel",
    "planes": "round_brilliant", "girdle_frosted": true, "backdrop": 0.05,
    "surface_glare": 0.5, "head_shadow_deg": 20, "tools": false })");
  EXPECT_EQ(s.width, 320u);
  EXPECT_EQ(s.height, 200u);
  EXPECT_EQ(s.yaw, 0.4f);
  EXPECT_EQ(s.pitch, 0.3f);
  EXPECT_EQ(s.distance, 3.5f);
  EXPECT_EQ(s.light_yaw, 0.5f);
  EXPECT_EQ(s.light_pitch, 0.9f);
  EXPECT_EQ(s.exposure, 1.5f);
  EXPECT_EQ(s.max_bounces, 6u);
  EXPECT_EQ(s.lighting_preset, ft::LightingPreset::kRingLights);
  EXPECT_EQ(s.environment, ft::EnvironmentKind::kStudio);
  EXPECT_EQ(s.material.name, "Spinel");
  EXPECT_EQ(s.planes.size(), 74u);
  EXPECT_TRUE(s.girdle_frosted);
  EXPECT_EQ(s.backdrop, 0.05f);
  EXPECT_EQ(s.surface_glare, 0.5f);
  EXPECT_EQ(s.head_shadow_deg, 20.0f);
  EXPECT_FALSE(s.tools);
}

TEST(SceneJson, reads_explicit_planes_with_finish) {
  const ft::Scene s = parse_ok(R"({"planes": [
      {"normal": [1, 0, 0], "d": -1}, {"normal": [-1, 0, 0], "d": -1},
      {"normal": [0, 1, 0], "d": -1, "finish": "frosted"}, {"normal": [0, -1, 0], "d": -1},
      {"normal": [0, 0, 1], "d": -1, "finish": "polished"}, {"normal": [0, 0, -1], "d": -0.5}]})");
  ASSERT_EQ(s.planes.size(), 6u);
  EXPECT_EQ(s.planes[0].normal[0], 1.0f);
  EXPECT_EQ(s.planes[0].finish, ft::Finish::kPolished);
  EXPECT_EQ(s.planes[2].finish, ft::Finish::kFrosted);
  EXPECT_EQ(s.planes[5].normal[2], -1.0f);
  EXPECT_EQ(s.planes[5].d, -0.5f);
}

TEST(SceneJson, furnace_is_the_uniform_environment_and_planes_may_be_empty) {
  const ft::Scene s = parse_ok(R"({"environment": "furnace", "planes": []})");
  EXPECT_EQ(s.environment, ft::EnvironmentKind::kUniform);
  EXPECT_TRUE(s.planes.empty());
  EXPECT_EQ(parse_ok(R"({"environment": "uniform"})").environment, ft::EnvironmentKind::kUniform);
}

TEST(SceneJson, accepts_all_fifteen_lighting_presets_by_name) {
  const char* names[] = {"Daylight",  "Incandescent", "RingLights",     "DarkSpotlight", "IsoHemisphere",
                         "LightTent", "DaylightDome", "UvLamp365",      "UvLamp395",     "DaylightSun",
                         "Aset",      "ShopLights",   "WindowDaylight", "WhiteTray",     "IlluminantA"};
  for (int i = 0; i < 15; ++i) {
    const ft::Scene s = parse_ok(std::string(R"({"lighting_preset": ")") + names[i] + "\"}");
    EXPECT_EQ(static_cast<int>(s.lighting_preset), i) << names[i];
    EXPECT_EQ(ft::lighting_preset_name(s.lighting_preset), names[i]);
  }
  EXPECT_EQ(parse_ok(R"({"lighting_preset": "light_tent"})").lighting_preset, ft::LightingPreset::kLightTent);
  EXPECT_EQ(parse_ok(R"({"lighting_preset": "illuminant-a"})").lighting_preset,
            ft::LightingPreset::kIlluminantA);
  EXPECT_TRUE(ft::lighting_preset_is_tier1(ft::LightingPreset::kDaylight));
  EXPECT_FALSE(ft::lighting_preset_is_tier1(ft::LightingPreset::kAset));
}

TEST(SceneJson, material_presets_have_their_published_indices) {
  struct Expect {
    const char* name;
    const char* display_name;
    double n_d, abbe;
  };
  // n_D (589.3 nm) and Abbe V of each preset's published Sellmeier fit (docs/design/tracer.md §3 for diamond).
  const Expect expect[] = {{"diamond", "Diamond", 2.41726, 55.27},
                           {"spinel", "Spinel", 1.71610, 60.63},
                           {"cubic_zirconia", "Cubic zirconia", 2.15846, 33.52},
                           {"sapphire_iso", "Sapphire (ordinary ray, isotropic)", 1.76808, 72.27}};
  for (const auto& e : expect) {
    auto m = ft::material_preset(e.name);
    ASSERT_TRUE(m.ok()) << m.status().what();
    EXPECT_EQ(m->name, e.display_name);
    EXPECT_NEAR(refractive_index(m->dispersion, 589.3), e.n_d, 2e-4) << e.name;
    EXPECT_NEAR(abbe(m->dispersion), e.abbe, 0.05) << e.name;
    EXPECT_TRUE(m->o_ray.empty());
    EXPECT_EQ(m->birefringence_delta, 0.0f) << "presets stay Tier 1";
  }
  EXPECT_EQ(ft::material_preset("CZ")->name, "Cubic zirconia");
  EXPECT_EQ(ft::material_preset_names().size(), 22u);  // the catalogue: MaterialCatalogue below
  const auto bad = ft::material_preset("diamnod");
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_MESSAGE_HAS(bad.status().what(), "did you mean \"diamond\"");
}

TEST(MaterialCatalogue, every_preset_is_valid_has_its_published_index_and_the_right_tier) {
  struct Expect {
    const char* name;
    double n_d;  // published n_D at 589.3 nm: n_o for uniaxial, n_β for biaxial
    int tier;    // 1 isotropic, 2 uniaxial, 3 biaxial (docs/design/tracer.md §1)
    bool coloured;
  };
  // Sources (full citations in docs/materials.md); "ref. table" = the reference renderer's material table
  // (suitable-name/indicatrix), where a gemmological figure is all there is.
  const Expect expect[] = {
      {"diamond", 2.417, 1, false},           // Peter (1923)
      {"moissanite", 2.6474, 2, false},       // Wang et al. (2013), 6H-SiC n_o
      {"rutile", 2.6129, 2, false},           // DeVore (1951) n_o
      {"cubic_zirconia", 2.15847, 1, false},  // Wood & Nassau (1982), their quoted N_D
      {"spinel", 1.716, 1, false},            // Tropf & Thomas (1991)
      {"red_spinel", 1.716, 1, true},         // Tropf & Thomas (1991)
      {"garnet", 1.790, 1, true},             // almandine, ref. table (gemmological n_D)
      {"pyrope", 1.714, 1, true},             // ref. table (gemmological n_D)
      {"emerald", 1.579, 2, true},            // ref. table, inside IGS 1.57-1.60
      {"aquamarine", 1.577, 2, true},         // ref. table (beryl)
      {"ruby", 1.768, 2, true},               // Malitson & Dodge (1972) n_o
      {"sapphire", 1.768, 2, true},           // Malitson & Dodge (1972) n_o
      {"sapphire_iso", 1.768, 1, false},      // Malitson & Dodge (1972) n_o
      {"tourmaline", 1.639, 2, true},         // ref. table, inside IGS n_o 1.619-1.655
      {"zircon", 1.925, 2, true},             // Handbook of Mineralogy (2001) / GIA, high zircon n_o
      {"quartz", 1.5442, 2, false},           // Ghosh (1999) n_o
      {"amethyst", 1.5442, 2, true},          // Ghosh (1999) n_o
      {"citrine", 1.5442, 2, true},           // Ghosh (1999) n_o
      {"peridot", 1.669, 3, true},            // Deer, Howie & Zussman, Fo~90 n_β
      {"topaz", 1.627, 3, true},              // ref. table, inside The Gemology Project n_β 1.609-1.637
      {"tanzanite", 1.6935, 3, true},         // Hurlbut (1969) n_β
      {"alexandrite", 1.7427, 3, true},       // Walling et al. (1980) n_β
  };
  const auto names = ft::material_preset_names();
  ASSERT_EQ(names.size(), std::size(expect));
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const Expect* e = nullptr;
    for (const auto& x : expect)
      if (name == x.name) e = &x;
    ASSERT_NE(e, nullptr) << "no published n_D in this test for preset " << name;
    auto m = ft::material_preset(name);
    ASSERT_TRUE(m.ok()) << m.status().what();

    ft::Scene s = ft::builtin_diamond_scene();
    s.material = *m;
    const facetrace::Status valid = ft::validate_scene(s);
    EXPECT_TRUE(valid.ok()) << valid.what();
    EXPECT_NEAR(refractive_index(m->dispersion, 589.3), e->n_d, 0.005);

    ft::Scene plain;
    plain.material = *m;
    const ft::TierFeatures t = ft::tier_features(plain);
    EXPECT_EQ(t.tier, e->tier);
    const bool biaxial = m->optical_character == ft::OpticalCharacter::kBiaxialPos ||
                         m->optical_character == ft::OpticalCharacter::kBiaxialNeg;
    const bool uniaxial = m->optical_character == ft::OpticalCharacter::kUniaxialPos ||
                          m->optical_character == ft::OpticalCharacter::kUniaxialNeg;
    EXPECT_EQ(biaxial, e->tier == 3);
    EXPECT_EQ(uniaxial, e->tier == 2);
    if (e->tier <= 2) {
      EXPECT_TRUE(t.status().ok()) << e->name << ": " << t.status().what();  // uniaxial: both tracers
      EXPECT_EQ(t.uniaxial, e->tier == 2) << e->name;
    } else {
      EXPECT_EQ(t.status().code(), Code::kNotSupported);
      EXPECT_MESSAGE_HAS(t.status().what(), "biaxial birefringence");
    }
    if (e->tier >= 2) {
      EXPECT_MESSAGE_HAS(t.features.at(0), "birefringence");
      EXPECT_GT(std::fabs(m->birefringence_delta), 1e-4f);
      EXPECT_NE(m->crystal_system, ft::CrystalSystem::kCubic);
    }
    EXPECT_EQ(!m->o_ray.empty(), e->coloured) << "colourless presets have no bands";
    if (!e->coloured) {
      EXPECT_TRUE(m->e_ray.empty() && m->beta_ray.empty());
    }
    if (e->coloured && e->tier >= 2) {
      EXPECT_FALSE(m->e_ray.empty()) << "anisotropic colour needs e-ray bands";
    }
    if (e->coloured && e->tier == 3) {
      EXPECT_FALSE(m->beta_ray.empty());
    }
  }
}

TEST(MaterialCatalogue, pleochroic_stones_have_distinct_ray_bands) {
  for (const char* name : {"ruby", "sapphire", "tourmaline", "tanzanite", "alexandrite"}) {
    auto m = ft::material_preset(name);
    ASSERT_TRUE(m.ok()) << name;
    bool differ = m->o_ray.size() != m->e_ray.size();
    for (std::size_t i = 0; !differ && i < m->o_ray.size(); ++i)
      differ = m->o_ray[i].peak != m->e_ray[i].peak || m->o_ray[i].centre != m->e_ray[i].centre;
    EXPECT_TRUE(differ) << name;
  }
  // Blue sapphire: the Fe-Ti band at 580 nm for E perpendicular to c, 700 nm for E parallel to c.
  const auto sapphire = ft::material_preset("sapphire");
  EXPECT_EQ(sapphire->o_ray.at(0).centre, 580.0f);
  EXPECT_EQ(sapphire->e_ray.at(0).centre, 700.0f);
  EXPECT_LT(sapphire->birefringence_delta, 0.0f);  // n_e < n_o
}

TEST(MaterialCatalogue, lookup_is_case_insensitive_and_an_unknown_name_lists_the_known_ones) {
  EXPECT_EQ(ft::material_preset("MOISSANITE")->name, ft::material_preset("moissanite")->name);
  EXPECT_EQ(ft::material_preset("Red Spinel")->name, "Red spinel");
  EXPECT_EQ(ft::material_preset("Sapphire_ISO")->name, "Sapphire (ordinary ray, isotropic)");
  EXPECT_EQ(ft::material_preset("cz")->name, "Cubic zirconia");
  EXPECT_EQ(ft::material_preset("Garnet")->name, "Garnet (almandine)");
  const auto bad = ft::material_preset("unobtainium");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  for (const std::string& name : ft::material_preset_names()) EXPECT_MESSAGE_HAS(bad.status().what(), name);
  EXPECT_MESSAGE_HAS(ft::material_preset("tanzanit").status().what(), "did you mean \"tanzanite\"");
}

TEST(MaterialCatalogue, scene_files_select_presets_by_name) {
  EXPECT_EQ(parse_ok(R"({"material": "garnet"})").material.name, "Garnet (almandine)");
  const ft::Scene s = parse_ok(R"({"material": {"preset": "Moissanite", "absorption_path_scale": 2}})");
  EXPECT_EQ(s.material.name, "Moissanite (6H-SiC)");
  EXPECT_EQ(ft::tier_features(s).tier, 2);
}

TEST(SceneJson, reads_a_full_material_object) {
  const ft::Scene s = parse_ok(R"({"material": {
      "name": "test glass",
      "dispersion": {"model": "sellmeier3", "b": [1.03961212, 0.231792344, 1.01046945],
                     "c": [0.00600069867, 0.0200179144, 103.560653]},
      "absorption": {"o_ray": [{"peak": 0.5, "centre": 550, "width": 30},
                               {"peak": 0.1, "centre": 0.0025, "width": 0.0002, "domain": "wavenumber"}]},
      "absorption_path_scale": 2.5, "optical_character": "isotropic", "crystal_system": "amorphous",
      "birefringence_delta": 0, "scattering_sigma_s": 0, "scattering_g": 0, "edge_rounding_radius": 0,
      "fluorescence": false}})");
  const ft::Material& m = s.material;
  EXPECT_EQ(m.name, "test glass");
  EXPECT_EQ(m.dispersion.model, ft::DispersionModel::kSellmeier3);
  EXPECT_EQ(m.dispersion.b[0], 1.03961212f);
  EXPECT_EQ(m.dispersion.c[2], 103.560653f);
  ASSERT_EQ(m.o_ray.size(), 2u);
  EXPECT_EQ(m.o_ray[0].peak, 0.5f);
  EXPECT_EQ(m.o_ray[0].centre, 550.0f);
  EXPECT_EQ(m.o_ray[0].width, 30.0f);
  EXPECT_EQ(m.o_ray[0].domain, ft::BandDomain::kWavelength);
  EXPECT_EQ(m.o_ray[1].domain, ft::BandDomain::kWavenumber);
  EXPECT_EQ(m.absorption_path_scale, 2.5f);
  EXPECT_EQ(m.crystal_system, ft::CrystalSystem::kAmorphous);
  EXPECT_NEAR(refractive_index(m.dispersion, 587.6), 1.5168, 1e-4);  // N-BK7
}

// material.c_axis (docs/scene-format.md): the optic axis, default [0, 1, 0]; written back; a zero axis, a wrong
// length or a non-number is named.
TEST(SceneJson, reads_the_optic_axis_and_refuses_a_zero_one) {
  EXPECT_EQ(parse_ok("{}").material.c_axis[1], 1.0f);
  const ft::Scene s = parse_ok(R"({"material": {"preset": "emerald", "c_axis": [0.5, 0, -2]}})");
  EXPECT_EQ(s.material.c_axis[0], 0.5f);
  EXPECT_EQ(s.material.c_axis[1], 0.0f);
  EXPECT_EQ(s.material.c_axis[2], -2.0f);
  const std::string text = ft::scene_to_json(s);
  EXPECT_NE(text.find("\"c_axis\""), std::string::npos);  // not the bare preset name any more
  auto back = ft::scene_from_json(text);
  ASSERT_TRUE(back.ok()) << back.status().what();
  EXPECT_EQ(back->material.c_axis[2], -2.0f);
  EXPECT_MESSAGE_HAS(parse_error(R"({"material": {"c_axis": [0, 0, 0]}})"),
                     "material.c_axis: the optic axis");
  EXPECT_MESSAGE_HAS(parse_error(R"({"material": {"c_axis": [1e-7, 0, 0]}})"), "must not be (near) zero");
  EXPECT_MESSAGE_HAS(parse_error(R"({"material": {"c_axis": [0, 1]}})"), "expected 3 numbers, got 2");
  EXPECT_MESSAGE_HAS(parse_error(R"({"material": {"c_axis": "up"}})"), "material.c_axis: expected an array");
  EXPECT_MESSAGE_HAS(parse_error(R"({"material": {"c_axis": [0, "y", 0]}})"), "material.c_axis[1]");
}

TEST(SceneJson, reads_the_extraordinary_curve_and_null_removes_it) {
  // docs/scene-format.md "extraordinary_dispersion": a dispersion object, checked like `dispersion`; null
  // returns to n_e = n_o + Δ.
  EXPECT_FALSE(parse_ok("{}").material.extraordinary_dispersion.has_value());
  ft::Scene s = parse_ok(R"({"material": {"preset": "emerald",
      "extraordinary_dispersion": {"model": "cauchy", "a": 1.571, "b": 0.0042}}})");
  ASSERT_TRUE(s.material.extraordinary_dispersion.has_value());
  EXPECT_EQ(s.material.extraordinary_dispersion->model, ft::DispersionModel::kCauchy);
  EXPECT_EQ(s.material.extraordinary_dispersion->b[0], 1.571f);
  EXPECT_EQ(s.material.extraordinary_dispersion->b[1], 0.0042f);
  const std::string text = ft::scene_to_json(s);
  EXPECT_NE(text.find("\"extraordinary_dispersion\""), std::string::npos);
  auto back = ft::scene_from_json(text);
  ASSERT_TRUE(back.ok()) << back.status().what();
  ASSERT_TRUE(back->material.extraordinary_dispersion.has_value());
  EXPECT_EQ(back->material.extraordinary_dispersion->b[1], 0.0042f);
  EXPECT_EQ(ft::scene_to_json(*back), text);

  s = parse_ok(R"({"material": {"preset": "ruby", "extraordinary_dispersion": null}})");
  EXPECT_FALSE(s.material.extraordinary_dispersion.has_value());
  EXPECT_EQ(s.material.birefringence_delta, -0.0081f);

  EXPECT_MESSAGE_HAS(
      parse_error(R"({"material": {"extraordinary_dispersion": {"model": "cauchy", "a": 7}}})"),
      "material.extraordinary_dispersion: refractive index at 380 nm is 7");
  EXPECT_MESSAGE_HAS(
      parse_error(
          R"({"material": {"extraordinary_dispersion": {"model": "sellmeier1", "b": 1, "c": 0.25}}})"),
      "material.extraordinary_dispersion: Sellmeier term 0 has its pole at 500 nm");
  EXPECT_MESSAGE_HAS(parse_error(R"({"material": {"extraordinary_dispersion": {"a": 1.5}}})"),
                     "material.extraordinary_dispersion.model: missing");
  EXPECT_MESSAGE_HAS(parse_error(R"({"material": {"extraordinary_dispersion": 1.6}})"),
                     "material.extraordinary_dispersion: expected an object");
}

TEST(MaterialCatalogue, published_extraordinary_curves_give_the_published_n_e) {
  // n_e at 589.3 nm from the papers' own formulas, evaluated here: Malitson & Dodge (1972) sapphire
  // n_e² − 1 = 1.5039759λ²/(λ² − 0.0740288²) + 0.55069141λ²/(λ² − 0.1216529²) + 6.5927379λ²/(λ² − 20.072248²);
  // Ghosh (1999) quartz n_e² = 1.28851804 + 1.09509924λ²/(λ² − 1.02101864e-2) + 1.15662475λ²/(λ² − 100);
  // DeVore (1951) rutile n_e² = 7.197 + 0.3322/(λ² − 0.0843).
  const double l2 = 0.5893 * 0.5893;
  const double sapphire = std::sqrt(1.0 + 1.5039759 * l2 / (l2 - 0.0740288 * 0.0740288) +
                                    0.55069141 * l2 / (l2 - 0.1216529 * 0.1216529) +
                                    6.5927379 * l2 / (l2 - 20.072248 * 20.072248));
  const double quartz =
      std::sqrt(1.28851804 + 1.09509924 * l2 / (l2 - 1.02101864e-2) + 1.15662475 * l2 / (l2 - 100.0));
  const double rutile = std::sqrt(7.197 + 0.3322 / (l2 - 0.0843));
  auto n_at = [&](const ft::Dispersion& d) {  // Sellmeier3, the model all three presets use
    EXPECT_EQ(d.model, ft::DispersionModel::kSellmeier3);
    double n2 = 1.0;
    for (int i = 0; i < 3; ++i) n2 += double{d.b[i]} * l2 / (l2 - d.c[i]);
    return std::sqrt(n2);
  };
  struct Case {
    const char* preset;
    double n_e;
  };
  for (const Case& c : {Case{"ruby", sapphire}, Case{"sapphire", sapphire}, Case{"quartz", quartz},
                        Case{"amethyst", quartz}, Case{"citrine", quartz}, Case{"rutile", rutile}}) {
    const ft::Material m = ft::material_preset(c.preset).value();
    ASSERT_TRUE(m.extraordinary_dispersion.has_value()) << c.preset;
    EXPECT_NEAR(n_at(*m.extraordinary_dispersion), c.n_e, 2e-6) << c.preset;
    // Δ stays the published value at 589.3 nm: n_e − n_o from the two curves.
    EXPECT_NEAR(n_at(*m.extraordinary_dispersion) - n_at(m.dispersion), m.birefringence_delta, 1e-4)
        << c.preset;
  }
  EXPECT_NEAR(sapphire, 1.7600, 1e-4);  // the papers' n_e,D (docs/materials.md)
  EXPECT_NEAR(quartz, 1.5534, 1e-4);
  EXPECT_NEAR(rutile, 2.9087, 1e-4);
  EXPECT_FALSE(ft::material_preset("emerald")->extraordinary_dispersion.has_value());  // n_o + Δ
}

TEST(SceneJson, reads_sellmeier1_cauchy_and_preset_overrides) {
  ft::Scene s = parse_ok(R"({"material": {"dispersion": {"model": "sellmeier1", "b": 1.3, "c": 0.01}}})");
  EXPECT_EQ(s.material.dispersion.model, ft::DispersionModel::kSellmeier1);
  EXPECT_EQ(s.material.dispersion.b[0], 1.3f);
  EXPECT_EQ(s.material.dispersion.c[0], 0.01f);
  EXPECT_EQ(s.material.name, "custom");

  s = parse_ok(R"({"material": {"dispersion": {"model": "cauchy", "a": 1.5, "b": 0.004, "c": 0.0001}}})");
  EXPECT_EQ(s.material.dispersion.model, ft::DispersionModel::kCauchy);
  EXPECT_EQ(s.material.dispersion.b[0], 1.5f);
  EXPECT_EQ(s.material.dispersion.b[1], 0.004f);
  EXPECT_EQ(s.material.dispersion.b[2], 0.0001f);

  s = parse_ok(R"({"material": {"preset": "cz", "absorption_path_scale": 3,
                               "absorption": {"o_ray": [{"peak": 1, "centre": 450, "width": 20}]}}})");
  EXPECT_EQ(s.material.name, "Cubic zirconia");
  EXPECT_EQ(s.material.absorption_path_scale, 3.0f);
  EXPECT_EQ(s.material.o_ray.size(), 1u);
  EXPECT_EQ(s.material.dispersion.b[2], ft::material_preset("cz")->dispersion.b[2]);
}

TEST(SceneJson, round_trips_bit_exactly) {
  ft::Scene a = ft::builtin_diamond_scene();
  a.width = 97;
  a.yaw = 0.1f;
  a.pitch = 1.0f / 3.0f;
  a.exposure = 1e-7f;
  a.planes[5].finish = ft::Finish::kFrosted;
  a.material.o_ray.push_back({0.25f, 510.5f, 12.0f, ft::BandDomain::kWavelength});
  a.material.name = "tinted";
  for (bool names : {true, false}) {
    ft::SceneJsonOptions opt;
    opt.use_names = names;
    const std::string text = ft::scene_to_json(a, opt);
    auto b = ft::scene_from_json(text);
    ASSERT_TRUE(b.ok()) << b.status().what() << "\n" << text;
    EXPECT_EQ(ft::scene_to_json(*b, opt), text);
    EXPECT_EQ(std::memcmp(&b->pitch, &a.pitch, sizeof(float)), 0);
    EXPECT_EQ(b->exposure, a.exposure);
    ASSERT_EQ(b->planes.size(), a.planes.size());
    for (std::size_t i = 0; i < a.planes.size(); ++i) {
      EXPECT_EQ(std::memcmp(b->planes[i].normal, a.planes[i].normal, sizeof a.planes[i].normal), 0) << i;
      EXPECT_EQ(b->planes[i].d, a.planes[i].d);
      EXPECT_EQ(b->planes[i].finish, a.planes[i].finish);
    }
    EXPECT_EQ(b->material.o_ray.size(), 1u);
  }
  // With names on, the built-in scene is written compactly.
  const std::string builtin = ft::scene_to_json(ft::builtin_diamond_scene());
  EXPECT_MESSAGE_HAS(builtin, "\"planes\": \"round_brilliant\"");
  EXPECT_MESSAGE_HAS(builtin, "\"material\": \"diamond\"");
  // Every preset round-trips by name.
  for (const auto& name : ft::material_preset_names()) {
    ft::Scene s = ft::builtin_diamond_scene();
    s.material = *ft::material_preset(name);
    auto back = ft::scene_from_json(ft::scene_to_json(s));
    ASSERT_TRUE(back.ok()) << back.status().what();
    EXPECT_EQ(ft::scene_to_json(*back), ft::scene_to_json(s));
  }
}

TEST(SceneJsonErrors, malformed_json_reports_line_and_column) {
  const std::string msg = parse_error("{\n  \"width\": 512,\n  \"height\" 512\n}");
  EXPECT_MESSAGE_HAS(msg, "malformed JSON");
  EXPECT_MESSAGE_HAS(msg, "at line 3, column 14: ");  // the offending token, "512"
  EXPECT_MESSAGE_HAS(msg, "expected ':'");
  EXPECT_MESSAGE_HAS(parse_error("{\"width\": 512,}"), "at line 1, column 15: ");
  EXPECT_MESSAGE_HAS(parse_error(""), "malformed JSON");
  EXPECT_MESSAGE_HAS(parse_error("[1, 2]"), "top level");
}

TEST(SceneJsonErrors, a_farm_job_file_is_named_as_one) {
  const std::string msg =
      parse_error(R"({"name": "d", "scene": "diamond.json", "spp": 64, "unit_samples": 8})");
  EXPECT_MESSAGE_HAS(msg, "a farm job file, not a scene");
  EXPECT_MESSAGE_HAS(msg, "facetrace worker --job");
  // A scene field that happens to be called like a job's is still the scene's error.
  EXPECT_MESSAGE_HAS(parse_error(R"({"scene": "x"})"), "scene: unknown field");
}

TEST(SceneJsonErrors, nan_and_infinity_are_refused) {
  EXPECT_MESSAGE_HAS(parse_error(R"({"exposure": NaN})"), "NaN");
  EXPECT_MESSAGE_HAS(parse_error(R"({"exposure": Infinity})"), "Infinity");
  std::string msg = parse_error(R"({"exposure": "NaN"})");
  EXPECT_MESSAGE_HAS(msg, "exposure: must be a finite number");
  msg = parse_error(R"({"planes": [{"normal": [0, "-Infinity", 0], "d": -1}]})");
  EXPECT_MESSAGE_HAS(msg, "planes[0].normal[1]: must be a finite number");
  parse_error(R"({"distance": 1e999})");
  EXPECT_MESSAGE_HAS(parse_error(R"({"distance": 1e300})"), "distance: value");
}

TEST(SceneJsonErrors, wrong_types_name_the_field) {
  EXPECT_MESSAGE_HAS(parse_error(R"({"width": "512"})"), "width: expected a number, got a string");
  EXPECT_MESSAGE_HAS(parse_error(R"({"girdle_frosted": 1})"), "girdle_frosted: expected true or false");
  EXPECT_MESSAGE_HAS(parse_error(R"({"planes": 5})"), "planes: expected \"round_brilliant\" or an array");
  EXPECT_MESSAGE_HAS(parse_error(R"({"material": 5})"), "material: expected an object");
  EXPECT_MESSAGE_HAS(parse_error(R"({"lighting_preset": 5})"), "lighting_preset: expected a string");
  EXPECT_MESSAGE_HAS(
      parse_error(R"({"planes": [{"normal": [0, 1], "d": -1}, {"normal": [0, 1, 0], "d": -1}]})"),
      "planes[0].normal: expected 3 numbers, got 2");
  EXPECT_MESSAGE_HAS(
      parse_error(R"({"planes": [{"normal": [0, 1, 0], "d": -1}, {"normal": [0, 1, 0], "d": -1},
                                   {"normal": [0, 1, 0], "d": -1}, {"normal": "up", "d": -1}]})"),
      "planes[3].normal: expected an array of 3 numbers, got a string");
  EXPECT_MESSAGE_HAS(parse_error(R"({"planes": [{"normal": [0, 1, 0]}]})"), "planes[0].d: missing");
  EXPECT_MESSAGE_HAS(parse_error(R"({"material": {"dispersion": {"model": "sellmeier3", "b": [1, 2, 3, 4],
                                   "c": [0, 0, 0]}}})"),
                     "material.dispersion.b: expected 1 to 3 numbers, got 4");
  EXPECT_MESSAGE_HAS(parse_error(R"({"material": {"dispersion": {"b": [1]}}})"),
                     "material.dispersion.model: missing");
  EXPECT_MESSAGE_HAS(parse_error(R"({"material": {"absorption": {"o_ray": [{"peak": 1, "centre": 500}]}}})"),
                     "material.absorption.o_ray[0].width: missing");
  EXPECT_MESSAGE_HAS(parse_error(R"({"material": {"absorption": {"o_ray": [{"peak": 1, "centre": 500,
                                   "width": 0}]}}})"),
                     "material.absorption.o_ray[0].width: must be > 0");
}

TEST(SceneJsonErrors, unknown_fields_are_named_with_a_suggestion) {
  std::string msg = parse_error(R"({"widht": 512})");
  EXPECT_MESSAGE_HAS(msg, "widht: unknown field");
  EXPECT_MESSAGE_HAS(msg, "did you mean \"width\"");
  msg = parse_error(R"({"material": {"dispresion": {}}})");
  EXPECT_MESSAGE_HAS(msg, "material.dispresion: unknown field");
  msg = parse_error(R"({"planes": [{"normal": [0, 1, 0], "d": -1, "finsh": "frosted"}]})");
  EXPECT_MESSAGE_HAS(msg, "planes[0].finsh: unknown field");
  msg = parse_error(R"({"material": {"absorption": {"o_ray": [{"peak": 1, "center": 500, "width": 9}]}}})");
  EXPECT_MESSAGE_HAS(msg, "material.absorption.o_ray[0].center: unknown field (did you mean \"centre\"?)");
  EXPECT_MESSAGE_HAS(parse_error(R"({"width": 512, "width": 256})"), "width: field given more than once");
}

TEST(SceneJsonErrors, unknown_enum_names_list_the_choices) {
  std::string msg = parse_error(R"({"lighting_preset": "LightTnt"})");
  EXPECT_MESSAGE_HAS(msg, "lighting_preset: unknown value \"LightTnt\" (did you mean \"LightTent\"?)");
  EXPECT_MESSAGE_HAS(msg, "IlluminantA");
  EXPECT_MESSAGE_HAS(parse_error(R"({"environment": "space"})"), "environment: unknown value \"space\"");
  EXPECT_MESSAGE_HAS(parse_error(R"({"environment": "hdr"})"), "environment: an HDR map is an object");
  EXPECT_MESSAGE_HAS(parse_error(R"({"material": "unobtainium"})"), "material: unknown material preset");
  EXPECT_MESSAGE_HAS(parse_error(R"({"material": {"preset": "glass"}})"),
                     "material.preset: unknown material preset");
  EXPECT_MESSAGE_HAS(parse_error(R"({"planes": "princess"})"), "planes: unknown plane set \"princess\"");
  EXPECT_MESSAGE_HAS(parse_error(R"({"planes": [{"normal": [0, 1, 0], "d": -1, "finish": "matte"}]})"),
                     "planes[0].finish: unknown value \"matte\"");
  EXPECT_MESSAGE_HAS(parse_error(R"({"material": {"dispersion": {"model": "sellmeier2", "b": 1, "c": 1}}})"),
                     "material.dispersion.model: unknown value");
  EXPECT_MESSAGE_HAS(parse_error(R"({"material": {"crystal_system": "cubical"}})"),
                     "material.crystal_system: unknown value \"cubical\" (did you mean \"cubic\"?)");
}

TEST(SceneJsonErrors, negative_or_fractional_sizes_and_ranges_are_refused) {
  EXPECT_MESSAGE_HAS(parse_error(R"({"width": -5})"), "width: must not be negative, got -5");
  EXPECT_MESSAGE_HAS(parse_error(R"({"height": -1})"), "height: must not be negative");
  EXPECT_MESSAGE_HAS(parse_error(R"({"width": 0})"), "width: must be in [1, 7680], got 0");
  EXPECT_MESSAGE_HAS(parse_error(R"({"height": 5000})"), "height: must be in [1, 4320]");
  EXPECT_MESSAGE_HAS(parse_error(R"({"width": 512.5})"), "width: expected a whole number");
  EXPECT_MESSAGE_HAS(parse_error(R"({"max_bounces": 129})"), "max_bounces: must be in [1, 128], got 129");
  EXPECT_MESSAGE_HAS(parse_error(R"({"material": {"absorption_path_scale": -1}})"),
                     "material.absorption_path_scale: must not be negative");
  EXPECT_MESSAGE_HAS(parse_error(R"({"version": 2})"), "version: unsupported");
}

TEST(SceneJsonErrors, scene_validation_failures_are_reported) {
  // An open plane set (a single plane) is not a closed convex polyhedron: validate_scene refuses it.
  auto r = ft::scene_from_json(R"({"planes": [{"normal": [0, 1, 0], "d": -1}]})", "open.json");
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_MESSAGE_HAS(r.status().what(), "open.json");
  EXPECT_MESSAGE_HAS(r.status().what(), "planes");
}

TEST(SceneJsonFiles, missing_file_is_an_io_error_naming_it) {
  auto r = ft::load_scene_file("/nonexistent/facetrace/scene.json");
  EXPECT_EQ(r.status().code(), Code::kIo);
  EXPECT_MESSAGE_HAS(r.status().what(), "/nonexistent/facetrace/scene.json");
}

TEST(SceneJsonFiles, a_directory_is_an_io_error_and_an_oversized_file_is_refused_unread) {
  const auto dir = std::filesystem::temp_directory_path();
  EXPECT_EQ(ft::load_scene_file(dir.string()).status().code(), Code::kIo);
  // A sparse 64 MiB + 1 file: over the scene-file cap, refused from its size before any byte is read.
  const std::string big = (dir / "ft_scene_too_large.json").string();
  { std::ofstream(big, std::ios::binary).put('{'); }
  std::filesystem::resize_file(big, (std::uint64_t{64} << 20) + 1);
  auto r = ft::load_scene_file(big);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_MESSAGE_HAS(r.status().what(), big);
  EXPECT_MESSAGE_HAS(r.status().what(), "67108865 bytes exceeds the limit of 67108864 bytes");
  std::filesystem::remove(big);
}

TEST(SceneJsonFiles, examples_parse_and_save_round_trips) {
  for (const char* name : {"diamond.json", "furnace.json"}) {
    const std::string path = std::string(FT_SOURCE_DIR) + "/examples/" + name;
    auto s = ft::load_scene_file(path);
    ASSERT_TRUE(s.ok()) << s.status().what();
    const std::string out =
        (std::filesystem::temp_directory_path() / ("ft_roundtrip_" + std::string(name))).string();
    ASSERT_TRUE(ft::save_scene_file(*s, out).ok());
    auto back = ft::load_scene_file(out);
    ASSERT_TRUE(back.ok()) << back.status().what();
    EXPECT_EQ(ft::scene_to_json(*back), ft::scene_to_json(*s));
    std::filesystem::remove(out);
  }
  auto furnace = ft::load_scene_file(std::string(FT_SOURCE_DIR) + "/examples/furnace.json");
  EXPECT_EQ(furnace->environment, ft::EnvironmentKind::kUniform);
  EXPECT_EQ(furnace->planes.size(), 74u);
  EXPECT_TRUE(furnace->material.o_ray.empty()) << "the furnace stone must not absorb";
}

// `"environment": {"hdr": …, "sha256": …}` (docs/scene-format.md): read and checked with the scene, a relative
// path resolved against the scene file's folder; the scene then needs Tier 2, and every bad map is named.
TEST(SceneJsonFiles, an_hdr_environment_is_read_and_checked_with_the_scene) {
  namespace fs = std::filesystem;
  const std::string sha = "1ee8846551d9f2df56fae3b7ff7f74750760a32b3d2c740c3d24755b5730ba85";
  const fs::path dir = fs::temp_directory_path() / ("ft_hdr_scene_" + std::to_string(::getpid()));
  fs::create_directories(dir / "maps");
  fs::copy_file(std::string(FT_SOURCE_DIR) + "/examples/maps/studio_small.hdr", dir / "maps" / "studio.hdr",
                fs::copy_options::overwrite_existing);
  auto write_scene = [&](const std::string& env) {
    const std::string path = (dir / "scene.json").string();
    std::ofstream(path) << R"({"material": "emerald", "environment": )" << env << "}";
    return ft::load_scene_file(path);
  };
  auto s = write_scene(R"({"hdr": "maps/studio.hdr", "sha256": ")" + sha + "\"}");
  ASSERT_TRUE(s.ok()) << s.status().what();
  EXPECT_EQ(s->environment, ft::EnvironmentKind::kHdr);
  EXPECT_EQ(s->environment_map, (dir / "maps" / "studio.hdr").string());
  EXPECT_EQ(s->environment_map_sha256, sha);
  const ft::TierFeatures t = ft::tier_features(*s);
  EXPECT_EQ(t.tier, 2);
  EXPECT_TRUE(t.hdr_environment);
  EXPECT_TRUE(t.uniaxial);                            // emerald
  EXPECT_TRUE(t.status().ok()) << t.status().what();  // an HDR map and a uniaxial stone: both tracers
  EXPECT_EQ(t.features.at(0), "HDR environment (Tier 2)");
  auto back = ft::scene_from_json(ft::scene_to_json(*s));  // the resolved path reads back from anywhere
  ASSERT_TRUE(back.ok()) << back.status().what();
  EXPECT_EQ(ft::scene_to_json(*back), ft::scene_to_json(*s));

  auto error = [&](const std::string& env) {
    auto r = write_scene(env);
    EXPECT_FALSE(r.ok()) << env;
    return r.ok() ? std::string() : r.status().what();
  };
  EXPECT_MESSAGE_HAS(error(R"({"hdr": "maps/studio.hdr"})"), "environment.sha256: missing");
  EXPECT_MESSAGE_HAS(error(R"({"sha256": ")" + sha + "\"}"), "environment.hdr: missing");
  EXPECT_MESSAGE_HAS(error(R"({"hdr": "maps/studio.hdr", "sha256": "abc"})"), "expected 64 hex digits");
  const std::string wrong = error(R"({"hdr": "maps/studio.hdr", "sha256": ")" + std::string(64, '0') + "\"}");
  EXPECT_MESSAGE_HAS(wrong, "environment.hdr");
  EXPECT_MESSAGE_HAS(wrong, "sha256");
  EXPECT_MESSAGE_HAS(error(R"({"hdr": "maps/none.hdr", "sha256": ")" + sha + "\"}"), "none.hdr");
  EXPECT_MESSAGE_HAS(error(R"({"hdr": "maps/studio.hdr", "sha256": ")" + sha + R"(", "gamma": 2})"), "gamma");
  { std::ofstream(dir / "maps" / "bad.hdr") << "#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y 40000 +X 40000\n"; }
  const std::string bad_sha =
      "7c31fa902bad8b3edefd5852f4d2cbf711a0db171a93f426cfa5faefa5eb946a";  // its sha256
  const std::string absurd = error(R"({"hdr": "maps/bad.hdr", "sha256": ")" + bad_sha + "\"}");
  EXPECT_MESSAGE_HAS(absurd, "environment.hdr");
  EXPECT_MESSAGE_HAS(absurd, "each side must be in [1, 32768]");
  fs::remove_all(dir);
}

TEST(SceneJsonFiles, diamond_example_is_the_builtin_scene) {
  auto s = ft::load_scene_file(std::string(FT_SOURCE_DIR) + "/examples/diamond.json");
  ASSERT_TRUE(s.ok()) << s.status().what();
  EXPECT_EQ(ft::scene_to_json(*s), ft::scene_to_json(ft::builtin_diamond_scene()))
      << "examples/diamond.json drifted from builtin_diamond_scene(); regenerate it with "
         "`facetrace render --save-scene examples/diamond.json` (and restore its description)";
}
