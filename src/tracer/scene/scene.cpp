/// @file
/// Scene helpers: the standard round brilliant, the built-in scene, validation.
#include "facetrace/tracer/scene.h"

#include <cmath>
#include <cstdio>
#include <string>

namespace facetrace::tracer {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kDegToRad = kPi / 180.0;
constexpr std::uint32_t kMaxWidth = 7680;   // docs/design/tracer.md §2
constexpr std::uint32_t kMaxHeight = 4320;  // docs/design/tracer.md §2
constexpr std::uint32_t kMaxBounces = 128;  // docs/design/tracer.md §2
constexpr std::size_t kMaxPlanes = 128;     // docs/design/tracer.md §4
constexpr std::size_t kMaxBands = 8;        // facetrace: bands kept in the trace parameters
constexpr double kMaxDistance = 1e4;        // facetrace: larger camera distances are refused as absurd
constexpr double kUnitTolerance = 1e-3;     // facetrace: |‖n‖ − 1| allowed for plane normals
constexpr double kOpenTolerance = 1e-3;     // facetrace: recession-direction margin (see planes_bounded)
constexpr double kIndexMin = 1.0;           // docs/design/tracer.md §3: n in [1, 6]
constexpr double kIndexMax = 6.0;           // docs/design/tracer.md §3
constexpr double kMaxEdgeRounding = 0.25;  // facetrace: radius ≤ this × inradius (docs/design/tracer.md §4.1)

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

Status bad(const std::string& field, const std::string& why) { return invalid_argument(field + ": " + why); }

/// Six significant digits, for bounds derived from f32 data (0.25 × 0.32f reads 0.08, not 0.0799999982).
std::string short_num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

bool finite(double v) { return std::isfinite(v); }

Status check_finite(const std::string& field, double v) {
  return finite(v) ? Status{} : bad(field, "must be finite (got " + num(v) + ")");
}

/// Gear-index facet normal (docs/design/tracer.md §13): crown (+cos θ) or pavilion (−cos θ), φ = 2π·idx/96.
Plane gear_plane(double theta_deg, int idx, bool crown, double d) {
  const double th = theta_deg * kDegToRad;
  const double phi = 2.0 * kPi * idx / 96.0;
  Plane p;
  p.normal[0] = static_cast<float>(std::sin(th) * std::cos(phi));
  p.normal[1] = static_cast<float>(crown ? std::cos(th) : -std::cos(th));
  p.normal[2] = static_cast<float>(std::sin(th) * std::sin(phi));
  p.d = static_cast<float>(d);
  return p;
}

/// Raw (unfloored) n at λ nm in double, for validation (docs/design/tracer.md §3); NaN when undefined.
double raw_index(const Dispersion& d, double lambda_nm) {
  const double l = lambda_nm * 1e-3, l2 = l * l;
  if (d.model == DispersionModel::kCauchy) return d.b[0] + d.b[1] / l2 + d.b[2] / (l2 * l2);
  double n2 = 1.0 + d.b[0] * l2 / (l2 - d.c[0]);
  if (d.model == DispersionModel::kSellmeier3) {
    n2 += d.b[1] * l2 / (l2 - d.c[1]);
    if (d.b[2] != 0.0f) n2 += d.b[2] * l2 / (l2 - d.c[2]);
  }
  return n2 >= 0.0 ? std::sqrt(n2) : std::nan("");
}

/// Whether the half-spaces {n·x + d ≤ 0} (all d < 0, so the origin is interior) form a bounded polytope:
/// its recession cone {v : n_k·v ≤ 0 ∀k} must be {0}. A non-trivial cone has an extreme ray (or a line,
/// when the normals have rank ≤ 2) along n_i × n_j for some pair, so testing ±(n_i × n_j) for every pair
/// is exact; a margin max_k n_k·v ≤ 1e-3 also refuses slivers more than ~1000× longer than wide.
bool planes_bounded(const std::vector<Plane>& planes, double out_dir[3]) {
  const std::size_t n = planes.size();
  bool any_pair = false;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n; ++j) {
      const float* a = planes[i].normal;
      const float* b = planes[j].normal;
      double v[3] = {double{a[1]} * b[2] - double{a[2]} * b[1], double{a[2]} * b[0] - double{a[0]} * b[2],
                     double{a[0]} * b[1] - double{a[1]} * b[0]};
      const double len = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
      if (len < 1e-6) continue;
      any_pair = true;
      for (double& c : v) c /= len;
      for (int sign = -1; sign <= 1; sign += 2) {
        double best = -1e300;
        for (std::size_t k = 0; k < n && best <= kOpenTolerance; ++k) {
          const float* c = planes[k].normal;
          best = std::fmax(best, sign * (double{c[0]} * v[0] + double{c[1]} * v[1] + double{c[2]} * v[2]));
        }
        if (best <= kOpenTolerance) {
          for (int q = 0; q < 3; ++q) out_dir[q] = sign * v[q];
          return false;
        }
      }
    }
  }
  if (!any_pair) {
    out_dir[0] = out_dir[1] = out_dir[2] = 0.0;
    return false;
  }
  return true;
}

}  // namespace

