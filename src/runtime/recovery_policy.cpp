/// @file
/// RecoveryPolicy and the clocks.
#include "facetrace/runtime/recovery_policy.h"

#include <algorithm>

#include "facetrace/core/env.h"

namespace facetrace::runtime {

const SteadyClock& SteadyClock::instance() {
  static const SteadyClock clock;
  return clock;
}

Clock::time_point ManualClock::now() const {
  std::lock_guard lock(mu_);
  return now_;
}

void ManualClock::advance(duration d) {
  std::lock_guard lock(mu_);
  now_ += d;
}

RecoveryConfig RecoveryConfig::from_env() {
  RecoveryConfig c;
  c.cool_down = std::chrono::duration<double>(
      core::env_double_clamped("FACETRACE_GPU_COOLDOWN_S", c.cool_down.count(), 0.0, 3600.0));
  return c;
}

RecoveryPolicy::RecoveryPolicy(const Clock& clock, RecoveryConfig config) : clock_(clock), config_(config) {}

void RecoveryPolicy::prune_locked(Clock::time_point now) const {
  while (!attempts_.empty() && now - attempts_.front() >= config_.window) attempts_.pop_front();
}

void RecoveryPolicy::record_loss() {
  // A loss alone starts no cool-down: the cool-down spaces attempts (docs/design/tracer.md §10.5), so the first
  // replacement after a healthy spell starts at once and a child that keeps dying is retried every cool-down.
}

Clock::duration RecoveryPolicy::wait_before_next_attempt() const {
  std::lock_guard lock(mu_);
  const auto now = clock_.now();
  prune_locked(now);
  Clock::duration wait{0};
  if (last_event_) {
    const auto ready = *last_event_ + std::chrono::duration_cast<Clock::duration>(config_.cool_down);
    if (ready > now) wait = ready - now;
  }
  if (static_cast<int>(attempts_.size()) >= config_.max_attempts && !attempts_.empty()) {
    const auto idx = attempts_.size() - static_cast<std::size_t>(config_.max_attempts);
    const auto free_at = attempts_[idx] + config_.window;
    if (free_at > now) wait = std::max<Clock::duration>(wait, free_at - now);
  }
  return wait;
}

bool RecoveryPolicy::may_attempt() const { return wait_before_next_attempt() == Clock::duration{0}; }

void RecoveryPolicy::record_attempt() {
  std::lock_guard lock(mu_);
  const auto now = clock_.now();
  prune_locked(now);
  attempts_.push_back(now);
  last_event_ = now;
}

void RecoveryPolicy::record_recovered() {}

int RecoveryPolicy::attempts_in_window() const {
  std::lock_guard lock(mu_);
  prune_locked(clock_.now());
  return static_cast<int>(attempts_.size());
}

}  // namespace facetrace::runtime
