/// @file
/// The Tier 2 transport (docs/design/tracer.md §7.7): uniaxial stones and Henyey–Greenstein inclusions, against
/// results derived here by hand (docs/design/tracer.md §7.7 "Analytic checks"):
/// - a slab under the uniform environment at normal incidence returns L·(1 − A) with the slab absorptance
///   A = (1 − R)(1 − τ)/(1 − Rτ), R = ((n − 1)/(n + 1))², τ = e^(−2αh) (the incoherent sum of the multiple
///   reflections; by reciprocity what the slab does not absorb is seen);
/// - a uniaxial slab with its optic axis normal to the faces is the isotropic slab of n_o and α_o whatever n_e and
///   α_e are; with the axis in the face plane, unpolarised light splits into two independent slabs (n_o, α_o) and
///   (n_e, α_e), each carrying half;
/// - a clear stone with or without inclusions, uniaxial or not, in the uniform environment returns it (furnace);
/// - HG directions have mean cosine g.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/trace_params.h"
#include "facetrace/tracer/cpu_tracer.h"
#include "facetrace/tracer/scene.h"
#include "physics/medium.h"
#include "physics/transport.h"

namespace ft = facetrace::tracer;
namespace ph = facetrace::tracer::physics;

namespace {

constexpr float kHalfThickness = 0.1f;  // the slab is |y| ≤ h

/// A clear slab |y| ≤ h, closed far away by four side planes, under the uniform environment, with a constant
/// index (Cauchy a = n) and, when alpha > 0, a constant absorption (one band of enormous width).
ft::Scene slab_scene(float n_o, float alpha_o) {
  ft::Scene s = ft::builtin_diamond_scene();
  s.width = 8;
  s.height = 8;
  s.environment = ft::EnvironmentKind::kUniform;
  s.max_bounces = 64;
  s.material = ft::Material{};
  s.material.name = "slab";
  s.material.dispersion.model = ft::DispersionModel::kCauchy;
  s.material.dispersion.b[0] = n_o;
  if (alpha_o > 0.0f) s.material.o_ray = {ft::AbsorptionBand{alpha_o, 580.0f, 1e7f}};
  s.planes.clear();
  auto plane = [&](float x, float y, float z, float d) {
    ft::Plane p;
    p.normal[0] = x;
    p.normal[1] = y;
    p.normal[2] = z;
    p.d = d;
    s.planes.push_back(p);
  };
  plane(0, 1, 0, -kHalfThickness);
  plane(0, -1, 0, -kHalfThickness);
  plane(1, 0, 0, -5);
  plane(-1, 0, 0, -5);
  plane(0, 0, 1, -5);
  plane(0, 0, -1, -5);
  return s;
}

/// The slab made uniaxial: Δ, the axis, and α_e (one enormous band as for α_o).
void make_uniaxial(ft::Scene& s, float delta, ph::Vec3 axis, float alpha_e) {
  s.material.crystal_system = ft::CrystalSystem::kTetragonal;
  s.material.optical_character =
      delta > 0 ? ft::OpticalCharacter::kUniaxialPos : ft::OpticalCharacter::kUniaxialNeg;
  s.material.birefringence_delta = delta;
  s.material.c_axis[0] = axis.x;
  s.material.c_axis[1] = axis.y;
  s.material.c_axis[2] = axis.z;
  s.material.e_ray = {ft::AbsorptionBand{alpha_e, 580.0f, 1e7f}};
}

/// ΣY_scene/ΣY_env over `samples` samples of every pixel (the environment traced with the same samples and no
/// stone) and its standard error (delta method on d = Y_scene − ratio·Y_env); with normal_incidence the camera
/// looks straight down at the slab through a pinhole of negligible field.
struct Ratio {
  double mean, stderr_;
};
Ratio slab_ratio(const ft::Scene& s, std::uint32_t samples, bool normal_incidence = true) {
  EXPECT_TRUE(ft::validate_scene(s).ok()) << ft::validate_scene(s).what();
  ph::TraceParams p = ft::make_trace_params(s);
  const ph::MediumParams m = ft::make_medium_params(s);
  if (normal_incidence) {
    p.eye = ph::Vec3{0.0f, 3.0f, 0.0f};
    p.forward = ph::Vec3{0.0f, -1.0f, 0.0f};
    p.right = ph::Vec3{1.0f, 0.0f, 0.0f};
    p.up = ph::Vec3{0.0f, 0.0f, -1.0f};
    p.tan_half_fov = 1e-5f;
  }
  const std::vector<ph::FacetPlane> planes = ft::make_facet_planes(s);
  ph::TraceParams empty = p;
  empty.plane_count = 0;
  empty.bound_radius2 = 0.0f;
  std::vector<double> ys, es;
  for (std::uint32_t y = 0; y < s.height; ++y) {
    for (std::uint32_t x = 0; x < s.width; ++x) {
      for (std::uint32_t i = 0; i < samples; ++i) {
        const ph::SampleXyz env = ph::trace_sample(empty, nullptr, x, y, i);
        const ph::SampleXyz v =
            m.kind == ph::kMediumUniaxial ? ph::trace_sample_medium<ph::kMediumUniaxial>(
                                                p, m, planes.data(), ph::AnalyticEnv{}, x, y, i)
            : ph::needs_medium_transport(m) ? ph::trace_sample_medium<ph::kMediumIsotropic>(
                                                  p, m, planes.data(), ph::AnalyticEnv{}, x, y, i)
                                            : ph::trace_sample(p, planes.data(), x, y, i);
        EXPECT_TRUE(v.finite);
        ys.push_back(v.y);
        es.push_back(env.y);
      }
    }
  }
  double sy = 0.0, se = 0.0;
  for (std::size_t i = 0; i < ys.size(); ++i) sy += ys[i], se += es[i];
  const double ratio = sy / se;
  const double n = static_cast<double>(ys.size());
  double var = 0.0;
  for (std::size_t i = 0; i < ys.size(); ++i) {
    const double d = ys[i] - ratio * es[i];
    var += d * d;
  }
  var /= n - 1.0;
  return {ratio, std::sqrt(var / n) / (se / n)};
}

/// What a slab of index n and absorption α returns at normal incidence: 1 − A (see the file comment).
double slab_return(double n, double alpha) {
  const double r = ((n - 1.0) / (n + 1.0)) * ((n - 1.0) / (n + 1.0));
  const double tau = std::exp(-alpha * 2.0 * kHalfThickness);
  const double a = (1.0 - r) * (1.0 - tau) / (1.0 - r * tau);
  return 1.0 - a;
}

void expect_near_sigma(const Ratio& got, double want, double sigmas, const char* what) {
  EXPECT_NEAR(got.mean, want, sigmas * got.stderr_ + 1e-6)
      << what << ": got " << got.mean << " ± " << got.stderr_ << ", want " << want;
}

}  // namespace

