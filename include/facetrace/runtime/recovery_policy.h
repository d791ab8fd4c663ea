/// @file
/// RecoveryPolicy: when a lost GPU may be replaced (cool-down, attempts per sliding hour), with an
/// injectable clock for tests (docs/design/tracer.md §10.5, docs/design/runtime.md §6).
#pragma once

#include <chrono>
#include <deque>
#include <mutex>
#include <optional>

namespace facetrace::runtime {

/// A monotonic clock the runtime reads; tests inject a ManualClock.
class Clock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  using duration = std::chrono::steady_clock::duration;
  virtual ~Clock() = default;
  /// Current time. Thread-safe.
  virtual time_point now() const = 0;
};

/// std::chrono::steady_clock.
class SteadyClock final : public Clock {
 public:
  time_point now() const override { return std::chrono::steady_clock::now(); }
  /// A process-wide instance.
  static const SteadyClock& instance();
};

/// A clock that moves only when told to. Thread-safe.
class ManualClock final : public Clock {
 public:
  time_point now() const override;
  /// Moves the clock forward by `d`.
  void advance(duration d);

 private:
  mutable std::mutex mu_;
  time_point now_{std::chrono::hours(1000)};
};

/// Recovery limits. Defaults: 30 s cool-down, 6 attempts per sliding hour.
struct RecoveryConfig {
  std::chrono::duration<double> cool_down{30.0};  ///< since the previous attempt (the first one is at once)
  int max_attempts = 6;                           ///< within `window`; the 7th is refused
  std::chrono::seconds window{3600};              ///< sliding window for `max_attempts`

  /// Defaults with the cool-down from FACETRACE_GPU_COOLDOWN_S (seconds, clamped to 0..3600, warning on
  /// bad values).
  static RecoveryConfig from_env();
};

/// Cool-down and attempt budget. All members are thread-safe.
class RecoveryPolicy {
 public:
  RecoveryPolicy(const Clock& clock, RecoveryConfig config);

  /// A loss happened now. It starts no cool-down: the first attempt after a loss may start at once.
  void record_loss();
  /// True when an attempt is allowed now: the cool-down has passed since the previous attempt (if any) and
  /// fewer than `max_attempts` attempts fall within the sliding window.
  bool may_attempt() const;
  /// An attempt starts now (counts toward the window, restarts the cool-down).
  void record_attempt();
  /// The attempt succeeded.
  void record_recovered();
  /// Attempts inside the current window.
  int attempts_in_window() const;
  /// Time until `may_attempt` could become true (0 when it is true now).
  Clock::duration wait_before_next_attempt() const;
  const RecoveryConfig& config() const { return config_; }

 private:
  void prune_locked(Clock::time_point now) const;
  const Clock& clock_;
  RecoveryConfig config_;
  mutable std::mutex mu_;
  std::optional<Clock::time_point> last_event_;  ///< the previous attempt
  mutable std::deque<Clock::time_point> attempts_;
};

}  // namespace facetrace::runtime
