/// @file
/// Private: the process-wide pace of face work on the GPU (docs/design/faces.md §4 "Pace"): at most `concurrent` runs
/// in flight, and after a run of length t its slot stays taken (idle) for t·(1 − share)/share, at most 2 s, so face
/// work keeps within `share` of GPU time and a render running at the same time keeps the rest.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>

namespace facetrace::faces::gpu {

class Pace {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kDefaultConcurrent = 1 << 20;          ///< effectively unlimited until set_pace
  static constexpr double kMinShare = 0.05;                   // docs/design/faces.md §4
  static constexpr std::chrono::milliseconds kMaxIdle{2000};  // docs/design/faces.md §4

  /// The instance set_pace configures.
  static Pace& global();
  /// concurrent < 1 → 1; share clamped to [0.05, 1], non-finite → 1.
  void set(int concurrent, double share);
  int concurrent() const;
  double share() const;
  /// The idle time after a run of length `run` at the current share.
  Clock::duration idle_after(Clock::duration run) const;

  /// One run's slot: taken by the constructor (blocking while `concurrent` slots are busy or idling), given
  /// back by the destructor with the idle time of the run's length (from construction to destruction).
  class Slot {
   public:
    explicit Slot(Pace& pace);
    ~Slot();
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

   private:
    Pace& pace_;
    Clock::time_point start_;
  };

 private:
  void acquire();
  void release(Clock::duration run);
  /// Drops idle periods that ended. Lock held.
  void prune_locked(Clock::time_point now);
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int concurrent_ = kDefaultConcurrent;
  double share_ = 1.0;
  int running_ = 0;
  std::deque<Clock::time_point> idle_until_;  ///< slots held idle after their run, ascending end time
};

}  // namespace facetrace::faces::gpu
