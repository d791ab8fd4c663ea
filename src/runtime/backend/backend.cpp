/// @file
/// GpuBackend: start, outcomes, loss and recovery (docs/design/tracer.md §10.3–10.6); the chunk loop of single requests
/// and batches is backend/chunk_stream.cpp.
#include "facetrace/runtime/backend.h"

#include <algorithm>
#include <system_error>

#include "backend/chunk_stream.h"
#include "backend/scratch_lease.h"
#include "log.h"

namespace facetrace::runtime {

std::string_view outcome_name(Outcome o) noexcept {
  constexpr std::string_view kNames[] = {"Done", "Declined", "Cancelled"};  // enumerator order
  const auto i = static_cast<std::size_t>(o);
  return i < std::size(kNames) ? kNames[i] : "?";
}

GpuBackend::GpuBackend(std::unique_ptr<Executor> executor, const Clock& clock, RecoveryConfig config)
    : executor_(std::move(executor)),
      policy_(clock, config),
      scratch_(std::make_unique<ScratchPool>(kMaxPooledScratch)) {}

GpuBackend::~GpuBackend() {
  std::lock_guard lock(recovery_thread_mu_);
  if (recovery_thread_.joinable()) recovery_thread_.join();
}

std::chrono::milliseconds hang_deadline(std::chrono::duration<double, std::milli> expected) {
  const double ms = std::max(static_cast<double>(kHangFloor.count()), kHangFactor * expected.count());
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::min(ms, 3600e3)));
}

std::unique_ptr<GpuBackend> GpuBackend::acquire() {
#ifndef FT_HAVE_CUDA
  return disabled("built without CUDA");
#else
  return with_executor(make_executor_from_env());
#endif
}

GpuBackend& shared_backend() {
  static const std::unique_ptr<GpuBackend> backend = GpuBackend::acquire();
  return *backend;
}

std::unique_ptr<GpuBackend> GpuBackend::with_executor(std::unique_ptr<Executor> executor, const Clock& clock,
                                                      RecoveryConfig config) {
  std::unique_ptr<GpuBackend> b(new GpuBackend(std::move(executor), clock, config));
  b->start_executor();
  return b;
}

std::unique_ptr<GpuBackend> GpuBackend::disabled(std::string why) {
  std::unique_ptr<GpuBackend> b(new GpuBackend(nullptr, SteadyClock::instance(), RecoveryConfig{}));
  b->none_reason_ = std::move(why);
  return b;
}

void GpuBackend::start_executor() {
  if (!executor_) {
    none_reason_ = "no executor";
    return;
  }
  Status st = executor_->state() == ExecutorState::kReady ? Status{} : executor_->start();
  if (st.ok()) {
    never_had_gpu_ = false;
    auto info = executor_->info();
    std::lock_guard lock(mu_);
    if (info) info_ = *info;
    FT_LOG_INFO("GPU backend active: {} ({})", info ? info->name : std::string("?"),
                executor_mode_name(executor_->mode()));
    return;
  }
  if (st.code() == Code::kDeviceLost) {  // e.g. in-process after an earlier sticky error
    never_had_gpu_ = false;
    mark_lost(st.what());
    return;
  }
  none_reason_ = st.what();
  if (executor_->state() == ExecutorState::kUnsupported) {
    // A GPU this build cannot drive is a deployment error (a wrong image for the node): said once, loudly.
    unsupported_ = true;
    FT_LOG_WARN("GPU {}; work stays on the CPU", st.what());
    return;
  }
  FT_LOG_INFO("GPU backend unavailable, work stays on the CPU: {}", st.what());
}

BackendState GpuBackend::state() const {
  if (never_had_gpu_) return unsupported_ ? BackendState::kUnsupported : BackendState::kNone;
  return is_lost() ? BackendState::kLost : BackendState::kReady;
}

std::map<std::string, std::uint64_t> GpuBackend::losses_by_reason() const {
  std::lock_guard lock(mu_);
  return losses_;
}

std::optional<std::string> GpuBackend::last_lost_reason() const {
  std::lock_guard lock(mu_);
  return last_lost_reason_;
}

std::optional<std::string> GpuBackend::adapter_label() const {
  if (never_had_gpu_ || is_lost() || !executor_) return std::nullopt;
  std::lock_guard lock(mu_);
  if (!info_) return std::nullopt;
  return info_->name + " (sm_" + std::to_string(info_->cc_major) + std::to_string(info_->cc_minor) + ", " +
         std::string(executor_mode_name(executor_->mode())) + ")";
}

std::optional<std::string> GpuBackend::unavailable_reason() const {
  if (!never_had_gpu_) return std::nullopt;
  return none_reason_;
}

std::optional<DeviceInfo> GpuBackend::device_info() const {
  std::lock_guard lock(mu_);
  return info_;
}

std::size_t GpuBackend::pooled_scratch() const { return scratch_->pooled(); }

