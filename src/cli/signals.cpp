/// @file
/// The cancel-on-signal scope (signals.h): async-signal-safe handler over two lock-free globals.
#include "signals.h"

#include <atomic>
#include <csignal>
#include <stdexcept>
#include <thread>

#include "exit_codes.h"

namespace facetrace::cli {
namespace {

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};

std::atomic<bool> g_cancel{false};
std::atomic<int> g_signal{0};
std::atomic<bool> g_scope_alive{false};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free,
              "the signal handler needs lock-free atomics");

extern "C" void on_cancel_signal(int sig) {
  int none = 0;
  g_signal.compare_exchange_strong(none, sig);  // keep the first signal
  g_cancel.store(true);
  std::signal(sig, SIG_DFL);  // a second delivery of the same signal ends the process at once
}

struct sigaction g_old[sizeof kSignals / sizeof kSignals[0]];

}  // namespace

CancelOnSignals::CancelOnSignals() {
  if (g_scope_alive.exchange(true)) throw std::logic_error("CancelOnSignals: a scope is already alive");
  g_cancel.store(false);
  g_signal.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_cancel_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking reads and writes in other threads carry on; the flag is polled
  for (std::size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &sa, &g_old[i]);
}

CancelOnSignals::~CancelOnSignals() {
  for (std::size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &g_old[i], nullptr);
  g_scope_alive.store(false);
}

const std::atomic<bool>* CancelOnSignals::flag() const { return &g_cancel; }

bool CancelOnSignals::cancelled() const { return g_cancel.load(); }

int CancelOnSignals::signal_number() const { return g_signal.load(); }

int CancelOnSignals::exit_code() const {
  const int sig = g_signal.load();
  return sig == 0 ? kExitCancelled : exit_code_for_signal(sig);
}

bool CancelOnSignals::wait_for(std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!g_cancel.load()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void CancelOnSignals::request_cancel(int signal_number) {
  int none = 0;
  g_signal.compare_exchange_strong(none, signal_number);
  g_cancel.store(true);
}

int exit_code_for_signal(int signal_number) { return 128 + signal_number; }

const char* signal_name(int signal_number) {
  switch (signal_number) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

}  // namespace facetrace::cli
