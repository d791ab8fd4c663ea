/// @file
/// make_trace_params, make_facet_planes, bradford_to_d65.
#include "cpu/trace_params.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "physics/camera.h"
#include "physics/environment.h"
#include "physics/preset_environment.h"
#include "physics/spectrum.h"

namespace facetrace::tracer {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kDegToRad = kPi / 180.0;
constexpr float kGirdleMaxNy =
    1e-3f;  // docs/design/tracer.md §4 "Facet finish" (facetrace): girdle facets have |n_y| ≤ 1e-3

physics::Vec3 to_vec(double x, double y, double z) {
  return physics::Vec3{static_cast<float>(x), static_cast<float>(y), static_cast<float>(z)};
}

/// Unit direction (cos p·sin y, sin p, cos p·cos y) (docs/design/tracer.md §2, §5).
physics::Vec3 orbit_direction(double yaw, double pitch) {
  return to_vec(std::cos(pitch) * std::sin(yaw), std::sin(pitch), std::cos(pitch) * std::cos(yaw));
}

void white_xyz(std::uint32_t kind, float kelvin, double out[3]) {
  out[0] = out[1] = out[2] = 0.0;
  for (int i = 0; i < physics::kSpectralTableSize; ++i) {
    const float lambda =
        physics::kSpectralTableStartNm + physics::kSpectralTableStepNm * static_cast<float>(i);
    const double s = physics::illuminant(kind, kelvin, lambda);
    out[0] += s * physics::cmf_x_table()[i];
    out[1] += s * physics::cmf_y_table()[i];
    out[2] += s * physics::cmf_z_table()[i];
  }
  const double y = out[1] > 0.0 ? out[1] : 1.0;
  for (int c = 0; c < 3; ++c) out[c] /= y;
}

void mat3_mul(const double a[9], const double b[9], double out[9]) {
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c)
      out[r * 3 + c] = a[r * 3] * b[c] + a[r * 3 + 1] * b[3 + c] + a[r * 3 + 2] * b[6 + c];
}

void mat3_inverse(const double m[9], double out[9]) {
  const double det = m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6]) +
                     m[2] * (m[3] * m[7] - m[4] * m[6]);
  const double inv = 1.0 / det;
  out[0] = (m[4] * m[8] - m[5] * m[7]) * inv;
  out[1] = (m[2] * m[7] - m[1] * m[8]) * inv;
  out[2] = (m[1] * m[5] - m[2] * m[4]) * inv;
  out[3] = (m[5] * m[6] - m[3] * m[8]) * inv;
  out[4] = (m[0] * m[8] - m[2] * m[6]) * inv;
  out[5] = (m[2] * m[3] - m[0] * m[5]) * inv;
  out[6] = (m[3] * m[7] - m[4] * m[6]) * inv;
  out[7] = (m[1] * m[6] - m[0] * m[7]) * inv;
  out[8] = (m[0] * m[4] - m[1] * m[3]) * inv;
}

}  // namespace

void bradford_to_d65(std::uint32_t illuminant_kind, float planck_kelvin, float out[9]) {
  if (illuminant_kind == static_cast<std::uint32_t>(physics::IlluminantKind::kD65)) {
    for (int i = 0; i < 9; ++i)
      out[i] = (i % 4 == 0) ? 1.0f : 0.0f;  // docs/design/tracer.md §8: identity for D65
    return;
  }
  // docs/design/tracer.md §8: Bradford cone matrix M.
  const double m[9] = {0.8951, 0.2664, -0.1614, -0.7502, 1.7135, 0.0367, 0.0389, -0.0685, 1.0296};
  double m_inv[9];
  mat3_inverse(m, m_inv);
  double src[3], dst[3];
  white_xyz(illuminant_kind, planck_kelvin, src);
  white_xyz(static_cast<std::uint32_t>(physics::IlluminantKind::kD65), 0.0f, dst);
  double diag[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int r = 0; r < 3; ++r) {
    const double rho_src = m[r * 3] * src[0] + m[r * 3 + 1] * src[1] + m[r * 3 + 2] * src[2];
    const double rho_dst = m[r * 3] * dst[0] + m[r * 3 + 1] * dst[1] + m[r * 3 + 2] * dst[2];
    diag[r * 4] = rho_dst / rho_src;
  }
  double tmp[9], full[9];
  mat3_mul(diag, m, tmp);
  mat3_mul(m_inv, tmp, full);
  for (int i = 0; i < 9; ++i) out[i] = static_cast<float>(full[i]);
}

