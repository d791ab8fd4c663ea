/// @file
/// HDR environment maps on the CPU tracer (docs/design/tracer.md §6.1): the texel spectra's XYZ, the
/// equirectangular convention, the importance-sampling density, a constant map against the uniform environment,
/// NEE on against NEE off, the example scene, and the GPU's decline.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "facetrace/tracer/cpu_tracer.h"
#include "facetrace/tracer/env_map.h"
#include "facetrace/tracer/gpu_tracer.h"
#include "facetrace/tracer/renderer.h"
#include "facetrace/tracer/scene.h"
#include "facetrace/tracer/scene_json.h"
#include "physics/hdr_environment.h"
#include "physics/spectral_tables.h"
#include "physics/transport.h"
#include "tracer_shapes.h"

namespace ft = facetrace::tracer;
namespace ph = facetrace::tracer::physics;
using facetrace::Code;

namespace {

// Linear Rec. 709 → XYZ (IEC 61966-2-1), the matrix scripts/make_env_basis solves the basis against.
constexpr double kM709[3][3] = {
    {0.4124564, 0.3575761, 0.1804375}, {0.2126729, 0.7151522, 0.0721750}, {0.0193339, 0.1191920, 0.9503041}};

/// XYZ of a spectrum given at the 81 nodes (380..780 nm step 5) and linearly interpolated, as the tracer's CMF:
/// ∫ CMF·S dλ / 106.856, exact for two piecewise-linear functions (Simpson on each 5 nm interval).
std::array<double, 3> exact_xyz(const std::vector<double>& s) {
  const float* cmf[3] = {ph::cmf_x_table(), ph::cmf_y_table(), ph::cmf_z_table()};
  std::array<double, 3> out{};
  for (int c = 0; c < 3; ++c) {
    double sum = 0;
    for (int i = 0; i + 1 < ph::kSpectralTableSize; ++i) {
      const double f0 = cmf[c][i], f1 = cmf[c][i + 1], g0 = s[i], g1 = s[i + 1];
      sum += 5.0 / 6.0 * (2 * f0 * g0 + f0 * g1 + f1 * g0 + 2 * f1 * g1);
    }
    out[c] = sum / 106.856;
  }
  return out;
}

std::array<double, 3> rgb_to_xyz(const float* rgb) {
  std::array<double, 3> out{};
  for (int r = 0; r < 3; ++r) out[r] = kM709[r][0] * rgb[0] + kM709[r][1] * rgb[1] + kM709[r][2] * rgb[2];
  return out;
}

ph::EnvMapView view_of(const ft::EnvLight& l, float exposure = 1.0f, bool nee = true) {
  return ph::EnvMapView{l.map.rgb.data(), l.row_cdf.data(), l.col_cdf.data(), l.row_cos.data(),
                        l.map.width,      l.map.height,     exposure,         nee ? 1u : 0u};
}

std::shared_ptr<const ft::EnvLight> studio_map() {
  auto m = ft::load_env_map(std::string(FT_SOURCE_DIR) + "/examples/maps/studio_small.hdr", "");
  EXPECT_TRUE(m.ok()) << m.status().what();
  auto l = ft::make_env_light(std::move(m).value());
  EXPECT_TRUE(l.ok()) << l.status().what();
  return *l;
}

ph::Vec3 direction(double az_deg, double el_deg) {
  const double az = az_deg * M_PI / 180, el = el_deg * M_PI / 180;
  return ph::Vec3{float(std::cos(el) * std::sin(az)), float(std::sin(el)),
                  float(std::cos(el) * std::cos(az))};
}

/// The mean XYZ over the film's pixels per sample.
std::array<double, 3> film_mean(const ft::Film& f) {
  std::array<double, 3> m{};
  for (std::size_t p = 0; p < f.pixels(); ++p)
    for (int c = 0; c < 3; ++c) m[c] += f.xyz[p * 3 + c] / double(f.samples[p]);
  for (double& v : m) v /= double(f.pixels());
  return m;
}

using facetrace::tracer::test::frosted_cube;

}  // namespace

