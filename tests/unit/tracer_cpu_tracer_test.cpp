/// @file
/// CPU tracer: furnace (energy conservation), additivity and thread independence (docs/design/tracer.md §9 G1–G3),
/// determinism, a pinned golden hash, cancellation, errors.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "facetrace/tracer/cpu_tracer.h"
#include "physics/spectrum.h"

namespace ft = facetrace::tracer;
namespace ph = facetrace::tracer::physics;
using facetrace::Code;

namespace {

/// exposure·XYZ(S) of the D65/100 illuminant, integrated from the interpolated tables (docs/design/tracer.md §12 furnace).
void furnace_expected(double exposure, double out[3]) {
  out[0] = out[1] = out[2] = 0.0;
  const double step = 0.01;
  for (double l = 380.0 + 0.5 * step; l < 780.0; l += step) {
    const ph::Vec3 c = ph::cmf_xyz(static_cast<float>(l));
    const double s = ph::d65_spectrum(static_cast<float>(l));
    out[0] += c.x * s * step;
    out[1] += c.y * s * step;
    out[2] += c.z * s * step;
  }
  for (int i = 0; i < 3; ++i) out[i] *= exposure / 106.856;
}

ft::Scene furnace_scene(bool with_stone) {
  ft::Scene s = ft::builtin_diamond_scene();
  s.environment = ft::EnvironmentKind::kUniform;
  s.width = 32;
  s.height = 32;
  s.distance = 2.6f;  // the stone covers most of the frame
  s.pitch = 0.6f;
  s.exposure = 0.8f;
  s.max_bounces = 128;
  if (!with_stone) s.planes.clear();
  return s;
}

void expect_furnace(const ft::Scene& s, std::uint32_t spp) {
  ft::Film film(s.width, s.height);
  ASSERT_TRUE(ft::cpu_accumulate(s, 0, spp, film).ok());
  double mean[3] = {0, 0, 0};
  for (std::size_t i = 0; i < film.pixels(); ++i) {
    for (int c = 0; c < 3; ++c) mean[c] += film.xyz[i * 3 + c];
  }
  double expected[3];
  furnace_expected(s.exposure, expected);
  for (int c = 0; c < 3; ++c) {
    mean[c] /= static_cast<double>(film.pixels()) * spp;
    EXPECT_NEAR(mean[c] / expected[c], 1.0, 0.01)
        << "component " << c << ": " << mean[c] << " vs " << expected[c];
  }
  EXPECT_EQ(film.nonfinite, 0u);
}

std::uint64_t fnv1a(const ft::Film& f) {
  std::uint64_t h = 1469598103934665603ull;
  auto feed = [&](const void* data, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  feed(f.xyz.data(), f.xyz.size() * sizeof(float));
  feed(f.samples.data(), f.samples.size() * sizeof(std::uint32_t));
  return h;
}

ft::Scene tiny_scene() {
  ft::Scene s = ft::builtin_diamond_scene();
  s.width = 24;
  s.height = 20;
  return s;
}

ft::Film render(const ft::Scene& s, std::uint64_t first, std::uint32_t spp, unsigned threads) {
  ft::Film f(s.width, s.height);
  ft::CpuOptions o;
  o.threads = threads;
  EXPECT_TRUE(ft::cpu_accumulate(s, first, spp, f, o).ok());
  return f;
}

bool same_bits(const ft::Film& a, const ft::Film& b) {
  return a.xyz.size() == b.xyz.size() &&
         std::memcmp(a.xyz.data(), b.xyz.data(), a.xyz.size() * sizeof(float)) == 0 &&
         a.samples == b.samples && a.nonfinite == b.nonfinite;
}

}  // namespace

TEST(Furnace, empty_scene_returns_the_environment) { expect_furnace(furnace_scene(false), 64); }

TEST(Furnace, non_absorbing_diamond_returns_the_environment) { expect_furnace(furnace_scene(true), 64); }

TEST(Furnace, non_dispersive_stone_returns_the_environment) {
  ft::Scene s = furnace_scene(true);
  s.material.dispersion = {ft::DispersionModel::kCauchy, {1.75f, 0, 0}, {0, 0, 0}};
  expect_furnace(s, 64);
}

TEST(Furnace, absorbing_stone_returns_less) {
  ft::Scene s = furnace_scene(true);
  s.material.o_ray.push_back({3.0f, 550.0f, 60.0f, ft::BandDomain::kWavelength});
  ft::Film f(s.width, s.height);
  ASSERT_TRUE(ft::cpu_accumulate(s, 0, 16, f).ok());
  double y = 0;
  for (std::size_t i = 0; i < f.pixels(); ++i) y += f.xyz[i * 3 + 1];
  double expected[3];
  furnace_expected(s.exposure, expected);
  EXPECT_LT(y / (f.pixels() * 16.0), 0.9 * expected[1]);
}

TEST(CpuTracer, split_ranges_add_up_bit_for_bit) {
  const ft::Scene s = tiny_scene();
  const ft::Film whole = render(s, 0, 64, 2);
  ft::Film parts(s.width, s.height);
  ft::CpuOptions o;
  o.threads = 2;
  ASSERT_TRUE(ft::cpu_accumulate(s, 0, 32, parts, o).ok());
  ASSERT_TRUE(ft::cpu_accumulate(s, 32, 32, parts, o).ok());
  EXPECT_TRUE(same_bits(whole, parts));
  ft::Film three(s.width, s.height);
  ASSERT_TRUE(ft::cpu_accumulate(s, 0, 5, three, o).ok());
  ASSERT_TRUE(ft::cpu_accumulate(s, 5, 50, three, o).ok());
  ASSERT_TRUE(ft::cpu_accumulate(s, 55, 9, three, o).ok());
  EXPECT_TRUE(same_bits(whole, three));
  EXPECT_EQ(whole.samples[0], 64u);
  // A different range gives a different image (the test can fail).
  EXPECT_FALSE(same_bits(whole, render(s, 1, 64, 2)));
}

TEST(CpuTracer, identical_for_1_2_and_8_threads) {
  const ft::Scene s = tiny_scene();
  const ft::Film one = render(s, 0, 8, 1);
  EXPECT_TRUE(same_bits(one, render(s, 0, 8, 2)));
  EXPECT_TRUE(same_bits(one, render(s, 0, 8, 8)));
  EXPECT_TRUE(same_bits(one, render(s, 0, 8, 0)));
}

TEST(CpuTracer, deterministic_twice) {
  const ft::Scene s = tiny_scene();
  EXPECT_TRUE(same_bits(render(s, 100, 8, 2), render(s, 100, 8, 2)));
}

TEST(CpuTracer, pinned_golden_hash_of_a_tiny_render) {
  // 32×32 built-in diamond, samples [0, 8). Checked by eye before pinning (see the commit message).
  ft::Scene s = ft::builtin_diamond_scene();
  s.width = 32;
  s.height = 32;
  const ft::Film f = render(s, 0, 8, 2);
  EXPECT_EQ(fnv1a(f), 0xace75555d7ba89deull) << std::hex << "got 0x" << fnv1a(f);
}

TEST(CpuTracer, pinned_golden_hashes_of_tier2_renders) {
  // 32×32, samples [0, 8) of the Tier 2 media (docs/design/tracer.md §7.7, §4.1). The same scenes were looked at
  // by eye at 256² and 128 spp before pinning (benchmarks/NOTES.md "Tier 2 goldens"): a green emerald with a frosted girdle and
  // rounded edges, a cloudy pink-red ruby with inclusions, a blue-violet sapphire with its axis along x.
  struct Case {
    const char* name;
    std::uint64_t hash;
    void (*edit)(ft::Scene&);
  };
  const Case cases[] = {
      {"emerald, frosted girdle, rounded edges", 0x4ee6ce3d75ccdca6ull,
       [](ft::Scene& s) {
         s.material = ft::material_preset("emerald").value();
         s.material.edge_rounding_radius = 0.03f;
         s.girdle_frosted = true;
       }},
      {"ruby with inclusions", 0x4217bad127e39d76ull,
       [](ft::Scene& s) {
         s.material = ft::material_preset("ruby").value();
         s.material.scattering_sigma_s = 1.5f;
         s.material.scattering_g = 0.3f;
       }},
      {"sapphire, tilted axis, Daylight", 0xeefce458d3db5fa8ull,
       [](ft::Scene& s) {
         s.material = ft::material_preset("sapphire").value();
         s.material.c_axis[0] = 1.0f;
         s.lighting_preset = ft::LightingPreset::kDaylight;
       }},
  };
  for (const Case& c : cases) {
    ft::Scene s = ft::builtin_diamond_scene();
    s.width = 32;
    s.height = 32;
    c.edit(s);
    const ft::Film f = render(s, 0, 8, 2);
    EXPECT_EQ(fnv1a(f), c.hash) << c.name << std::hex << ": got 0x" << fnv1a(f);
  }
}

TEST(CpuTracer, cancellation_stops_between_tiles) {
  const ft::Scene s = tiny_scene();
  std::atomic<bool> cancel{true};
  ft::CpuOptions o;
  o.cancel = &cancel;
  ft::Film f(s.width, s.height);
  EXPECT_EQ(ft::cpu_accumulate(s, 0, 4, f, o).code(), Code::kCancelled);
  EXPECT_EQ(f.samples[0], 0u);
}

TEST(CpuTracer, reports_progress_up_to_one) {
  const ft::Scene s = tiny_scene();
  std::atomic<int> calls{0};
  std::atomic<double> last{0.0};
  ft::CpuOptions o;
  o.threads = 1;
  o.progress = [&](double f) {
    ++calls;
    last = f;
  };
  ft::Film f(s.width, s.height);
  ASSERT_TRUE(ft::cpu_accumulate(s, 0, 1, f, o).ok());
  EXPECT_EQ(calls.load(), 4);  // 2×2 tiles of 16 px
  EXPECT_DOUBLE_EQ(last.load(), 1.0);
}

TEST(CpuTracer, rejects_bad_inputs) {
  ft::Scene s = tiny_scene();
  ft::Film wrong(s.width + 1, s.height);
  EXPECT_EQ(ft::cpu_accumulate(s, 0, 1, wrong).code(), Code::kInvalidArgument);
  ft::Film f(s.width, s.height);
  s.max_bounces = 500;
  EXPECT_EQ(ft::cpu_accumulate(s, 0, 1, f).code(), Code::kInvalidArgument);
  s = tiny_scene();
  s.lighting_preset = ft::LightingPreset::kUvLamp395;  // a UV lamp needs fluorescence (Tier 3)
  EXPECT_EQ(ft::cpu_accumulate(s, 0, 1, f).code(), Code::kNotSupported);
  s = tiny_scene();
  s.material.fluorescence = true;
  EXPECT_EQ(ft::cpu_accumulate(s, 0, 1, f).code(), Code::kNotSupported);
  EXPECT_EQ(f.samples[0], 0u);
}

TEST(CpuTracer, frosted_girdle_and_other_presets_render_finite) {
  for (auto preset :
       {ft::LightingPreset::kDaylight, ft::LightingPreset::kRingLights, ft::LightingPreset::kIlluminantA}) {
    ft::Scene s = tiny_scene();
    s.girdle_frosted = true;
    s.lighting_preset = preset;
    s.pitch = 0.05f;  // look at the girdle
    const ft::Film f = render(s, 0, 4, 2);
    double y = 0;
    for (std::size_t i = 0; i < f.pixels(); ++i) y += f.xyz[i * 3 + 1];
    EXPECT_GT(y, 0.0);
    EXPECT_EQ(f.nonfinite, 0u);
  }
}
