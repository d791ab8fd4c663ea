/// @file
/// Hostile input as a user (or an attacker handing them files) meets it, docs/limits.md "Echoed input": a 10 MB
/// field, terminal escape sequences and invalid UTF-8 in scene files, file names and flag values. `facetrace` runs
/// in child processes; every message it prints must be short, hold no control byte and be valid UTF-8, and every
/// `--json` output must parse as JSON (nlohmann's strict parser, which also refuses invalid UTF-8).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "run_child.h"

namespace facetrace {
namespace {

namespace fs = std::filesystem;

using CliRun = facetrace::testing::ChildRun;

std::string head(const std::string& s) { return s.substr(0, 400); }

CliRun run_cli(const std::vector<std::string>& args) {
  return facetrace::testing::run_to_end(FT_FACETRACE_EXE, args,
                                        ::testing::TempDir() + "cli_escape_test_run." + std::to_string(::getpid()));
}

std::string fresh_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "cli_escape_test_" + name + "." + std::to_string(::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

// Independent of core/text.h: no byte below 0x20 but newline (the end of a line), no DEL.
bool clean_terminal_text(const std::string& s) {
  for (unsigned char c : s)
    if ((c < 0x20 && c != '\n') || c == 0x7f) return false;
  return true;
}

/// What a message about hostile input must be: short, no control byte, valid UTF-8 (the strict JSON parser
/// checks the UTF-8 of a string it is given).
void expect_clean_stderr(const CliRun& r) {
  EXPECT_LT(r.err.size(), 4000u) << head(r.err);
  EXPECT_TRUE(clean_terminal_text(r.err)) << head(r.err);
  EXPECT_NO_THROW(static_cast<void>(nlohmann::json::parse(nlohmann::json(r.err).dump()))) << head(r.err);
}

/// `render --json` printed exactly one JSON object on stdout, with ok false and the error; returns the error.
std::string json_error(const CliRun& r) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "stdout is not valid JSON (" << e.what() << "): " << head(r.out);
    return {};
  }
  EXPECT_EQ(j.value("ok", true), false);
  EXPECT_EQ(j.value("exit_code", -1), r.rc);
  const std::string error = j.value("error", std::string());
  EXPECT_LT(error.size(), 2000u) << head(error);
  EXPECT_TRUE(clean_terminal_text(error)) << head(error);
  return error;
}

/// `render [scene] --json` of an 8x8 image, 1 spp on the CPU, plus `extra` (the built-in scene when `scene` is
/// empty).
std::vector<std::string> render(const std::string& scene, const std::string& dir,
                                std::vector<std::string> extra = {}) {
  std::vector<std::string> a{"render"};
  if (!scene.empty()) a.push_back(scene);
  for (const char* s : {"--device", "cpu", "--spp", "1", "--width", "8", "--height", "8", "--json"})
    a.push_back(s);
  a.push_back("-o");
  a.push_back(dir + "/out.png");
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(CliEscape, a_10_mb_field_value_is_cut_in_the_message_and_the_json) {
  const std::string dir = fresh_dir("big");
  write(dir + "/s.json", "{\"material\": \"" + std::string(10u << 20, 'Q') + "\"}");
  const CliRun r = run_cli(render(dir + "/s.json", dir));
  EXPECT_EQ(r.rc, 42) << head(r.err);  // an invalid scene (docs/cli.md "Exit codes")
  const std::string error = json_error(r);
  EXPECT_NE(error.find("unknown material preset \"QQQQ"), std::string::npos) << head(error);
  EXPECT_NE(error.find("\xe2\x80\xa6 (10485760 bytes)"), std::string::npos) << head(error);
  expect_clean_stderr(r);
}

TEST(CliEscape, a_10_mb_unknown_key_is_cut) {
  const std::string dir = fresh_dir("bigkey");
  write(dir + "/s.json", "{\"" + std::string(10u << 20, 'K') + "\": 1}");
  const CliRun r = run_cli(render(dir + "/s.json", dir));
  EXPECT_EQ(r.rc, 42) << head(r.err);  // an invalid scene (docs/cli.md "Exit codes")
  const std::string error = json_error(r);
  EXPECT_NE(error.find("\xe2\x80\xa6 (10485760 bytes): unknown field"), std::string::npos) << head(error);
  expect_clean_stderr(r);
}

TEST(CliEscape, terminal_escapes_in_a_scene_are_shown_escaped) {
  const std::string dir = fresh_dir("esc");
  // JSON's \u001b is a real ESC once parsed: the key and the value both carry one
  write(dir + "/s.json", "{\"lighting_preset\": \"\\u001b]0;owned\\u0007\\u001b[2J\"}");
  CliRun r = run_cli(render(dir + "/s.json", dir));
  EXPECT_EQ(r.rc, 42) << head(r.err);  // an invalid scene (docs/cli.md "Exit codes")
  std::string error = json_error(r);
  EXPECT_NE(error.find("\"\\x1b]0;owned\\x07\\x1b[2J\""), std::string::npos) << head(error);
  expect_clean_stderr(r);

  write(dir + "/s.json", "{\"\\u001b[31mred\": 1}");
  r = run_cli(render(dir + "/s.json", dir));
  EXPECT_EQ(r.rc, 42) << head(r.err);  // an invalid scene (docs/cli.md "Exit codes")
  error = json_error(r);
  EXPECT_NE(error.find("\\x1b[31mred: unknown field"), std::string::npos) << head(error);
  expect_clean_stderr(r);
}

TEST(CliEscape, invalid_utf8_in_a_scene_file_keeps_the_json_valid) {
  const std::string dir = fresh_dir("utf8");
  write(dir + "/s.json", "{\"material\": \"\xff\xfe\x1b[0m\"}");  // the parser refuses it, quoting the bytes
  const CliRun r = run_cli(render(dir + "/s.json", dir));
  EXPECT_EQ(r.rc, 42) << head(r.err);  // an invalid scene (docs/cli.md "Exit codes")
  const std::string error = json_error(r);
  EXPECT_NE(error.find("malformed JSON"), std::string::npos) << head(error);
  EXPECT_NE(error.find("\\xff"), std::string::npos) << head(error);
  expect_clean_stderr(r);
}

TEST(CliEscape, a_hostile_file_name_is_escaped_and_the_json_stays_valid) {
  const std::string dir = fresh_dir("name");
  const std::string name = dir + "/\x1b]0;x\x07\xff\xfe.json";  // does not exist
  const CliRun r = run_cli(render(name, dir));
  EXPECT_EQ(r.rc, 2) << head(r.err);
  const std::string error = json_error(r);
  EXPECT_NE(error.find("/\\x1b]0;x\\x07\\xff\\xfe.json"), std::string::npos) << head(error);
  expect_clean_stderr(r);
}

TEST(CliEscape, hostile_flag_values_are_escaped) {
  const std::string dir = fresh_dir("flags");
  CliRun r = run_cli({"render", "--device", "cpu", "--json", "-o", dir + "/out.png", "--spp",
                      "\x1b[2J" + std::string(100000, '9')});
  EXPECT_EQ(r.rc, 2) << head(r.err);
  std::string error = json_error(r);
  EXPECT_NE(error.find("--spp"), std::string::npos) << head(error);
  EXPECT_NE(error.find("\\x1b[2J999"), std::string::npos) << head(error);
  EXPECT_NE(error.find("(100004 bytes)"), std::string::npos) << head(error);
  expect_clean_stderr(r);

  r = run_cli(render("", dir, {"--progress", "\xc3\x28\x1b"}));
  EXPECT_EQ(r.rc, 2) << head(r.err);
  error = json_error(r);
  EXPECT_NE(error.find("--progress: expected auto, bar, lines, json or none, got \"\\xc3(\\x1b\""),
            std::string::npos)
      << head(error);
  expect_clean_stderr(r);

  // CLI11's own errors quote the argument too
  r = run_cli({"render", "--no-such-flag\x1b[2J\xff"});
  EXPECT_EQ(r.rc, 2) << head(r.err);
  EXPECT_NE(r.err.find("--no-such-flag\\x1b[2J\\xff"), std::string::npos) << head(r.err);
  expect_clean_stderr(r);
}

#ifdef FT_HAVE_FACES
TEST(CliEscape, faces_detect_json_lines_stay_valid_for_hostile_photo_names) {
  const std::string dir = fresh_dir("faces");
  const std::string photo = dir + "/\x1b]0;x\x07\xff.jpg";
  write(photo, "not a JPEG at all");
  const CliRun r = run_cli({"faces", "detect", "--device", "cpu", "--json", photo});
  EXPECT_NE(r.rc, 0) << head(r.err);
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << head(r.out);
  const std::string error = j.value("error", std::string());
  EXPECT_NE(error.find("/\\x1b]0;x\\x07\\xff.jpg"), std::string::npos) << head(error);
  EXPECT_TRUE(clean_terminal_text(error)) << head(error);
  expect_clean_stderr(r);
}
#endif

}  // namespace
}  // namespace facetrace