TEST(TracerMedium, isotropic_slab_matches_the_slab_formula) {
  // The Tier 1 transport first: the formula and the harness are right before they judge the uniaxial step.
  const Ratio r = slab_ratio(slab_scene(1.6f, 1.5f), 4000);
  expect_near_sigma(r, slab_return(1.6, 1.5), 5.0, "isotropic slab");
  EXPECT_LT(r.stderr_, 0.01);
}

TEST(TracerMedium, uniaxial_slab_with_the_axis_normal_to_the_faces_is_the_isotropic_slab_of_n_o) {
  ft::Scene s = slab_scene(1.6f, 1.5f);
  make_uniaxial(s, 0.3f, ph::Vec3{0.0f, 1.0f, 0.0f}, 6.0f);  // n_e and α_e far from n_o and α_o
  const Ratio r = slab_ratio(s, 4000);
  expect_near_sigma(r, slab_return(1.6, 1.5), 5.0, "axis ⟂ faces");
  // And it is not the slab of n_e or α_e.
  EXPECT_GT(std::fabs(slab_return(1.9, 6.0) - slab_return(1.6, 1.5)), 20.0 * r.stderr_);
}

TEST(TracerMedium, uniaxial_slab_with_the_axis_in_the_face_splits_into_two_independent_slabs) {
  ft::Scene s = slab_scene(1.6f, 1.5f);
  make_uniaxial(s, 0.3f, ph::Vec3{1.0f, 0.0f, 0.0f}, 6.0f);
  const Ratio r = slab_ratio(s, 4000);
  const double want = 0.5 * (slab_return(1.6, 1.5) + slab_return(1.9, 6.0));
  expect_near_sigma(r, want, 5.0, "axis in the face");
  // Distinguishable from either slab alone.
  EXPECT_GT(std::fabs(want - slab_return(1.6, 1.5)), 20.0 * r.stderr_);
  // A negative Δ (n_e < n_o) and the axis along z (still in the face).
  make_uniaxial(s, -0.2f, ph::Vec3{0.0f, 0.0f, 2.0f}, 0.2f);
  const Ratio r2 = slab_ratio(s, 4000);
  expect_near_sigma(r2, 0.5 * (slab_return(1.6, 1.5) + slab_return(1.4, 0.2)), 5.0, "Δ < 0");
}