// §6.1: XYZ(Σ cᵢBᵢ) = M₇₀₉·c, the integral taken exactly over the float basis tables (so float precision is
// all that separates them), and the same through the hero-wavelength estimator itself (§8) by midpoint
// quadrature over the hero.
TEST(HdrSpectrum, reproduces_the_xyz_of_random_texels_to_float_precision) {
  std::mt19937 rng(14);
  std::uniform_real_distribution<float> exponent(-3.0f, 3.0f);
  double worst = 0;
  for (int t = 0; t < 2000; ++t) {
    const float rgb[3] = {std::exp(exponent(rng)), std::exp(exponent(rng)), std::exp(exponent(rng))};
    std::vector<double> s(ph::kSpectralTableSize);
    for (int i = 0; i < ph::kSpectralTableSize; ++i) s[i] = ph::hdr_spectrum(rgb, 380.0f + 5.0f * float(i));
    const auto got = exact_xyz(s), want = rgb_to_xyz(rgb);
    for (int c = 0; c < 3; ++c) worst = std::max(worst, std::fabs(got[c] - want[c]) / want[c]);
  }
  EXPECT_LT(worst, 1e-6) << "worst relative XYZ error of a texel spectrum";
  // Non-negative everywhere: a texel with RGB ≥ 0 has a spectrum ≥ 0 (no per-sample clamp bias, §8 Finish).
  for (int b = 0; b < 3; ++b)
    for (int i = 0; i < ph::kSpectralTableSize; ++i) EXPECT_GE(ph::hdr_basis_table(b)[i], 0.0f);
  // Through the estimator: Σ_k CMF(λ_k)·L(λ_k)·50/106.856 averaged over 40 000 evenly spaced heroes.
  for (int t = 0; t < 5; ++t) {
    const float rgb[3] = {std::exp(exponent(rng)), std::exp(exponent(rng)), std::exp(exponent(rng))};
    const int n = 40000;
    std::array<double, 3> mean{};
    for (int i = 0; i < n; ++i) {
      const float hero = 380.0f + 400.0f * (float(i) + 0.5f) / float(n);
      for (int k = 0; k < ph::kChannels; ++k) {
        const float l = ph::channel_lambda(hero, k);
        const ph::Vec3 cmf = ph::cmf_xyz(l);
        const double v = double(ph::hdr_spectrum(rgb, l)) * ph::kXyzScale;
        mean[0] += cmf.x * v / n;
        mean[1] += cmf.y * v / n;
        mean[2] += cmf.z * v / n;
      }
    }
    const auto want = rgb_to_xyz(rgb);
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(mean[c], want[c], 2e-5 * want[c]) << "component " << c;
  }
}

// §6.1 orientation: column x is azimuth 2π(x + ½)/W from +Z towards +X, row y the polar angle π(y + ½)/H from +Y:
// the regions examples/maps/make_studio_hdr.py describes sit where that convention puts them.
TEST(HdrMap, lookup_follows_the_equirectangular_convention_of_the_example_map) {
  const auto light = studio_map();
  const ph::EnvMapView v = view_of(*light);
  auto rgb = [&](double az, double el) {
    const float* t = v.rgb + std::size_t{ph::env_texel(v, direction(az, el))} * 3;
    return std::array<float, 3>{t[0], t[1], t[2]};
  };
  auto near = [](std::array<float, 3> got, std::array<float, 3> want) {
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(got[c], want[c], 0.02 * want[c] + 1e-3) << "channel " << c;
  };
  near(rgb(45, 35), {8.0f, 7.6f, 7.0f});    // key softbox
  near(rgb(220, 25), {3.0f, 3.2f, 3.6f});   // fill softbox
  near(rgb(-140, 25), {3.0f, 3.2f, 3.6f});  // the same azimuth, negative
  near(rgb(0, 89.9), {2.0f, 2.0f, 2.0f});   // top light
  near(rgb(130, 10), {0.05f, 0.05f, 0.05f});
  near(rgb(300, -45), {0.075f, 0.075f, 0.075f});  // floor: 0.15·(1 − 45/90)
}

