/// @file
/// core/file.h's writer and pre-flight checks: atomic replacement, symbolic links written through, refused
/// targets, a file size limit (a full disk) keeping the old file, concurrent writers, and outputs that alias
/// inputs or each other.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "facetrace/core/file.h"

namespace facetrace {
namespace {

namespace fs = std::filesystem;

/// A fresh, empty directory for one test.
std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "core_file_test_" + name + "." + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string slurp(const std::string& path) {
  auto bytes = core::read_file(path, 1 << 26);
  if (!bytes) return "<unreadable: " + bytes.status().what() + ">";
  return std::string(bytes->begin(), bytes->end());
}

void spit(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(text.data(), 1, text.size(), f), text.size());
  ASSERT_EQ(std::fclose(f), 0);
}

/// The names in `dir` (no "." or ".."), sorted.
std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> r;
  for (const auto& e : fs::directory_iterator(dir)) r.push_back(e.path().filename().string());
  std::sort(r.begin(), r.end());
  return r;
}

/// Runs `body` in a child process and returns its exit status (the child's result travels as the exit code).
int in_child(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

constexpr uid_t kNobody = 65534;

// ---- the writer -------------------------------------------------------------------------------------------

TEST(AtomicWrite, creates_then_replaces_the_file_and_leaves_no_temporary) {
  const std::string dir = fresh_dir("replace");
  const std::string path = dir + "/out.txt";
  ASSERT_TRUE(core::write_file_atomic(path, std::string_view("first")).ok());
  EXPECT_EQ(slurp(path), "first");
  ASSERT_TRUE(core::write_file_atomic(path, std::string_view("second, longer")).ok());
  EXPECT_EQ(slurp(path), "second, longer");
  ASSERT_TRUE(core::write_file_atomic(path, std::string_view("")).ok());
  EXPECT_EQ(slurp(path), "");
  EXPECT_EQ(names_in(dir), std::vector<std::string>{"out.txt"});
  fs::remove_all(dir);
}

TEST(AtomicWrite, a_name_near_the_length_limit_still_gets_a_temporary) {
  const std::string dir = fresh_dir("long");
  const std::string name(250, 'n');  // NAME_MAX is 255: ".<name>.tmp-…" would not fit untruncated
  ASSERT_TRUE(core::write_file_atomic(dir + "/" + name, std::string_view("x")).ok());
  EXPECT_EQ(slurp(dir + "/" + name), "x");
  EXPECT_EQ(names_in(dir), std::vector<std::string>{name});
  fs::remove_all(dir);
}

TEST(AtomicWrite, a_new_file_gets_0666_less_the_umask_and_a_replaced_one_keeps_its_mode) {
  const std::string dir = fresh_dir("mode");
  const mode_t old_mask = ::umask(027);
  const Status st = core::write_file_atomic(dir + "/new.txt", std::string_view("x"));
  ::umask(old_mask);
  ASSERT_TRUE(st.ok()) << st.what();
  struct stat s {};
  ASSERT_EQ(::stat((dir + "/new.txt").c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 07777, 0640u);
  spit(dir + "/kept.txt", "old");
  ASSERT_EQ(::chmod((dir + "/kept.txt").c_str(), 0604), 0);
  ASSERT_TRUE(core::write_file_atomic(dir + "/kept.txt", std::string_view("new")).ok());
  ASSERT_EQ(::stat((dir + "/kept.txt").c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 07777, 0604u);
  EXPECT_EQ(slurp(dir + "/kept.txt"), "new");
  fs::remove_all(dir);
}

TEST(AtomicWrite, an_uncommitted_file_leaves_the_target_alone_and_removes_its_temporary) {
  const std::string dir = fresh_dir("abandon");
  const std::string path = dir + "/a.bin";
  spit(path, "precious");
  {
    auto f = core::AtomicFile::create(path);
    ASSERT_TRUE(f.ok()) << f.status().what();
    EXPECT_EQ(fs::path(f->temp_path()).parent_path(), fs::path(dir));
    EXPECT_EQ(fs::path(f->temp_path()).filename().string().rfind(".a.bin.tmp-", 0), 0u) << f->temp_path();
    ASSERT_TRUE(f->write(std::string_view("half of a new")).ok());
    ASSERT_TRUE(f->sync().ok());
    EXPECT_EQ(slurp(path), "precious");
    EXPECT_EQ(names_in(dir).size(), 2u);
  }
  EXPECT_EQ(slurp(path), "precious");
  EXPECT_EQ(names_in(dir), std::vector<std::string>{"a.bin"});
  // after commit, further use is an error, not a write to a closed descriptor
  auto g = core::AtomicFile::create(path);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(g->write(std::string_view("new")).ok());
  ASSERT_TRUE(g->commit().ok());
  EXPECT_EQ(g->write(std::string_view("more")).code(), Code::kInternal);
  EXPECT_EQ(g->commit().code(), Code::kInternal);
  EXPECT_EQ(slurp(path), "new");
  fs::remove_all(dir);
}

TEST(AtomicWrite, a_symbolic_link_is_written_through_and_kept) {
  const std::string dir = fresh_dir("symlink");
  fs::create_directories(dir + "/real");
  spit(dir + "/real/target.png", "old");
  fs::create_symlink("real/target.png", dir + "/link.png");  // relative: from the link's directory
  fs::create_symlink("link.png", dir + "/link2.png");        // a chain
  ASSERT_TRUE(core::write_file_atomic(dir + "/link2.png", std::string_view("new")).ok());
  EXPECT_TRUE(fs::is_symlink(dir + "/link.png"));
  EXPECT_TRUE(fs::is_symlink(dir + "/link2.png"));
  EXPECT_EQ(fs::read_symlink(dir + "/link.png"), fs::path("real/target.png"));
  EXPECT_EQ(slurp(dir + "/real/target.png"), "new");
  EXPECT_EQ(names_in(dir + "/real"), std::vector<std::string>{"target.png"});
  // a dangling link: its target is created, the link stays
  fs::create_symlink(dir + "/real/later.png", dir + "/dangling.png");
  ASSERT_TRUE(core::write_file_atomic(dir + "/dangling.png", std::string_view("born")).ok());
  EXPECT_TRUE(fs::is_symlink(dir + "/dangling.png"));
  EXPECT_EQ(slurp(dir + "/real/later.png"), "born");
  // a loop is refused with a message, not followed forever
  fs::create_symlink("loop_b", dir + "/loop_a");
  fs::create_symlink("loop_a", dir + "/loop_b");
  const Status loop = core::write_file_atomic(dir + "/loop_a", std::string_view("x"));
  EXPECT_EQ(loop.code(), Code::kInvalidArgument);
  EXPECT_NE(loop.what().find("symbolic links"), std::string::npos) << loop.what();
  EXPECT_TRUE(fs::is_symlink(dir + "/loop_a"));
  fs::remove_all(dir);
}

TEST(AtomicWrite, refuses_directories_fifos_and_devices_without_touching_them) {
  const std::string dir = fresh_dir("refuse");
  fs::create_directories(dir + "/sub");
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0644), 0);
  fs::create_symlink("sub", dir + "/link_to_dir");
  for (const std::string& p : {dir + "/sub", dir + "/fifo", dir + "/link_to_dir", std::string("/dev/null")}) {
    const Status st = core::write_file_atomic(p, std::string_view("x"));
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << p << ": " << st.what();
    EXPECT_NE(st.what().find(p), std::string::npos) << st.what();
  }
  EXPECT_TRUE(fs::is_directory(dir + "/sub"));
  EXPECT_TRUE(fs::is_fifo(dir + "/fifo"));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  std::vector<std::string> expected{"fifo", "link_to_dir", "sub"};
  EXPECT_EQ(names_in(dir), expected);
  EXPECT_TRUE(fs::is_empty(dir + "/sub"));
  fs::remove_all(dir);
}

TEST(AtomicWrite, a_missing_directory_is_an_io_error_naming_the_path_and_the_os_error) {
  const std::string path = "/nonexistent-dir-facetrace/x.bin";
  const Status st = core::write_file_atomic(path, std::string_view("x"));
  EXPECT_EQ(st.code(), Code::kIo);
  EXPECT_NE(st.what().find(path), std::string::npos) << st.what();
  EXPECT_NE(st.what().find("No such file or directory"), std::string::npos) << st.what();
}

TEST(AtomicWrite, a_file_size_limit_fails_the_write_and_keeps_the_old_file_whole) {
  // RLIMIT_FSIZE with SIGXFSZ ignored makes write() fail with EFBIG, exactly where a full disk fails with ENOSPC.
  const std::string dir = fresh_dir("fsize");
  const std::string path = dir + "/frame.exr";
  const std::string old(1000, 'o');
  spit(path, old);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const int rc = in_child([&] {
    ::close(fds[0]);
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit lim{4096, 4096};
    if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) return 3;
    const Status st = core::write_file_atomic(path, std::string(100000, 'n'));
    const std::string msg = std::to_string(static_cast<int>(st.code())) + " " + st.what();
    return ::write(fds[1], msg.data(), msg.size()) == static_cast<ssize_t>(msg.size()) ? 0 : 4;
  });
  ::close(fds[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) msg.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  ASSERT_EQ(rc, 0) << msg;
  EXPECT_EQ(msg.rfind(std::to_string(static_cast<int>(Code::kIo)) + " " + path + ": ", 0), 0u) << msg;
  EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;
  EXPECT_EQ(slurp(path), old);
  EXPECT_EQ(names_in(dir), std::vector<std::string>{"frame.exr"});
  fs::remove_all(dir);
}

TEST(AtomicWrite, concurrent_writers_to_one_path_never_tear_it_and_all_succeed) {
  // Two processes replace the same file 150 times each with their own 64 KiB content while this process reads
  // it: every read is one whole version (all 'A' or all 'B'); every write reports success.
  const std::string dir = fresh_dir("concurrent");
  const std::string path = dir + "/sums.exr";
  constexpr std::size_t kSize = 64 * 1024;
  constexpr int kRounds = 150;
  ASSERT_TRUE(core::write_file_atomic(path, std::string(kSize, 'A')).ok());
  std::vector<pid_t> kids;
  for (char c : {'A', 'B'}) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const std::string body(kSize, c);
      for (int k = 0; k < kRounds; ++k)
        if (!core::write_file_atomic(path, body).ok()) ::_exit(1);
      ::_exit(0);
    }
    kids.push_back(pid);
  }
  int reads = 0, torn = 0;
  std::vector<int> status(kids.size(), -1);
  for (std::size_t done = 0; done < kids.size();) {
    const std::string got = slurp(path);
    ++reads;
    if (!(got == std::string(kSize, 'A') || got == std::string(kSize, 'B'))) ++torn;
    for (std::size_t k = 0; k < kids.size(); ++k) {
      int st = 0;
      if (status[k] == -1 && ::waitpid(kids[k], &st, WNOHANG) == kids[k]) status[k] = st, ++done;
    }
  }
  for (int st : status) EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "writer status " << st;
  EXPECT_EQ(torn, 0) << "of " << reads << " reads";
  const std::string last = slurp(path);
  EXPECT_TRUE(last == std::string(kSize, 'A') || last == std::string(kSize, 'B'));
  EXPECT_EQ(names_in(dir), std::vector<std::string>{"sums.exr"});
  fs::remove_all(dir);
}

