/// @file
/// docs/limits.md, one test per row of its table: each enforced limit at its value (accepted, where that is
/// cheap) and one past it (refused with the documented code, exit code or message naming the limit). Library
/// limits go through the public API; command-line limits run `facetrace` in a child process. File-size caps use
/// sparse files, so a 2 GiB image costs no disk.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "facetrace/core/image.h"
#include "facetrace/faces/detector.h"
#include "facetrace/faces/net.h"
#include "facetrace/tracer/farm.h"
#include "facetrace/tracer/scene.h"
#include "facetrace/tracer/scene_json.h"
#include "onnx_builder.h"
#include "run_child.h"

namespace facetrace {
namespace {

namespace fs = std::filesystem;
using faces::testing::OnnxBuilder;

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "limits_test_" + std::to_string(::getpid()) + "_" + name;
}

/// A file of `size` zero bytes that takes no disk space.
std::string sparse_file(const std::string& name, std::uint64_t size) {
  const std::string p = temp_path(name);
  { std::ofstream f(p, std::ios::binary | std::ios::trunc); }
  fs::resize_file(p, size);
  return p;
}

void expect_refused(const Status& st, Code code, const std::string& needle) {
  EXPECT_EQ(st.code(), code) << st.to_string().substr(0, 400);
  EXPECT_NE(st.what().find(needle), std::string::npos)
      << "wanted \"" << needle << "\" in " << st.what().substr(0, 400);
}

using CliRun = facetrace::testing::ChildRun;

CliRun run_cli(const std::vector<std::string>& args) {
  return facetrace::testing::run_to_end(FT_FACETRACE_EXE, args, temp_path("cli"));
}

/// `facetrace render` of a 1x1 image on the CPU with `extra`.
CliRun render(std::vector<std::string> extra) {
  std::vector<std::string> a{"render", "--device",   "cpu",  "--width", "1",  "--height",
                             "1",      "--progress", "none", "-q",      "-o", temp_path("r.png")};
  a.insert(a.end(), extra.begin(), extra.end());
  return run_cli(a);
}

Status scene_status(const std::string& json) { return tracer::scene_from_json(json, "s.json").status(); }

// ---- scenes -----------------------------------------------------------------------------------------------

TEST(Limits, scene_file_size_64_mib) {
  const std::string at = sparse_file("scene_at.json", std::uint64_t{64} << 20);
  const Status ok_size =
      tracer::load_scene_file(at).status();  // read whole, then refused as JSON, not by size
  EXPECT_EQ(ok_size.what().find("exceeds the limit"), std::string::npos) << ok_size.what();
  expect_refused(
      tracer::load_scene_file(sparse_file("scene_past.json", (std::uint64_t{64} << 20) + 1)).status(),
      Code::kInvalidArgument, "67108865 bytes exceeds the limit of 67108864 bytes");
  fs::remove(at);
  fs::remove(temp_path("scene_past.json"));
}

TEST(Limits, image_width_7680_and_height_4320) {
  EXPECT_TRUE(scene_status(R"({"width": 7680, "height": 4320})").ok());
  expect_refused(scene_status(R"({"width": 7681})"), Code::kInvalidArgument,
                 "width: must be in [1, 7680], got 7681");
  expect_refused(scene_status(R"({"height": 4321})"), Code::kInvalidArgument,
                 "height: must be in [1, 4320], got 4321");
  expect_refused(scene_status(R"({"width": 0})"), Code::kInvalidArgument,
                 "width: must be in [1, 7680], got 0");
}

TEST(Limits, max_bounces_128) {
  EXPECT_TRUE(scene_status(R"({"max_bounces": 128})").ok());
  expect_refused(scene_status(R"({"max_bounces": 129})"), Code::kInvalidArgument,
                 "max_bounces: must be in [1, 128], got 129");
}

TEST(Limits, planes_4_to_128) {
  tracer::Scene s = tracer::builtin_diamond_scene();
  const float k = 0.57735027f;  // 1/sqrt(3): a regular tetrahedron, the fewest planes that close
  s.planes.assign(4, tracer::Plane{});
  const float normals[4][3] = {{k, k, k}, {k, -k, -k}, {-k, k, -k}, {-k, -k, k}};
  for (int i = 0; i < 4; ++i) {
    std::memcpy(s.planes[i].normal, normals[i], sizeof normals[i]);
    s.planes[i].d = -1.0f;
  }
  EXPECT_TRUE(tracer::validate_scene(s).ok()) << tracer::validate_scene(s).to_string();
  tracer::Scene three = s;
  three.planes.pop_back();
  expect_refused(tracer::validate_scene(three), Code::kInvalidArgument, "at least 4 planes");
  tracer::Scene many = s;
  while (many.planes.size() < 129) many.planes.push_back(s.planes[many.planes.size() % 4]);
  expect_refused(tracer::validate_scene(many), Code::kInvalidArgument, "at most 128 planes (got 129)");
}

TEST(Limits, absorption_bands_8) {
  tracer::Scene s = tracer::builtin_diamond_scene();
  s.material.o_ray.assign(9, tracer::AbsorptionBand{});
  expect_refused(tracer::validate_scene(s), Code::kInvalidArgument, "at most 8 bands (got 9)");
}

TEST(Limits, camera_distance_1e4) {
  EXPECT_TRUE(scene_status(R"({"distance": 10000})").ok());
  expect_refused(scene_status(R"({"distance": 10001})"), Code::kInvalidArgument, "distance: must be in (0, ");
}

TEST(Limits, echoed_input_200_bytes) {
  const Status st = scene_status("{\"material\": \"" + std::string(300, 'm') + "\"}");
  expect_refused(st, Code::kInvalidArgument, "\"" + std::string(200, 'm') + "\xe2\x80\xa6 (300 bytes)\"");
  EXPECT_EQ(st.what().find(std::string(201, 'm')), std::string::npos);
}

// ---- render flags -----------------------------------------------------------------------------------------

TEST(Limits, render_spp_1048576_per_run) {
  EXPECT_EQ(render({"--spp", "1048576"}).rc, 0);
  const CliRun r = render({"--spp", "1048577"});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("--spp: must be in [1, 1048576]"), std::string::npos) << r.err;
}

