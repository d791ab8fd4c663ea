/// @file
/// The `facetrace faces` command line as a user runs it (docs/faces.md "CLI"): the binary is started in a child
/// process with FACETRACE_MODELS unset, its stdout (JSON lines), stderr and exit code checked. Folders of photos
/// with a corrupt one, @lists, every exit code, --device, --input-size native, --annotate-dir, the progress line and
/// `embed` with a small embedder the test builds.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "facetrace/core/file.h"
#include "facetrace/core/image.h"
#include "log_guard.h"
#include "onnx_builder.h"
#include "run_child.h"

namespace facetrace {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

struct CliRun {
  int rc = -1;
  std::string out, err;
  /// stdout parsed as JSON lines (a line that does not parse fails the test).
  std::vector<Json> lines() const {
    std::vector<Json> r;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      Json j = Json::parse(line, nullptr, false);
      EXPECT_FALSE(j.is_discarded()) << "not JSON: " << line;
      r.push_back(std::move(j));
    }
    return r;
  }
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

/// Runs `facetrace args...` (FACETRACE_MODELS unset), stdout and stderr to files.
CliRun run_cli(const std::vector<std::string>& args) {
  const std::string base = ::testing::TempDir() + "cli_faces_test_run." + std::to_string(::getpid());
  const std::string out = base + ".out", err = base + ".err";
  const pid_t pid = facetrace::testing::spawn_redirected(
      FT_FACETRACE_EXE, args, out, err, [] { return ::unsetenv("FACETRACE_MODELS") == 0; });
  CliRun r;
  int status = 0;
  if (pid > 0 && ::waitpid(pid, &status, 0) == pid && WIFEXITED(status)) r.rc = WEXITSTATUS(status);
  r.out = slurp(out);
  r.err = slurp(err);
  fs::remove(out);
  fs::remove(err);
  return r;
}

std::string describe(const CliRun& r) {
  return "exit " + std::to_string(r.rc) + "\nstdout:\n" + r.out + "stderr:\n" + r.err;
}

/// A fresh folder under the test temp dir.
std::string fresh_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "cli_faces_test_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

/// A folder holding a_portrait.jpg, b_corrupt.jpg (a JPEG cut in its entropy data), c_astronaut.png and notes.txt.
std::string photo_folder(const std::string& data, const std::string& name) {
  const std::string d = fresh_dir(name);
  fs::copy_file(data + "/images/obama_portrait_2012.jpg", d + "/a_portrait.jpg");
  fs::copy_file(data + "/images/astronaut_eileen_collins.png", d + "/c_astronaut.png");
  const std::string jpg = slurp(data + "/images/biden_crop_2010.jpg");
  std::ofstream(d + "/b_corrupt.jpg", std::ios::binary) << jpg.substr(0, jpg.size() / 3);
  std::ofstream(d + "/notes.txt") << "not a photo\n";
  return d;
}

bool has_warning(const std::string& err) { return err.find("warning") != std::string::npos; }

TEST(CliFaces, a_folder_streams_a_record_per_photo_in_name_order_with_an_error_record_and_exits_1) {
  FT_REQUIRE_TEST_DATA(data);
  const std::string d = photo_folder(data, "stream");
  const CliRun r = run_cli({"faces", "detect", "--json", "--device", "cpu", d});
  EXPECT_EQ(r.rc, 1) << describe(r);
  const auto lines = r.lines();
  ASSERT_EQ(lines.size(), 3u) << describe(r);
  EXPECT_EQ(lines[0]["path"], d + "/a_portrait.jpg");
  EXPECT_EQ(lines[0]["width"], 910);
  EXPECT_EQ(lines[0]["height"], 1137);
  ASSERT_EQ(lines[0]["faces"].size(), 1u);
  EXPECT_GE(lines[0]["faces"][0]["score"].get<double>(), 0.6);
  EXPECT_EQ(lines[0]["faces"][0]["box"].size(), 4u);
  EXPECT_EQ(lines[0]["faces"][0]["landmarks"].size(), 5u);
  EXPECT_EQ(lines[1]["path"], d + "/b_corrupt.jpg");
  EXPECT_FALSE(lines[1].contains("faces"));
  EXPECT_EQ(lines[1]["code"], "InvalidArgument");
  EXPECT_NE(lines[1]["error"].get<std::string>().find("truncated or corrupt"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[2]["path"], d + "/c_astronaut.png");
  EXPECT_EQ(lines[2]["faces"].size(), 1u);
  EXPECT_FALSE(has_warning(r.err)) << "--device cpu never looks for the GPU: " << r.err;
  fs::remove_all(d);
}

TEST(CliFaces, lists_and_files_give_the_same_records_for_any_batch_size) {
  FT_REQUIRE_TEST_DATA(data);
  const std::string d = fresh_dir("list");
  const std::string a = data + "/images/obama_portrait_2012.jpg",
                    b = data + "/images/astronaut_eileen_collins.png",
                    c = data + "/images/obama_congress_2009.jpg";
  std::ofstream(d + "/list.txt") << a << "\n\n" << b << "\r\n" << c;  // a blank line, CRLF, no final newline
  const CliRun listed =
      run_cli({"faces", "detect", "--json", "--device", "cpu", "--batch", "2", "@" + d + "/list.txt"});
  ASSERT_EQ(listed.rc, 0) << describe(listed);
  const auto lines = listed.lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["path"], a);
  EXPECT_EQ(lines[1]["path"], b);
  EXPECT_EQ(lines[2]["path"], c);
  for (const Json& l : lines) EXPECT_EQ(l["faces"].size(), 1u) << l;
  const CliRun one = run_cli({"faces", "detect", "--json", "--device", "cpu", "--batch", "1", a, b, c});
  ASSERT_EQ(one.rc, 0) << describe(one);
  EXPECT_EQ(one.out, listed.out);  // batches of 2 (the last of 1) and of 1: the same bytes
  fs::remove_all(d);
}

TEST(CliFaces, a_missing_photo_is_an_error_record_and_exit_1) {
  FT_REQUIRE_TEST_DATA(data);
  const std::string missing = ::testing::TempDir() + "cli_faces_test_no_such_photo.jpg";
  const CliRun r = run_cli({"faces", "detect", "--json", "--device", "cpu", missing,
                            data + "/images/astronaut_eileen_collins.png"});
  EXPECT_EQ(r.rc, 1) << describe(r);
  const auto lines = r.lines();
  ASSERT_EQ(lines.size(), 2u) << describe(r);
  EXPECT_EQ(lines[0]["path"], missing);
  EXPECT_EQ(lines[0]["code"], "Io");
  EXPECT_NE(lines[0]["error"].get<std::string>().find("No such file"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[1]["faces"].size(), 1u);  // processing went on
  // text mode: the error on stderr, the good photo on stdout
  const CliRun text =
      run_cli({"faces", "detect", "--device", "cpu", missing, data + "/images/astronaut_eileen_collins.png"});
  EXPECT_EQ(text.rc, 1);
  EXPECT_NE(text.err.find(missing), std::string::npos) << describe(text);
  EXPECT_NE(text.out.find("astronaut_eileen_collins.png (512x512): 1 face"), std::string::npos)
      << describe(text);
}

TEST(CliFaces, bad_usage_exits_2_before_any_work) {
  FT_REQUIRE_TEST_DATA(data);
  const std::string photo = data + "/images/astronaut_eileen_collins.png";
  const std::string empty = fresh_dir("empty");
  const std::vector<std::vector<std::string>> cases = {
      {"faces", "detect", "--json"},                 // no paths
      {"faces", "detect", "--no-such-flag", photo},  // unknown flag
      {"faces", "detect", "--batch", "0", photo},    // batch outside 1..256
      {"faces", "detect", "--batch", "257", photo},
      {"faces", "detect", "--device", "tpu", photo},           // unknown device
      {"faces", "detect", "--input-size", "512", photo},       // not the model's side
      {"faces", "detect", "@" + empty + "/no_such_list.txt"},  // unreadable list
      {"faces", "detect", empty},                              // a folder without photos
      {"faces", "embed", "--device", "cpu", photo},            // no embedder
      {"faces", "detect", "--score", "nan", photo},            // scores: a finite number in [0, 1]
      {"faces", "detect", "--score", "-5", photo},
      {"faces", "detect", "--score", "2", photo},
      {"faces", "detect", "--score", "0.5x", photo},
      {"faces", "embed", "--score", "inf", photo},
      {"faces", "detect", "--threads", "-1", photo},           // threads: 0 (all) .. 4096
  };
  for (const auto& args : cases) {
    const CliRun r = run_cli(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.rc, 2) << joined << "\n" << describe(r);
    EXPECT_TRUE(r.out.empty()) << joined << "\n" << describe(r);
  }
  fs::remove_all(empty);
}

// The same faces in two `faces detect --json` outputs: one line per photo, the same paths, face counts and order,
// boxes, landmarks and scores within 0.02 (the GPU network agrees with the CPU's within the fp32 bar of
// docs/design/faces.md §4, not bit for bit, and the JSON rounds to 0.01 px).
static void expect_same_detections(const std::string& a, const std::string& b) {
  std::istringstream sa(a), sb(b);
  std::string la, lb;
  std::size_t lines = 0;
  while (std::getline(sa, la)) {
    ASSERT_TRUE(std::getline(sb, lb)) << "fewer lines in\n" << b;
    ++lines;
    const auto ja = nlohmann::json::parse(la), jb = nlohmann::json::parse(lb);
    ASSERT_EQ(ja.value("path", ""), jb.value("path", ""));
    ASSERT_EQ(ja["faces"].size(), jb["faces"].size()) << la << "\n" << lb;
    for (std::size_t f = 0; f < ja["faces"].size(); ++f) {
      const auto& fa = ja["faces"][f];
      const auto& fb = jb["faces"][f];
      EXPECT_NEAR(fa["score"].get<double>(), fb["score"].get<double>(), 0.02);
      for (std::size_t k = 0; k < 4; ++k) EXPECT_NEAR(fa["box"][k].get<double>(), fb["box"][k].get<double>(), 0.02);
      for (std::size_t k = 0; k < 5; ++k)
        for (std::size_t c = 0; c < 2; ++c)
          EXPECT_NEAR(fa["landmarks"][k][c].get<double>(), fb["landmarks"][k][c].get<double>(), 0.02);
    }
  }
  EXPECT_FALSE(std::getline(sb, lb)) << "more lines in\n" << b;
  EXPECT_GT(lines, 0u);
}

TEST(CliFaces, device_gpu_fails_with_the_reason_or_matches_the_cpu_and_auto_falls_back_with_one_warning) {
  FT_REQUIRE_TEST_DATA(data);
  const std::string photo = data + "/images/obama_portrait_2012.jpg";
  const CliRun cpu = run_cli({"faces", "detect", "--json", "--device", "cpu", photo});
  ASSERT_EQ(cpu.rc, 0) << describe(cpu);
  const CliRun gpu = run_cli({"faces", "detect", "--json", "--device", "gpu", photo});
  if (gpu.rc == 0) {
    expect_same_detections(cpu.out, gpu.out);  // the same faces on the GPU
  } else {
    EXPECT_EQ(gpu.rc, 1) << describe(gpu);
    EXPECT_TRUE(gpu.out.empty()) << describe(gpu);
    EXPECT_NE(gpu.err.find("--device gpu: "), std::string::npos) << describe(gpu);
  }
  const CliRun aut = run_cli({"faces", "detect", "--json", "--device", "auto", photo});
  ASSERT_EQ(aut.rc, 0) << describe(aut);
  expect_same_detections(cpu.out, aut.out);
  std::size_t warnings = 0;
  for (std::size_t p = 0; (p = aut.err.find("warning", p)) != std::string::npos; ++p) ++warnings;
  EXPECT_EQ(warnings, gpu.rc == 0 ? 0u : 1u) << aut.err;
}

TEST(CliFaces, native_input_size_finds_the_faces_too) {
  FT_REQUIRE_TEST_DATA(data);
  const CliRun r =
      run_cli({"faces", "detect", "--json", "--device", "cpu", "--input-size", "native",
               data + "/images/obama_portrait_2012.jpg", data + "/images/astronaut_eileen_collins.png"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  const auto lines = r.lines();
  ASSERT_EQ(lines.size(), 2u);
  for (const Json& l : lines) EXPECT_EQ(l["faces"].size(), 1u) << l;
  const CliRun boxed = run_cli({"faces", "detect", "--json", "--device", "cpu", "--input-size", "640",
                                data + "/images/obama_portrait_2012.jpg"});
  ASSERT_EQ(boxed.rc, 0);
  EXPECT_NE(boxed.lines()[0]["faces"][0]["box"], lines[0]["faces"][0]["box"])
      << "native is another network input";
}

TEST(CliFaces, annotate_dir_writes_one_png_per_photo_and_refuses_a_folder_in_the_way_up_front) {
  FT_REQUIRE_TEST_DATA(data);
  const std::string d = photo_folder(data, "annotate_in");
  const std::string out = fresh_dir("annotate_out");
  // a folder in the way of one annotation: refused before any photo (exit 2), nothing written
  // (a write failing mid-run, an error record and exit 1: tests/unit/cli_outputs_test.cpp)
  fs::create_directories(out + "/a_portrait.png");
  const CliRun refused = run_cli({"faces", "detect", "--json", "--device", "cpu", "--annotate-dir", out, d});
  EXPECT_EQ(refused.rc, 2) << describe(refused);
  EXPECT_NE(refused.err.find(out + "/a_portrait.png: is a directory"), std::string::npos) << describe(refused);
  EXPECT_TRUE(refused.lines().empty()) << describe(refused);
  EXPECT_FALSE(fs::exists(out + "/c_astronaut.png"));
  fs::remove(out + "/a_portrait.png");
  const CliRun r = run_cli({"faces", "detect", "--json", "--device", "cpu", "--annotate-dir", out, d});
  EXPECT_EQ(r.rc, 1) << describe(r);  // the corrupt photo
  const auto lines = r.lines();
  ASSERT_EQ(lines.size(), 3u) << describe(r);
  EXPECT_EQ(lines[0]["faces"].size(), 1u);
  EXPECT_FALSE(lines[0].contains("error")) << lines[0];
  EXPECT_FALSE(lines[2].contains("error")) << lines[2];
  auto bytes = core::read_file(out + "/c_astronaut.png", 64 << 20);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  auto im = core::decode_image(*bytes);
  ASSERT_TRUE(im.ok());
  EXPECT_EQ(im->width, 512);
  EXPECT_FALSE(fs::exists(out + "/b_corrupt.png"));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(out)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"a_portrait.png", "c_astronaut.png"}));  // no temporary left
  fs::remove_all(d);
  fs::remove_all(out);
}

TEST(CliFaces, a_long_run_prints_a_progress_line_every_tenth_when_stderr_is_not_a_terminal) {
  FT_REQUIRE_TEST_DATA(data);
  const std::string d = fresh_dir("progress");
  for (int i = 0; i < 20; ++i)
    fs::copy_file(data + "/images/astronaut_eileen_collins.png", d + "/p" + std::to_string(100 + i) + ".png");
  const CliRun r = run_cli({"faces", "detect", "--json", "--device", "cpu", "--batch", "4", d});
  ASSERT_EQ(r.rc, 0) << describe(r);
  EXPECT_EQ(r.lines().size(), 20u);
  std::vector<std::string> progress;
  std::istringstream in(r.err);
  for (std::string line; std::getline(in, line);)
    if (line.find("photos (") != std::string::npos) progress.push_back(line);
  ASSERT_EQ(progress.size(), 5u) << r.err;  // batches end at 20 %, 40 %, … : one line each
  EXPECT_NE(progress.front().find("4/20 photos (20%)"), std::string::npos) << progress.front();
  EXPECT_NE(progress.back().find("20/20 photos (100%), 20 faces, 0 failed"), std::string::npos)
      << progress.back();
  const CliRun quiet = run_cli({"faces", "detect", "--json", "--device", "cpu", "--quiet", d});
  EXPECT_EQ(quiet.err.find("photos ("), std::string::npos) << quiet.err;
  fs::remove_all(d);
}

TEST(CliFaces, embed_writes_one_unit_embedding_line_per_face_and_an_error_record) {
  FT_REQUIRE_TEST_DATA(data);
  const std::string d = photo_folder(data, "embed");
  // a small embedder: Conv 1×1 3→8 then GlobalAveragePool, 112² input → 8 values
  faces::testing::OnnxBuilder m(13);
  m.input("x", {1, 3, 112, 112}).output("y");
  m.init("w", {8, 3, 1, 1}, faces::testing::random_floats(24, 5));
  m.init("b", {8}, std::vector<float>(8, 0.1f));
  m.node("Conv", {"x", "w", "b"}, {"c"});
  m.node("GlobalAveragePool", {"c"}, {"y"});
  const auto bytes = m.bytes();
  const std::string model = d + "/tiny_embedder.onnx";
  std::ofstream(model, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  const CliRun r = run_cli({"faces", "embed", "--device", "cpu", "--embedder", model, "--batch", "3", d});
  EXPECT_EQ(r.rc, 1) << describe(r);
  const auto lines = r.lines();
  ASSERT_EQ(lines.size(), 3u) << describe(r);
  for (std::size_t i : {0u, 2u}) {
    const Json& l = lines[i];
    EXPECT_EQ(l["face"], 0);
    EXPECT_EQ(l["dim"], 8);
    ASSERT_EQ(l["embedding"].size(), 8u) << l;
    double n2 = 0;
    for (const Json& v : l["embedding"]) n2 += v.get<double>() * v.get<double>();
    EXPECT_NEAR(std::sqrt(n2), 1.0, 1e-5);
    EXPECT_EQ(l["landmarks"].size(), 5u);
  }
  EXPECT_EQ(lines[0]["path"], d + "/a_portrait.jpg");
  EXPECT_EQ(lines[1]["path"], d + "/b_corrupt.jpg");
  EXPECT_TRUE(lines[1].contains("error"));
  EXPECT_EQ(lines[2]["path"], d + "/c_astronaut.png");
  EXPECT_NE(lines[0]["embedding"], lines[2]["embedding"]);
  fs::remove_all(d);
}

}  // namespace
}  // namespace facetrace