std::vector<Plane> round_brilliant_planes() {
  // docs/design/tracer.md §13 plane table.
  std::vector<Plane> planes;
  planes.reserve(74);
  Plane table;
  table.normal[0] = 0.0f;
  table.normal[1] = 1.0f;
  table.normal[2] = 0.0f;
  table.d = -0.32f;
  planes.push_back(table);
  for (int m = 0; m < 8; ++m) planes.push_back(gear_plane(15.0, 6 + 12 * m, true, -0.45));  // stars
  for (int m = 0; m < 8; ++m) planes.push_back(gear_plane(34.5, 12 * m, true, -0.59));      // crown mains
  for (int m = 0; m < 8; ++m) {                                                             // upper girdle
    planes.push_back(gear_plane(41.0, (12 * m + 95) % 96, true, -0.67));
    planes.push_back(gear_plane(41.0, 12 * m + 1, true, -0.67));
  }
  for (int i = 0; i < 16; ++i) {  // girdle
    const double phi = 2.0 * kPi * i / 16.0;
    Plane g;
    g.normal[0] = static_cast<float>(std::cos(phi));
    g.normal[1] = 0.0f;
    g.normal[2] = static_cast<float>(std::sin(phi));
    g.d = -1.0f;
    planes.push_back(g);
  }
  for (int m = 0; m < 8; ++m) planes.push_back(gear_plane(41.0, 12 * m, false, -0.67));  // pavilion mains
  for (int m = 0; m < 8; ++m) {                                                          // lower girdle
    planes.push_back(gear_plane(42.5, (12 * m + 95) % 96, false, -0.68));
    planes.push_back(gear_plane(42.5, 12 * m + 1, false, -0.68));
  }
  Plane culet;
  culet.normal[0] = 0.0f;
  culet.normal[1] = -1.0f;
  culet.normal[2] = 0.0f;
  culet.d = -0.88f;
  planes.push_back(culet);
  return planes;
}

Scene builtin_diamond_scene() {
  Scene s;
  s.width = 512;
  s.height = 512;
  s.max_bounces = 12;
  s.lighting_preset = LightingPreset::kLightTent;
  s.environment = EnvironmentKind::kStudio;
  s.material = diamond_material();
  s.planes = round_brilliant_planes();
  return s;
}

