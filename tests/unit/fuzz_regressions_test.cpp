/// @file
/// The inputs the fuzzers of tests/fuzz/ found (docs/testing.md "Fuzzing"), each fed through the normal API: every
/// one once crashed, hung or ran out of memory, and must now be refused (or served) cleanly.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#ifdef FT_FUZZ_REGRESSIONS_FACES
#include "facetrace/faces/net.h"
#include "onnx_builder.h"
#endif
#include "facetrace/runtime/executor.h"
#include "facetrace/runtime/op.h"
#include "facetrace/runtime/testing/simulated_executor.h"
#include "facetrace/tracer/farm.h"
#include "facetrace/tracer/scene.h"

namespace facetrace {
namespace {

namespace fs = std::filesystem;

// ---- the executor protocol's server side (tests/fuzz/protocol_fuzz.cpp) ---------------------------------------

std::unique_ptr<runtime::SimulatedExecutor> started_simulated_executor() {
  runtime::ExecutorOptions options;
  options.ring_bytes = 2 << 20;
  options.transfer_bytes = 2 << 20;
  auto ex = runtime::make_simulated_executor(options);
  EXPECT_TRUE(ex && ex->start().ok());
  return ex;
}

// A parent may name an input range at any byte offset: the simulated sum read it as aligned floats (UBSan: load
// of misaligned address).
TEST(FuzzRegressions, simulated_sum_floats_reads_a_range_at_any_byte_offset) {
  auto ex = started_simulated_executor();
  ASSERT_TRUE(ex);
  const float values[2] = {1.5f, 2.25f};
  const std::uint64_t offset = ex->arena().ring_bytes() + 1;  // odd: misaligned for float
  std::memcpy(ex->arena().base() + offset, values, sizeof values);
  runtime::OpCall call;
  call.op = runtime::ops::kSumFloats;
  call.in = runtime::ArenaRange{offset, sizeof values};
  auto r = ex->invoke(call);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  double sum = 0;
  ASSERT_TRUE(r->get(sum));
  EXPECT_EQ(sum, 3.75);
}

// fill_ramp's count comes from the parent: 2^40 floats would be allocated before the ring's size was looked at
// (std::bad_alloc would end the child).
TEST(FuzzRegressions, simulated_fill_ramp_refuses_a_count_beyond_the_ring_before_allocating) {
  auto ex = started_simulated_executor();
  ASSERT_TRUE(ex);
  const runtime::FillRampArgs f{0, std::uint64_t{1} << 40, 1.0f, 1.0f, 0, 0};
  runtime::OpCall call;
  call.op = runtime::ops::kFillRamp;
  call.args = std::as_bytes(std::span(&f, 1));
  auto r = ex->invoke(call);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kOutOfMemory);
  EXPECT_NE(r.status().what().find("1099511627776"), std::string::npos) << r.status().what();
  EXPECT_EQ(ex->state(), runtime::ExecutorState::kReady);  // this call failed, the device did not
}

// ---- partial files and the merge (tests/fuzz/partial_fuzz.cpp) --------------------------------------------

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "ft_fuzzreg_XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

/// A partial of a 2×2, spp 2, K 1 job holding unit 0, as the writer makes it.
std::string write_tiny_partial(const fs::path& dir) {
  tracer::Scene scene = tracer::builtin_diamond_scene();
  scene.width = 2;
  scene.height = 2;
  auto job = farm::make_job("tiny", scene, 2, 1);
  EXPECT_TRUE(job.ok()) << job.status().what();
  auto w = farm::PartialWriter::open(dir.string(), *job, 0, 2);
  EXPECT_TRUE(w.ok()) << w.status().what();
  farm::UnitResult u;
  u.unit = 0;
  u.range = farm::unit_samples(*job, 0);
  u.xyz.assign(2 * 2 * 3, 0.5f);
  EXPECT_TRUE(w->append(u).ok());
  return w->path();
}

/// Sets a field of both header copies and recomputes their CRCs (layout: docs/design/farm.md §1 "Partial file":
/// preamble of 4096 B with the copy size H as u32 at 12; in a copy, u32 bytes used at 8 and the CRC-32 of
/// everything before it in its last 4 bytes).
template <class T>
void patch_headers(const std::string& path, std::size_t field_offset, T value) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> f((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  std::uint32_t slot = 0;
  std::memcpy(&slot, f.data() + 12, 4);
  for (std::size_t base : {std::size_t{4096}, std::size_t{4096} + slot}) {
    std::uint64_t sequence = 0;
    std::memcpy(&sequence, f.data() + base, 8);
    if (sequence == 0) continue;  // a copy never written
    std::uint32_t used = 0;
    std::memcpy(&used, f.data() + base + 8, 4);
    std::memcpy(f.data() + base + field_offset, &value, sizeof value);
    const std::uint32_t crc = farm::crc32(f.data() + base, used - 4);
    std::memcpy(f.data() + base + used - 4, &crc, 4);
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(f.data(), static_cast<std::streamsize>(f.size()));
}

constexpr std::size_t kWidthField = 176,
                      kSppField = 192;  // docs/design/farm.md §1: u32 W at 176, u64 spp at 192

// spp 2^32−1 in units of 1: a header no job can have. The merge built a list of 4 294 967 294 missing units
// (a timeout, then out of memory).
TEST(FuzzRegressions, a_partial_whose_job_has_too_many_units_is_corrupt_and_the_merge_stops_at_once) {
  TempDir dir;
  const std::string path = write_tiny_partial(dir.path);
  ASSERT_TRUE(farm::read_partial_header(path).ok());
  patch_headers<std::uint64_t>(path, kSppField, 0xFFFFFFFFull);
  auto h = farm::read_partial_header(path);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), Code::kIo);
  EXPECT_NE(h.status().what().find("corrupt: spp 4294967295 in units of 1"), std::string::npos)
      << h.status().what();
  farm::MergeOptions allow;
  allow.allow_missing = true;
  auto m = farm::merge_partials({path}, allow);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kIo);
}

