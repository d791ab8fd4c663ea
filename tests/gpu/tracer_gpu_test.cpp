/// @file
/// The CUDA megakernel tracer against the CPU tracer (docs/design/tracer.md §12): per-sample agreement, statistical image
/// agreement on disjoint sample ranges, chunked == whole and batch == single bit for bit, cancellation, and a
/// real injected device fault in the middle of a multi-request render.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "facetrace/core/parallel.h"
#include "facetrace/runtime/executor.h"
#include "facetrace/tracer/cpu_tracer.h"
#include "facetrace/tracer/env_map.h"
#include "facetrace/tracer/renderer.h"
#include "gpu_skip.h"
#include "log_guard.h"
#include "tracer_agreement.h"
#include "physics/hdr_environment.h"
#include "physics/transport.h"
#include "cpu/trace_params.h"
#include "tracer/transport_launch.h"

namespace facetrace::tracer {
namespace {

using runtime::Outcome;
using test::same_bits;

Scene small_diamond(std::uint32_t w, std::uint32_t h) {
  Scene s = builtin_diamond_scene();
  s.width = w;
  s.height = h;
  return s;
}

/// Runs f(i) for i in [0, n) on all cores (the library's one parallel loop).
template <class F>
void parallel_for(std::uint32_t n, F f) {
  core::parallel_for(n, 0, [&](std::int64_t i) { f(static_cast<std::uint32_t>(i)); });
}

TEST(TracerLaunch, feasibility_and_handoff_size_are_functions_of_the_chunk_arguments_alone) {
  // No device needed: these are host functions of the launch arguments (CUTLASS can_implement /
  // get_workspace_size), never of the environment.
  ChunkArgs a{};  // zeroed: plane_count 0
  a.scene.params.width = 64;
  a.scene.params.height = 64;
  a.range = {0, 1024, 0, 0};
  const std::uint64_t none = handoff_bytes(a);  // 0 tuples: the header alone
  a.range.spp = 4;
  ASSERT_TRUE(can_implement_chunk(a).ok());
  const std::uint64_t quarter = handoff_bytes(a);
  ::setenv("FACETRACE_TRACER_KERNEL", "b256_r128", 1);
  EXPECT_EQ(handoff_bytes(a), quarter);
  ::unsetenv("FACETRACE_TRACER_KERNEL");
  a.range.spp = 8;
  EXPECT_GT(quarter, none);
  EXPECT_EQ(handoff_bytes(a) - none, 2 * (quarter - none));  // the saved states of a quarter of the tuples
  EXPECT_EQ((quarter - none) % 1024, 0u);
  a.kernel = *find_kernel_config("b256_r128");
  EXPECT_EQ(handoff_bytes(a), 0u);  // one launch: no handoff
  ASSERT_TRUE(can_implement_chunk(a).ok());
  a.kernel = KernelConfig{100, 1, 0};
  EXPECT_EQ(can_implement_chunk(a).code(), Code::kInvalidArgument);
  a.kernel = KernelConfig{};
  a.scene.params.plane_count = physics::kMaxPlanes + 1;
  EXPECT_EQ(can_implement_chunk(a).code(), Code::kDeclined);
  a.scene.params.plane_count = 0;
  // Media (docs/design/tracer.md §10.1): an isotropic stone with inclusions runs one launch; a uniaxial stone,
  // clear or with inclusions, has queues for every tuple of a chunk up to 2^21, then 2^21.
  a.scene.params.env_kind = physics::kEnvHdr;
  EXPECT_EQ(handoff_bytes(a), 0u);  // Tier 1 under an HDR map: one launch, whatever the configuration
  a.scene.medium.kind = physics::kMediumUniaxial;
  const std::uint64_t queued = handoff_bytes(a);  // 8192 tuples
  EXPECT_GT(queued, 8192u * sizeof(physics::PathState));
  a.scene.medium.sigma_s = 1.5f;
  EXPECT_EQ(handoff_bytes(a), queued);
  a.range = {0, 4096, 0, 1024};  // 2^22 tuples
  EXPECT_EQ(handoff_bytes(a) - none, 256 * (queued - none));
  a.scene.medium.kind = physics::kMediumIsotropic;
  EXPECT_EQ(handoff_bytes(a), 0u);
}

TEST(TracerGpu, per_sample_values_agree_with_the_cpu) {
  FT_REQUIRE_GPU();
  const test::Agreement a = test::per_sample_agreement(small_diamond(64, 48), 16);
  std::printf("[ metric ] per-sample agreement: %zu of %zu (pixel, sample) XYZ within 1e-3 relative = %.5f\n",
              a.agree, a.total, a.fraction());
  RecordProperty("per_sample_agreement", std::to_string(a.fraction()));
  EXPECT_GE(a.fraction(), 0.999);
}

/// The examples folder (FT_EXAMPLES_DIR in the environment, for a copy of the repository elsewhere, else the
/// build's source tree).
std::string examples_dir() {
  const char* e = std::getenv("FT_EXAMPLES_DIR");
  return e != nullptr && e[0] != '\0' ? std::string(e) : std::string(FT_EXAMPLES_DIR);
}

// docs/design/tracer.md §6.1 and §12: under the studio HDR map, with a frosted girdle (so NEE paths too), every
// tuple of the GPU equals the CPU's trace_sample_env within 1e-3 relative for ≥ 99.9 % of them.
TEST(TracerGpu, per_sample_values_agree_with_the_cpu_under_an_hdr_map) {
  FT_REQUIRE_GPU();
  Scene s = small_diamond(64, 48);
  s.girdle_frosted = true;
  s.environment = EnvironmentKind::kHdr;
  s.environment_map = examples_dir() + "/maps/studio_small.hdr";
  s.environment_map_sha256 = "1ee8846551d9f2df56fae3b7ff7f74750760a32b3d2c740c3d24755b5730ba85";
  ASSERT_TRUE(load_environment_light(s).ok()) << s.environment_map;
  const test::Agreement a = test::per_sample_agreement(s, 16);
  std::printf(
      "[ metric ] HDR per-sample agreement: %zu of %zu (pixel, sample) XYZ within 1e-3 relative = %.5f "
      "(mean Y %.4f)\n",
      a.agree, a.total, a.fraction(), a.mean_y);
  RecordProperty("hdr_per_sample_agreement", std::to_string(a.fraction()));
  EXPECT_GE(a.fraction(), 0.999);
  EXPECT_GT(a.mean_y, 0.0);
}

TEST(TracerGpu, image_agrees_statistically_with_the_cpu_on_disjoint_ranges) {
  FT_REQUIRE_GPU();
  const Scene s = small_diamond(48, 48);
  const std::uint32_t n = 500, pixels = 48 * 48;
  Film f(s.width, s.height);
  GpuChunkOptions o;
  o.return_tuples = true;
  TraceWorkload w(s, 500, n, f, o);  // GPU: samples [500, 1000)
  ASSERT_EQ(shared_gpu_backend().accumulate(w), Outcome::kDone);
  const auto params = make_trace_params(s);
  const auto planes = make_facet_planes(s);
  std::vector<double> cm(pixels * 3), cv(pixels * 3), gm(pixels * 3), gv(pixels * 3);
  parallel_for(pixels, [&](std::uint32_t p) {
    double s1[3] = {0, 0, 0}, s2[3] = {0, 0, 0}, g1[3] = {0, 0, 0}, g2[3] = {0, 0, 0};
    for (std::uint32_t k = 0; k < n; ++k) {  // CPU: samples [0, 500)
      const auto c = physics::trace_sample(params, planes.data(), p % 48, p / 48, k);
      const float* g = &w.tuples()[(std::size_t{p} * n + k) * 3];
      for (int i = 0; i < 3; ++i) {
        const double x = (&c.x)[i];
        s1[i] += x;
        s2[i] += x * x;
        g1[i] += g[i];
        g2[i] += double{g[i]} * g[i];
      }
    }
    for (int i = 0; i < 3; ++i) {
      cm[p * 3 + i] = s1[i] / n;
      cv[p * 3 + i] = std::max(0.0, s2[i] / n - cm[p * 3 + i] * cm[p * 3 + i]) * n / (n - 1);
      gm[p * 3 + i] = g1[i] / n;
      gv[p * 3 + i] = std::max(0.0, g2[i] / n - gm[p * 3 + i] * gm[p * 3 + i]) * n / (n - 1);
    }
  });
  std::vector<std::uint8_t> fail_px(pixels, 0);
  std::size_t fails = 0, tests = 0;
  for (std::uint32_t p = 0; p < pixels; ++p)
    for (int i = 0; i < 3; ++i) {
      const double a = cm[p * 3 + i], b = gm[p * 3 + i];
      const double se = std::sqrt(cv[p * 3 + i] / n + gv[p * 3 + i] / n);
      bool bad;
      if (se == 0.0)
        bad = std::fabs(a - b) > 1e-6 * std::max(std::fabs(a), std::fabs(b));
      else
        bad = std::fabs(a - b) / se > 3.0;
      ++tests;
      if (bad) ++fails, fail_px[p] = 1;
    }
  const double frac = static_cast<double>(fails) / tests;
  const double bound = 0.0027 + 3.0 * std::sqrt(0.0027 * 0.9973 / tests);  // docs/design/tracer.md §12
  int worst_window = 0;
  for (int y = 0; y + 3 <= 48; ++y)
    for (int x = 0; x + 3 <= 48; ++x) {
      int c = 0;
      for (int dy = 0; dy < 3; ++dy)
        for (int dx = 0; dx < 3; ++dx) c += fail_px[(y + dy) * 48 + x + dx];
      worst_window = std::max(worst_window, c);
    }
  std::printf(
      "[ metric ] statistical: %zu of %zu (pixel, component) tests beyond 3 sigma = %.5f (bound %.5f); "
      "worst 3x3 window %d\n",
      fails, tests, frac, bound, worst_window);
  RecordProperty("statistical_fail_fraction", std::to_string(frac));
  EXPECT_LE(frac, bound);
  EXPECT_LT(worst_window, 3);
}

TEST(TracerGpu, chunked_equals_whole_frame_and_batch_equals_single) {
  FT_REQUIRE_GPU();
  auto& gpu = shared_gpu_backend();
  const Scene s = small_diamond(96, 80);
  Film whole(96, 80), chunked(96, 80);
  TraceWorkload w1(s, 3, 32, whole);
  ASSERT_EQ(gpu.accumulate(w1), Outcome::kDone);
  GpuChunkOptions tiny;
  tiny.max_chunk_pixels = 173;
  TraceWorkload w2(s, 3, 32, chunked, tiny);
  ASSERT_EQ(gpu.accumulate(w2), Outcome::kDone);
  EXPECT_GT(w2.chunks(), 40);
  EXPECT_TRUE(same_bits(whole, chunked)) << "chunked GPU render differs from the whole-frame render";

  Scene s2 = small_diamond(64, 64);
  s2.yaw = 0.9f;
  Film b1(96, 80), b2(64, 64), single2(64, 64);
  TraceWorkload i1(s, 3, 32, b1, tiny), i2(s2, 0, 16, b2, tiny);
  std::vector<runtime::Workload*> items{&i1, &i2};
  std::vector<Outcome> seen;
  gpu.accumulate_batch(items, nullptr, [&](std::size_t i, Outcome o) {
    EXPECT_EQ(i, seen.size());
    seen.push_back(o);
  });
  ASSERT_EQ(seen, (std::vector<Outcome>{Outcome::kDone, Outcome::kDone}));
  TraceWorkload one(s2, 0, 16, single2);
  ASSERT_EQ(gpu.accumulate(one), Outcome::kDone);
  EXPECT_TRUE(same_bits(b1, whole));
  EXPECT_TRUE(same_bits(b2, single2));
}

TEST(TracerGpu, chained_requests_of_a_render_equal_one_request_bit_for_bit) {
  // The render loop's batches of chained requests (docs/design/tracer.md §10.7) on the device: each follower's
  // first chunk runs while the previous request's last chunk is in flight and is seeded from its sums.
  FT_REQUIRE_GPU();
  auto& gpu = shared_gpu_backend();
  const Scene s = small_diamond(96, 80);
  Film whole(96, 80);
  TraceWorkload w(s, 0, 30, whole);
  ASSERT_EQ(gpu.accumulate(w), Outcome::kDone);
  for (std::uint32_t chunk_pixels : {0u, 173u, 1000u}) {  // one chunk per request, many, a few
    Film chained(96, 80);
    RenderOptions o;
    o.device = RenderDevice::kGpu;
    o.samples_per_request = 4;  // 8 requests in one batch, the last of 2 samples
    o.chunk.max_chunk_pixels = chunk_pixels;
    auto report = render(s, 0, 30, chained, o);
    ASSERT_TRUE(report.ok()) << report.status().to_string();
    EXPECT_EQ(report->gpu_samples, 30u);
    EXPECT_EQ(report->declined, 0u);
    EXPECT_TRUE(same_bits(chained, whole))
        << "chained requests differ from one request, chunks of " << chunk_pixels << " pixels";
  }
}

/// Forwards to a TraceWorkload and raises `cancel` after `after` chunks (a deterministic mid-request cancel).
class CancelAfter final : public runtime::Workload {
 public:
  CancelAfter(TraceWorkload& inner, std::atomic<bool>& cancel, int after)
      : inner_(inner), cancel_(cancel), after_(after) {}
  Status can_run(const runtime::DeviceInfo& d) override { return inner_.can_run(d); }
  std::size_t scratch_bytes() const override { return inner_.scratch_bytes(); }
  void seed_scratch(std::span<std::byte> s) override { inner_.seed_scratch(s); }
  Status begin_turn(runtime::Executor& ex) override { return inner_.begin_turn(ex); }
  Expected<bool> run_chunk(runtime::Executor& ex, std::span<std::byte> s) override {
    auto r = inner_.run_chunk(ex, s);
    if (++chunks_ == after_) cancel_.store(true);
    return r;
  }
  Status drain(runtime::Executor& ex, std::span<std::byte> s, bool discard) override {
    return inner_.drain(ex, s, discard);
  }
  void commit(std::span<const std::byte> s) override { inner_.commit(s); }

