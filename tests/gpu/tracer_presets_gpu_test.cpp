/// @file
/// The Tier 2 lighting presets on the GPU against the CPU tracer (docs/design/tracer.md §6.2, §12): per-sample
/// agreement for every lit model (transport_env_kernel with PresetEnv) and the two Studio configurations (the Tier 1
/// megakernel), DaylightSun with a frosted girdle (the sun's NEE paths) and a uniaxial stone under DaylightSun
/// (the medium kernel with the lit model); chunked == whole bit for bit under DaylightSun; the UV lamps declined.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/trace_params.h"
#include "facetrace/core/parallel.h"
#include "facetrace/runtime/executor.h"
#include "facetrace/tracer/cpu_tracer.h"
#include "facetrace/tracer/renderer.h"
#include "gpu_skip.h"
#include "tracer_agreement.h"
#include "physics/medium.h"
#include "physics/preset_environment.h"
#include "physics/transport.h"

namespace facetrace::tracer {
namespace {

using runtime::Outcome;
using test::CpuTrace;
using test::gpu_tuples;
using test::same_bits;

Scene preset_stone(LightingPreset preset, const char* material, std::uint32_t w, std::uint32_t h) {
  Scene s = builtin_diamond_scene();
  s.width = w;
  s.height = h;
  s.lighting_preset = preset;
  s.material = material_preset(material).value();
  return s;
}

struct Case {
  std::string name;
  Scene scene;
};

std::vector<Case> per_sample_cases() {
  std::vector<Case> out;
  for (LightingPreset p :
       {LightingPreset::kIncandescent, LightingPreset::kDarkSpotlight, LightingPreset::kIsoHemisphere,
        LightingPreset::kDaylightDome, LightingPreset::kDaylightSun, LightingPreset::kAset,
        LightingPreset::kShopLights, LightingPreset::kWindowDaylight, LightingPreset::kWhiteTray}) {
    out.push_back({std::string(lighting_preset_name(p)) + ", diamond", preset_stone(p, "diamond", 64, 48)});
  }
  Scene f = preset_stone(LightingPreset::kDaylightSun, "diamond", 64, 48);
  f.girdle_frosted = true;
  f.pitch = 0.15f;  // the girdle in view: many frosted bounces, so many sun NEE events
  out.push_back({"DaylightSun, diamond, frosted girdle (sun NEE)", f});
  Scene t = preset_stone(LightingPreset::kShopLights, "diamond", 64, 48);
  t.girdle_frosted = true;
  t.pitch = 0.15f;
  out.push_back({"ShopLights, diamond, frosted girdle", t});
  Scene e = preset_stone(LightingPreset::kDaylightSun, "emerald", 64, 48);
  out.push_back({"DaylightSun, emerald (uniaxial)", e});
  Scene ef = preset_stone(LightingPreset::kDaylightSun, "emerald", 64, 48);
  ef.girdle_frosted = true;
  ef.pitch = 0.15f;
  out.push_back({"DaylightSun, emerald (uniaxial), frosted girdle (sun NEE)", ef});
  Scene a = preset_stone(LightingPreset::kAset, "ruby", 64, 48);
  a.material.scattering_sigma_s = 1.0f;
  a.material.scattering_g = 0.3f;
  out.push_back({"Aset, ruby with inclusions", a});
  return out;
}

// docs/design/tracer.md §12 for the Tier 2 presets: each GPU tuple equal to the CPU's within 1e-3 relative for
// ≥ 99.9 % of them.
TEST(TracerPresetsGpu, per_sample_values_agree_with_the_cpu_for_every_tier2_preset) {
  FT_REQUIRE_GPU();
  for (const Case& c : per_sample_cases()) {
    SCOPED_TRACE(c.name);
    const Scene& s = c.scene;
    const test::Agreement a = test::per_sample_agreement(s, 16);
    std::printf("[ metric ] Tier 2 preset per-sample agreement, %s: %zu of %zu = %.5f (mean Y %.4f)\n",
                c.name.c_str(), a.agree, a.total, a.fraction(), a.mean_y);
    EXPECT_GE(a.fraction(), 0.999);
    EXPECT_GT(a.mean_y, 0.0);
  }
}

// Chunked == whole and split ranges add up bit for bit under DaylightSun with NEE paths (G1/G3 on the GPU);
// the UV lamps are declined by name.
TEST(TracerPresetsGpu, chunked_equals_whole_under_daylight_sun_and_uv_lamps_are_declined) {
  FT_REQUIRE_GPU();
  auto& gpu = shared_gpu_backend();
  Scene s = preset_stone(LightingPreset::kDaylightSun, "diamond", 96, 80);
  s.girdle_frosted = true;
  s.pitch = 0.15f;
  Film whole(96, 80), chunked(96, 80), parts(96, 80);
  TraceWorkload w1(s, 3, 24, whole);
  ASSERT_EQ(gpu.accumulate(w1), Outcome::kDone);
  GpuChunkOptions tiny;
  tiny.max_chunk_pixels = 173;
  TraceWorkload w2(s, 3, 24, chunked, tiny);
  ASSERT_EQ(gpu.accumulate(w2), Outcome::kDone);
  EXPECT_GT(w2.chunks(), 40);
  EXPECT_TRUE(same_bits(whole, chunked)) << "chunked DaylightSun render differs from the whole-frame render";
  TraceWorkload p1(s, 3, 10, parts);
  ASSERT_EQ(gpu.accumulate(p1), Outcome::kDone);
  TraceWorkload p2(s, 13, 14, parts);
  ASSERT_EQ(gpu.accumulate(p2), Outcome::kDone);
  EXPECT_TRUE(same_bits(whole, parts));

  Scene uv = preset_stone(LightingPreset::kUvLamp365, "diamond", 16, 16);
  Film fu(16, 16);
  TraceWorkload wu(uv, 0, 4, fu);
  const Status st = wu.can_run({});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.what().find("fluorescence"), std::string::npos) << st.what();
  EXPECT_EQ(gpu.accumulate(wu), Outcome::kDeclined);
}

}  // namespace
}  // namespace facetrace::tracer