TEST(FuzzRegressions, a_partial_of_width_zero_is_corrupt) {
  TempDir dir;
  const std::string path = write_tiny_partial(dir.path);
  patch_headers<std::uint32_t>(path, kWidthField, 0);
  auto h = farm::read_partial_header(path);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().what().find("corrupt: image size 0x2"), std::string::npos) << h.status().what();
}

TEST(FuzzRegressions, a_job_of_more_than_2_to_the_24_units_is_refused) {
  tracer::Scene scene = tracer::builtin_diamond_scene();
  scene.width = 2;
  scene.height = 2;
  EXPECT_TRUE(farm::make_job("ok", scene, farm::kMaxJobUnits, 1).ok());
  auto job = farm::make_job("big", scene, farm::kMaxJobUnits + 1, 1);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), Code::kInvalidArgument);
  EXPECT_NE(job.status().what().find("16777217 units, more than 16777216"), std::string::npos)
      << job.status().what();
}

// ---- the ONNX loader (tests/fuzz/onnx_fuzz.cpp) ----------------------------------------------------------------

#ifdef FT_FUZZ_REGRESSIONS_FACES
/// An input the fuzzers found, kept in their seed corpus (tests/fuzz/corpus/<target>/).
std::vector<std::uint8_t> corpus_file(const std::string& target, const std::string& name) {
  std::ifstream in(std::string(FT_FUZZ_CORPUS_DIR) + "/" + target + "/" + name, std::ios::binary);
  EXPECT_TRUE(in.good()) << name;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Tile of a [1, 2, 3, 4] input by a constant `repeats` of 7954764333999718402 for dim 1 (2): repeats · dim
// overflowed int64 (UBSan: signed integer overflow) before any size check.
TEST(FuzzRegressions, onnx_tile_whose_repeats_overflow_the_shape_is_refused) {
  const auto model = corpus_file("onnx", "crash-tile-repeat-overflow.onnx");
  ASSERT_FALSE(model.empty());
  auto net = faces::Net::create(model);
  ASSERT_FALSE(net.ok());
  EXPECT_EQ(net.status().code(), Code::kInvalidArgument);
  EXPECT_NE(net.status().what().find("repeat 7954764333999718402 of dim 1 (2) is too large"),
            std::string::npos)
      << net.status().what();
}

// AveragePool of a rank-3 ([N,C,L]) input with a 2-D kernel_shape [2, 3], pads and ceil_mode: the pool was
// computed 2 rows high into the [N,C,OW] output of a 1-D pool (ASan: heap-buffer-overflow in avgpool).
TEST(FuzzRegressions, onnx_1d_avgpool_with_2d_attributes_is_refused) {
  const auto model = corpus_file("onnx", "crash-avgpool-1d-with-2d-kernel.onnx");
  ASSERT_FALSE(model.empty());
  auto net = faces::Net::create(model);
  ASSERT_FALSE(net.ok());
  EXPECT_EQ(net.status().code(), Code::kInvalidArgument);
  EXPECT_NE(net.status().what().find("1-D pooling with 2-D"), std::string::npos) << net.status().what();
}

// The same shape of fault in the 1-D conv (found by reading the pool's fix): 4 pads on a [1,1,4] input gave an
// output 3 rows high for a [N,C,OW] tensor.
TEST(FuzzRegressions, onnx_1d_conv_with_2d_pads_is_refused) {
  faces::testing::OnnxBuilder b;
  b.input("x", {1, 1, 4}).output("y").init("w", {1, 1, 1}, {1.0f});
  auto* conv = b.node("Conv", {"x", "w"}, {"y"});
  faces::testing::OnnxBuilder::ints(conv, "pads", {1, 0, 1, 0});
  auto net = faces::Net::create(b.bytes());
  ASSERT_FALSE(net.ok());
  EXPECT_NE(net.status().what().find("1-D conv with 2-D 'pads' or 'strides' (output height 3)"),
            std::string::npos)
      << net.status().what();
  faces::testing::OnnxBuilder ok;  // the 1-D form of the same pads is accepted
  ok.input("x", {1, 1, 4}).output("y").init("w", {1, 1, 1}, {1.0f});
  faces::testing::OnnxBuilder::ints(ok.node("Conv", {"x", "w"}, {"y"}), "pads", {1, 1});
  auto good = faces::Net::create(ok.bytes());
  ASSERT_TRUE(good.ok()) << good.status().what();
  auto out = good->run(std::vector<float>{1, 2, 3, 4});
  ASSERT_TRUE(out.ok()) << out.status().what();
  EXPECT_EQ((*out)[0].data, (std::vector<float>{0, 1, 2, 3, 4, 0}));
}
#endif

}  // namespace
}  // namespace facetrace