/// The checks of one dispersion curve (docs/design/tracer.md §3): a known model, finite coefficients, no Sellmeier
/// pole in 380–780 nm and n in [1, 6] at every 1 nm of it; errors name `field` ("material.dispersion").
namespace {

Status check_dispersion(const std::string& field, const Dispersion& d) {
  if (static_cast<unsigned>(d.model) > static_cast<unsigned>(DispersionModel::kCauchy))
    return bad(field + ".model", "unknown model " + std::to_string(static_cast<unsigned>(d.model)));
  for (int i = 0; i < 3; ++i) {
    FT_TRY(check_finite(field + ".b[" + std::to_string(i) + "]", d.b[i]));
    FT_TRY(check_finite(field + ".c[" + std::to_string(i) + "]", d.c[i]));
  }
  // The whole visible range 380–780 nm, not three points: a Sellmeier pole inside it is refused outright (the
  // curve leaves every bound near it, however narrowly); then every 1 nm, plus a Cauchy curve's extremum.
  if (d.model != DispersionModel::kCauchy) {
    const int terms = d.model == DispersionModel::kSellmeier3 ? 3 : 1;
    for (int i = 0; i < terms; ++i)
      if (d.b[i] != 0.0f && d.c[i] >= 0.38 * 0.38 && d.c[i] <= 0.78 * 0.78)
        return bad(field, "Sellmeier term " + std::to_string(i) + " has its pole at " +
                              num(1000.0 * std::sqrt(double{d.c[i]})) +
                              " nm, inside the visible range 380-780 nm");
  }
  std::vector<double> probes;
  for (int k = 0; k <= 400; ++k) probes.push_back(380.0 + k);
  probes.push_back(589.3);
  if (d.model == DispersionModel::kCauchy &&
      d.b[2] != 0.0f) {  // n = A + B·x + C·x², x = 1/λ²: vertex at −B/2C
    const double x = -double{d.b[1]} / (2.0 * d.b[2]);
    if (x > 0.0) {
      const double lambda = 1000.0 / std::sqrt(x);
      if (lambda > 380.0 && lambda < 780.0) probes.push_back(lambda);
    }
  }
  for (double lambda : probes) {
    const double n = raw_index(d, lambda);
    if (!finite(n) || n < kIndexMin || n > kIndexMax)
      return bad(field, "refractive index at " + num(lambda) + " nm is " + num(n) + ", outside [1, 6]");
  }
  return {};
}

}  // namespace