TEST(AtomicWrite, concurrent_writer_processes_report_success) {
  const std::string dir = fresh_dir("concurrent_rc");
  const std::string path = dir + "/same.png";
  std::vector<pid_t> kids;
  for (int w = 0; w < 4; ++w) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const std::string body(8192, static_cast<char>('a' + w));
      for (int k = 0; k < 100; ++k)
        if (!core::write_file_atomic(path, body).ok()) ::_exit(1);
      ::_exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer status " << status;
  }
  const std::string last = slurp(path);
  ASSERT_EQ(last.size(), 8192u);
  EXPECT_EQ(last, std::string(8192, last[0]));
  EXPECT_EQ(names_in(dir), std::vector<std::string>{"same.png"});
  fs::remove_all(dir);
}

// ---- pre-flight ---------------------------------------------------------------------------------------------

TEST(OutputPreflight, accepts_a_new_file_and_an_existing_one_and_creates_nothing) {
  const std::string dir = fresh_dir("ok");
  spit(dir + "/old.png", "x");
  EXPECT_TRUE(core::check_output_path({"-o", dir + "/new.png"}).ok());
  EXPECT_TRUE(core::check_output_path({"-o", dir + "/old.png"}).ok());
  const std::vector<std::string> expected{"old.png"};
  EXPECT_EQ(names_in(dir), expected);
  fs::remove_all(dir);
}

