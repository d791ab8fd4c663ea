/// @file
/// Farm jobs, units, partial files and the canonical merge (docs/design/farm.md §1), against a naive reference: each
/// unit rendered by the CPU tracer into a fresh film and added in ascending order into doubles by the test.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "facetrace/core/sha256.h"
#include "facetrace/tracer/cpu_tracer.h"
#include "facetrace/tracer/env_map.h"
#include "facetrace/tracer/farm.h"
#include "facetrace/tracer/scene_json.h"

namespace facetrace::farm {
namespace {

namespace fs = std::filesystem;

tracer::Scene tiny_scene() {
  tracer::Scene s = tracer::builtin_diamond_scene();
  s.width = 12;
  s.height = 9;
  s.max_bounces = 6;
  return s;
}

/// A job of 6 units: spp 22, K 4 (the last unit holds 2 samples).
Job tiny_job(float exposure = 1.0f) {
  tracer::Scene s = tiny_scene();
  s.exposure = exposure;
  auto job = make_job("tiny", s, 22, 4);
  EXPECT_TRUE(job.ok()) << job.status().what();
  return std::move(job).value();
}

tracer::RenderOptions cpu_options() {
  tracer::RenderOptions o;
  o.device = tracer::RenderDevice::kCpu;
  o.threads = 2;
  return o;
}

/// A fresh directory under the test temp dir, removed at the end.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "ft_farm_XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

/// Renders `units` of `job` into one partial in `dir` starting at `first`.
std::string write_units(const std::string& dir, const Job& job, std::uint64_t first,
                        const std::vector<std::uint64_t>& units, std::uint32_t capacity = 0) {
  auto w =
      PartialWriter::open(dir, job, first, capacity ? capacity : static_cast<std::uint32_t>(units.size()));
  EXPECT_TRUE(w.ok()) << w.status().what();
  for (const std::uint64_t u : units) {
    auto r = render_unit(job, u, cpu_options());
    EXPECT_TRUE(r.ok()) << r.status().what();
    EXPECT_TRUE(w->append(*r).ok());
  }
  return w->path();
}

/// The naive canonical reference: every unit through the CPU tracer, added in ascending order into doubles.
std::vector<double> reference_sums(const Job& job, const std::vector<std::uint64_t>& units) {
  std::vector<double> acc(job.scene.width * job.scene.height * 3, 0.0);
  for (const std::uint64_t u : units) {
    tracer::Film film(job.scene.width, job.scene.height);
    const std::uint64_t first = u * job.unit_samples;
    const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(job.unit_samples, job.spp - first));
    EXPECT_TRUE(tracer::cpu_accumulate(job.scene, first, n, film).ok());
    for (std::size_t i = 0; i < acc.size(); ++i) acc[i] += static_cast<double>(film.xyz[i]);
  }
  return acc;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// ---- basics ----------------------------------------------------------------------------------------------

TEST(FarmCrc, matches_the_ieee_check_value) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(crc32("56789", 5, crc32("1234", 4)), 0xCBF43926u);  // continues a running CRC
}

TEST(FarmUnits, cut_the_whole_frame_into_k_sample_chunks) {
  const Job job = tiny_job();
  EXPECT_EQ(unit_count(job), 6u);  // ⌈22 / 4⌉
  EXPECT_EQ(unit_samples(job, 0).first_sample, 0u);
  EXPECT_EQ(unit_samples(job, 0).samples, 4u);
  EXPECT_EQ(unit_samples(job, 3).first_sample, 12u);
  EXPECT_EQ(unit_samples(job, 5).first_sample, 20u);
  EXPECT_EQ(unit_samples(job, 5).samples, 2u);
  EXPECT_FALSE(render_unit(job, 6, cpu_options()).ok());
}

TEST(FarmUnits, a_unit_is_its_sample_range_traced_into_a_zeroed_film) {
  const Job job = tiny_job();
  auto r = render_unit(job, 3, cpu_options());
  ASSERT_TRUE(r.ok()) << r.status().what();
  tracer::Film film(job.scene.width, job.scene.height);
  ASSERT_TRUE(tracer::cpu_accumulate(job.scene, 12, 4, film).ok());
  ASSERT_EQ(r->xyz.size(), film.xyz.size());
  EXPECT_EQ(std::memcmp(r->xyz.data(), film.xyz.data(), film.xyz.size() * 4), 0);
  EXPECT_EQ(r->backend, UnitBackend::kCpu);
  EXPECT_EQ(r->range.samples, 4u);
}

TEST(FarmJob, hashes_the_canonical_scene_json) {
  const Job job = tiny_job();
  tracer::SceneJsonOptions one_line;
  one_line.indent = -1;
  const std::string json = tracer::scene_to_json(job.scene, one_line);
  EXPECT_EQ(job.scene_json, json);
  EXPECT_EQ(core::hex(job.scene_sha256),
            core::sha256_hex({reinterpret_cast<const std::uint8_t*>(json.data()), json.size()}));
  EXPECT_NE(tiny_job(0.5f).scene_sha256, job.scene_sha256);
}

// docs/design/farm.md §1: an HDR map is part of the scene hash by its sha256, not by where it is mounted.
TEST(FarmJob, an_hdr_map_enters_the_scene_hash_by_its_sha256_not_its_path) {
  auto with_map = [](const std::string& path, const std::string& sha) {
    tracer::Scene s = tracer::builtin_diamond_scene();
    s.width = s.height = 8;
    s.environment = tracer::EnvironmentKind::kHdr;
    s.environment_map = path;
    s.environment_map_sha256 = sha;
    auto m = tracer::make_env_light(tracer::EnvMap{2, 1, {1, 1, 1, 0.5f, 0.5f, 0.5f}});
    EXPECT_TRUE(m.ok());
    if (m) s.environment_light = *m;
    auto j = make_job("hdr", std::move(s), 4, 2);
    EXPECT_TRUE(j.ok()) << j.status().what();
    return std::move(j).value();
  };
  const std::string sha(64, 'b');
  const Job a = with_map("/mnt/farm/maps/studio.hdr", sha), b = with_map("/data/studio.hdr", sha);
  EXPECT_EQ(a.scene_sha256, b.scene_sha256);
  EXPECT_NE(a.scene_json, b.scene_json);  // the record keeps each machine's path
  EXPECT_NE(a.scene_json.find("/mnt/farm/maps/studio.hdr"), std::string::npos);
  EXPECT_NE(with_map("/data/studio.hdr", std::string(64, 'c')).scene_sha256, a.scene_sha256);
}

TEST(FarmJob, parses_inline_file_and_builtin_scenes_with_overrides) {
  TempDir dir;
  const tracer::Scene s = tiny_scene();
  ASSERT_TRUE(tracer::save_scene_file(s, (dir.path / "gem.json").string()).ok());
  auto from_file = parse_job(R"({"name":"a","scene":"gem.json","spp":64,"unit_samples":16})", dir.str(), "x");
  ASSERT_TRUE(from_file.ok()) << from_file.status().what();
  EXPECT_EQ(from_file->name, "a");
  EXPECT_EQ(from_file->scene.width, 12u);
  EXPECT_EQ(unit_count(*from_file), 4u);

  const std::string inline_job = R"({"scene":)" + tracer::scene_to_json(s) + R"(,"spp":5,"unit_samples":2})";
  auto inl = parse_job(inline_job, dir.str(), "stem");
  ASSERT_TRUE(inl.ok()) << inl.status().what();
  EXPECT_EQ(inl->name, "stem");
  EXPECT_EQ(inl->scene_sha256, from_file->scene_sha256);  // the same scene, however it was given

  auto builtin = parse_job(
      R"({"scene":"builtin:diamond","spp":4096,"unit_samples":64,"width":64,"height":32})", ".", "d");
  ASSERT_TRUE(builtin.ok()) << builtin.status().what();
  EXPECT_EQ(builtin->scene.width, 64u);
  EXPECT_EQ(builtin->scene.height, 32u);
  EXPECT_EQ(unit_count(*builtin), 64u);

  std::ofstream(dir.path / "job.json") << R"({"scene":"gem.json","spp":8,"unit_samples":8})";
  auto loaded = load_job_file((dir.path / "job.json").string());
  ASSERT_TRUE(loaded.ok()) << loaded.status().what();
  EXPECT_EQ(loaded->name, "job");  // the file's stem
}

TEST(FarmJob, refuses_bad_jobs_naming_the_field) {
  auto err = [](const std::string& text) {
    auto j = parse_job(text, ".", "j", "job.json");
    EXPECT_FALSE(j.ok()) << text;
    return j.ok() ? std::string() : j.status().what();
  };
  EXPECT_NE(err(R"({"scene":"builtin:diamond","spp":8})").find("unit_samples"), std::string::npos);
  EXPECT_NE(err(R"({"scene":"builtin:diamond","spp":0,"unit_samples":4})").find("spp"), std::string::npos);
  EXPECT_NE(
      err(R"({"scene":"builtin:diamond","spp":8,"unit_samples":4,"sp":1})").find("unknown field \"sp\""),
      std::string::npos);
  EXPECT_NE(err(R"({"scene":"builtin:diamond","spp":8,"unit_samples":-4})").find("unit_samples"),
            std::string::npos);
  EXPECT_NE(err(R"({"name":"a b","scene":"builtin:diamond","spp":8,"unit_samples":4})").find("job name"),
            std::string::npos);
  EXPECT_NE(err(R"({"scene":"no_such.json","spp":8,"unit_samples":4})").find("no_such.json"),
            std::string::npos);
  EXPECT_NE(err(R"({"scene":{"width":0},"spp":8,"unit_samples":4})").find("width"), std::string::npos);
  EXPECT_NE(err("{").find("job.json"), std::string::npos);
}

// ---- partial files ---------------------------------------------------------------------------------------

TEST(FarmPartial, round_trips_header_and_blocks) {
  TempDir dir;
  const Job job = tiny_job();
  const std::string path = write_units(dir.str(), job, 2, {2, 3}, 4);
  EXPECT_EQ(fs::path(path).filename().string(), "part-tiny-2.ftp");
  auto h = read_partial_header(path);
  ASSERT_TRUE(h.ok()) << h.status().what();
  EXPECT_EQ(h->version, 1u);
  EXPECT_EQ(h->build_id, build_id());
  EXPECT_EQ(h->job_name, "tiny");
  EXPECT_EQ(h->scene_sha256, job.scene_sha256);
  EXPECT_EQ(h->scene_json, job.scene_json);
  EXPECT_EQ(h->width, 12u);
  EXPECT_EQ(h->height, 9u);
  EXPECT_EQ(h->unit_samples, 4u);
  EXPECT_EQ(h->spp, 22u);
  EXPECT_EQ(h->capacity, 4u);
  ASSERT_EQ(h->units.size(), 2u);
  EXPECT_EQ(h->units[1].unit, 3u);
  EXPECT_EQ(h->units[1].first_sample, 12u);
  EXPECT_EQ(h->units[1].samples, 4u);
  auto block = read_partial_unit(path, *h, 1);
  ASSERT_TRUE(block.ok()) << block.status().what();
  tracer::Film film(12, 9);
  ASSERT_TRUE(tracer::cpu_accumulate(job.scene, 12, 4, film).ok());
  EXPECT_EQ(std::memcmp(block->data(), film.xyz.data(), film.xyz.size() * 4), 0);
  EXPECT_EQ(h->units[1].crc32, crc32(film.xyz.data(), film.xyz.size() * 4));
  // no temporary left behind
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path)) ++files;
  EXPECT_EQ(files, 1u);
}

