// Runs a program for a test in a child process with its stdout and stderr sent to files (the CLI tests). Not named
// spawn.h: tests/support is on the include path, and that name would hide the system <spawn.h>.
#pragma once

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <functional>
#include <string>
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

}  // namespace facetrace::testing