TEST(Limits, render_sample_range_below_2_pow_32) {
  EXPECT_EQ(render({"--first-sample", "4294967294", "--spp", "1"}).rc, 0);
  const CliRun r = render({"--first-sample", "4294967295", "--spp", "1"});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("--first-sample"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--spp"), std::string::npos) << r.err;
}

TEST(Limits, render_threads_4096) {
  const CliRun r = render({"--spp", "1", "--threads", "4097"});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("--threads: must be in [0, 4096]"), std::string::npos) << r.err;
}

// ---- farm jobs and partials ---------------------------------------------------------------------------------

Status job_status(const std::string& fields) {
  return farm::parse_job("{\"scene\": \"builtin:diamond\", " + fields + "}", ".", "j", "job.json").status();
}

TEST(Limits, job_file_size_16_mib) {
  const std::string p = sparse_file("job.json", (std::uint64_t{16} << 20) + 1);
  expect_refused(farm::load_job_file(p).status(), Code::kInvalidArgument,
                 "16777217 bytes exceeds the limit of 16777216 bytes");
  fs::remove(p);
}

TEST(Limits, job_spp_and_unit_samples) {
  EXPECT_TRUE(job_status(R"("spp": 4294967295, "unit_samples": 65536)").ok());
  expect_refused(job_status(R"("spp": 4294967296, "unit_samples": 64)"), Code::kInvalidArgument,
                 "spp: must be in [1, 4294967295], got 4294967296");
  expect_refused(job_status(R"("spp": 64, "unit_samples": 65537)"), Code::kInvalidArgument,
                 "unit_samples: must be in [1, 65536], got 65537");
  expect_refused(job_status(R"("spp": 64, "unit_samples": 64, "width": 7681)"), Code::kInvalidArgument,
                 "width: must be in [1, 7680], got 7681");
}

TEST(Limits, partial_header_copy_64_mib) {
  // A partial's preamble (docs/design/farm.md §2): magic, version 1, the size of one header copy, CRC-32.
  auto preamble = [](std::uint32_t slot_bytes) {
    std::vector<std::uint8_t> b(4096, 0);
    std::memcpy(b.data(), "FTPART1", 8);
    const std::uint32_t version = 1;
    std::memcpy(b.data() + 8, &version, 4);
    std::memcpy(b.data() + 12, &slot_bytes, 4);
    const auto crc = static_cast<std::uint32_t>(::crc32(0, b.data(), 16));
    std::memcpy(b.data() + 16, &crc, 4);
    return b;
  };
  const std::string p = temp_path("part.ftp");
  for (std::uint32_t slot : {std::uint32_t{64} << 20, (std::uint32_t{64} << 20) + 4096}) {
    const auto b = preamble(slot);
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
    const Status st = farm::read_partial_header(p).status();
    ASSERT_EQ(st.code(), Code::kIo);
    if (slot == std::uint32_t{64} << 20)  // accepted as a size; the file is then too short for two copies
      EXPECT_NE(st.what().find("truncated"), std::string::npos) << st.what();
    else
      EXPECT_NE(st.what().find("corrupt: header size 67112960"), std::string::npos) << st.what();
  }
  fs::remove(p);
}