TEST(FarmPartial, reopening_resumes_the_same_file) {
  TempDir dir;
  const Job job = tiny_job();
  write_units(dir.str(), job, 0, {0, 1}, 4);
  {
    auto w = PartialWriter::open(dir.str(), job, 0, 4);
    ASSERT_TRUE(w.ok()) << w.status().what();
    EXPECT_EQ(w->header().units.size(), 2u);
    auto r = render_unit(job, 2, cpu_options());
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(w->append(*r).ok());
    auto again = render_unit(job, 1, cpu_options());
    ASSERT_TRUE(again.ok());
    EXPECT_FALSE(w->append(*again).ok());  // already present
  }
  auto h = read_partial_header((dir.path / "part-tiny-0.ftp").string());
  ASSERT_TRUE(h.ok());
  ASSERT_EQ(h->units.size(), 3u);
  EXPECT_EQ(h->units[2].unit, 2u);
}

TEST(FarmPartial, never_takes_over_another_jobs_file_or_a_locked_one) {
  TempDir dir;
  write_units(dir.str(), tiny_job(), 0, {0}, 2);
  auto other = PartialWriter::open(dir.str(), tiny_job(0.5f), 0, 2);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().what().find("another job"), std::string::npos) << other.status().what();
  auto bigger = PartialWriter::open(dir.str(), tiny_job(), 0, 3);
  ASSERT_FALSE(bigger.ok());
  EXPECT_NE(bigger.status().what().find("room for 2"), std::string::npos) << bigger.status().what();
  auto first = PartialWriter::open(dir.str(), tiny_job(), 0, 2);
  ASSERT_TRUE(first.ok()) << first.status().what();
  auto second = PartialWriter::open(dir.str(), tiny_job(), 0, 2);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().what().find("another process"), std::string::npos) << second.status().what();
}