// §6.1 sampling: the density integrates to 1 over the sphere, and draws from it estimate ∫ Y dω (luminance)
// and ∫ 1 dω = 4π without bias.
TEST(HdrMap, the_sampling_density_is_normalised_and_unbiased) {
  const auto light = studio_map();
  const ph::EnvMapView v = view_of(*light);
  double total = 0;
  for (std::uint32_t y = 0; y < v.height; ++y) {
    const double solid = 2 * M_PI / v.width * (double(v.row_cos[y]) - double(v.row_cos[y + 1]));
    for (std::uint32_t x = 0; x < v.width; ++x) total += ph::env_texel_pdf(v, y * v.width + x) * solid;
  }
  EXPECT_NEAR(total, 1.0, 1e-5);
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const int n = 400000;
  double lum = 0, area = 0;
  for (int i = 0; i < n; ++i) {
    const ph::Vec3 w = ph::env_sample(v, u(rng), u(rng));
    ASSERT_NEAR(ph::length(w), 1.0f, 1e-5f);
    const float pdf = ph::env_pdf(v, w);
    ASSERT_GT(pdf, 0.0f);
    const float* t = v.rgb + std::size_t{ph::env_texel(v, w)} * 3;
    lum += (0.2126729 * t[0] + 0.7151522 * t[1] + 0.0721750 * t[2]) / pdf / n;
    area += 1.0 / pdf / n;
  }
  EXPECT_NEAR(lum, light->luminance_power, 2e-3 * light->luminance_power);  // importance ∝ Y: low variance
  EXPECT_NEAR(area, 4 * M_PI, 0.03 * 4 * M_PI);  // 1/p varies 160× over this map: σ ≈ 0.6 % at n = 4e5
  // u = 1 (a stream can return it, §9) stays inside the map.
  const ph::Vec3 edge = ph::env_sample(v, 1.0f, 1.0f);
  EXPECT_GT(ph::env_pdf(v, edge), 0.0f);
}

// §6.1: a constant map whose texels have the XYZ of the uniform environment's radiance renders the same image
// in expectation. The stone has a constant index (Cauchy n = 1.5), so every sample follows the same path under
// both and only the spectra (metamers of one XYZ) differ; a frosted girdle brings NEE and its MIS in.
TEST(HdrRender, a_constant_map_equals_the_uniform_environment_of_the_same_radiance) {
  ft::Scene uni = ft::builtin_diamond_scene();
  uni.width = uni.height = 48;
  uni.environment = ft::EnvironmentKind::kUniform;
  uni.exposure = 1.5f;
  uni.material.dispersion.model = ft::DispersionModel::kCauchy;
  uni.material.dispersion.b[0] = 1.5f;
  uni.material.dispersion.b[1] = uni.material.dispersion.b[2] = 0.0f;
  uni.girdle_frosted = true;
  // XYZ of exposure·D65/100 (the uniform environment's radiance, LightTent's illuminant), exactly.
  std::vector<double> d65(ph::kSpectralTableSize);
  for (int i = 0; i < ph::kSpectralTableSize; ++i) d65[i] = ph::d65_table()[i] * 0.01;
  const auto xyz = exact_xyz(d65);
  // Rec. 709 RGB of that XYZ (M₇₀₉⁻¹, IEC 61966-2-1).
  const double inv[3][3] = {{3.2404542, -1.5371385, -0.4985314},
                            {-0.9692660, 1.8760108, 0.0415560},
                            {0.0556434, -0.2040259, 1.0572252}};
  ft::EnvMap map;
  map.width = 16;
  map.height = 8;
  for (std::uint32_t t = 0; t < map.width * map.height; ++t)
    for (int r = 0; r < 3; ++r)
      map.rgb.push_back(float(inv[r][0] * xyz[0] + inv[r][1] * xyz[1] + inv[r][2] * xyz[2]));
  ft::Scene hdr = uni;
  hdr.environment = ft::EnvironmentKind::kHdr;
  hdr.environment_map = "<constant>";
  hdr.environment_light = *ft::make_env_light(map);
  ASSERT_TRUE(ft::validate_scene(hdr).ok()) << ft::validate_scene(hdr).what();

  ft::Film fu(48, 48), fh(48, 48);
  ASSERT_TRUE(ft::cpu_accumulate(uni, 0, 64, fu).ok());
  ASSERT_TRUE(ft::cpu_accumulate(hdr, 0, 64, fh).ok());
  EXPECT_EQ(fh.nonfinite, 0u);
  const auto mu = film_mean(fu), mh = film_mean(fh);
  // Bound 0.05 %: the per-sample difference is I·Σ_k CMF(λ_k)·ΔL(λ_k), of zero mean over the hero; over
  // 147 456 samples with stratified heroes its mean measured 0.006 % (leaving out the MIS weight of escapes
  // after a frosted bounce, i.e. counting them twice with NEE, gives +0.18 %).
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(mh[c], mu[c], 5e-4 * mu[c]) << "component " << c << ": hdr " << mh[c] << " uniform " << mu[c];
    std::printf("[ measure  ] constant map vs uniform, component %d: %.6f vs %.6f (%+.4f %%)\n", c, mh[c],
                mu[c], 100.0 * (mh[c] - mu[c]) / mu[c]);
  }
}

