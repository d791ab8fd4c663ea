/// @file
/// The tracer's scene description (docs/design/tracer.md §2–§6): fully resolved, validated before use.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "facetrace/core/status.h"
#include "facetrace/tracer/env_map.h"

namespace facetrace::tracer {

/// Lighting presets; the numeric value is the wire index (docs/design/tracer.md §2). Tier 1: Daylight, RingLights,
/// LightTent, IlluminantA; the others are Tier 2 (docs/design/tracer.md §6.2), the UV lamps refused (fluorescence).
enum class LightingPreset : std::uint8_t {
  kDaylight = 0,
  kIncandescent = 1,
  kRingLights = 2,
  kDarkSpotlight = 3,
  kIsoHemisphere = 4,
  kLightTent = 5,
  kDaylightDome = 6,
  kUvLamp365 = 7,
  kUvLamp395 = 8,
  kDaylightSun = 9,
  kAset = 10,
  kShopLights = 11,
  kWindowDaylight = 12,
  kWhiteTray = 13,
  kIlluminantA = 14,
};

/// Environment kinds (docs/design/tracer.md §6). kFurnace is kUniform used with no planes.
enum class EnvironmentKind : std::uint8_t { kStudio = 0, kUniform = 1, kHdr = 2 };

/// Dispersion formulas (docs/design/tracer.md §3), λ in µm. Sellmeier1 uses b[0], c[0]; Cauchy uses a=b[0], b=b[1], c=b[2].
enum class DispersionModel : std::uint8_t { kSellmeier1 = 0, kSellmeier3 = 1, kCauchy = 2 };

struct Dispersion {
  DispersionModel model = DispersionModel::kSellmeier3;
  float b[3] = {0, 0, 0};
  float c[3] = {0, 0, 0};
};

enum class BandDomain : std::uint8_t { kWavelength = 0, kWavenumber = 1 };

/// One Gaussian absorption band: α(λ) = peak·exp(−½((x−centre)/width)²), per model unit, where x = λ in nm
/// (wavelength domain) or x = 1e7/λ in cm⁻¹ (wavenumber domain; centre and width then in cm⁻¹) (docs/design/tracer.md §3).
struct AbsorptionBand {
  float peak = 0;
  float centre = 0;
  float width = 1;
  BandDomain domain = BandDomain::kWavelength;
  bool operator==(const AbsorptionBand&) const = default;  ///< field by field, exactly
};

enum class OpticalCharacter : std::uint8_t {
  kIsotropic = 0,
  kUniaxialPos,
  kUniaxialNeg,
  kBiaxialPos,
  kBiaxialNeg
};
enum class CrystalSystem : std::uint8_t {
  kCubic = 0,
  kTetragonal,
  kHexagonal,
  kTrigonal,
  kOrthorhombic,
  kMonoclinic,
  kTriclinic,
  kAmorphous
};

/// A gem material, fully resolved (never a name lookup at trace time).
struct Material {
  std::string name;
  Dispersion dispersion;
  std::vector<AbsorptionBand> o_ray;     ///< used by isotropic materials
  std::vector<AbsorptionBand> e_ray;     ///< Tier 2
  std::vector<AbsorptionBand> beta_ray;  ///< Tier 3
  float absorption_path_scale = 1.0f;
  OpticalCharacter optical_character = OpticalCharacter::kIsotropic;
  CrystalSystem crystal_system = CrystalSystem::kCubic;
  float birefringence_delta = 0.0f;  ///< Tier 2/3; anisotropic only when non-cubic and |Δ| > 1e-4
  /// Tier 2: the extraordinary curve n_e(λ) of a uniaxial stone (docs/design/tracer.md §3, §7.7); absent, the
  /// tracer uses n_e(λ) = n_o(λ) + Δ. Δ still decides whether the stone is anisotropic.
  std::optional<Dispersion> extraordinary_dispersion;
  /// Tier 2: the optic axis in the stone's frame (any length but zero; the tracer normalises it).
  float c_axis[3] = {0.0f, 1.0f, 0.0f};
  float scattering_sigma_s = 0.0f;  ///< Tier 2 (HG inclusions)
  float scattering_g = 0.0f;
  float edge_rounding_radius = 0.0f;  ///< Tier 2
  bool fluorescence = false;          ///< Tier 3
};

/// Diamond (docs/design/tracer.md §3): Sellmeier3 b = [4.3356, 0.3306, 0], c = [0.011236, 0.030625, 1.0].
Material diamond_material();

// ---- The preset catalogue (src/tracer/scene/materials.cpp) ---------------------------------------------

/// Names of the built-in material presets (the gem catalogue, docs/materials.md), e.g. "diamond", "moissanite",
/// "garnet", "sapphire", "sapphire_iso", "tanzanite". Uniaxial stones need Tier 2 and biaxial ones Tier 3.
std::vector<std::string> material_preset_names();

/// A built-in material by name (case-insensitive; "cz" is an alias of "cubic_zirconia").
/// Errors: kInvalidArgument naming the unknown preset and listing the known ones.
Expected<Material> material_preset(std::string_view name);

/// Canonical name of a lighting preset, e.g. "LightTent" (docs/design/tracer.md §2).
std::string_view lighting_preset_name(LightingPreset preset);

/// Looks a lighting preset up by name: case-insensitive, '_' / '-' / ' ' ignored ("light_tent" =
/// "LightTent"). Errors: kInvalidArgument listing the 15 names.
Expected<LightingPreset> lighting_preset_from_name(std::string_view name);

/// True for the Tier 1 presets (Daylight, RingLights, LightTent, IlluminantA; docs/design/tracer.md §1); tier_features
/// uses it.
bool lighting_preset_is_tier1(LightingPreset preset);

enum class Finish : std::uint8_t { kPolished = 0, kFrosted = 1 };

/// A facet plane {x : n·x + d ≤ 0}; n is a unit outward normal, d < 0.
struct Plane {
  float normal[3] = {0, 1, 0};
  float d = -1;
  Finish finish = Finish::kPolished;
};

/// A complete scene. A scene carries no sample count: a request is (scene, first_sample, samples).
struct Scene {
  std::uint32_t width = 512;
  std::uint32_t height = 512;
  float yaw = 0.3f;           ///< rad
  float pitch = 0.7f;         ///< rad, clamped to |p| ≤ 89.9° by the camera
  float distance = 3.6f;      ///< model units (girdle radius ≈ 1); in (0, 1e4]
  float light_yaw = 0.85f;    ///< rad
  float light_pitch = 0.95f;  ///< rad
  float exposure = 1.0f;
  std::uint32_t max_bounces = 12;  ///< ≤ 128
  LightingPreset lighting_preset = LightingPreset::kLightTent;
  EnvironmentKind environment = EnvironmentKind::kStudio;
  /// kHdr (Tier 2): the equirectangular map's file (a relative path in a scene file is resolved against the
  /// file's folder) and its sha256 (64 hex digits); the scene reader checks both (tracer/env_map.h).
  std::string environment_map;
  std::string environment_map_sha256;
  /// kHdr: the decoded map and its sampling tables (docs/design/tracer.md §6.1), read once by the scene reader
  /// (or load_environment_light) and shared by every copy of the scene; validate_scene requires it for kHdr.
  std::shared_ptr<const EnvLight> environment_light;
  Material material;
  std::vector<Plane> planes;
  bool girdle_frosted = false;  ///< re-derives Frosted for |n_y| ≤ 1e-3
  float backdrop = 0.02f;       ///< radiance for camera rays that miss, × the illuminant spectrum
  float surface_glare = 1.0f;   ///< 0..1
  float head_shadow_deg = 16.0f;
  bool tools = false;  ///< Tier 3, CPU only
};

/// Planes of the standard round brilliant (docs/design/tracer.md §13): 74 planes.
std::vector<Plane> round_brilliant_planes();

/// The built-in scene: round brilliant in diamond, LightTent, 512×512, max_bounces 12.
Scene builtin_diamond_scene();

/// Checks every field (sizes, finiteness, ranges, convexity/closure of the planes, indices in [1, 6]);
/// the error names the field and the reason. Returns kInvalidArgument.
Status validate_scene(const Scene& scene);

/// What a scene needs beyond Tier 1 (docs/design/tracer.md §1). tier_features() is the one tier check: the CLI, the CPU
/// tracer, the GPU workload and the render loop all ask it.
struct TierFeatures {
  int tier = 1;                       ///< highest tier the scene needs: 1, 2 or 3
  std::vector<std::string> features;  ///< each feature beyond Tier 1, e.g. "HDR environment (Tier 2)"
  /// The features neither tracer implements yet: all of `features` but the HDR environment, uniaxial
  /// birefringence, inclusions, edge rounding and the Tier 2 lighting presets other than the UV lamps (which
  /// need fluorescence, Tier 3).
  std::vector<std::string> not_on_cpu;
  bool hdr_environment = false;  ///< the scene has an HDR environment (Tier 2; on both tracers)
  bool uniaxial = false;         ///< a uniaxial stone (Tier 2; on both tracers, docs/design/tracer.md §7.7)

  /// The CPU tracer's answer: ok when not_on_cpu is empty; otherwise kNotSupported: "the scene needs
  /// <not_on_cpu>; the CPU tracer implements Tier 1, the Tier 2 lighting presets but the UV lamps, HDR
  /// environments, uniaxial stones, inclusions and edge rounding".
  Status status() const;
  /// The GPU tracer's answer, the same features as the CPU's (docs/design/tracer.md §6.1, §6.2): ok when
  /// not_on_cpu is empty; otherwise kNotSupported: "the scene needs <not_on_cpu>; the GPU tracer implements
  /// Tier 1, …" as status(). A map too large for the GPU declines in the GPU workload.
  Status gpu_status() const;
};

/// The tier and the beyond-Tier-1 features of `scene` (which need not be validated). Pure; thread-safe.
TierFeatures tier_features(const Scene& scene);

}  // namespace facetrace::tracer
