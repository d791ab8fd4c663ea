/// @file
/// The library's one worker pool (parallel.h): jobs in a FIFO queue; workers and the submitting thread claim
/// indices atomically. Workers spin briefly (~50 µs) for the next job before sleeping on the condition variable,
/// and the caller spins briefly for the helpers to finish, so a network's back-to-back ops do not pay a futex
/// wake-up per op; a submit only notifies when some worker is asleep.
#include "facetrace/core/parallel.h"

#include <immintrin.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace facetrace::core {
namespace {

// How long an idle worker (or a caller waiting for its helpers) spins before blocking.
constexpr auto kSpin = std::chrono::microseconds(50);

// Spins until pred() or kSpin has passed; true when pred() held.
template <class P>
bool spin_until(P&& pred) {
  if (pred()) return true;
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 32; ++i) {
      _mm_pause();
      if (pred()) return true;
    }
    if (std::chrono::steady_clock::now() >= until) return pred();
  }
}

struct Job {
  const std::function<void(std::int64_t)>* fn = nullptr;
  std::int64_t n = 0;
  int helpers_allowed = 0;
  int helpers_joined = 0;  // guarded by Pool::mu_
  std::atomic<std::int64_t> next{0};
  std::atomic<std::int64_t> done{0};
  std::atomic<bool> waiting{false};  // the caller sleeps on cv
  std::mutex mu;
  std::condition_variable cv;

  // Claims and runs indices until none are left. noexcept: a throwing fn terminates here, on any thread, instead
  // of unwinding the caller's frame while helpers still run its loop body.
  void work() noexcept {
    for (;;) {
      const std::int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n) return;
      (*fn)(i);
      if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == n) {
        std::lock_guard<std::mutex> lock(mu);
        if (waiting.load(std::memory_order_relaxed)) cv.notify_all();
      }
    }
  }
};

class Pool {
 public:
  explicit Pool(int workers, bool idle = false) {
    threads_.reserve(static_cast<std::size_t>(workers));
    for (int i = 0; i < workers; ++i)
      threads_.emplace_back([this, idle] {
        if (idle) make_this_thread_idle();
        loop();
      });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      queued_.fetch_add(1, std::memory_order_release);  // wakes spinners
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  int workers() const { return static_cast<int>(threads_.size()); }

  void submit(const std::shared_ptr<Job>& job) {
    if (job->helpers_allowed <= 0) return;
    int sleeping;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(job);
      queued_.fetch_add(1, std::memory_order_release);
      sleeping = sleepers_;
    }
    if (sleeping == 0) return;  // the spinners see queued_
    if (job->helpers_allowed == 1)
      cv_.notify_one();
    else
      cv_.notify_all();
  }
  void retire(const std::shared_ptr<Job>& job) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = std::remove(queue_.begin(), queue_.end(), job);
    if (it != queue_.end()) {
      queued_.fetch_sub(static_cast<int>(queue_.end() - it), std::memory_order_relaxed);
      queue_.erase(it, queue_.end());
    }
  }

 private:
  void loop() {
    for (;;) {
      spin_until([this] { return queued_.load(std::memory_order_acquire) > 0; });
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (!stop_ && queue_.empty()) {
          ++sleepers_;
          cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
          --sleepers_;
        }
        if (stop_) return;
        job = queue_.front();
        if (++job->helpers_joined >= job->helpers_allowed ||
            job->next.load(std::memory_order_relaxed) >= job->n) {
          queue_.pop_front();
          queued_.fetch_sub(1, std::memory_order_relaxed);
        }
      }
      job->work();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::atomic<int> queued_{0};  // queue_.size() (plus one at stop), readable without the lock
  int sleepers_ = 0;            // workers blocked on cv_, guarded by mu_
  std::vector<std::thread> threads_;
  bool stop_ = false;
};

Pool& pool(Priority priority) {
  static Pool normal(hardware_threads() - 1);
  if (priority == Priority::kNormal) return normal;
  static Pool idle(hardware_threads() - 1, true);  // started on first use
  return idle;
}

}  // namespace

int hardware_threads() {
  static const int n = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return n;
}

bool make_this_thread_idle() {
#ifdef SCHED_IDLE
  sched_param param{};
  return sched_setscheduler(0, SCHED_IDLE, &param) == 0;  // 0: this thread (Linux sets per thread)
#else
  return false;
#endif
}

void parallel_for(std::int64_t n, int threads, const std::function<void(std::int64_t)>& fn,
                  Priority priority) {
  if (n <= 0) return;
  const int all = hardware_threads();
  int t = threads <= 0 ? all : std::min(threads, all);
  if (static_cast<std::int64_t>(t) > n) t = static_cast<int>(n);
  if (t <= 1) {
    for (std::int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->n = n;
  Pool& helpers = pool(priority);
  job->helpers_allowed = std::min(t - 1, helpers.workers());
  helpers.submit(job);
  job->work();
  if (!spin_until([&] { return job->done.load(std::memory_order_acquire) >= n; })) {
    std::unique_lock<std::mutex> lock(job->mu);
    job->waiting.store(true, std::memory_order_relaxed);
    job->cv.wait(lock, [&] { return job->done.load(std::memory_order_acquire) >= n; });
  }
  helpers.retire(job);
}

}  // namespace facetrace::core
