/// @file
/// RecoveryPolicy with a manual clock, and the Turnstile.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "facetrace/runtime/recovery_policy.h"
#include "facetrace/runtime/turnstile.h"

namespace facetrace::runtime {
namespace {

using namespace std::chrono_literals;

TEST(RecoveryPolicy, allows_the_first_attempt_at_once_and_spaces_the_next_by_the_cool_down) {
  ManualClock clock;
  RecoveryPolicy p(clock, RecoveryConfig{});
  p.record_loss();
  EXPECT_TRUE(p.may_attempt());  // a loss alone starts no cool-down
  p.record_attempt();
  p.record_loss();  // the replacement died at once
  EXPECT_FALSE(p.may_attempt());
  clock.advance(29s);
  EXPECT_FALSE(p.may_attempt());
  EXPECT_EQ(p.wait_before_next_attempt(), std::chrono::duration_cast<Clock::duration>(1s));
  clock.advance(1s);
  EXPECT_TRUE(p.may_attempt());
  p.record_attempt();
  EXPECT_FALSE(p.may_attempt());
  clock.advance(30s);
  EXPECT_TRUE(p.may_attempt());
}

TEST(RecoveryPolicy, refuses_the_seventh_attempt_within_an_hour) {
  ManualClock clock;
  RecoveryPolicy p(clock, RecoveryConfig{});
  p.record_loss();
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(p.may_attempt()) << "attempt " << i + 1;
    p.record_attempt();
    clock.advance(30s);
  }
  EXPECT_FALSE(p.may_attempt());
  EXPECT_EQ(p.attempts_in_window(), 6);
  // The first attempt leaves the sliding window one hour after it was made.
  clock.advance(1h - 6 * 30s);
  EXPECT_TRUE(p.may_attempt());
}

TEST(RecoveryPolicy, zero_cool_down_allows_an_immediate_attempt) {
  ManualClock clock;
  RecoveryConfig c;
  c.cool_down = std::chrono::duration<double>(0.0);
  RecoveryPolicy p(clock, c);
  p.record_loss();
  EXPECT_TRUE(p.may_attempt());
}

TEST(Turnstile, serves_tickets_in_fifo_order_under_16_threads) {
  Turnstile t;
  std::mutex mu;
  std::vector<std::uint64_t> served;
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 50; ++k) {
        auto turn = t.enter();
        std::lock_guard lock(mu);
        served.push_back(turn.ticket());
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(served.size(), 16u * 50u);
  for (std::size_t i = 0; i < served.size(); ++i) EXPECT_EQ(served[i], i);
}

TEST(Turnstile, reports_waiters_behind_a_ticket) {
  Turnstile t;
  auto first = t.enter();
  EXPECT_FALSE(t.has_waiters_behind(first.ticket()));
  std::atomic<bool> got{false};
  std::thread other([&] {
    auto turn = t.enter();
    got = true;
  });
  while (!t.has_waiters_behind(first.ticket())) std::this_thread::yield();
  EXPECT_FALSE(got.load());
  { auto released = std::move(first); }
  other.join();
  EXPECT_TRUE(got.load());
}

}  // namespace
}  // namespace facetrace::runtime