namespace {

/// A dispersion curve as the physics headers read it (docs/design/tracer.md §3).
physics::DispersionCoeffs dispersion_coeffs(const Dispersion& d) {
  physics::DispersionCoeffs c{};
  c.model = static_cast<std::uint32_t>(d.model);
  for (int i = 0; i < 3; ++i) {
    c.b[i] = d.b[i];
    c.c[i] = d.c[i];
  }
  return c;
}

/// Squared radius about the origin of a sphere holding the polytope {x : n·x + d ≤ 0}: the largest |v|² over
/// its vertices (each the intersection of three planes that satisfies all others), in double, with a margin
/// so rays that graze the stone still reach the slab test. 0 for an empty plane list.
float bounding_radius2(const std::vector<Plane>& planes) {
  const std::size_t n = planes.size();
  double r2 = 0.0;
  auto cross = [](const float* a, const float* b, double* out) {
    out[0] = double{a[1]} * b[2] - double{a[2]} * b[1];
    out[1] = double{a[2]} * b[0] - double{a[0]} * b[2];
    out[2] = double{a[0]} * b[1] - double{a[1]} * b[0];
  };
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n; ++j) {
      double jk[3], ki[3], ij[3];
      cross(planes[i].normal, planes[j].normal, ij);
      for (std::size_t k = j + 1; k < n; ++k) {
        cross(planes[j].normal, planes[k].normal, jk);
        const float* ni = planes[i].normal;
        const double det = ni[0] * jk[0] + ni[1] * jk[1] + ni[2] * jk[2];
        if (std::fabs(det) < 1e-9) continue;
        cross(planes[k].normal, planes[i].normal, ki);
        double v[3];
        for (int c = 0; c < 3; ++c)
          v[c] = (-double{planes[i].d} * jk[c] - double{planes[j].d} * ki[c] - double{planes[k].d} * ij[c]) /
                 det;
        bool inside = true;
        for (std::size_t m = 0; m < n && inside; ++m) {
          const float* nm = planes[m].normal;
          inside = nm[0] * v[0] + nm[1] * v[1] + nm[2] * v[2] + planes[m].d <= 1e-6;
        }
        if (inside) r2 = std::max(r2, v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
      }
    }
  }
  if (r2 == 0.0) return 0.0f;
  const double r = std::sqrt(r2) * (1.0 + 1e-3) + 1e-3;  // margin: the slab test's own tolerances are ≤ 1e-4
  return static_cast<float>(r * r);
}

/// bounding_radius2 of the last plane set seen on this thread: a render makes trace parameters for every
/// request of the same scene, and the vertex search is O(n⁴) worst case (benchmarks/NOTES.md, host work per request).
float cached_bounding_radius2(const std::vector<Plane>& planes) {
  thread_local std::vector<float> key;
  thread_local float value = 0.0f;
  std::vector<float> k;
  k.reserve(planes.size() * 4);
  for (const Plane& pl : planes) k.insert(k.end(), {pl.normal[0], pl.normal[1], pl.normal[2], pl.d});
  if (k != key) {
    value = bounding_radius2(planes);
    key = std::move(k);
  }
  return value;
}

}  // namespace

namespace {

/// The lit models' parameters (docs/design/tracer.md §6.2), after the reference renderer (suitable-name/indicatrix,
/// crates/indicatrix/src/optics/studio_rig.rs StudioRig::new for the spark and card directions,
/// environment/mod.rs head_shadow_cosines and LightingPreset::params for the rest).
void set_preset_params(const Scene& scene, std::uint32_t model, physics::TraceParams& p) {
  p.preset_model = model;
  const physics::TentConfig tent = physics::tent_config(static_cast<std::uint32_t>(scene.lighting_preset));
  p.spot_mult = tent.spot_mult;
  p.tent_walls = tent.walls;
  p.tent_cards = tent.cards;
  p.tent_spark = tent.spark;
  p.tent_ground = tent.ground;
  p.tent_flat = tent.flat;
  // Head shadow: dark within head_shadow_deg − 2°, gone by + 2°; off for ≤ 0; else clamped to [3°, 88°]
  // (indicatrix mod.rs head_shadow_cosines; 16° gives its literals 0.9510565, 0.9702957).
  const double deg = scene.head_shadow_deg;
  if (!(deg > 0.0)) {
    p.shadow_outer = 2.0f;  // never reached by a dot product: visibility exactly 1
    p.shadow_inner = 3.0f;
  } else {
    const double d = std::fmin(std::fmax(deg, 3.0), 88.0);
    p.shadow_outer = static_cast<float>(std::cos((d + 2.0) * kDegToRad));
    p.shadow_inner = static_cast<float>(std::cos((d - 2.0) * kDegToRad));
  }
  auto unit = [](double x, double y, double z) {
    const double l = std::sqrt(x * x + y * y + z * z);
    return to_vec(x / l, y / l, z / l);
  };
  // The spark sits at the reference rig's fill: yaw + 0.78π, pitch clamp(0.65·pitch, 0.15, 1.2).
  const double yaw = scene.light_yaw, pitch = scene.light_pitch;
  const double fy = yaw + 0.78 * kPi, fp = std::fmin(std::fmax(0.65 * pitch, 0.15), 1.2);
  p.spark_dir = unit(std::cos(fp) * std::sin(fy), std::sin(fp), std::cos(fp) * std::cos(fy));
  // The black cards on the reference rig's ring slots 4, 8, 12: azimuth yaw + i·2π/16, direction
  // (0.75·cos a, 0.8·sin pitch, 0.75·sin a).
  const int slots[3] = {4, 8, 12};
  for (int i = 0; i < 3; ++i) {
    const double a = yaw + slots[i] * (2.0 * kPi / 16.0);
    p.card_dir[i] = unit(0.75 * std::cos(a), 0.8 * std::sin(pitch), 0.75 * std::sin(a));
  }
}

}  // namespace

