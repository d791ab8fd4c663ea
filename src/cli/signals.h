/// @file
/// Private: SIGINT, SIGTERM and SIGHUP cancel the command instead of ending the process (docs/cli.md "Signals").
/// One process-wide flag, set by the handler; every long-running command (render, worker) polls it, finishes or
/// flushes what is complete, and exits with exit_code_for_signal() of the first signal: 130, 143 or 129.
#pragma once

#include <atomic>
#include <chrono>
#include <csignal>

namespace facetrace::cli {

/// While alive, SIGINT, SIGTERM and SIGHUP set one cancel flag; a second delivery of the same signal ends the
/// process at once (its default action), so a stuck command still dies on a second Ctrl-C or `kill`. The
/// destructor restores the previous handlers. At most one scope is alive at a time (the process has one set of
/// handlers); constructing a second one while the first lives throws std::logic_error.
class CancelOnSignals {
 public:
  CancelOnSignals();
  ~CancelOnSignals();
  CancelOnSignals(const CancelOnSignals&) = delete;
  CancelOnSignals& operator=(const CancelOnSignals&) = delete;

  /// The flag the handler sets, for APIs that poll one (tracer::RenderOptions::cancel).
  [[nodiscard]] const std::atomic<bool>* flag() const;
  [[nodiscard]] bool cancelled() const;
  /// The first signal received since construction, 0 if none.
  [[nodiscard]] int signal_number() const;
  /// exit_code_for_signal(signal_number()); kExitCancelled when cancelled without a signal.
  [[nodiscard]] int exit_code() const;
  /// Sleeps until cancelled or `timeout` passed (polls every 10 ms); true when cancelled.
  bool wait_for(std::chrono::milliseconds timeout) const;
  /// Cancels as a signal would, without one (tests; a command that gives up on its own).
  void request_cancel(int signal_number = SIGINT);
};

/// 128 + the signal number, as shells report a process ended by it: SIGINT 130, SIGTERM 143, SIGHUP 129.
[[nodiscard]] int exit_code_for_signal(int signal_number);

/// "SIGINT", "SIGTERM", "SIGHUP", or "a signal" for any other.
[[nodiscard]] const char* signal_name(int signal_number);

}  // namespace facetrace::cli