TEST(OutputPreflight, refuses_directory_fifo_device_and_missing_directory_naming_the_flag) {
  const std::string dir = fresh_dir("refuse");
  fs::create_directories(dir + "/sub");
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0644), 0);
  fs::create_symlink("sub", dir + "/link_to_dir");
  fs::create_symlink("/dev/null", dir + "/link_to_null");
  spit(dir + "/file", "x");
  struct Case {
    std::string path, says;
  };
  const std::vector<Case> cases{{dir + "/sub", "is a directory"},
                                {dir + "/fifo", "is a FIFO"},
                                {"/dev/null", "is a device"},
                                {dir + "/link_to_dir", "is a directory"},
                                {dir + "/link_to_null", "is a device"},
                                {dir + "/nope/x.png", "does not exist"},
                                {dir + "/file/x.png", "is not a directory"},
                                {"", "empty path"}};
  for (const Case& c : cases) {
    const Status st = core::check_output_path({"--exr", c.path});
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << c.path;
    EXPECT_EQ(st.what().rfind("--exr", 0), 0u) << st.what();
    EXPECT_NE(st.what().find(c.path), std::string::npos) << st.what();
    EXPECT_NE(st.what().find(c.says), std::string::npos) << st.what();
  }
  fs::remove_all(dir);
}