physics::TraceParams make_trace_params(const Scene& scene) {
  physics::TraceParams p{};
  // Camera (docs/design/tracer.md §5).
  const double max_pitch = physics::kMaxPitchDeg * kDegToRad;
  const double pitch = std::fmax(-max_pitch, std::fmin(max_pitch, static_cast<double>(scene.pitch)));
  const double yaw = scene.yaw;
  const double dist = scene.distance;
  const double ex = dist * std::cos(pitch) * std::sin(yaw), ey = dist * std::sin(pitch),
               ez = dist * std::cos(pitch) * std::cos(yaw);
  const double el = std::sqrt(ex * ex + ey * ey + ez * ez);
  const double fx = -ex / el, fy = -ey / el, fz = -ez / el;
  double rx = -fz, ry = 0.0, rz = fx;  // f × ŷ = (−f_z, 0, f_x)
  const double rl = std::sqrt(rx * rx + rz * rz);
  rx /= rl;
  rz /= rl;
  const double ux = ry * fz - rz * fy, uy = rz * fx - rx * fz, uz = rx * fy - ry * fx;  // u = r × f
  p.eye = to_vec(ex, ey, ez);
  p.forward = to_vec(fx, fy, fz);
  p.right = to_vec(rx, ry, rz);
  p.up = to_vec(ux, uy, uz);
  p.tan_half_fov = static_cast<float>(std::tan(0.5 * physics::kVerticalFovDeg * kDegToRad));
  p.aspect = static_cast<float>(static_cast<double>(scene.width) / static_cast<double>(scene.height));
  p.width = scene.width;
  p.height = scene.height;
  p.max_bounces = scene.max_bounces;
  p.plane_count = static_cast<std::uint32_t>(scene.planes.size());

  // Environment (docs/design/tracer.md §6).
  const physics::StudioRig rig = physics::studio_rig(static_cast<std::uint32_t>(scene.lighting_preset));
  const std::uint32_t model = physics::preset_model(static_cast<std::uint32_t>(scene.lighting_preset));
  p.env_kind = scene.environment == EnvironmentKind::kUniform ? physics::kEnvUniform
               : scene.environment == EnvironmentKind::kHdr   ? physics::kEnvHdr
               : model != physics::kPresetNone                ? physics::kEnvPreset
                                                              : physics::kEnvStudio;
  p.illuminant_kind = rig.illuminant_kind;
  p.planck_kelvin = rig.planck_kelvin;
  p.exposure = scene.exposure;
  p.backdrop = scene.backdrop;
  p.glare = scene.surface_glare;
  p.cos_head_shadow = static_cast<float>(std::cos(static_cast<double>(scene.head_shadow_deg) * kDegToRad));
  p.key_dir = orbit_direction(scene.light_yaw, scene.light_pitch);
  p.fill_dir =
      orbit_direction(static_cast<double>(scene.light_yaw) + physics::kFillYawOffset, physics::kFillPitch);
  p.view_dir = to_vec(ex / el, ey / el, ez / el);
  p.rig_floor = rig.floor_level;
  p.rig_ceiling = rig.ceiling_level;
  p.rig_key = rig.key;
  p.rig_fill = rig.fill;
  p.rig_ring = rig.ring;
  p.ring_sin_elev = static_cast<float>(std::sin(rig.ring_elevation_deg * kDegToRad));
  p.ring_cos_elev = static_cast<float>(std::cos(rig.ring_elevation_deg * kDegToRad));
  p.ring_cos_radius = static_cast<float>(std::cos(rig.ring_radius_deg * kDegToRad));
  p.white_balance = p.env_kind == physics::kEnvStudio ? 1u : 0u;  // docs/design/tracer.md §8: Studio only
  bradford_to_d65(p.illuminant_kind, p.planck_kelvin, p.wb);
  if (p.env_kind == physics::kEnvPreset) set_preset_params(scene, model, p);

  // Material (docs/design/tracer.md §3); isotropic materials use o_ray.
  const Material& m = scene.material;
  p.dispersion = dispersion_coeffs(m.dispersion);
  const std::size_t bands = std::min<std::size_t>(m.o_ray.size(), physics::kMaxBands);
  p.band_count = static_cast<std::uint32_t>(bands);
  for (std::size_t i = 0; i < bands; ++i) {
    p.bands[i] = physics::GaussianBand{m.o_ray[i].peak, m.o_ray[i].centre, m.o_ray[i].width,
                                       static_cast<std::uint32_t>(m.o_ray[i].domain)};
  }
  p.path_scale = m.absorption_path_scale;
  p.bound_radius2 = cached_bounding_radius2(scene.planes);
  for (std::size_t i = 0; i < scene.planes.size() && i < physics::kMaxPlanes; ++i) {
    const Plane& pl = scene.planes[i];
    const bool girdle = scene.girdle_frosted && std::fabs(pl.normal[1]) <= kGirdleMaxNy;
    if (pl.finish == Finish::kFrosted || girdle) p.frosted_mask[i / 32] |= 1u << (i % 32);
  }
  return p;
}

