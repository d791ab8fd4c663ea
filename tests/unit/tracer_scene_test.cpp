/// @file
/// Scene helpers: the standard round brilliant (docs/design/tracer.md §13), the built-in scene, every validation error
/// (each names its field), and tiers (§1).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "facetrace/tracer/cpu_tracer.h"
#include "facetrace/tracer/scene.h"

namespace ft = facetrace::tracer;
using facetrace::Code;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

/// Applies `edit` to the built-in scene and expects kInvalidArgument whose message names `field`.
void expect_invalid(const std::string& field, const std::function<void(ft::Scene&)>& edit) {
  ft::Scene s = ft::builtin_diamond_scene();
  edit(s);
  const facetrace::Status st = ft::validate_scene(s);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << field;
  EXPECT_NE(st.what().find(field), std::string::npos)
      << "message '" << st.what() << "' should name " << field;
}

}  // namespace

TEST(RoundBrilliant, has_the_74_planes_of_the_table) {
  const auto planes = ft::round_brilliant_planes();
  ASSERT_EQ(planes.size(), 74u);
  int crown = 0, pavilion = 0, girdle = 0;
  for (const ft::Plane& p : planes) {
    const double len =
        std::sqrt(p.normal[0] * p.normal[0] + p.normal[1] * p.normal[1] + p.normal[2] * p.normal[2]);
    EXPECT_NEAR(len, 1.0, 1e-6);
    EXPECT_LT(p.d, 0.0f);
    (p.normal[1] > 1e-3f ? crown : p.normal[1] < -1e-3f ? pavilion : girdle)++;
  }
  EXPECT_EQ(crown, 33);     // table + 8 stars + 8 mains + 16 upper girdle
  EXPECT_EQ(pavilion, 25);  // 8 mains + 16 lower girdle + culet
  EXPECT_EQ(girdle, 16);
  EXPECT_EQ(planes[0].normal[1], 1.0f);
  EXPECT_FLOAT_EQ(planes[0].d, -0.32f);
  // Star at gear 6: φ = π/8, θ = 15°.
  EXPECT_NEAR(planes[1].normal[0], std::sin(15 * M_PI / 180) * std::cos(M_PI / 8), 1e-6);
  EXPECT_NEAR(planes[1].normal[1], std::cos(15 * M_PI / 180), 1e-6);
  EXPECT_FLOAT_EQ(planes[1].d, -0.45f);
  // First upper girdle facet at gear 95 (12m − 1 for m = 0).
  EXPECT_NEAR(planes[17].normal[2], std::sin(41 * M_PI / 180) * std::sin(2 * M_PI * 95 / 96), 1e-6);
  EXPECT_FLOAT_EQ(planes[17].d, -0.67f);
  EXPECT_EQ(planes[73].normal[1], -1.0f);
  EXPECT_FLOAT_EQ(planes[73].d, -0.88f);
  EXPECT_FLOAT_EQ(planes[49].d, -0.67f);  // first pavilion main
  EXPECT_LT(planes[49].normal[1], 0.0f);
}

TEST(BuiltinScene, is_valid_tier_one_diamond_in_light_tent) {
  const ft::Scene s = ft::builtin_diamond_scene();
  EXPECT_TRUE(ft::validate_scene(s).ok()) << ft::validate_scene(s).what();
  EXPECT_EQ(ft::tier_features(s).tier, 1);
  EXPECT_EQ(s.width, 512u);
  EXPECT_EQ(s.height, 512u);
  EXPECT_EQ(s.max_bounces, 12u);
  EXPECT_EQ(s.lighting_preset, ft::LightingPreset::kLightTent);
  EXPECT_EQ(s.material.name, "Diamond");
  EXPECT_EQ(s.planes.size(), 74u);
}