// ---- images ------------------------------------------------------------------------------------------------

/// A PNG holding only its signature, an IHDR of `w`×`h` (8-bit RGB), the start of an IDAT and IEND: enough for
/// the size check, which comes before any pixel.
std::vector<std::uint8_t> png_header(std::uint32_t w, std::uint32_t h) {
  std::vector<std::uint8_t> b = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  auto chunk = [&b](const char* type, const std::vector<std::uint8_t>& data) {
    const std::uint32_t n = static_cast<std::uint32_t>(data.size());
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(n >> s));
    std::vector<std::uint8_t> body(type, type + 4);
    body.insert(body.end(), data.begin(), data.end());
    b.insert(b.end(), body.begin(), body.end());
    const auto crc = static_cast<std::uint32_t>(::crc32(0, body.data(), static_cast<uInt>(body.size())));
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(crc >> s));
  };
  std::vector<std::uint8_t> ihdr;
  for (std::uint32_t v : {w, h})
    for (int s = 24; s >= 0; s -= 8) ihdr.push_back(static_cast<std::uint8_t>(v >> s));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});
  chunk("IHDR", ihdr);
  chunk("IDAT", {0x78, 0x9c});  // where the reader stops for the header: a zlib stream's start, then nothing
  chunk("IEND", {});
  return b;
}

TEST(Limits, image_file_size_2_gib) {
  const std::string p = sparse_file("big.jpg", (std::uint64_t{2} << 30) + 1);
  expect_refused(core::load_image(p).status(), Code::kInvalidArgument,
                 "2147483649 bytes exceeds the limit of 2147483648 bytes");
  fs::remove(p);
}

TEST(Limits, image_side_65536_and_2_pow_28_pixels) {
  // at the limit: the size passes and the (missing) pixel data is what fails
  const Status at = core::decode_image(png_header(16384, 16384)).status();
  EXPECT_FALSE(at.ok());
  EXPECT_EQ(at.what().find("beyond the limits"), std::string::npos) << at.what();
  expect_refused(core::decode_image(png_header(16385, 16385)).status(), Code::kInvalidArgument,
                 "size 16385x16385 beyond the limits (sides 1..65536, at most 268435456 pixels)");
  const Status wide = core::decode_image(png_header(65537, 1)).status();
  EXPECT_EQ(wide.code(), Code::kInvalidArgument) << wide.to_string();
  EXPECT_NE(wide.what().find("limit"), std::string::npos) << wide.what();
}

// ---- models ------------------------------------------------------------------------------------------------

/// A chain x → Relu → … → y of `n` nodes on a [1, 4] input.
std::vector<std::uint8_t> relu_chain(int n) {
  OnnxBuilder m;
  m.input("x", {1, 4}).output("y");
  for (int i = 0; i < n; ++i)
    m.node("Relu", {i == 0 ? std::string("x") : "v" + std::to_string(i)},
           {i + 1 == n ? std::string("y") : "v" + std::to_string(i + 1)});
  return m.bytes();
}

TEST(Limits, model_file_512_mib) {
  const std::string p = sparse_file("big.onnx", (std::uint64_t{512} << 20) + 1);
  expect_refused(faces::Net::load(p).status(), Code::kInvalidArgument,
                 "536870913 bytes exceeds the limit of 536870912 bytes");
  fs::remove(p);
}

TEST(Limits, model_nodes_20000) {
  EXPECT_TRUE(faces::Net::create(relu_chain(20000)).ok());
  expect_refused(faces::Net::create(relu_chain(20001)).status(), Code::kInvalidArgument,
                 "20001 nodes exceed the limit of 20000");
}

TEST(Limits, model_initializers_20000) {
  OnnxBuilder m;
  m.input("x", {1, 4}).output("y");
  for (int i = 0; i < 20001; ++i) m.init("w" + std::to_string(i), {1}, {1.0f});
  m.node("Relu", {"x"}, {"y"});
  expect_refused(faces::Net::create(m.bytes()).status(), Code::kInvalidArgument,
                 "20001 initializers exceed the limit of 20000");
}

TEST(Limits, model_node_inputs_outputs_attributes_64) {
  OnnxBuilder m;
  m.input("x", {1, 4}).output("y");
  auto* n = m.node("Sum", {}, {"y"});
  for (int i = 0; i < 65; ++i) n->add_input("x");
  expect_refused(faces::Net::create(m.bytes()).status(), Code::kInvalidArgument,
                 "more than 64 inputs, outputs or attributes");
}