TEST(TracerMedium, uniaxial_slab_takes_n_e_from_its_extraordinary_curve) {
  // docs/design/tracer.md §7.7: with material.extraordinary_dispersion, n_e(λ) is that curve and Δ only marks the
  // stone anisotropic. Δ = +0.01 here would give n_e 1.61; the curve says 2.1, so the e slab is (2.1, α_e).
  ft::Scene s = slab_scene(1.6f, 1.5f);
  make_uniaxial(s, 0.01f, ph::Vec3{1.0f, 0.0f, 0.0f}, 6.0f);  // strong α_e: the index shows through R
  ft::Dispersion e;
  e.model = ft::DispersionModel::kCauchy;
  e.b[0] = 2.1f;
  s.material.extraordinary_dispersion = e;
  const Ratio r = slab_ratio(s, 4000);
  const double want = 0.5 * (slab_return(1.6, 1.5) + slab_return(2.1, 6.0));
  expect_near_sigma(r, want, 5.0, "n_e from the curve");
  // Distinguishable from n_o + Δ.
  EXPECT_GT(std::fabs(want - 0.5 * (slab_return(1.6, 1.5) + slab_return(1.61, 6.0))), 20.0 * r.stderr_);
}

TEST(TracerMedium, clear_stones_return_the_uniform_environment) {
  // The furnace with every Tier 2 medium: a clear stone neither creates nor loses energy (R + T = 1 per mode,
  // the mode and Fresnel choices divided by their probabilities, HG scattering with albedo 1).
  struct Case {
    const char* name;
    const char* preset;
    float sigma_s, g, edge;
  };
  for (const Case& c :
       {Case{"uniaxial emerald", "emerald", 0.0f, 0.0f, 0.0f},
        Case{"uniaxial zircon", "zircon", 0.0f, 0.0f, 0.0f},
        Case{"diamond with inclusions", "diamond", 2.0f, 0.5f, 0.0f},
        Case{"ruby with inclusions", "ruby", 1.5f, 0.3f, 0.0f},
        Case{"quartz with back-scattering inclusions", "quartz", 3.0f, -0.6f, 0.0f},
        Case{"diamond with rounded edges", "diamond", 0.0f, 0.0f, 0.03f},
        Case{"tourmaline with rounded edges and inclusions", "tourmaline", 1.0f, 0.2f, 0.02f}}) {
    ft::Scene s = ft::builtin_diamond_scene();
    s.width = 12;
    s.height = 12;
    s.environment = ft::EnvironmentKind::kUniform;
    s.max_bounces = 128;
    s.material = ft::material_preset(c.preset).value();
    s.material.o_ray.clear();  // clear: no absorption
    s.material.e_ray.clear();
    s.material.scattering_sigma_s = c.sigma_s;
    s.material.scattering_g = c.g;
    s.material.edge_rounding_radius = c.edge;
    const Ratio r = slab_ratio(s, 600, false);
    // Within 1 % (the bound for HG) and within the statistics; max_bounces truncation is far below.
    EXPECT_NEAR(r.mean, 1.0, std::max(0.01, 5.0 * r.stderr_))
        << c.name << ": " << r.mean << " ± " << r.stderr_;
    EXPECT_LT(r.stderr_, 0.004) << c.name;
  }
}

