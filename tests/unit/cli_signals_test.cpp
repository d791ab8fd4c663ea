// SIGINT, SIGTERM and SIGHUP → one cancel flag and the shell's exit code (src/cli/signals.h, docs/cli.md).
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include <unistd.h>

#include "signals.h"

namespace facetrace::cli {
namespace {

struct sigaction current_action(int sig) {
  struct sigaction sa {};
  sigaction(sig, nullptr, &sa);
  return sa;
}

TEST(CliSignals, ExitCodesAreTheShellsOnes) {
  // 128 + the number POSIX/Linux gives each signal: SIGHUP 1, SIGINT 2, SIGTERM 15.
  EXPECT_EQ(exit_code_for_signal(SIGINT), 130);
  EXPECT_EQ(exit_code_for_signal(SIGTERM), 143);
  EXPECT_EQ(exit_code_for_signal(SIGHUP), 129);
  EXPECT_STREQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_STREQ(signal_name(SIGUSR1), "a signal");
}

class CliSignalsEach : public ::testing::TestWithParam<int> {};

TEST_P(CliSignalsEach, SignalSetsTheFlagAndKeepsTheProcess) {
  const int sig = GetParam();
  CancelOnSignals scope;
  EXPECT_FALSE(scope.cancelled());
  EXPECT_EQ(scope.signal_number(), 0);
  ASSERT_EQ(std::raise(sig), 0);  // handled: the test process survives
  EXPECT_TRUE(scope.cancelled());
  EXPECT_TRUE(scope.flag()->load());
  EXPECT_EQ(scope.signal_number(), sig);
  EXPECT_EQ(scope.exit_code(), 128 + sig);
}

TEST_P(CliSignalsEach, SecondDeliveryEndsTheProcess) {
  const int sig = GetParam();
  EXPECT_EXIT(
      {
        CancelOnSignals scope;
        std::raise(sig);
        std::raise(sig);
        std::_Exit(0);  // not reached
      },
      ::testing::KilledBySignal(sig), "");
}

INSTANTIATE_TEST_SUITE_P(IntTermHup, CliSignalsEach, ::testing::Values(SIGINT, SIGTERM, SIGHUP));

TEST(CliSignals, FirstSignalWins) {
  CancelOnSignals scope;
  std::raise(SIGTERM);
  std::raise(SIGINT);
  EXPECT_EQ(scope.signal_number(), SIGTERM);
  EXPECT_EQ(scope.exit_code(), 143);
}

TEST(CliSignals, HandlersAreRestoredAndTheFlagResetByANewScope) {
  const auto before = current_action(SIGTERM).sa_handler;
  {
    CancelOnSignals scope;
    EXPECT_NE(current_action(SIGTERM).sa_handler, before);
    EXPECT_NE(current_action(SIGHUP).sa_handler, SIG_DFL);
    std::raise(SIGHUP);
    EXPECT_TRUE(scope.cancelled());
  }
  EXPECT_EQ(current_action(SIGTERM).sa_handler, before);
  CancelOnSignals next;
  EXPECT_FALSE(next.cancelled());
  EXPECT_EQ(next.signal_number(), 0);
  EXPECT_EQ(next.exit_code(), 130);  // cancelled without a signal reads as SIGINT's code
}

TEST(CliSignals, OnlyOneScopeAtATime) {
  CancelOnSignals scope;
  EXPECT_THROW(CancelOnSignals second, std::logic_error);
  EXPECT_FALSE(scope.cancelled());
}

TEST(CliSignals, RequestCancelAndWaitFor) {
  CancelOnSignals scope;
  EXPECT_FALSE(scope.wait_for(std::chrono::milliseconds(30)));
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    scope.request_cancel(SIGTERM);
  });
  EXPECT_TRUE(scope.wait_for(std::chrono::seconds(10)));
  t.join();
  EXPECT_EQ(scope.exit_code(), 143);
}

TEST(CliSignals, SignalFromAnotherThreadIsSeen) {
  CancelOnSignals scope;
  std::thread t([] { ::kill(::getpid(), SIGTERM); });
  t.join();
  EXPECT_TRUE(scope.wait_for(std::chrono::seconds(10)));
  EXPECT_EQ(scope.signal_number(), SIGTERM);
}

}  // namespace
}  // namespace facetrace::cli
