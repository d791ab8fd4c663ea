/// @file
/// Test support for the tracer's CPU/GPU equivalence tests (docs/design/tracer.md §12): the CPU's trace of one
/// sample dispatched as cpu_accumulate does, the GPU's tuples of a sample range, and the per-sample agreement of the
/// two (each GPU tuple within 1e-3 relative of the CPU's).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "cpu/trace_params.h"
#include "facetrace/core/parallel.h"
#include "facetrace/runtime/executor.h"
#include "facetrace/tracer/cpu_tracer.h"
#include "facetrace/tracer/renderer.h"
#include "physics/hdr_environment.h"
#include "physics/medium.h"
#include "physics/preset_environment.h"
#include "physics/transport.h"

namespace facetrace::tracer::test {

/// The CPU's trace of one sample of `s`, dispatched as cpu_accumulate does: the HDR policy under a map, the lit
/// model's PresetEnv (the sun's NEE on) under a Tier 2 preset, the analytic environments otherwise;
/// physics/medium.h for a Tier 2 medium, trace_sample for a Tier 1 scene.
class CpuTrace {
 public:
  explicit CpuTrace(const Scene& s)
      : p_(make_trace_params(s)), m_(make_medium_params(s)), planes_(make_facet_planes(s)) {
    if (s.environment == EnvironmentKind::kHdr)
      hdr_.emplace(env_map_view(*s.environment_light, s.exposure, true));
  }
  physics::SampleXyz operator()(std::uint32_t x, std::uint32_t y, std::uint32_t k) const {
    if (hdr_) return with(physics::HdrEnv{*hdr_}, x, y, k);
    if (p_.env_kind == physics::kEnvPreset)
      return with(physics::PresetEnv{p_.preset_model == physics::kPresetSun ? 1u : 0u}, x, y, k);
    return with(physics::AnalyticEnv{}, x, y, k);
  }

 private:
  template <class Env>
  physics::SampleXyz with(const Env& env, std::uint32_t x, std::uint32_t y, std::uint32_t k) const {
    if (m_.kind == physics::kMediumUniaxial)
      return physics::trace_sample_medium<physics::kMediumUniaxial>(p_, m_, planes_.data(), env, x, y, k);
    if (physics::needs_medium_transport(m_))
      return physics::trace_sample_medium<physics::kMediumIsotropic>(p_, m_, planes_.data(), env, x, y, k);
    if constexpr (Env::kNee) return physics::trace_sample_env(p_, planes_.data(), env, x, y, k);
    return physics::trace_sample(p_, planes_.data(), x, y, k);
  }
  physics::TraceParams p_;
  physics::MediumParams m_;
  std::vector<physics::FacetPlane> planes_;
  std::optional<physics::EnvMapView> hdr_;
};

inline bool same_bits(const Film& a, const Film& b) {
  return a.xyz.size() == b.xyz.size() &&
         std::memcmp(a.xyz.data(), b.xyz.data(), a.xyz.size() * sizeof(float)) == 0 && a.samples == b.samples;
}

/// Renders samples [first, first + spp) of `s` on the GPU with every tuple returned.
inline std::vector<float> gpu_tuples(const Scene& s, std::uint32_t first, std::uint32_t spp) {
  Film f(s.width, s.height);
  GpuChunkOptions o;
  o.return_tuples = true;
  TraceWorkload w(s, first, spp, f, o);
  EXPECT_TRUE(w.can_run({}).ok()) << w.can_run({}).what();
  EXPECT_EQ(shared_gpu_backend().accumulate(w), runtime::Outcome::kDone);
  return w.tuples();
}

/// How many of the (pixel, sample) tuples of samples [0, spp) agree, and the GPU's mean Y.
struct Agreement {
  std::size_t agree = 0, total = 0;
  double mean_y = 0.0;
  double fraction() const { return total ? static_cast<double>(agree) / static_cast<double>(total) : 0.0; }
};

/// Per-sample agreement of the GPU with the CPU over samples [0, spp) of `s`: a tuple agrees when each of its XYZ
/// components is within 1e-3 relative (plus 1e-7 absolute) of the CPU's.
inline Agreement per_sample_agreement(const Scene& s, std::uint32_t spp) {
  const std::uint32_t pixels = s.width * s.height;
  const std::vector<float> g = gpu_tuples(s, 0, spp);
  Agreement a;
  if (g.size() != std::size_t{pixels} * spp * 3) {
    ADD_FAILURE() << "GPU returned " << g.size() << " tuple values, expected "
                  << std::size_t{pixels} * spp * 3;
    return a;
  }
  const CpuTrace cpu(s);
  std::vector<std::uint8_t> ok(std::size_t{pixels} * spp, 0);
  std::vector<double> ysum(pixels, 0.0);
  core::parallel_for(pixels, 0, [&](std::int64_t pi) {
    const auto p = static_cast<std::uint32_t>(pi);
    for (std::uint32_t k = 0; k < spp; ++k) {
      const physics::SampleXyz v = cpu(p % s.width, p / s.width, k);
      const float* gv = &g[(std::size_t{p} * spp + k) * 3];
      bool good = true;
      for (int i = 0; i < 3; ++i) {
        const float cv = (&v.x)[i];
        const float tol = 1e-3f * std::max(std::fabs(cv), std::fabs(gv[i])) + 1e-7f;
        good = good && std::fabs(gv[i] - cv) <= tol;
      }
      ok[std::size_t{p} * spp + k] = good;
      ysum[p] += gv[1];
    }
  });
  for (auto v : ok) a.agree += v;
  a.total = ok.size();
  double y = 0.0;
  for (double v : ysum) y += v;
  a.mean_y = y / static_cast<double>(a.total);
  return a;
}

}  // namespace facetrace::tracer::test