/// The byte offset and size of header copy `slot` (the preamble stores the copy size at offset 12).
std::pair<std::uint64_t, std::uint32_t> slot_of(const std::string& path, int slot) {
  std::ifstream f(path, std::ios::binary);
  char pre[16];
  f.read(pre, 16);
  std::uint32_t bytes = 0;
  std::memcpy(&bytes, pre + 12, 4);
  return {4096 + static_cast<std::uint64_t>(slot) * bytes, bytes};
}

void poke(const std::string& path, std::uint64_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(FarmPartial, a_torn_header_falls_back_to_the_previous_copy) {
  TempDir dir;
  const Job job = tiny_job();
  // sequence 1 (slot 0, no unit), 2 (slot 1, unit 0), 3 (slot 0, units 0 and 1)
  const std::string path = write_units(dir.str(), job, 0, {0, 1}, 3);
  const auto [offset, bytes] = slot_of(path, 0);
  poke(path, offset + 300, "garbage: a crash in the middle of rewriting the header");
  auto h = read_partial_header(path);
  ASSERT_TRUE(h.ok()) << h.status().what();
  ASSERT_EQ(h->units.size(), 1u);  // the newest intact copy
  EXPECT_EQ(h->units[0].unit, 0u);
  poke(path, slot_of(path, 1).first + 300, "and the other copy too");
  auto none = read_partial_header(path);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().what().find("neither copy"), std::string::npos) << none.status().what();
}

