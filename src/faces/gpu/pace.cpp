/// @file
/// Pace (pace.h) and set_pace (accelerator.h).
#include "gpu/pace.h"

#include <algorithm>
#include <cmath>

#include "facetrace/faces/accelerator.h"

namespace facetrace::faces {

void set_pace(int concurrent, double share) { gpu::Pace::global().set(concurrent, share); }

}  // namespace facetrace::faces

namespace facetrace::faces::gpu {

Pace& Pace::global() {
  static Pace pace;
  return pace;
}

void Pace::set(int concurrent, double share) {
  if (!std::isfinite(share)) share = 1.0;
  {
    std::lock_guard lock(mu_);
    concurrent_ = std::max(concurrent, 1);
    share_ = std::clamp(share, kMinShare, 1.0);
  }
  cv_.notify_all();
}

int Pace::concurrent() const {
  std::lock_guard lock(mu_);
  return concurrent_;
}

double Pace::share() const {
  std::lock_guard lock(mu_);
  return share_;
}

Pace::Clock::duration Pace::idle_after(Clock::duration run) const {
  const double s = share();
  const auto idle = std::chrono::duration_cast<Clock::duration>(run * ((1.0 - s) / s));
  return std::min<Clock::duration>(idle, kMaxIdle);
}

void Pace::prune_locked(Clock::time_point now) {
  while (!idle_until_.empty() && idle_until_.front() <= now) idle_until_.pop_front();
}

void Pace::acquire() {
  std::unique_lock lock(mu_);
  for (;;) {
    const auto now = Clock::now();
    prune_locked(now);
    if (running_ + static_cast<int>(idle_until_.size()) < concurrent_) break;
    if (!idle_until_.empty() && running_ < concurrent_)
      cv_.wait_until(lock, idle_until_.front());
    else
      cv_.wait(lock);
  }
  ++running_;
}

void Pace::release(Clock::duration run) {
  const auto idle = idle_after(run);
  {
    std::lock_guard lock(mu_);
    --running_;
    if (idle > Clock::duration::zero()) {
      const auto until = Clock::now() + idle;
      idle_until_.insert(std::upper_bound(idle_until_.begin(), idle_until_.end(), until), until);
    }
  }
  cv_.notify_all();
}

Pace::Slot::Slot(Pace& pace) : pace_(pace) {
  pace_.acquire();
  start_ = Clock::now();
}

Pace::Slot::~Slot() { pace_.release(Clock::now() - start_); }

}  // namespace facetrace::faces::gpu
