// Runs a program for a test in a child process with its stdout and stderr sent to files (the CLI tests). Not named
// spawn.h: tests/support is on the include path, and that name would hide the system <spawn.h>.
#pragma once

#include <fcntl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace facetrace::testing {

/// Forks and execs `exe args...` with stdout to `out` and stderr to `err`. `in_child`, when given, runs in the
/// child after the redirection and before the exec (environment, working folder) and returns false on failure.
/// The child exits 120 when the redirection or `in_child` fails, 121 when the exec does. Returns the child's pid.
inline pid_t spawn_redirected(const char* exe, const std::vector<std::string>& args, const std::string& out,
                              const std::string& err, const std::function<bool()>& in_child = {}) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0) ::_exit(120);
    ::dup2(o, 1);
    ::dup2(e, 2);
    if (in_child && !in_child()) ::_exit(120);
    std::vector<char*> argv = {const_cast<char*>(exe)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(exe, argv.data());
    ::_exit(121);
  }
  return pid;
}

/// What a finished child left: its exit code (128 + the signal when a signal ended it) and its output.
struct ChildRun {
  int rc = -1;
  std::string out, err;
};

/// Runs `exe args...` to its end with stdout and stderr in `base`.out / `base`.err, reads both and removes them.
inline ChildRun run_to_end(const char* exe, const std::vector<std::string>& args, const std::string& base) {
  const std::string out = base + ".out", err = base + ".err";
  const pid_t pid = spawn_redirected(exe, args, out, err);
  ChildRun r;
  int status = 0;
  if (pid > 0 && ::waitpid(pid, &status, 0) == pid)
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  for (auto [path, text] : {std::pair{&out, &r.out}, std::pair{&err, &r.err}}) {
    std::ifstream f(*path, std::ios::binary);
    text->assign(std::istreambuf_iterator<char>(f), {});
    std::remove(path->c_str());
  }
  return r;
}

}  // namespace facetrace::testing