TEST(FarmPartial, names_what_is_wrong_with_a_bad_file) {
  TempDir dir;
  const std::string not_partial = (dir.path / "x.ftp").string();
  std::ofstream(not_partial) << "hello";
  auto h = read_partial_header(not_partial);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().what().find("not a facetrace partial"), std::string::npos);
  auto missing = read_partial_header((dir.path / "none.ftp").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().what().find("none.ftp"), std::string::npos);
}

// ---- merge -----------------------------------------------------------------------------------------------

TEST(FarmMerge, any_grouping_gives_identical_bits_equal_to_the_canonical_sum) {
  const Job job = tiny_job();
  const std::vector<std::uint64_t> all = {0, 1, 2, 3, 4, 5};
  const std::vector<double> want = reference_sums(job, all);
  TempDir one, three, odd;
  write_units(one.str(), job, 0, all);
  write_units(three.str(), job, 0, {0, 1});
  write_units(three.str(), job, 2, {2, 3, 4});
  write_units(three.str(), job, 5, {5});
  write_units(odd.str(), job, 1, {1, 3, 5});  // an MPI-like stride: rank 1 of 2
  write_units(odd.str(), job, 0, {0, 2, 4});
  for (const std::string& d : {one.str(), three.str(), odd.str()}) {
    auto m = merge_partials({d});
    ASSERT_TRUE(m.ok()) << d << ": " << m.status().what();
    EXPECT_TRUE(same_bits(m->xyz, want)) << d;
    EXPECT_EQ(m->samples, 22u);
    EXPECT_EQ(m->units_merged, 6u);
    EXPECT_EQ(m->units_total, 6u);
    EXPECT_EQ(m->cpu_units, 6u);
    EXPECT_TRUE(m->missing.empty());
    EXPECT_EQ(m->scene_sha256, job.scene_sha256);
  }
  // the files in any order on the command line
  auto reversed =
      merge_partials({(three.path / "part-tiny-5.ftp").string(), (three.path / "part-tiny-2.ftp").string(),
                      (three.path / "part-tiny-0.ftp").string()});
  ASSERT_TRUE(reversed.ok()) << reversed.status().what();
  EXPECT_TRUE(same_bits(reversed->xyz, want));
}

TEST(FarmMerge, refuses_another_scenes_partial) {
  TempDir dir;
  write_units(dir.str(), tiny_job(), 0, {0, 1, 2});
  write_units(dir.str(), tiny_job(0.5f), 3, {3, 4, 5});
  auto m = merge_partials({dir.str()});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kInvalidArgument);
  EXPECT_NE(m.status().what().find("part-tiny-3.ftp does not belong with"), std::string::npos)
      << m.status().what();
  EXPECT_NE(m.status().what().find("scene"), std::string::npos) << m.status().what();
}

