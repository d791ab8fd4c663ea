/// @file
/// Farm units on the GPU backend (docs/design/farm.md §1): a unit's sums depend only on the job, the unit and the
/// backend, not on how the render loop cut it into requests, so GPU partials merge to identical bits for any
/// grouping, as CPU ones do.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "facetrace/tracer/farm.h"
#include "gpu_skip.h"

namespace facetrace::farm {
namespace {

namespace fs = std::filesystem;

Job gpu_job() {
  tracer::Scene s = tracer::builtin_diamond_scene();
  s.width = 96;
  s.height = 64;
  auto job = make_job("gpu", s, 4 * 64, 64);  // 4 units of 64 samples
  EXPECT_TRUE(job.ok());
  return std::move(job).value();
}

tracer::RenderOptions gpu_options(std::uint32_t samples_per_request) {
  tracer::RenderOptions o;
  o.device = tracer::RenderDevice::kGpu;
  o.samples_per_request = samples_per_request;
  return o;
}

TEST(FarmGpu, a_unit_has_the_same_bits_however_the_requests_cut_it) {
  FT_REQUIRE_GPU();
  const Job job = gpu_job();
  for (std::uint64_t u = 0; u < unit_count(job); ++u) {
    auto adaptive = render_unit(job, u, gpu_options(0));
    ASSERT_TRUE(adaptive.ok()) << adaptive.status().what();
    auto odd = render_unit(job, u, gpu_options(7));  // 64 = 9 requests of 7 + one of 1
    ASSERT_TRUE(odd.ok()) << odd.status().what();
    EXPECT_EQ(adaptive->backend, UnitBackend::kGpu) << "unit " << u << " fell back to the CPU";
    EXPECT_EQ(odd->backend, UnitBackend::kGpu);
    ASSERT_EQ(adaptive->xyz.size(), odd->xyz.size());
    EXPECT_EQ(std::memcmp(adaptive->xyz.data(), odd->xyz.data(), odd->xyz.size() * 4), 0) << "unit " << u;
  }
}

TEST(FarmGpu, gpu_partials_merge_to_identical_bits_for_any_grouping) {
  FT_REQUIRE_GPU();
  const Job job = gpu_job();
  std::string t = (fs::temp_directory_path() / "ft_farm_gpu_XXXXXX").string();
  const fs::path root = ::mkdtemp(t.data());
  const std::string one = (root / "one").string(), two = (root / "two").string();
  fs::create_directories(one);
  fs::create_directories(two);
  auto write = [&](const std::string& dir, std::uint64_t first, std::vector<std::uint64_t> units, std::uint32_t spr) {
    auto w = PartialWriter::open(dir, job, first, static_cast<std::uint32_t>(units.size()));
    ASSERT_TRUE(w.ok()) << w.status().what();
    for (const auto u : units) {
      auto r = render_unit(job, u, gpu_options(spr));
      ASSERT_TRUE(r.ok()) << r.status().what();
      ASSERT_TRUE(w->append(*r).ok());
    }
  };
  write(one, 0, {0, 1, 2, 3}, 0);
  write(two, 2, {2, 3}, 5);
  write(two, 0, {0, 1}, 13);
  auto a = merge_partials({one});
  auto b = merge_partials({two});
  ASSERT_TRUE(a.ok()) << a.status().what();
  ASSERT_TRUE(b.ok()) << b.status().what();
  EXPECT_EQ(a->gpu_units, 4u);
  EXPECT_EQ(b->gpu_units, 4u);
  ASSERT_EQ(a->xyz.size(), b->xyz.size());
  EXPECT_EQ(std::memcmp(a->xyz.data(), b->xyz.data(), a->xyz.size() * 8), 0);
  fs::remove_all(root);
}

}  // namespace
}  // namespace facetrace::farm