TEST(ValidateScene, accepts_an_empty_furnace_scene) {
  ft::Scene s;
  s.environment = ft::EnvironmentKind::kUniform;
  s.material = ft::diamond_material();
  EXPECT_TRUE(ft::validate_scene(s).ok());
}

TEST(ValidateScene, rejects_bad_image_sizes) {
  expect_invalid("width", [](ft::Scene& s) { s.width = 0; });
  expect_invalid("width", [](ft::Scene& s) { s.width = 7681; });
  expect_invalid("height", [](ft::Scene& s) { s.height = 0; });
  expect_invalid("height", [](ft::Scene& s) { s.height = 4321; });
}

TEST(ValidateScene, rejects_non_finite_numbers) {
  expect_invalid("yaw", [](ft::Scene& s) { s.yaw = kNaN; });
  expect_invalid("pitch", [](ft::Scene& s) { s.pitch = kInf; });
  expect_invalid("distance", [](ft::Scene& s) { s.distance = kNaN; });
  expect_invalid("light_yaw", [](ft::Scene& s) { s.light_yaw = kNaN; });
  expect_invalid("light_pitch", [](ft::Scene& s) { s.light_pitch = -kInf; });
  expect_invalid("exposure", [](ft::Scene& s) { s.exposure = kNaN; });
  expect_invalid("backdrop", [](ft::Scene& s) { s.backdrop = kInf; });
  expect_invalid("surface_glare", [](ft::Scene& s) { s.surface_glare = kNaN; });
  expect_invalid("head_shadow_deg", [](ft::Scene& s) { s.head_shadow_deg = kNaN; });
  expect_invalid("material.dispersion.b[1]", [](ft::Scene& s) { s.material.dispersion.b[1] = kNaN; });
  expect_invalid("planes[3].normal", [](ft::Scene& s) { s.planes[3].normal[2] = kNaN; });
  expect_invalid("planes[5].d", [](ft::Scene& s) { s.planes[5].d = -kInf; });
  expect_invalid("material.o_ray[0].peak", [](ft::Scene& s) {
    s.material.o_ray.push_back({kNaN, 500, 10, {}});
  });
  expect_invalid("material.absorption_path_scale",
                 [](ft::Scene& s) { s.material.absorption_path_scale = kNaN; });
}

TEST(ValidateScene, rejects_out_of_range_values) {
  expect_invalid("distance", [](ft::Scene& s) { s.distance = 0.0f; });
  expect_invalid("distance", [](ft::Scene& s) { s.distance = -2.0f; });
  expect_invalid("distance", [](ft::Scene& s) { s.distance = 1e6f; });
  expect_invalid("distance", [](ft::Scene& s) { s.distance = 0.2f; });  // camera inside the stone
  expect_invalid("max_bounces", [](ft::Scene& s) { s.max_bounces = 129; });
  expect_invalid("max_bounces", [](ft::Scene& s) { s.max_bounces = 0; });
  expect_invalid("exposure", [](ft::Scene& s) { s.exposure = -1.0f; });
  expect_invalid("backdrop", [](ft::Scene& s) { s.backdrop = -0.1f; });
  expect_invalid("surface_glare", [](ft::Scene& s) { s.surface_glare = 1.5f; });
  expect_invalid("surface_glare", [](ft::Scene& s) { s.surface_glare = -0.01f; });
  expect_invalid("head_shadow_deg", [](ft::Scene& s) { s.head_shadow_deg = 95.0f; });
  expect_invalid("lighting_preset",
                 [](ft::Scene& s) { s.lighting_preset = static_cast<ft::LightingPreset>(15); });
  expect_invalid("environment", [](ft::Scene& s) { s.environment = static_cast<ft::EnvironmentKind>(7); });
  expect_invalid("material.scattering_sigma_s", [](ft::Scene& s) { s.material.scattering_sigma_s = -1.0f; });
  expect_invalid("material.scattering_g", [](ft::Scene& s) { s.material.scattering_g = 1.0f; });
  expect_invalid("material.edge_rounding_radius",
                 [](ft::Scene& s) { s.material.edge_rounding_radius = -0.1f; });
  expect_invalid("material.edge_rounding_radius",
                 [](ft::Scene& s) { s.material.edge_rounding_radius = kNaN; });
  expect_invalid("material.edge_rounding_radius",
                 [](ft::Scene& s) { s.material.edge_rounding_radius = kInf; });
}