TEST(FarmMerge, refuses_another_size) {
  TempDir dir;
  write_units(dir.str(), tiny_job(), 0, {0, 1, 2});
  tracer::Scene s = tiny_scene();
  s.width = 13;
  auto wide = make_job("tiny", s, 22, 4);
  ASSERT_TRUE(wide.ok());
  write_units(dir.str(), *wide, 3, {3});
  auto m = merge_partials({dir.str()});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().what().find("scene"), std::string::npos)
      << m.status().what();  // the scene holds the size
}

TEST(FarmMerge, refuses_a_duplicated_unit_naming_both_files) {
  TempDir dir;
  write_units(dir.str(), tiny_job(), 0, {0, 1, 2});
  write_units(dir.str(), tiny_job(), 2, {2, 3, 4, 5});
  auto m = merge_partials({dir.str()});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().what().find("unit 2 is in both"), std::string::npos) << m.status().what();
  EXPECT_NE(m.status().what().find("part-tiny-0.ftp"), std::string::npos);
  EXPECT_NE(m.status().what().find("part-tiny-2.ftp"), std::string::npos);
}

TEST(FarmMerge, refuses_a_truncated_partial_naming_file_and_unit) {
  TempDir dir;
  write_units(dir.str(), tiny_job(), 0, {0, 1, 2, 3, 4, 5});
  const fs::path p = dir.path / "part-tiny-0.ftp";
  fs::resize_file(p, fs::file_size(p) - 100);
  auto m = merge_partials({dir.str()});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kIo);
  EXPECT_NE(m.status().what().find("part-tiny-0.ftp: truncated: unit 5"), std::string::npos)
      << m.status().what();
}

TEST(FarmMerge, refuses_a_corrupt_block_naming_file_and_unit) {
  TempDir dir;
  const Job job = tiny_job();
  const std::string path = write_units(dir.str(), job, 0, {0, 1, 2, 3, 4, 5});
  const std::uint64_t block = 12ull * 9 * 12;
  const std::uint64_t body = 4096 + 2ull * slot_of(path, 0).second;
  poke(path, body + 3 * block + 17, "\x7f");
  auto m = merge_partials({path});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().what().find("part-tiny-0.ftp: unit 3: corrupt: CRC mismatch"), std::string::npos)
      << m.status().what();
}

TEST(FarmMerge, reports_missing_units_and_merges_them_only_when_allowed) {
  TempDir dir;
  const Job job = tiny_job();
  write_units(dir.str(), job, 0, {0, 1});
  write_units(dir.str(), job, 4, {4});
  auto m = merge_partials({dir.str()});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().what().find("3 of 6 units are missing: 2-3, 5"), std::string::npos)
      << m.status().what();
  MergeOptions allow;
  allow.allow_missing = true;
  auto partial = merge_partials({dir.str()}, allow);
  ASSERT_TRUE(partial.ok()) << partial.status().what();
  EXPECT_EQ(partial->samples, 12u);  // N counts only what is present
  EXPECT_EQ(partial->missing, (std::vector<std::uint64_t>{2, 3, 5}));
  EXPECT_TRUE(same_bits(partial->xyz, reference_sums(job, {0, 1, 4})));
}

TEST(FarmMerge, formats_unit_lists_as_ranges) {
  EXPECT_EQ(format_unit_list({0, 1, 2, 5, 7, 8}), "0-2, 5, 7-8");
  EXPECT_EQ(format_unit_list({4}), "4");
  EXPECT_EQ(format_unit_list({0, 2, 4, 6}, 2), "0, 2, … (2 more)");
}

TEST(FarmMerge, the_accumulator_insists_on_ascending_units) {
  CanonicalAccumulator acc(1, 1);
  const float a[3] = {1, 2, 3};
  EXPECT_TRUE(acc.add(3, a, 3).ok());
  EXPECT_FALSE(acc.add(3, a, 3).ok());
  EXPECT_FALSE(acc.add(2, a, 3).ok());
  EXPECT_FALSE(acc.add(4, a, 2).ok());
  EXPECT_TRUE(acc.add(4, a, 3).ok());
  EXPECT_EQ(acc.xyz()[2], 6.0);
}

}  // namespace
}  // namespace facetrace::farm