// §6.1: NEE with the power heuristic and the frosted lobe alone estimate the same image. A cube with every face
// frosted under the studio map: 8 batches of 32 samples each way; the image means agree within 4 standard
// errors of their difference, and NEE lowers the spread between batches.
TEST(HdrRender, nee_on_and_off_agree_statistically) {
  ft::Scene s = ft::builtin_diamond_scene();
  s.width = s.height = 32;
  s.distance = 3.0f;
  s.planes = frosted_cube();
  s.environment = ft::EnvironmentKind::kHdr;
  s.environment_map = "studio_small.hdr";
  s.environment_light = studio_map();
  ASSERT_TRUE(ft::validate_scene(s).ok()) << ft::validate_scene(s).what();
  const int batches = 8, spp = 32;
  double mean[2] = {0, 0}, var[2] = {0, 0};
  for (int nee = 0; nee < 2; ++nee) {
    ft::CpuOptions o;
    o.hdr_nee = nee == 1;
    std::vector<double> y;
    for (int b = 0; b < batches; ++b) {
      ft::Film f(s.width, s.height);
      ASSERT_TRUE(ft::cpu_accumulate(s, std::uint64_t(b) * spp, spp, f, o).ok());
      EXPECT_EQ(f.nonfinite, 0u);
      y.push_back(film_mean(f)[1]);
    }
    for (double v : y) mean[nee] += v / batches;
    for (double v : y) var[nee] += (v - mean[nee]) * (v - mean[nee]) / (batches - 1);
  }
  const double se = std::sqrt(var[0] / batches + var[1] / batches);
  std::printf(
      "[ measure  ] frosted cube Y: NEE off %.6f (batch sd %.6f), NEE on %.6f (batch sd %.6f), "
      "difference %.2f standard errors\n",
      mean[0], std::sqrt(var[0]), mean[1], std::sqrt(var[1]), (mean[1] - mean[0]) / se);
  EXPECT_NEAR(mean[1], mean[0], 4 * se);
  EXPECT_LT(var[1], var[0]) << "NEE should lower the variance under a map with small bright lights";
}

// The example scene renders on the CPU as documented: finite, not black, with a lit stone.
TEST(HdrRender, the_example_scene_renders_finite_and_not_black_on_the_cpu) {
  auto s = ft::load_scene_file(std::string(FT_SOURCE_DIR) + "/examples/diamond-hdr.json");
  ASSERT_TRUE(s.ok()) << s.status().what();
  ASSERT_EQ(s->environment, ft::EnvironmentKind::kHdr);
  ASSERT_NE(s->environment_light, nullptr);
  EXPECT_EQ(s->environment_light->map.width, 256u);
  s->width = s->height = 40;
  ASSERT_TRUE(ft::tier_features(*s).status().ok());
  ft::Film f(s->width, s->height);
  ft::RenderOptions o;
  o.device = ft::RenderDevice::kCpu;
  auto r = ft::render(*s, 0, 8, f, o);
  ASSERT_TRUE(r.ok()) << r.status().what();
  EXPECT_EQ(f.nonfinite, 0u);
  double max_y = 0;
  for (float v : f.xyz) ASSERT_TRUE(std::isfinite(v));
  for (std::size_t p = 0; p < f.pixels(); ++p)
    max_y = std::max(max_y, double(f.xyz[p * 3 + 1]) / f.samples[p]);
  const auto m = film_mean(f);
  EXPECT_GT(m[1], 0.02) << "mean Y";
  EXPECT_GT(max_y, 1.0) << "the stone shows the key light";
}