TEST(ValidateScene, bounds_the_edge_rounding_radius_by_the_stone) {
  // docs/design/tracer.md §4.1: at most a quarter of the distance from the origin to the nearest facet plane
  // (the brilliant's table, 0.32 away): 0.08.
  ft::Scene s = ft::builtin_diamond_scene();
  for (float r : {0.0f, 0.02f, 0.08f}) {
    s.material.edge_rounding_radius = r;
    EXPECT_TRUE(ft::validate_scene(s).ok()) << r;
  }
  s.material.edge_rounding_radius = 0.081f;
  const facetrace::Status st = ft::validate_scene(s);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_EQ(
      st.what(),
      "material.edge_rounding_radius: must be in [0, 0.08], a quarter of the stone's inradius 0.32 (the "
      "distance from the origin to its nearest facet plane) (got 0.0810000002)");
  // The bound follows the stone: the same radius is fine on a stone twice the size.
  for (ft::Plane& p : s.planes) p.d *= 2.0f;
  s.distance *= 2.0f;
  EXPECT_TRUE(ft::validate_scene(s).ok()) << ft::validate_scene(s).what();
}

TEST(ValidateScene, rejects_absurd_refractive_indices) {
  expect_invalid("material.dispersion", [](ft::Scene& s) {
    s.material.dispersion = {ft::DispersionModel::kCauchy, {7.0f, 0, 0}, {0, 0, 0}};
  });
  expect_invalid("material.dispersion", [](ft::Scene& s) {
    s.material.dispersion = {ft::DispersionModel::kCauchy, {0.5f, 0, 0}, {0, 0, 0}};
  });
  expect_invalid("material.dispersion", [](ft::Scene& s) {  // pole inside the visible range
    s.material.dispersion = {ft::DispersionModel::kSellmeier1, {1.0f, 0, 0}, {0.36f, 0, 0}};
  });
  expect_invalid("material.dispersion.model",
                 [](ft::Scene& s) { s.material.dispersion.model = static_cast<ft::DispersionModel>(9); });
  // Checked over the whole 380-780 nm range, not at 380, 589.3 and 780 nm only:
  // a weak Sellmeier pole at 450 nm beside a strong term: n ≈ 1.42–1.44 at the three old points and at every 1 nm
  // (449 nm: 1.425, 451 nm: 1.440), past any bound only within a fraction of a nanometre of 450 nm
  expect_invalid("pole at 450", [](ft::Scene& s) {
    s.material.dispersion = {ft::DispersionModel::kSellmeier3, {1.0f, 1e-4f, 0}, {0.01f, 0.2025f, 0}};
  });
  // a Cauchy curve that dips below 1 between 380 and 589.3 nm: n = 3.4 − x + 0.1·x² (x = 1/λ² in µm⁻²) is 1.27 at
  // 380 nm, 1.35 at 589.3 nm and 2.03 at 780 nm, but 0.9 at its minimum, x = 5 (447.2 nm)
  expect_invalid("material.dispersion", [](ft::Scene& s) {
    s.material.dispersion = {ft::DispersionModel::kCauchy, {3.4f, -1.0f, 0.1f}, {0, 0, 0}};
  });
  ft::Scene ok = ft::builtin_diamond_scene();
  ok.material.dispersion = {ft::DispersionModel::kCauchy, {1.0f, 0, 0}, {0, 0, 0}};
  EXPECT_TRUE(ft::validate_scene(ok).ok()) << "n = 1 is inside [1, 6]";
}