Status validate_scene(const Scene& s) {
  if (s.width == 0 || s.width > kMaxWidth)
    return bad("width",
               "must be in 1.." + std::to_string(kMaxWidth) + " (got " + std::to_string(s.width) + ")");
  if (s.height == 0 || s.height > kMaxHeight)
    return bad("height",
               "must be in 1.." + std::to_string(kMaxHeight) + " (got " + std::to_string(s.height) + ")");
  FT_TRY(check_finite("yaw", s.yaw));
  FT_TRY(check_finite("pitch", s.pitch));
  FT_TRY(check_finite("distance", s.distance));
  if (!(s.distance > 0.0f) || s.distance > kMaxDistance)
    return bad("distance", "must be in (0, " + num(kMaxDistance) + "] (got " + num(s.distance) + ")");
  FT_TRY(check_finite("light_yaw", s.light_yaw));
  FT_TRY(check_finite("light_pitch", s.light_pitch));
  FT_TRY(check_finite("exposure", s.exposure));
  if (s.exposure < 0.0f) return bad("exposure", "must be >= 0 (got " + num(s.exposure) + ")");
  if (s.max_bounces == 0 || s.max_bounces > kMaxBounces)
    return bad("max_bounces", "must be in 1.." + std::to_string(kMaxBounces) + " (got " +
                                  std::to_string(s.max_bounces) + ")");
  if (static_cast<unsigned>(s.lighting_preset) > static_cast<unsigned>(LightingPreset::kIlluminantA))
    return bad("lighting_preset",
               "unknown preset index " + std::to_string(static_cast<unsigned>(s.lighting_preset)));
  if (static_cast<unsigned>(s.environment) > static_cast<unsigned>(EnvironmentKind::kHdr))
    return bad("environment",
               "unknown environment kind " + std::to_string(static_cast<unsigned>(s.environment)));
  if (s.environment == EnvironmentKind::kHdr) {
    // docs/design/tracer.md §6.1: the map is read once, with the scene; nothing reads it at render time.
    const EnvLight* light = s.environment_light.get();
    if (light == nullptr)
      return bad("environment",
                 "the HDR map " + s.environment_map +
                     " is not loaded (scene files load it; a program calls load_environment_light)");
    const EnvMap& m = light->map;
    if (m.width == 0 || m.height == 0 || m.rgb.size() != std::size_t{m.width} * m.height * 3 ||
        light->row_cdf.size() != std::size_t{m.height} + 1 ||
        light->row_cos.size() != std::size_t{m.height} + 1 ||
        light->col_cdf.size() != std::size_t{m.height} * (std::size_t{m.width} + 1))
      return bad("environment",
                 "the HDR map's tables do not match its size (build them with make_env_light)");
  }
  FT_TRY(check_finite("backdrop", s.backdrop));
  if (s.backdrop < 0.0f) return bad("backdrop", "must be >= 0 (got " + num(s.backdrop) + ")");
  FT_TRY(check_finite("surface_glare", s.surface_glare));
  if (s.surface_glare < 0.0f || s.surface_glare > 1.0f)
    return bad("surface_glare", "must be in [0, 1] (got " + num(s.surface_glare) + ")");
  FT_TRY(check_finite("head_shadow_deg", s.head_shadow_deg));
  if (s.head_shadow_deg < 0.0f || s.head_shadow_deg >= 90.0f)
    return bad("head_shadow_deg", "must be in [0, 90) (got " + num(s.head_shadow_deg) + ")");

  // Material (docs/design/tracer.md §3).
  const Material& m = s.material;
  FT_TRY(check_dispersion("material.dispersion", m.dispersion));
  if (m.extraordinary_dispersion)
    FT_TRY(check_dispersion("material.extraordinary_dispersion", *m.extraordinary_dispersion));
  auto check_bands = [](const std::string& field, const std::vector<AbsorptionBand>& bands) -> Status {
    if (bands.size() > kMaxBands)
      return bad(field, "at most " + std::to_string(kMaxBands) + " bands (got " +
                            std::to_string(bands.size()) + ")");
    for (std::size_t i = 0; i < bands.size(); ++i) {
      const AbsorptionBand& b = bands[i];
      const std::string f = field + "[" + std::to_string(i) + "]";
      FT_TRY(check_finite(f + ".peak", b.peak));
      FT_TRY(check_finite(f + ".centre", b.centre));
      FT_TRY(check_finite(f + ".width", b.width));
      if (b.peak < 0.0f) return bad(f + ".peak", "must be >= 0 (got " + num(b.peak) + ")");
      if (!(b.width > 0.0f)) return bad(f + ".width", "must be > 0 (got " + num(b.width) + ")");
      if (static_cast<unsigned>(b.domain) > 1u) return bad(f + ".domain", "unknown domain");
    }
    return {};
  };
  FT_TRY(check_bands("material.o_ray", m.o_ray));
  FT_TRY(check_bands("material.e_ray", m.e_ray));
  FT_TRY(check_bands("material.beta_ray", m.beta_ray));
  FT_TRY(check_finite("material.absorption_path_scale", m.absorption_path_scale));
  if (m.absorption_path_scale < 0.0f)
    return bad("material.absorption_path_scale", "must be >= 0 (got " + num(m.absorption_path_scale) + ")");
  FT_TRY(check_finite("material.birefringence_delta", m.birefringence_delta));
  for (int k = 0; k < 3; ++k) FT_TRY(check_finite("material.c_axis[" + std::to_string(k) + "]", m.c_axis[k]));
  if (const double len2 = static_cast<double>(m.c_axis[0]) * m.c_axis[0] +
                          static_cast<double>(m.c_axis[1]) * m.c_axis[1] +
                          static_cast<double>(m.c_axis[2]) * m.c_axis[2];
      !(len2 > 1e-12))
    return bad("material.c_axis", "the optic axis must not be (near) zero (got [" + num(m.c_axis[0]) + ", " +
                                      num(m.c_axis[1]) + ", " + num(m.c_axis[2]) + "])");
  FT_TRY(check_finite("material.scattering_sigma_s", m.scattering_sigma_s));
  if (m.scattering_sigma_s < 0.0f)
    return bad("material.scattering_sigma_s", "must be >= 0 (got " + num(m.scattering_sigma_s) + ")");
  FT_TRY(check_finite("material.scattering_g", m.scattering_g));
  if (m.scattering_g <= -1.0f || m.scattering_g >= 1.0f)
    return bad("material.scattering_g", "must be in (-1, 1) (got " + num(m.scattering_g) + ")");
  FT_TRY(check_finite("material.edge_rounding_radius", m.edge_rounding_radius));
  if (m.edge_rounding_radius < 0.0f)
    return bad("material.edge_rounding_radius", "must be >= 0 (got " + num(m.edge_rounding_radius) + ")");

  // Planes (docs/design/tracer.md §4).
  if (s.planes.size() > kMaxPlanes)
    return bad("planes", "at most " + std::to_string(kMaxPlanes) + " planes (got " +
                             std::to_string(s.planes.size()) + ")");
  for (std::size_t i = 0; i < s.planes.size(); ++i) {
    const Plane& p = s.planes[i];
    const std::string f = "planes[" + std::to_string(i) + "]";
    for (int c = 0; c < 3; ++c) FT_TRY(check_finite(f + ".normal", p.normal[c]));
    FT_TRY(check_finite(f + ".d", p.d));
    const double len = std::sqrt(double{p.normal[0]} * p.normal[0] + double{p.normal[1]} * p.normal[1] +
                                 double{p.normal[2]} * p.normal[2]);
    if (std::fabs(len - 1.0) > kUnitTolerance)
      return bad(f + ".normal", "must be a unit vector (length " + num(len) + ")");
    if (!(p.d < 0.0f))
      return bad(f + ".d", "must be < 0 so the origin lies inside the stone (got " + num(p.d) + ")");
    if (static_cast<unsigned>(p.finish) > 1u) return bad(f + ".finish", "unknown finish");
  }
  if (!s.planes.empty()) {
    if (s.planes.size() < 4)
      return bad("planes", "at least 4 planes are needed to enclose a bounded convex polyhedron (got " +
                               std::to_string(s.planes.size()) + ")");
    double dir[3] = {0.0, 0.0, 0.0};
    if (!planes_bounded(s.planes, dir)) {
      return bad("planes", "the planes do not enclose a bounded convex polyhedron (open along (" +
                               num(dir[0]) + ", " + num(dir[1]) + ", " + num(dir[2]) + "))");
    }
    // Edge rounding (docs/design/tracer.md §4.1): the radius is a small fraction of the stone, measured by
    // its inradius about the origin (the distance from the origin to the nearest facet plane).
    double inradius = -double{s.planes[0].d};
    for (const Plane& pl : s.planes) inradius = std::fmin(inradius, -double{pl.d});
    if (const double max_radius = kMaxEdgeRounding * inradius; m.edge_rounding_radius > max_radius)
      return bad("material.edge_rounding_radius",
                 "must be in [0, " + short_num(max_radius) + "], a quarter of the stone's inradius " +
                     short_num(inradius) +
                     " (the distance from the origin to its nearest facet plane) (got " +
                     num(m.edge_rounding_radius) + ")");
    // The camera must be outside the stone.
    const double p = std::fmax(-89.9 * kDegToRad, std::fmin(89.9 * kDegToRad, double{s.pitch}));
    const double eye[3] = {s.distance * std::cos(p) * std::sin(s.yaw), s.distance * std::sin(p),
                           s.distance * std::cos(p) * std::cos(s.yaw)};
    bool inside = true;
    for (const Plane& pl : s.planes) {
      if (pl.normal[0] * eye[0] + pl.normal[1] * eye[1] + pl.normal[2] * eye[2] + pl.d > 0.0) inside = false;
    }
    if (inside) return bad("distance", "the camera (distance " + num(s.distance) + ") is inside the stone");
  }
  return {};
}

}  // namespace facetrace::tracer