physics::MediumParams make_medium_params(const Scene& scene) {
  physics::MediumParams md{};
  const Material& m = scene.material;
  const bool biaxial = m.optical_character == OpticalCharacter::kBiaxialPos ||
                       m.optical_character == OpticalCharacter::kBiaxialNeg;
  if (tier_features(scene).uniaxial && !biaxial) {
    md.kind = physics::kMediumUniaxial;
    md.delta = m.birefringence_delta;
    if (m.extraordinary_dispersion) {  // docs/design/tracer.md §7.7: n_e(λ) from its own curve
      md.e_dispersion = 1u;
      md.e_disp = dispersion_coeffs(*m.extraordinary_dispersion);
    }
    const double cx = m.c_axis[0], cy = m.c_axis[1], cz = m.c_axis[2];
    const double len = std::sqrt(cx * cx + cy * cy + cz * cz);  // validate_scene refused a (near) zero axis
    md.c_axis = to_vec(cx / len, cy / len, cz / len);
    const std::size_t bands = std::min<std::size_t>(m.e_ray.size(), physics::kMaxBands);
    // e bands equal to the o bands (emerald, zircon: no dichroic split published) are no pleochroism: α_e = α_o
    // bit for bit, so the transport takes α_o for both modes without forming the e wave's polarisation.
    md.e_band_count = m.e_ray == m.o_ray ? 0u : static_cast<std::uint32_t>(bands);
    for (std::size_t i = 0; i < md.e_band_count; ++i) {
      md.e_bands[i] = physics::GaussianBand{m.e_ray[i].peak, m.e_ray[i].centre, m.e_ray[i].width,
                                            static_cast<std::uint32_t>(m.e_ray[i].domain)};
    }
  }
  if (m.scattering_sigma_s > 0.0f) {
    md.sigma_s = m.scattering_sigma_s * m.absorption_path_scale;
    md.hg_g = m.scattering_g;
  }
  md.edge_radius = m.edge_rounding_radius;
  return md;
}

std::vector<physics::FacetPlane> make_facet_planes(const Scene& scene) {
  std::vector<physics::FacetPlane> out;
  out.reserve(scene.planes.size());
  for (const Plane& pl : scene.planes)
    out.push_back(physics::FacetPlane{pl.normal[0], pl.normal[1], pl.normal[2], pl.d});
  return out;
}

physics::EnvMapView env_map_view(const EnvLight& light, float exposure, bool nee) {
  physics::EnvMapView v{};
  v.rgb = light.map.rgb.data();
  v.row_cdf = light.row_cdf.data();
  v.col_cdf = light.col_cdf.data();
  v.row_cos = light.row_cos.data();
  v.width = light.map.width;
  v.height = light.map.height;
  v.exposure = exposure;
  v.nee = nee ? 1u : 0u;
  return v;
}

}  // namespace facetrace::tracer