TEST(OutputPreflight, an_unwritable_directory_or_file_is_refused) {
  const std::string dir = fresh_dir("unwritable");
  fs::create_directories(dir + "/locked");
  spit(dir + "/readonly.png", "x");
  ASSERT_EQ(::chmod((dir + "/locked").c_str(), 0555), 0);
  ASSERT_EQ(::chmod((dir + "/readonly.png").c_str(), 0444), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  // root ignores permission bits: the checks then run as nobody in a child process
  const int rc = in_child([&] {
    if (::geteuid() == 0 && (::setgid(kNobody) != 0 || ::setuid(kNobody) != 0)) return 10;
    const Status a = core::check_output_path({"-o", dir + "/locked/x.png"});
    if (a.code() != Code::kInvalidArgument) return 11;
    if (a.what().find("Permission denied") == std::string::npos) return 12;
    const Status b = core::check_output_path({"-o", dir + "/readonly.png"});
    if (b.code() != Code::kInvalidArgument) return 13;
    if (b.what().find("cannot be written") == std::string::npos) return 14;
    return 0;
  });
  EXPECT_EQ(rc, 0);
  EXPECT_TRUE(fs::is_empty(dir + "/locked"));
  // a directory no file can be created in even by root (the probe sees what access() does not)
  const Status proc = core::check_output_path({"-o", "/proc/facetrace-out.png"});
  EXPECT_EQ(proc.code(), Code::kInvalidArgument) << proc.what();
  ::chmod((dir + "/locked").c_str(), 0755);
  fs::remove_all(dir);
}

TEST(OutputPreflight, an_output_equal_to_an_input_is_refused_however_it_is_spelled) {
  const std::string dir = fresh_dir("alias_input");
  fs::create_directories(dir + "/d");
  const std::string scene = dir + "/s.json";
  spit(scene, "{}");
  fs::create_symlink("s.json", dir + "/link.json");
  ASSERT_EQ(::link(scene.c_str(), (dir + "/hard.json").c_str()), 0);
  const std::vector<core::NamedPath> inputs{{"scene", scene}};
  for (const std::string& out :
       {scene, dir + "/./s.json", dir + "/d/../s.json", dir + "/link.json", dir + "/hard.json"}) {
    const std::vector<core::NamedPath> outputs{{"-o", out}};
    const Status st = core::check_outputs(inputs, outputs);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << out;
    EXPECT_NE(st.what().find("input"), std::string::npos) << st.what();
    EXPECT_NE(st.what().find(out), std::string::npos) << st.what();
  }
  // a relative spelling from the working directory
  const fs::path cwd = fs::current_path();
  fs::current_path(dir);
  const std::vector<core::NamedPath> rel_in{{"scene", "s.json"}};
  const std::vector<core::NamedPath> rel_out{{"-o", "d/../s.json"}};
  EXPECT_EQ(core::check_outputs(rel_in, rel_out).code(), Code::kInvalidArgument);
  fs::current_path(cwd);
  EXPECT_EQ(slurp(scene), "{}");
  // another file, and an input that does not exist, are fine
  const std::vector<core::NamedPath> other{{"-o", dir + "/s.png"}};
  EXPECT_TRUE(core::check_outputs(inputs, other).ok());
  const std::vector<core::NamedPath> missing_in{{"scene", dir + "/missing.json"}};
  EXPECT_TRUE(core::check_outputs(missing_in, other).ok());
  fs::remove_all(dir);
}

TEST(OutputPreflight, two_outputs_of_one_command_must_be_different_files) {
  const std::string dir = fresh_dir("alias_output");
  fs::create_symlink("b.exr", dir + "/a.exr");  // dangling: neither exists yet
  const std::vector<core::NamedPath> none;
  const std::vector<core::NamedPath> same{{"-o", dir + "/x.png"}, {"--exr", dir + "/./x.png"}};
  const Status st = core::check_outputs(none, same);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.what().find("--exr"), std::string::npos) << st.what();
  EXPECT_NE(st.what().find("-o"), std::string::npos) << st.what();
  const std::vector<core::NamedPath> via_link{{"--exr", dir + "/b.exr"}, {"--save-scene", dir + "/a.exr"}};
  EXPECT_EQ(core::check_outputs(none, via_link).code(), Code::kInvalidArgument);
  const std::vector<core::NamedPath> distinct{{"-o", dir + "/x.png"}, {"--exr", dir + "/x.exr"}};
  EXPECT_TRUE(core::check_outputs(none, distinct).ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace facetrace
