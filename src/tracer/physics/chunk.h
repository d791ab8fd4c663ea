/// @file
/// The one header of POD types shared by the physics, the CPU tracer and the CUDA kernels: FacetPlane and
/// TraceParams (the inputs of trace_sample, built on the host by make_trace_params / make_facet_planes),
/// SampleXyz (its result) and ChunkScene (both inputs in one block, passed to the kernels by value and carried
/// verbatim in the tracer op's arguments). One definition each; no mirror copies elsewhere.
#pragma once

#include <cstdint>
#include <type_traits>

#include "absorption.h"
#include "dispersion.h"
#include "vec3.h"

namespace facetrace::tracer::physics {

inline constexpr std::uint32_t kMaxPlanes = 128;  // docs/design/tracer.md §4: at most 128 planes

/// Environment modes (docs/design/tracer.md §6): uniform is env mode 0.
inline constexpr std::uint32_t kEnvUniform = 0;  // docs/design/tracer.md §6
inline constexpr std::uint32_t kEnvStudio = 1;   // docs/design/tracer.md §6
/// An HDR map (docs/design/tracer.md §6.1): traced with physics::HdrEnv (hdr_environment.h), never with the
/// analytic environment functions, which treat it as the Studio rig.
inline constexpr std::uint32_t kEnvHdr = 2;  // docs/design/tracer.md §6.1
/// A Tier 2 lit lighting model (docs/design/tracer.md §6.2, TraceParams::preset_model): traced with
/// physics::PresetEnv (preset_environment.h), never with the analytic environment functions.
inline constexpr std::uint32_t kEnvPreset = 3;  // docs/design/tracer.md §6.2

/// One facet plane {x : n·x + d ≤ 0} (docs/design/tracer.md §4); n is a unit outward normal, d < 0.
/// 16 bytes and 16-byte aligned, so the device loads a plane with one 128-bit shared-memory access; the
/// facet finish lives in TraceParams::frosted_mask.
struct alignas(16) FacetPlane {
  float nx, ny, nz, d;
};
static_assert(sizeof(FacetPlane) == 16, "FacetPlane layout is shared with the device");
static_assert(std::is_standard_layout_v<FacetPlane> && std::is_trivially_copyable_v<FacetPlane>);

/// Everything trace_sample needs besides the planes. All directions are unit vectors.
struct TraceParams {
  // Camera (docs/design/tracer.md §5).
  Vec3 eye;            ///< camera position d·(cos p sin y, sin p, cos p cos y)
  Vec3 forward;        ///< f = −eye/|eye|
  Vec3 right;          ///< r = normalize(f × ŷ)
  Vec3 up;             ///< u = r × f
  float tan_half_fov;  ///< tan 21°
  float aspect;        ///< W/H
  std::uint32_t width, height;
  std::uint32_t max_bounces;
  std::uint32_t plane_count;  ///< ≤ kMaxPlanes; 0 = empty scene
  // Environment (docs/design/tracer.md §6).
  std::uint32_t env_kind;         ///< kEnvUniform, kEnvStudio or kEnvHdr
  std::uint32_t illuminant_kind;  ///< IlluminantKind
  float planck_kelvin;            ///< colour temperature for IlluminantKind::kPlanck
  float exposure;
  float backdrop;                     ///< Studio only: radiance of bounce-0 misses, × S(λ)
  float glare;                        ///< surface_glare, 0..1
  float cos_head_shadow;              ///< cos(head_shadow_deg)
  std::uint32_t white_balance;        ///< 1 = apply wb (Studio); 0 = skip
  Vec3 key_dir;                       ///< ℓ from light_yaw / light_pitch
  Vec3 fill_dir;                      ///< ℓ_fill (environment.h)
  Vec3 view_dir;                      ///< eye/|eye|: towards the observer (head-shadow axis)
  float rig_floor, rig_ceiling;       ///< charcoal backdrop levels below / above
  float rig_key, rig_fill, rig_ring;  ///< lobe weights of the preset
  float ring_sin_elev, ring_cos_elev, ring_cos_radius;
  float wb[9];  ///< Bradford white balance, row-major 3×3 (docs/design/tracer.md §8)
  // Material (docs/design/tracer.md §3).
  DispersionCoeffs dispersion;
  std::uint32_t band_count;  ///< ≤ kMaxBands
  float path_scale;          ///< absorption_path_scale
  GaussianBand bands[kMaxBands];
  std::uint32_t
      frosted_mask[kMaxPlanes / 32];  ///< bit i: plane i is Frosted (docs/design/tracer.md §4 "Facet finish")
  float bound_radius2;  ///< squared radius (about the origin) of a sphere holding the stone; 0 = no planes
  // The Tier 2 lit models (docs/design/tracer.md §6.2; env_kind kEnvPreset only). Appended after the Tier 1
  // fields, which keep their offsets.
  std::uint32_t preset_model;  ///< kPreset* of preset_environment.h; 0 = none
  float spot_mult;             ///< the tent's key softbox and spark multiplier
  float tent_walls, tent_cards, tent_spark, tent_ground, tent_flat;  ///< the tent variant's knobs
  float shadow_outer, shadow_inner;  ///< cosines of the soft head-shadow cone (head_shadow_deg ± 2°)
  Vec3 spark_dir;                    ///< the tent's spark light (the reference rig's fill direction)
  Vec3 card_dir[3];                  ///< the tent's three black cards
};
static_assert(sizeof(TraceParams) == 476, "TraceParams layout is shared with the device");
static_assert(std::is_standard_layout_v<TraceParams> && std::is_trivially_copyable_v<TraceParams>);

/// Whether any facet is Frosted. It reads the mask at constant indices, so on the device the test is uniform
/// across a warp: only stones with frosted facets pay for the per-lane lookup, whose index varies.
FT_HD bool any_frosted(const TraceParams& p) {
  static_assert(kMaxPlanes / 32 == 4, "any_frosted reads the four mask words");
  return (p.frosted_mask[0] | p.frosted_mask[1] | p.frosted_mask[2] | p.frosted_mask[3]) != 0u;
}

/// Media beyond Tier 1's isotropic glass (docs/design/tracer.md §7.6, §7.7): kMediumIsotropic is traced by
/// path_step_env alone; kMediumUniaxial by path_step_uniaxial (physics/medium.h).
inline constexpr std::uint32_t kMediumIsotropic = 0;  // docs/design/tracer.md §7.7
inline constexpr std::uint32_t kMediumUniaxial = 1;   // docs/design/tracer.md §7.7

/// The material beyond TraceParams' isotropic part (docs/design/tracer.md §7.7): the optic axis and the
/// extraordinary index and bands of a uniaxial stone, Henyey–Greenstein inclusions and edge rounding.
/// Zero-initialised means an isotropic clear stone with sharp edges (Tier 1), which the megakernel traces
/// without reading it.
struct MediumParams {
  std::uint32_t kind;          ///< kMediumIsotropic or kMediumUniaxial
  std::uint32_t e_dispersion;  ///< 1: n_e(λ) from e_disp; 0: n_e = n_o(λ) + delta
  float delta;                 ///< Δ = n_e − n_o (used when e_dispersion is 0)
  Vec3 c_axis;                 ///< unit optic axis in the stone's frame
  DispersionCoeffs e_disp;     ///< the extraordinary curve (e_dispersion 1)
  std::uint32_t e_band_count;  ///< ≤ kMaxBands; 0 = α_e equals α_o (no pleochroism)
  float sigma_s;               ///< scattering coefficient × absorption_path_scale (0 = no inclusions)
  float hg_g;                  ///< Henyey–Greenstein asymmetry, |g| < 1
  GaussianBand e_bands[kMaxBands];
  float edge_radius;  ///< edge rounding radius r (docs/design/tracer.md §4.1); 0 = sharp edges
};
static_assert(sizeof(MediumParams) == 196, "MediumParams layout is shared with the device");
static_assert(std::is_standard_layout_v<MediumParams> && std::is_trivially_copyable_v<MediumParams>);

/// True when `m` needs the Tier 2 transport (physics/medium.h): a uniaxial stone, inclusions or edge rounding;
/// false for the Tier 1 code (path_step).
FT_HD bool needs_medium_transport(const MediumParams& m) {
  return m.kind != kMediumIsotropic || m.sigma_s > 0.0f || m.edge_radius > 0.0f;
}

/// One sample's result: f32 XYZ after max(·, 0); finite = 0 when the raw value was non-finite, in which case
/// xyz is 0 but the sample still counts in N (docs/design/tracer.md §8 "Finish").
struct SampleXyz {
  float x, y, z;
  std::uint32_t finite;
};
static_assert(sizeof(SampleXyz) == 16, "SampleXyz layout");

/// The scene of one chunk: trace parameters plus planes, passed to the kernels by value (2720 B, under the
/// 4 KiB kernel-parameter limit), so interleaved requests never see each other's scene. Planes past
/// params.plane_count are unused.
struct ChunkScene {
  TraceParams params;
  MediumParams medium;
  FacetPlane planes[kMaxPlanes];
};
static_assert(sizeof(ChunkScene) == 2720, "ChunkScene layout is shared with the device");
static_assert(sizeof(ChunkScene) <= 4000, "ChunkScene must fit the 4 KiB kernel-parameter space");
static_assert(std::is_standard_layout_v<ChunkScene> && std::is_trivially_copyable_v<ChunkScene>);

}  // namespace facetrace::tracer::physics