TEST(Limits, model_attribute_list_1000000) {
  OnnxBuilder m;
  m.input("x", {1, 4}).output("y");
  OnnxBuilder::ints(m.node("Transpose", {"x"}, {"y"}), "perm", std::vector<std::int64_t>(1000001, 0));
  expect_refused(faces::Net::create(m.bytes()).status(), Code::kInvalidArgument,
                 "attribute 'perm': list too long");
}

TEST(Limits, model_rank_8) {
  OnnxBuilder m;
  m.input("x", {1, 1, 1, 1, 1, 1, 1, 1, 1}).output("y");
  m.node("Relu", {"x"}, {"y"});
  expect_refused(faces::Net::create(m.bytes()).status(), Code::kInvalidArgument, "rank exceeds 8");
}

TEST(Limits, model_tensor_elements_2_pow_26) {
  OnnxBuilder m;
  m.input("x", {1, 4}).output("y");
  auto* t = m.model().mutable_graph()->add_initializer();  // declared size only: refused before any data
  t->set_name("w");
  t->set_data_type(onnx::TensorProto_DataType_FLOAT);
  t->add_dims((std::int64_t{1} << 26) + 1);
  m.node("Relu", {"x"}, {"y"});
  expect_refused(faces::Net::create(m.bytes()).status(), Code::kInvalidArgument,
                 "more than 67108864 elements");
}

TEST(Limits, model_weights_in_total) {
  // The default (2^26 values) would need a 256 MB model; the limit is a NetOptions field: test it at 100.
  faces::NetOptions o;
  o.limits.max_weight_elements = 100;
  auto model = [](int a, int b) {
    OnnxBuilder m;
    m.input("x", {1, 4})
        .output("y")
        .init("a", {a}, std::vector<float>(a, 1.0f))
        .init("b", {b}, std::vector<float>(b, 1.0f));
    m.node("Relu", {"x"}, {"y"});
    return m.bytes();
  };
  EXPECT_TRUE(faces::Net::create(model(50, 50), o).ok());
  expect_refused(faces::Net::create(model(50, 51), o).status(), Code::kInvalidArgument,
                 "initializers exceed 100 elements in total");
}

TEST(Limits, model_live_tensors_512_mib) {
  // [1, 2^26] floats are 256 MiB: x and relu(x) live together are the limit; x + relu(x) needs a third.
  const std::int64_t n = std::int64_t{1} << 26;
  OnnxBuilder at;
  at.input("x", {1, n}).output("y");
  at.node("Relu", {"x"}, {"y"});
  EXPECT_TRUE(faces::Net::create(at.bytes()).ok());
  OnnxBuilder past;
  past.input("x", {1, n}).output("y");
  past.node("Relu", {"x"}, {"r"});
  past.node("Add", {"x", "r"}, {"y"});
  expect_refused(faces::Net::create(past.bytes()).status(), Code::kInvalidArgument,
                 "program needs 805306368 bytes of live tensors, above the limit of 536870912");
}

TEST(Limits, detector_native_input_2_pow_26_values) {
  auto det = faces::Detector::builtin();
  ASSERT_TRUE(det.ok()) << det.status().to_string();
  faces::DetectOptions native;
  native.input = faces::DetectInput::kNative;
  const int w = 8192, h = 2752;  // 3 x 8192 x 2752 = 67 633 152 values, past 2^26 = 67 108 864
  const std::vector<std::uint8_t> rgb(static_cast<std::size_t>(w) * h * 3, 0);
  expect_refused(det->detect(rgb, w, h, native).status(), Code::kInvalidArgument,
                 "native input 8192x2752 (67633152 values) is over the network's limit of 67108864");
}

// ---- faces flags ---------------------------------------------------------------------------------------------

TEST(Limits, faces_batch_256_and_threads_4096) {
  CliRun r = run_cli({"faces", "detect", "--device", "cpu", "--batch", "257", "photo.jpg"});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("--batch"), std::string::npos) << r.err;
  r = run_cli({"faces", "detect", "--device", "cpu", "--threads", "4097", "photo.jpg"});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("--threads"), std::string::npos) << r.err;
}

TEST(Limits, faces_list_file_64_mib) {
  const std::string p = sparse_file("list.txt", (std::uint64_t{64} << 20) + 1);
  const CliRun r = run_cli({"faces", "detect", "--device", "cpu", "@" + p});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("67108865 bytes exceeds the limit of 67108864 bytes"), std::string::npos) << r.err;
  fs::remove(p);
}

}  // namespace
}  // namespace facetrace