TEST(TracerMedium, absorbing_uniaxial_stone_loses_energy_and_pleochroism_matters) {
  // Ruby's bands absorb: the stone returns less than the environment. With its bands made weak, an e list that
  // absorbs 10× more than the o list (E ∥ c) darkens the stone: the e mode sees α_e.
  ft::Scene s = ft::builtin_diamond_scene();
  s.width = 12;
  s.height = 12;
  s.distance = 2.6f;  // the stone fills the view
  s.environment = ft::EnvironmentKind::kUniform;
  s.material = ft::material_preset("ruby").value();
  ASSERT_FALSE(s.material.e_ray.empty());
  const Ratio with_bands = slab_ratio(s, 300, false);
  EXPECT_LT(with_bands.mean, 0.8);
  for (ft::AbsorptionBand& band : s.material.o_ray) band.peak *= 0.05f;
  s.material.e_ray = s.material.o_ray;  // no pleochroism
  const Ratio no_pleo = slab_ratio(s, 300, false);
  for (ft::AbsorptionBand& band : s.material.e_ray) band.peak *= 10.0f;
  const Ratio strong = slab_ratio(s, 300, false);
  EXPECT_GT(no_pleo.mean, with_bands.mean + 3.0 * (with_bands.stderr_ + no_pleo.stderr_));
  EXPECT_LT(strong.mean, no_pleo.mean - 3.0 * (strong.stderr_ + no_pleo.stderr_))
      << strong.mean << " vs " << no_pleo.mean;
}

TEST(TracerMedium, hg_directions_have_mean_cosine_g) {
  const ph::Vec3 w = ph::normalize(ph::Vec3{0.3f, -0.5f, 0.8f});
  for (const float g : {-0.7f, -0.2f, 0.0f, 0.3f, 0.9f}) {
    double sum = 0.0;
    const int n = 200000;
    for (int i = 0; i < n; ++i) {
      const float u1 = (static_cast<float>(i) + 0.5f) / static_cast<float>(n);
      const float u2 = std::fmod(static_cast<float>(i) * 0.618034f, 1.0f);
      const ph::Vec3 d = ph::detail::hg_direction(w, g, u1, u2);
      EXPECT_NEAR(ph::dot(d, d), 1.0f, 1e-5f);
      sum += ph::dot(d, w);
    }
    EXPECT_NEAR(sum / n, g, 2e-3) << "g " << g;
  }
}

TEST(TracerMedium, cpu_tracer_renders_uniaxial_and_included_stones_deterministically_and_additively) {
  ft::Scene s = ft::builtin_diamond_scene();
  s.width = 24;
  s.height = 18;
  s.material = ft::material_preset("ruby").value();
  s.material.scattering_sigma_s = 1.5f;
  s.material.scattering_g = 0.3f;
  ft::Film whole(s.width, s.height), parts(s.width, s.height), again(s.width, s.height);
  ASSERT_TRUE(ft::cpu_accumulate(s, 0, 8, whole).ok());
  ASSERT_TRUE(ft::cpu_accumulate(s, 0, 3, parts).ok());
  ASSERT_TRUE(ft::cpu_accumulate(s, 3, 5, parts).ok());
  ft::CpuOptions one_thread;
  one_thread.threads = 1;
  ASSERT_TRUE(ft::cpu_accumulate(s, 0, 8, again, one_thread).ok());
  EXPECT_EQ(whole.xyz, parts.xyz);  // G3: [0,8) ≡ [0,3) then [3,8)
  EXPECT_EQ(whole.xyz, again.xyz);  // G1: independent of the threads
  double total = 0.0;
  for (float v : whole.xyz) total += v;
  EXPECT_GT(total, 0.0);
  EXPECT_EQ(whole.nonfinite, 0u);
}

/// Sample (x, y, i) the way the GPU's phased medium kernels trace it (docs/design/tracer.md §10.1): outside steps
/// until the path enters, inside steps until it ends or meets the stone again from outside (`handoffs` counts
/// those), then every bounce; kPlain as the plain stone's kernels take the first two (no inclusions, frosted
/// facets or edge rounding compiled in). Returns the sample's XYZ.
template <bool kPlain = false, class Env>
ph::SampleXyz phased_sample(const ph::TraceParams& p, const ph::MediumParams& m, const ph::FacetPlane* planes,
                            const Env& env, std::uint32_t x, std::uint32_t y, std::uint32_t i,
                            int& handoffs) {
  ph::PathState ps;
  ph::EnvPathState es{{0.0f, 0.0f, 0.0f}, 0.0f};
  ph::path_begin(ps, p, x, y, i);
  ph::MediumPathState ms;
  ph::medium_begin(ms, ps, p, m);
  bool going = p.max_bounces > 0;
  while (going && !ps.inside)
    going = ph::path_step_uniaxial<Env, ph::kPhaseOutside, kPlain>(ps, ms, p, m, planes, env, es);
  if (going) {
    bool handoff = false;
    while (ph::path_step_uniaxial<Env, ph::kPhaseInside, kPlain>(ps, ms, p, m, planes, env, es, &handoff)) {
    }
    if (handoff) {
      ++handoffs;
      while (ph::path_step_uniaxial(ps, ms, p, m, planes, env, es)) {
      }
    }
  }
  return ph::path_finish_env(ps, p, es);
}