TEST(ValidateScene, rejects_bad_absorption_bands) {
  expect_invalid("material.o_ray", [](ft::Scene& s) { s.material.o_ray.assign(9, ft::AbsorptionBand{}); });
  expect_invalid("material.o_ray[0].width", [](ft::Scene& s) {
    s.material.o_ray.push_back({1, 500, 0, {}});
  });
  expect_invalid("material.o_ray[0].peak", [](ft::Scene& s) {
    s.material.o_ray.push_back({-1, 500, 10, {}});
  });
  expect_invalid("material.e_ray[0].centre", [](ft::Scene& s) {
    s.material.e_ray.push_back({1, kNaN, 10, {}});
  });
  expect_invalid("material.absorption_path_scale",
                 [](ft::Scene& s) { s.material.absorption_path_scale = -1.0f; });
}

TEST(ValidateScene, rejects_bad_planes) {
  expect_invalid("planes", [](ft::Scene& s) { s.planes.resize(129, s.planes[0]); });
  expect_invalid("planes[2].normal", [](ft::Scene& s) { s.planes[2].normal[0] *= 2.0f; });
  expect_invalid("planes[0].d", [](ft::Scene& s) { s.planes[0].d = 0.0f; });
  expect_invalid("planes[4].d", [](ft::Scene& s) { s.planes[4].d = 0.3f; });
  // Open: no pavilion or culet, so the stone extends to y → −∞.
  expect_invalid("planes", [](ft::Scene& s) { s.planes.resize(49); });
  // Open: only the girdle (all normals in one plane).
  expect_invalid("planes", [](ft::Scene& s) {
    std::vector<ft::Plane> g(s.planes.begin() + 33, s.planes.begin() + 49);
    s.planes = g;
  });
  // Fewer than four planes can never be bounded: said so, with no direction (it was uninitialised memory).
  expect_invalid("at least 4 planes", [](ft::Scene& s) { s.planes.resize(3); });
  {
    ft::Scene three = ft::builtin_diamond_scene();
    three.planes.resize(3);
    const std::string what = ft::validate_scene(three).what();
    EXPECT_NE(what.find("(got 3)"), std::string::npos) << what;
    EXPECT_EQ(what.find("open along"), std::string::npos) << what;
  }
  // A tetrahedron is fine.
  ft::Scene tet = ft::builtin_diamond_scene();
  const float k = 1.0f / std::sqrt(3.0f);
  tet.planes = {
      {{k, k, k}, -0.5f, {}}, {{k, -k, -k}, -0.5f, {}}, {{-k, k, -k}, -0.5f, {}}, {{-k, -k, k}, -0.5f, {}}};
  EXPECT_TRUE(ft::validate_scene(tet).ok()) << ft::validate_scene(tet).what();
  // Remove one face of the tetrahedron: open.
  tet.planes.pop_back();
  tet.planes.push_back(tet.planes[0]);
  EXPECT_EQ(ft::validate_scene(tet).code(), Code::kInvalidArgument);
}