 private:
  TraceWorkload& inner_;
  std::atomic<bool>& cancel_;
  int after_;
  int chunks_ = 0;
};

TEST(TracerGpu, cancellation_leaves_the_film_untouched) {
  FT_REQUIRE_GPU();
  const Scene s = small_diamond(128, 128);
  Film f(128, 128);
  f.xyz.assign(f.xyz.size(), 0.25f);
  const Film before = f;
  std::atomic<bool> cancel{false};
  GpuChunkOptions tiny;
  tiny.max_chunk_pixels = 64;  // 256 chunks; cancelled after the 5th, with one in flight
  TraceWorkload w(s, 0, 64, f, tiny);
  CancelAfter c(w, cancel, 5);
  EXPECT_EQ(shared_gpu_backend().accumulate(c, &cancel), Outcome::kCancelled);
  EXPECT_EQ(w.chunks(), 5);
  EXPECT_TRUE(same_bits(f, before));
}

TEST(TracerGpu, a_real_fault_mid_render_falls_back_and_counts_every_sample_once) {
  FT_REQUIRE_GPU();
  runtime::RecoveryConfig rc;
  rc.cool_down = std::chrono::duration<double>(0.0);
  auto gpu = runtime::GpuBackend::with_executor(runtime::make_isolated_executor(),
                                                runtime::SteadyClock::instance(), rc);
  ASSERT_FALSE(gpu->unavailable_reason().has_value());
  const Scene s = small_diamond(80, 64);
  const std::uint32_t per = 8;
  Film film(80, 64), expected(80, 64);
  std::vector<Outcome> outcomes;
  {
    facetrace::testing::ExpectLogs logs;  // the loss and the respawn are logged at warn
    for (std::uint32_t r = 0; r < 3; ++r) {
      GpuChunkOptions o;
      o.max_chunk_pixels = 500;
      if (r == 1) o.fault_after_chunks = 3;  // a real illegal-address kernel in the child, mid-request
      TraceWorkload w(s, r * per, per, film, o);
      Outcome out = gpu->accumulate(w);
      if (out == Outcome::kDeclined && r == 2) {  // recovery needs the lost flag's cool-down (0 s) to pass
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        out = gpu->accumulate(w);
      }
      outcomes.push_back(out);
      if (out != Outcome::kDone) {
        ASSERT_TRUE(cpu_accumulate(s, r * per, per, film).ok());
      }
    }
    EXPECT_TRUE(logs.contains("lost") || logs.contains("Lost"));
  }
  EXPECT_EQ(outcomes[0], Outcome::kDone);
  EXPECT_EQ(outcomes[1], Outcome::kDeclined);
  EXPECT_EQ(outcomes[2], Outcome::kDone) << "a new child should serve GPU work after the cool-down";
  for (auto n : film.samples) ASSERT_EQ(n, 3 * per);
  // Expected: the GPU's bits for requests 0 and 2 (deterministic), the CPU's for request 1.
  for (std::uint32_t r = 0; r < 3; ++r) {
    if (outcomes[r] == Outcome::kDone) {
      TraceWorkload w(s, r * per, per, expected);
      ASSERT_EQ(gpu->accumulate(w), Outcome::kDone);
    } else {
      ASSERT_TRUE(cpu_accumulate(s, r * per, per, expected).ok());
    }
  }
  EXPECT_TRUE(same_bits(film, expected));
  EXPECT_TRUE(gpu->last_lost_reason().has_value());
  std::printf("[ metric ] fault mid-render: outcomes %s/%s/%s, lost reason: %s\n",
              std::string(runtime::outcome_name(outcomes[0])).c_str(),
              std::string(runtime::outcome_name(outcomes[1])).c_str(),
              std::string(runtime::outcome_name(outcomes[2])).c_str(), gpu->last_lost_reason()->c_str());
}

}  // namespace
}  // namespace facetrace::tracer