// §6.1: an HDR scene is for both tracers; the GPU workload takes it (its map goes up as a resident) unless the map
// is over FACETRACE_GPU_ENV_MAX_MB, which declines by name; a feature neither tracer has is still refused.
TEST(HdrRender, an_hdr_scene_goes_to_the_gpu_unless_its_map_is_over_the_limit) {
  ft::Scene s = ft::builtin_diamond_scene();
  s.width = s.height = 8;
  s.environment = ft::EnvironmentKind::kHdr;
  s.environment_map = "studio_small.hdr";
  s.environment_map_sha256 = std::string(64, 'a');
  s.environment_light = studio_map();
  const ft::TierFeatures t = ft::tier_features(s);
  EXPECT_TRUE(t.status().ok());
  EXPECT_TRUE(t.gpu_status().ok()) << t.gpu_status().what();
  ft::Film f(8, 8);
  {
    ft::TraceWorkload w(s, 0, 4, f, {});
    EXPECT_TRUE(w.can_run({}).ok()) << w.can_run({}).what();
  }
  ::setenv("FACETRACE_GPU_ENV_MAX_MB", "0", 1);
  {
    ft::TraceWorkload w(s, 0, 4, f, {});
    const facetrace::Status why = w.can_run({});
    EXPECT_EQ(why.code(), Code::kDeclined);
    EXPECT_NE(why.what().find("over FACETRACE_GPU_ENV_MAX_MB=0"), std::string::npos) << why.what();
    EXPECT_NE(why.what().find("256x128"), std::string::npos) << why.what();
  }
  ::unsetenv("FACETRACE_GPU_ENV_MAX_MB");
  ft::TierFeatures birefringent = t;
  birefringent.not_on_cpu.push_back("birefringence (Tier 2)");
  EXPECT_EQ(birefringent.gpu_status().code(), Code::kNotSupported);
  EXPECT_NE(birefringent.gpu_status().what().find("birefringence (Tier 2)"), std::string::npos);
  ft::RenderOptions autod;  // on whichever device there is
  autod.device = ft::RenderDevice::kAuto;
  auto a = ft::render(s, 0, 2, f, autod);
  ASSERT_TRUE(a.ok()) << a.status().what();
  EXPECT_EQ(f.samples[0], 2u);
}

// Bad input stays named: an HDR scene without its map, a map that is not there, a table of the wrong size.
TEST(HdrRender, an_hdr_scene_without_its_map_is_named) {
  ft::Scene s = ft::builtin_diamond_scene();
  s.environment = ft::EnvironmentKind::kHdr;
  s.environment_map = "/nonexistent/map.hdr";
  const facetrace::Status v = ft::validate_scene(s);
  EXPECT_EQ(v.code(), Code::kInvalidArgument);
  EXPECT_NE(v.what().find("environment: the HDR map /nonexistent/map.hdr is not loaded"), std::string::npos)
      << v.what();
  ft::Film f(s.width, s.height);
  EXPECT_EQ(ft::cpu_accumulate(s, 0, 1, f).code(), Code::kInvalidArgument);
  const facetrace::Status l = ft::load_environment_light(s);
  EXPECT_EQ(l.code(), Code::kIo);
  EXPECT_NE(l.what().find("/nonexistent/map.hdr"), std::string::npos) << l.what();
  ft::EnvMap bad;
  bad.width = 4;
  bad.height = 2;
  bad.rgb.assign(5, 0.0f);
  EXPECT_EQ(ft::make_env_light(bad).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ft::make_env_light(ft::EnvMap{}).status().code(), Code::kInvalidArgument);
}