void GpuBackend::mark_lost(std::string reason) {
  {
    std::lock_guard lock(mu_);
    ++losses_[reason];
    last_lost_reason_ = std::move(reason);
  }
  policy_.record_loss();  // cool-down starts before the flag is visible
  lost_.store(true, std::memory_order_release);
}

void GpuBackend::note_error(const Status& st, const char* what) {
  const bool lost =
      st.code() == Code::kDeviceLost || (executor_ && executor_->state() == ExecutorState::kLost);
  if (lost) {
    const std::string why = st.code() == Code::kDeviceLost ? st.what() : executor_->state_reason();
    FT_LOG_WARN("GPU device lost during {} ({}); declining to the CPU until a replacement is up", what, why);
    mark_lost(why);
  } else {
    FT_LOG_DEBUG("GPU declined {}: {}", what, st.to_string());
  }
}

bool GpuBackend::try_recover() {
  if (never_had_gpu_ || !executor_) return false;
  if (!is_lost()) return true;
  if (!policy_.may_attempt()) return false;
  if (recovering_.exchange(true, std::memory_order_acq_rel)) return false;
  if (!is_lost()) {
    recovering_.store(false, std::memory_order_release);
    return true;
  }
  policy_.record_attempt();
  recovery_attempts_.fetch_add(1, std::memory_order_acq_rel);
  FT_LOG_INFO("GPU was lost ({}); trying a replacement", last_lost_reason().value_or(""));
  // The replacement (a fresh child, re-uploaded residents) is built outside the turnstile: nobody else uses
  // the executor while the lost flag is up. It is swapped in during a turn.
  Status st = executor_->restart();
  bool ok = st.ok();
  if (ok) {
    auto info = executor_->info();
    auto turn = turnstile_.enter();
    {
      std::lock_guard lock(mu_);
      if (info) info_ = *info;
    }
    policy_.record_recovered();
    recoveries_.fetch_add(1, std::memory_order_acq_rel);
    lost_.store(false, std::memory_order_release);
    FT_LOG_INFO("GPU recovered: {}", info ? info->name : std::string("?"));
  } else {
    FT_LOG_WARN("GPU recovery failed, staying on the CPU for at least {:.1f} s: {}",
                policy_.config().cool_down.count(), st.to_string());
  }
  recovering_.store(false, std::memory_order_release);
  return ok;
}

void GpuBackend::start_recovery() {
  if (never_had_gpu_ || !executor_ || !is_lost()) return;
  if (recovering_.load(std::memory_order_acquire) || !policy_.may_attempt()) return;
  std::lock_guard lock(recovery_thread_mu_);
  bool idle = false;
  if (!background_recovery_.compare_exchange_strong(idle, true, std::memory_order_acq_rel)) return;
  if (recovery_thread_.joinable()) recovery_thread_.join();  // the previous one has finished or is finishing
  try {
    recovery_thread_ = std::thread([this] {
      // A loss between the replacement coming up and this thread ending would otherwise find the flag still up
      // and start nothing: look once more after lowering it, and go on while lost and allowed.
      for (int i = 0; i < policy_.config().max_attempts; ++i) {
        static_cast<void>(try_recover());
        background_recovery_.store(false, std::memory_order_release);
        if (!is_lost() || recovering_.load(std::memory_order_acquire) || !policy_.may_attempt()) return;
        bool again = false;
        if (!background_recovery_.compare_exchange_strong(again, true, std::memory_order_acq_rel)) return;
      }
      background_recovery_.store(false, std::memory_order_release);
    });
  } catch (const std::system_error& e) {  // no thread: the next request recovers in line (ChunkStream::run)
    background_recovery_.store(false, std::memory_order_release);
    FT_LOG_DEBUG("no background recovery thread: {}", e.what());
  }
}

Outcome GpuBackend::accumulate(Workload& work, const std::atomic<bool>* cancel) {
  return accumulate(work, cancel, nullptr);
}

Outcome GpuBackend::accumulate(Workload& work, const std::atomic<bool>* cancel, Status* why) {
  Outcome outcome = Outcome::kDeclined;
  Workload* const items[] = {&work};
  const BatchCallback on_done = [&](std::size_t, Outcome o) { outcome = o; };  // the stream keeps a reference
  ChunkStream stream(*this, items, cancel, on_done);
  Status reason;
  stream.record_declines(std::span<Status>(&reason, 1));
  stream.run();
  if (why != nullptr && outcome == Outcome::kDeclined) *why = std::move(reason);
  return outcome;
}

void GpuBackend::accumulate_batch(std::span<Workload* const> items, const std::atomic<bool>* cancel,
                                  const BatchCallback& on_done) {
  ChunkStream(*this, items, cancel, on_done).run();
}

void GpuBackend::accumulate_batch(std::span<Workload* const> items, const std::atomic<bool>* cancel,
                                  const BatchCallback& on_done, std::span<Status> why) {
  ChunkStream stream(*this, items, cancel, on_done);
  stream.record_declines(why);
  stream.run();
}

}  // namespace facetrace::runtime