TEST(SceneTier, classifies_features) {
  ft::Scene s = ft::builtin_diamond_scene();
  EXPECT_EQ(ft::tier_features(s).tier, 1);
  for (auto p :
       {ft::LightingPreset::kDaylight, ft::LightingPreset::kRingLights, ft::LightingPreset::kIlluminantA}) {
    s.lighting_preset = p;
    EXPECT_EQ(ft::tier_features(s).tier, 1);
  }
  s.lighting_preset = ft::LightingPreset::kUvLamp365;
  EXPECT_EQ(ft::tier_features(s).tier, 2);
  s = ft::builtin_diamond_scene();
  s.environment = ft::EnvironmentKind::kHdr;
  EXPECT_EQ(ft::tier_features(s).tier, 2);
  s = ft::builtin_diamond_scene();
  s.material.crystal_system = ft::CrystalSystem::kTrigonal;
  s.material.optical_character = ft::OpticalCharacter::kUniaxialNeg;
  s.material.birefringence_delta = -0.008f;
  EXPECT_EQ(ft::tier_features(s).tier, 2);
  s.material.birefringence_delta = 5e-5f;  // near-isotropic stays Tier 1
  EXPECT_EQ(ft::tier_features(s).tier, 1);
  s.material.optical_character = ft::OpticalCharacter::kBiaxialPos;
  s.material.birefringence_delta = 0.01f;
  EXPECT_EQ(ft::tier_features(s).tier, 3);
  s = ft::builtin_diamond_scene();
  s.material.fluorescence = true;
  EXPECT_EQ(ft::tier_features(s).tier, 3);
  s = ft::builtin_diamond_scene();
  s.tools = true;
  EXPECT_EQ(ft::tier_features(s).tier, 3);
  s = ft::builtin_diamond_scene();
  s.material.scattering_sigma_s = 1.5f;
  EXPECT_EQ(ft::tier_features(s).tier, 2);
}

TEST(SceneTier, uniaxial_stones_and_inclusions_are_traced_by_both_tracers_and_biaxial_ones_refused) {
  ft::Scene s = ft::builtin_diamond_scene();
  s.material = ft::material_preset("ruby").value();
  s.material.scattering_sigma_s = 1.5f;
  s.material.scattering_g = 0.3f;
  ft::TierFeatures t = ft::tier_features(s);
  EXPECT_EQ(t.tier, 2);
  EXPECT_TRUE(t.uniaxial);
  EXPECT_EQ(t.features,
            (std::vector<std::string>{"uniaxial birefringence (material.birefringence_delta, Tier 2)",
                                      "inclusions (material.scattering_sigma_s, Tier 2)"}));
  EXPECT_TRUE(t.status().ok()) << t.status().what();
  EXPECT_TRUE(t.gpu_status().ok()) << t.gpu_status().what();
  s.material = ft::material_preset("tanzanite").value();
  t = ft::tier_features(s);
  EXPECT_EQ(t.tier, 3);
  EXPECT_FALSE(t.uniaxial);
  EXPECT_EQ(t.status().code(), Code::kNotSupported);
  EXPECT_NE(t.gpu_status().what().find("biaxial birefringence"), std::string::npos) << t.gpu_status().what();
}

TEST(SceneTier, names_every_feature_beyond_tier_one_in_one_not_supported_status) {
  ft::Scene s = ft::builtin_diamond_scene();
  EXPECT_TRUE(ft::tier_features(s).features.empty());
  EXPECT_TRUE(ft::tier_features(s).status().ok());
  s.lighting_preset = ft::LightingPreset::kUvLamp365;
  s.material.edge_rounding_radius = 0.01f;
  s.material.fluorescence = true;
  const ft::TierFeatures t = ft::tier_features(s);
  EXPECT_EQ(t.tier, 3);
  EXPECT_EQ(t.features,
            (std::vector<std::string>{
                "lighting preset UvLamp365 (Tier 2; a UV lamp needs fluorescence, Tier 3)",
                "edge rounding (material.edge_rounding_radius, Tier 2)", "fluorescence (Tier 3)"}));
  EXPECT_EQ(t.status().code(), Code::kNotSupported);
  EXPECT_EQ(t.status().what(),
            "the scene needs lighting preset UvLamp365 (Tier 2; a UV lamp needs fluorescence, Tier 3), "
            "fluorescence (Tier 3); the CPU tracer implements Tier 1, the Tier 2 lighting presets but the UV "
            "lamps, HDR environments, uniaxial stones, inclusions and edge rounding");
  // The CPU tracer refuses it with the same status.
  ft::Film f(s.width, s.height);
  EXPECT_EQ(ft::cpu_accumulate(s, 0, 1, f).what(), t.status().what());
}
