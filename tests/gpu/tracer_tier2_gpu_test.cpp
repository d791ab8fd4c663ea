/// @file
/// Tier 2 media on the GPU against the CPU tracer (docs/design/tracer.md §7.7, §12): per-sample agreement of every
/// Tier 2 feature the megakernel traces (uniaxial stones, frosted facets on them, inclusions in isotropic and
/// uniaxial stones, a uniaxial stone under an HDR map), the statistical test of tracer.md §12 on the §13 Tier 2
/// materials, and chunked == whole and batch == single bit for bit with a batch that mixes material classes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "cpu/trace_params.h"
#include "facetrace/core/parallel.h"
#include "facetrace/runtime/executor.h"
#include "facetrace/tracer/cpu_tracer.h"
#include "facetrace/tracer/env_map.h"
#include "facetrace/tracer/renderer.h"
#include "gpu_skip.h"
#include "tracer_agreement.h"
#include "physics/hdr_environment.h"
#include "physics/medium.h"
#include "physics/transport.h"

namespace facetrace::tracer {
namespace {

using runtime::Outcome;
using test::CpuTrace;
using test::gpu_tuples;
using test::same_bits;

std::string examples_dir() {
  const char* e = std::getenv("FT_EXAMPLES_DIR");
  return e != nullptr && e[0] != '\0' ? std::string(e) : std::string(FT_EXAMPLES_DIR);
}

Scene stone(const char* preset, std::uint32_t w, std::uint32_t h) {
  Scene s = builtin_diamond_scene();
  s.width = w;
  s.height = h;
  s.material = material_preset(preset).value();
  return s;
}

struct Case {
  const char* name;
  Scene scene;
};

std::vector<Case> per_sample_cases() {
  std::vector<Case> out;
  out.push_back({"emerald (uniaxial)", stone("emerald", 64, 48)});
  Scene t = stone("tourmaline", 64, 48);
  t.girdle_frosted = true;
  out.push_back({"tourmaline, frosted girdle", t});
  Scene r = stone("ruby", 64, 48);
  r.material.scattering_sigma_s = 1.5f;
  r.material.scattering_g = 0.3f;
  out.push_back({"ruby with inclusions (σ_s 1.5, g 0.3)", r});
  Scene d = stone("diamond", 64, 48);
  d.material.scattering_sigma_s = 0.8f;
  d.material.scattering_g = -0.2f;
  out.push_back({"diamond with inclusions (isotropic)", d});
  Scene z = stone("sapphire", 64, 48);
  z.material.c_axis[0] = 1.0f;
  z.material.c_axis[1] = 0.3f;
  z.material.c_axis[2] = 0.0f;
  out.push_back({"sapphire, tilted optic axis", z});
  Scene e = stone("diamond", 64, 48);
  e.material.edge_rounding_radius = 0.02f;  // tracer.md §13's diamond variant
  out.push_back({"diamond with rounded edges (r 0.02)", e});
  Scene u = stone("zircon", 64, 48);
  u.material.edge_rounding_radius = 0.02f;
  u.material.scattering_sigma_s = 0.5f;
  out.push_back({"zircon with rounded edges and inclusions", u});
  Scene h = stone("emerald", 64, 48);
  h.girdle_frosted = true;
  h.environment = EnvironmentKind::kHdr;
  h.environment_map = examples_dir() + "/maps/studio_small.hdr";
  h.environment_map_sha256 = "1ee8846551d9f2df56fae3b7ff7f74750760a32b3d2c740c3d24755b5730ba85";
  EXPECT_TRUE(load_environment_light(h).ok()) << h.environment_map;
  out.push_back({"emerald under an HDR map, frosted girdle", h});
  return out;
}

// docs/design/tracer.md §12: every Tier 2 feature, each tuple of the GPU equal to the CPU's within 1e-3 relative
// for ≥ 99.9 % of them.
TEST(TracerTier2Gpu, per_sample_values_agree_with_the_cpu_for_every_tier2_feature) {
  FT_REQUIRE_GPU();
  for (const Case& c : per_sample_cases()) {
    SCOPED_TRACE(c.name);
    const Scene& s = c.scene;
    const test::Agreement a = test::per_sample_agreement(s, 16);
    std::printf("[ metric ] Tier 2 per-sample agreement, %s: %zu of %zu = %.5f (mean Y %.4f)\n", c.name,
                a.agree, a.total, a.fraction(), a.mean_y);
    EXPECT_GE(a.fraction(), 0.999);
    EXPECT_GT(a.mean_y, 0.0);
  }
}

// docs/design/tracer.md §12 statistical test (tracer.md §13 Tier 2 materials): 48 × 48, CPU samples [0, 500),
// GPU [500, 1000); the fraction of |z| > 3 within its bound and no 3 × 3 window of ≥ 3 failing pixels.
TEST(TracerTier2Gpu, images_agree_statistically_with_the_cpu_on_disjoint_ranges) {
  FT_REQUIRE_GPU();
  struct Mat {
    const char* preset;
    float sigma_s, g;
  };
  for (const Mat& mat : {Mat{"zircon", 0, 0}, Mat{"tourmaline", 0, 0}, Mat{"quartz", 0, 0},
                         Mat{"rutile", 0, 0}, Mat{"moissanite", 0, 0}, Mat{"ruby", 1.5f, 0.3f}}) {
    SCOPED_TRACE(mat.preset);
    auto m = material_preset(mat.preset);
    if (!m.ok()) {
      ADD_FAILURE() << "no material preset " << mat.preset << " (tracer.md §13 names it)";
      continue;
    }
    Scene s = builtin_diamond_scene();
    s.width = s.height = 48;
    s.material = *m;
    s.material.scattering_sigma_s = mat.sigma_s;
    s.material.scattering_g = mat.g;
    const std::uint32_t n = 500, pixels = 48 * 48;
    const std::vector<float> g = gpu_tuples(s, 500, n);
    ASSERT_EQ(g.size(), std::size_t{pixels} * n * 3);
    const CpuTrace cpu(s);
    std::vector<double> cm(pixels * 3), cv(pixels * 3), gm(pixels * 3), gvar(pixels * 3);
    core::parallel_for(pixels, 0, [&](std::int64_t pi) {
      const auto p = static_cast<std::uint32_t>(pi);
      double s1[3] = {0, 0, 0}, s2[3] = {0, 0, 0}, g1[3] = {0, 0, 0}, g2[3] = {0, 0, 0};
      for (std::uint32_t k = 0; k < n; ++k) {
        const physics::SampleXyz c = cpu(p % 48, p / 48, k);
        const float* gv = &g[(std::size_t{p} * n + k) * 3];
        for (int i = 0; i < 3; ++i) {
          const double x = (&c.x)[i];
          s1[i] += x;
          s2[i] += x * x;
          g1[i] += gv[i];
          g2[i] += double{gv[i]} * gv[i];
        }
      }
      for (int i = 0; i < 3; ++i) {
        cm[p * 3 + i] = s1[i] / n;
        cv[p * 3 + i] = std::max(0.0, s2[i] / n - cm[p * 3 + i] * cm[p * 3 + i]) * n / (n - 1);
        gm[p * 3 + i] = g1[i] / n;
        gvar[p * 3 + i] = std::max(0.0, g2[i] / n - gm[p * 3 + i] * gm[p * 3 + i]) * n / (n - 1);
      }
    });
    std::vector<std::uint8_t> fail_px(pixels, 0);
    std::size_t fails = 0, tests = 0;
    for (std::uint32_t p = 0; p < pixels; ++p) {
      for (int i = 0; i < 3; ++i) {
        const double a = cm[p * 3 + i], b = gm[p * 3 + i];
        const double se = std::sqrt(cv[p * 3 + i] / n + gvar[p * 3 + i] / n);
        const bool bad = se == 0.0 ? std::fabs(a - b) > 1e-6 * std::max(std::fabs(a), std::fabs(b))
                                   : std::fabs(a - b) / se > 3.0;
        ++tests;
        if (bad) ++fails, fail_px[p] = 1;
      }
    }
    const double frac = static_cast<double>(fails) / static_cast<double>(tests);
    const double bound = 0.0027 + 3.0 * std::sqrt(0.0027 * 0.9973 / static_cast<double>(tests));
    int worst = 0;
    for (int y = 0; y + 3 <= 48; ++y) {
      for (int x = 0; x + 3 <= 48; ++x) {
        int c = 0;
        for (int dy = 0; dy < 3; ++dy)
          for (int dx = 0; dx < 3; ++dx) c += fail_px[(y + dy) * 48 + x + dx];
        worst = std::max(worst, c);
      }
    }
    std::printf(
        "[ metric ] Tier 2 statistical, %s%s: %zu of %zu beyond 3 sigma = %.5f (bound %.5f); worst 3x3 %d\n",
        mat.preset, mat.sigma_s > 0 ? " with inclusions" : "", fails, tests, frac, bound, worst);
    EXPECT_LE(frac, bound);
    EXPECT_LT(worst, 3);
  }
}

TEST(TracerTier2Gpu, chunked_equals_whole_and_a_batch_mixing_classes_equals_single_requests) {
  FT_REQUIRE_GPU();
  auto& gpu = shared_gpu_backend();
  Scene ruby = stone("ruby", 96, 80);
  ruby.material.scattering_sigma_s = 1.5f;
  ruby.material.scattering_g = 0.3f;
  Film whole(96, 80), chunked(96, 80);
  TraceWorkload w1(ruby, 3, 24, whole);
  ASSERT_EQ(gpu.accumulate(w1), Outcome::kDone);
  GpuChunkOptions tiny;
  tiny.max_chunk_pixels = 173;
  TraceWorkload w2(ruby, 3, 24, chunked, tiny);
  ASSERT_EQ(gpu.accumulate(w2), Outcome::kDone);
  EXPECT_GT(w2.chunks(), 40);
  EXPECT_TRUE(same_bits(whole, chunked)) << "chunked Tier 2 render differs from the whole-frame render";

  // One batch: a uniaxial stone with inclusions, a clear isotropic diamond (the Tier 1 kernel), an emerald.
  const Scene diamond = stone("diamond", 64, 64);
  const Scene emerald = stone("emerald", 64, 48);
  Film b1(96, 80), b2(64, 64), b3(64, 48), s2(64, 64), s3(64, 48);
  TraceWorkload i1(ruby, 3, 24, b1, tiny), i2(diamond, 0, 16, b2, tiny), i3(emerald, 5, 16, b3);
  std::vector<runtime::Workload*> items{&i1, &i2, &i3};
  std::vector<Outcome> seen;
  gpu.accumulate_batch(items, nullptr, [&](std::size_t, Outcome o) { seen.push_back(o); });
  ASSERT_EQ(seen, (std::vector<Outcome>{Outcome::kDone, Outcome::kDone, Outcome::kDone}));
  TraceWorkload o2(diamond, 0, 16, s2), o3(emerald, 5, 16, s3);
  ASSERT_EQ(gpu.accumulate(o2), Outcome::kDone);
  ASSERT_EQ(gpu.accumulate(o3), Outcome::kDone);
  EXPECT_TRUE(same_bits(b1, whole));
  EXPECT_TRUE(same_bits(b2, s2));
  EXPECT_TRUE(same_bits(b3, s3));
  // Split-range additivity (G3) on the GPU: [0, 24) ≡ [0, 10) then [10, 24).
  Film a(64, 48), parts(64, 48);
  TraceWorkload all(emerald, 0, 24, a), p1(emerald, 0, 10, parts);
  ASSERT_EQ(gpu.accumulate(all), Outcome::kDone);
  ASSERT_EQ(gpu.accumulate(p1), Outcome::kDone);
  TraceWorkload p2(emerald, 10, 14, parts);
  ASSERT_EQ(gpu.accumulate(p2), Outcome::kDone);
  EXPECT_TRUE(same_bits(a, parts));
}

// A chunk of a uniaxial stone past the phased kernels' queue (2^21 tuples, docs/design/tracer.md §10.1) runs in
// two rounds (with inclusions: of the three phases; clear: of the split and the persistent rest); the image
// equals one of small chunks, each a single round, bit for bit.
TEST(TracerTier2Gpu, chunks_of_several_queue_rounds_equal_small_chunks) {
  FT_REQUIRE_GPU();
  auto& gpu = shared_gpu_backend();
  Scene ruby = stone("ruby", 1024, 1024);
  ruby.material.scattering_sigma_s = 1.5f;
  ruby.material.scattering_g = 0.3f;
  Scene emerald = stone("emerald", 1024, 1024);
  for (const Scene* scene : {&ruby, &emerald}) {
    const char* name = scene == &ruby ? "ruby with inclusions" : "emerald";
    Film big(1024, 1024), small(1024, 1024);
    TraceWorkload wb(*scene, 0, 16, big);  // 16.8 M tuples in chunks of up to 4 194 240 (§10.2)
    ASSERT_EQ(gpu.accumulate(wb), Outcome::kDone) << name;
    EXPECT_LE(wb.chunks(), 7) << name;  // so some chunk holds more than 16.8 M / 7 = 2.4 M > 2^21 tuples
    GpuChunkOptions opt;
    opt.max_chunk_pixels = 16384;  // 262 144 tuples a chunk
    TraceWorkload ws(*scene, 0, 16, small, opt);
    ASSERT_EQ(gpu.accumulate(ws), Outcome::kDone) << name;
    EXPECT_GE(ws.chunks(), 64) << name;
    EXPECT_TRUE(same_bits(big, small))
        << name << ": a chunk of several queue rounds differs from small chunks";
    std::printf("[ metric ] %s, 1024^2 x 16 spp: %d chunks whole, %d small\n", name, wb.chunks(),
                ws.chunks());
  }
}

}  // namespace
}  // namespace facetrace::tracer