// The phases the GPU splits a uniaxial path into are the whole path's steps: every sample's bits equal
// trace_sample_medium's, with inclusions, under NEE of the sun, and where a frosted girdle and rounded edges send
// paths back into the stone (the third phase). A plain stone's (no inclusions, frosted facets or edge rounding:
// the GPU's kPlain kernels) are the same bits with that code compiled out.
TEST(TracerMedium, phased_steps_are_the_whole_path_bit_for_bit) {
  struct Case {
    const char* name;
    const char* material;
    float sigma_s, edge_radius;
    bool frosted, sun;
    bool expect_handoffs;
    bool plain;
  };
  const Case cases[] = {
      {"emerald", "emerald", 0.0f, 0.0f, false, false, false, true},
      {"tourmaline (pleochroic)", "tourmaline", 0.0f, 0.0f, false, false, false, true},
      {"ruby with inclusions", "ruby", 1.5f, 0.0f, false, false, false, false},
      {"tourmaline, frosted girdle, rounded edges", "tourmaline", 0.0f, 0.05f, true, false, true, false},
      {"emerald, frosted girdle, rounded edges, DaylightSun", "emerald", 0.0f, 0.05f, true, true, true, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ft::Scene s = ft::builtin_diamond_scene();
    s.width = 40;
    s.height = 30;
    s.material = ft::material_preset(c.material).value();
    s.material.scattering_sigma_s = c.sigma_s;
    s.material.scattering_g = 0.3f;
    s.material.edge_rounding_radius = c.edge_radius;
    s.girdle_frosted = c.frosted;
    if (c.sun) s.lighting_preset = ft::LightingPreset::kDaylightSun;
    ASSERT_TRUE(ft::validate_scene(s).ok()) << ft::validate_scene(s).what();
    const ph::TraceParams p = ft::make_trace_params(s);
    const ph::MediumParams m = ft::make_medium_params(s);
    ASSERT_EQ(m.kind, ph::kMediumUniaxial);
    const std::vector<ph::FacetPlane> planes = ft::make_facet_planes(s);
    int handoffs = 0, plain_handoffs = 0, differ = 0, lit = 0;
    auto check = [&](const auto& env) {
      for (std::uint32_t y = 0; y < s.height; ++y) {
        for (std::uint32_t x = 0; x < s.width; ++x) {
          for (std::uint32_t i = 0; i < 8; ++i) {
            const ph::SampleXyz whole =
                ph::trace_sample_medium<ph::kMediumUniaxial>(p, m, planes.data(), env, x, y, i);
            const ph::SampleXyz phased = phased_sample(p, m, planes.data(), env, x, y, i, handoffs);
            bool same = std::memcmp(&whole, &phased, sizeof whole) == 0;
            if (c.plain) {
              const ph::SampleXyz plain =
                  phased_sample<true>(p, m, planes.data(), env, x, y, i, plain_handoffs);
              same = same && std::memcmp(&whole, &plain, sizeof whole) == 0;
            }
            differ += same ? 0 : 1;
            lit += whole.y > 0.0f ? 1 : 0;
          }
        }
      }
    };
    if (c.sun) {
      ASSERT_EQ(p.env_kind, ph::kEnvPreset);
      check(ph::PresetEnv{p.preset_model == ph::kPresetSun ? 1u : 0u});
    } else {
      check(ph::AnalyticEnv{});
    }
    EXPECT_EQ(differ, 0);
    if (c.plain) {
      EXPECT_EQ(plain_handoffs, handoffs) << "the plain steps hand on other paths";
    }
    EXPECT_GT(lit, 1000);  // the stone and the background, not a black frame
    if (c.expect_handoffs) {
      EXPECT_GT(handoffs, 0) << "no path met the stone again: the third phase went untested";
    }
    std::printf("[ metric ] %s: %d of %u samples handed to the third phase\n", c.name, handoffs,
                s.width * s.height * 8);
  }
}

TEST(TracerMedium, edge_rounding_changes_the_image_and_radius_zero_is_the_tier1_render) {
  ft::Scene s = ft::builtin_diamond_scene();
  s.width = 32;
  s.height = 24;
  ft::Film sharp(s.width, s.height), zero(s.width, s.height), rounded(s.width, s.height);
  ASSERT_TRUE(ft::cpu_accumulate(s, 0, 16, sharp).ok());
  s.material.edge_rounding_radius = 0.0f;
  EXPECT_FALSE(ph::needs_medium_transport(ft::make_medium_params(s)));
  ASSERT_TRUE(ft::cpu_accumulate(s, 0, 16, zero).ok());
  EXPECT_EQ(sharp.xyz, zero.xyz);
  s.material.edge_rounding_radius = 0.02f;  // tracer.md §13's diamond variant
  EXPECT_TRUE(ph::needs_medium_transport(ft::make_medium_params(s)));
  ASSERT_TRUE(ft::cpu_accumulate(s, 0, 16, rounded).ok());
  // Rounding bends most hits' normals (docs/design/tracer.md §4.1): many pixel values change.
  std::size_t differ = 0;
  double sum_sharp = 0.0, sum_rounded = 0.0;
  for (std::size_t i = 0; i < sharp.xyz.size(); ++i) {
    differ += sharp.xyz[i] != rounded.xyz[i];
    sum_sharp += sharp.xyz[i];
    sum_rounded += rounded.xyz[i];
  }
  EXPECT_GT(differ, sharp.xyz.size() / 8);
  EXPECT_GT(sum_rounded, 0.0);
  EXPECT_EQ(rounded.nonfinite, 0u);
  std::printf("[ metric ] edge rounding 0.02: %zu of %zu values differ, sum %.4f vs sharp %.4f\n", differ,
              sharp.xyz.size(), sum_rounded, sum_sharp);
}

// make_medium_params: e bands equal to the o bands are no pleochroism (e_band_count 0, docs/design/tracer.md
// §7.7), which the transport may skip because eᵀAe = α_o + (α_e − α_o)(e·c)² is α_o exactly when α_e = α_o.
TEST(TracerMedium, e_bands_equal_to_the_o_bands_are_no_pleochroism_and_change_no_bit) {
  ft::Scene s = ft::builtin_diamond_scene();
  auto emerald = ft::material_preset("emerald");
  auto tourmaline = ft::material_preset("tourmaline");
  ASSERT_TRUE(emerald.ok() && tourmaline.ok());
  s.material = *emerald;
  ASSERT_FALSE(s.material.o_ray.empty());
  const ph::MediumParams me = ft::make_medium_params(s);
  EXPECT_EQ(me.e_band_count, 0u);
  s.material.e_ray.back().peak *= 0.5f;  // one band differs: pleochroic
  EXPECT_EQ(ft::make_medium_params(s).e_band_count, static_cast<std::uint32_t>(s.material.e_ray.size()));
  s.material = *tourmaline;
  EXPECT_EQ(ft::make_medium_params(s).e_band_count, static_cast<std::uint32_t>(s.material.e_ray.size()));
  // The skipped expression: α_o + 0·(e·c)² for unit e and c and α over the catalogue's range.
  std::uint32_t state = 12345u;
  auto uniform = [&state] {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(state >> 8) * (1.0f / 16777216.0f);
  };
  int changed = 0;
  for (int i = 0; i < 10000; ++i) {
    const ph::Vec3 e = ph::normalize(ph::Vec3{uniform() - 0.5f, uniform() - 0.5f, uniform() - 0.5f});
    const ph::Vec3 c = ph::normalize(ph::Vec3{uniform() - 0.5f, uniform() - 0.5f, uniform() - 0.5f});
    const float alpha = uniform() * 40.0f;
    changed += ph::pleochroic_absorption(e, c, alpha, alpha) != alpha;
  }
  EXPECT_EQ(changed, 0);
}
