/// @file
/// GpuBackend: turns, scratch, outcomes, batches, loss and recovery (tracer.md §10.3–10.6).
#include "facetrace/runtime/backend.h"

#include <algorithm>
#include <cstring>

#include "log.h"

namespace facetrace::runtime {

std::string_view outcome_name(Outcome o) noexcept {
  switch (o) {
    case Outcome::kDone: return "Done";
    case Outcome::kDeclined: return "Declined";
    case Outcome::kCancelled: return "Cancelled";
  }
  return "?";
}

GpuBackend::GpuBackend(std::unique_ptr<Executor> executor, const Clock& clock, RecoveryConfig config)
    : executor_(std::move(executor)), policy_(clock, config) {}

GpuBackend::~GpuBackend() = default;

std::unique_ptr<GpuBackend> GpuBackend::acquire() {
#ifndef FT_HAVE_CUDA
  return disabled("built without CUDA");
#else
  return with_executor(make_executor_from_env());
#endif
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
  FT_LOG_INFO("GPU backend unavailable, work stays on the CPU: {}", st.what());
}

BackendState GpuBackend::state() const {
  if (never_had_gpu_) return BackendState::kNone;
  return is_lost() ? BackendState::kLost : BackendState::kReady;
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

std::size_t GpuBackend::pooled_scratch() const {
  std::lock_guard lock(mu_);
  return scratch_pool_.size();
}

void GpuBackend::mark_lost(std::string reason) {
  {
    std::lock_guard lock(mu_);
    last_lost_reason_ = std::move(reason);
  }
  policy_.record_loss();  // cool-down starts before the flag is visible
  lost_.store(true, std::memory_order_release);
}

void GpuBackend::note_error(const Status& st, const char* what) {
  const bool lost = st.code() == Code::kDeviceLost ||
                    (executor_ && executor_->state() == ExecutorState::kLost);
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
    lost_.store(false, std::memory_order_release);
    FT_LOG_INFO("GPU recovered: {}", info ? info->name : std::string("?"));
  } else {
    FT_LOG_WARN("GPU recovery failed, staying on the CPU for at least {:.1f} s: {}",
                policy_.config().cool_down.count(), st.to_string());
  }
  recovering_.store(false, std::memory_order_release);
  return ok;
}

std::vector<std::byte> GpuBackend::take_scratch(std::size_t bytes) {
  std::vector<std::byte> buf;
  {
    std::lock_guard lock(mu_);
    if (!scratch_pool_.empty()) {
      buf = std::move(scratch_pool_.back());
      scratch_pool_.pop_back();
    }
  }
  buf.resize(bytes);
  return buf;
}

void GpuBackend::return_scratch(std::vector<std::byte> buffer) {
  if (buffer.capacity() == 0) return;
  std::lock_guard lock(mu_);
  if (scratch_pool_.size() < kMaxPooledScratch) scratch_pool_.push_back(std::move(buffer));
}

Outcome GpuBackend::accumulate(Workload& work, const std::atomic<bool>* cancel) {
  if (!executor_ || never_had_gpu_) return Outcome::kDeclined;
  if (is_lost() && !try_recover()) return Outcome::kDeclined;
  if (auto info = device_info()) {
    if (Status st = work.can_run(*info); !st.ok()) {
      FT_LOG_DEBUG("GPU declined a request: {}", st.to_string());
      return Outcome::kDeclined;
    }
  }
  std::vector<std::byte> scratch = take_scratch(work.scratch_bytes());
  work.seed_scratch(scratch);
  auto finish = [&](Outcome o) {
    if (o == Outcome::kDone) work.commit(scratch);
    return_scratch(std::move(scratch));
    return o;
  };
  auto cancelled = [&] { return cancel != nullptr && cancel->load(std::memory_order_acquire); };
  for (;;) {
    // A request rejoins the back of the queue for every turn (tracer.md §10.3).
    auto turn = turnstile_.enter();
    if (is_lost()) return finish(Outcome::kDeclined);  // lost while we waited
    if (Status st = work.begin_turn(*executor_); !st.ok()) {
      note_error(st, "begin_turn");
      return finish(Outcome::kDeclined);
    }
    bool more = true;
    for (int chunk = 0; more; ++chunk) {
      // After kChunksPerTurn chunks the turn ends if somebody waits; while nobody does, keep the turn and the
      // chunk in flight (no drain, so the device never idles at a turn boundary) — as batches do.
      if (chunk == kChunksPerTurn) {
        if (turnstile_.has_waiters_behind(turn.ticket())) break;
        chunk = 0;
      }
      if (cancelled()) {
        (void)work.drain(*executor_, scratch, /*discard=*/true);
        return finish(Outcome::kCancelled);
      }
      auto r = work.run_chunk(*executor_, scratch);
      if (!r) {
        (void)work.drain(*executor_, scratch, /*discard=*/true);
        note_error(r.status(), "run_chunk");
        return finish(Outcome::kDeclined);
      }
      more = *r;
    }
    // Drain before giving the turn away so the device is idle for the next request.
    if (Status st = work.drain(*executor_, scratch, /*discard=*/false); !st.ok()) {
      note_error(st, "drain");
      return finish(Outcome::kDeclined);
    }
    if (!more) return finish(cancelled() ? Outcome::kCancelled : Outcome::kDone);
  }
}

void GpuBackend::accumulate_batch(std::span<Workload* const> items, const std::atomic<bool>* cancel,
                                  const BatchCallback& on_done) {
  std::size_t reported = 0;
  auto report = [&](std::size_t i, Outcome o) {
    reported = i + 1;
    on_done(i, o);
  };
  auto finish_rest = [&](Outcome o) {
    for (std::size_t i = reported; i < items.size(); ++i) report(i, o);
  };
  if (!executor_ || never_had_gpu_ || (is_lost() && !try_recover())) return finish_rest(Outcome::kDeclined);
  auto cancelled = [&] { return cancel != nullptr && cancel->load(std::memory_order_acquire); };
  const auto info = device_info();

  // One continuous chunk stream (tracer.md §10.6): when an item has issued its last chunk, that chunk stays in
  // flight ("pending") until the next item's first chunk is queued behind it; only then is it drained,
  // committed and reported. Reports stay in input order: nothing later is reported before the pending item.
  struct Pending {
    std::size_t index;
    Workload* work;
    std::vector<std::byte> scratch;
  };
  std::optional<Pending> pending;
  // Drains, commits and reports the pending item. False when the device was lost (the caller declines the
  // rest, the pending item included, since it was not reported).
  auto finish_pending = [&]() -> bool {
    if (!pending) return true;
    Pending p = std::move(*pending);
    pending.reset();
    Outcome o = Outcome::kDone;
    if (Status st = p.work->drain(*executor_, p.scratch, /*discard=*/false); !st.ok()) {
      note_error(st, "drain");
      if (is_lost()) {
        return_scratch(std::move(p.scratch));
        return false;
      }
      o = Outcome::kDeclined;
    }
    if (o == Outcome::kDone) p.work->commit(p.scratch);
    return_scratch(std::move(p.scratch));
    report(p.index, o);
    return true;
  };

  std::optional<Turnstile::Turn> turn;
  int chunks_in_turn = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    Workload& work = *items[i];
    if (cancelled()) {
      if (!finish_pending()) return finish_rest(Outcome::kDeclined);
      return finish_rest(Outcome::kCancelled);
    }
    if (info) {
      if (Status st = work.can_run(*info); !st.ok()) {
        FT_LOG_DEBUG("GPU declined batch item {}: {}", i, st.to_string());
        if (!finish_pending()) return finish_rest(Outcome::kDeclined);
        report(i, Outcome::kDeclined);  // declined alone
        continue;
      }
    }
    std::vector<std::byte> scratch = take_scratch(work.scratch_bytes());
    work.seed_scratch(scratch);
    bool need_begin = true;
    bool first_chunk = true;
    std::optional<Outcome> outcome;
    // A failure of this item: finish the pending one first (reports stay in order), then decline this one.
    auto fail_this = [&](const Status& st, const char* what) -> bool {
      note_error(st, what);
      if (is_lost()) return false;
      if (!finish_pending()) return false;
      outcome = Outcome::kDeclined;
      return true;
    };
    while (!outcome) {
      if (!turn) {
        turn.emplace(turnstile_.enter());
        chunks_in_turn = 0;
        need_begin = true;
      }
      if (is_lost()) {
        return_scratch(std::move(scratch));
        turn.reset();
        return finish_rest(Outcome::kDeclined);
      }
      if (need_begin) {
        if (Status st = work.begin_turn(*executor_); !st.ok()) {
          if (!fail_this(st, "begin_turn")) {
            return_scratch(std::move(scratch));
            turn.reset();
            return finish_rest(Outcome::kDeclined);
          }
          break;
        }
        need_begin = false;
      }
      if (cancelled()) {
        (void)work.drain(*executor_, scratch, /*discard=*/true);
        return_scratch(std::move(scratch));
        if (!finish_pending()) return finish_rest(Outcome::kDeclined);
        return finish_rest(Outcome::kCancelled);
      }
      auto r = work.run_chunk(*executor_, scratch);
      if (!r) {
        (void)work.drain(*executor_, scratch, /*discard=*/true);
        if (!fail_this(r.status(), "run_chunk")) {
          return_scratch(std::move(scratch));
          turn.reset();
          return finish_rest(Outcome::kDeclined);
        }
        break;
      }
      if (first_chunk) {
        first_chunk = false;
        // This item's first chunk is queued behind the pending item's last one: now collect that.
        if (!finish_pending()) {
          (void)work.drain(*executor_, scratch, /*discard=*/true);
          return_scratch(std::move(scratch));
          turn.reset();
          return finish_rest(Outcome::kDeclined);
        }
      }
      ++chunks_in_turn;
      const bool more = *r;
      if (!more) {
        if (i + 1 < items.size()) {
          // Keep the last chunk in flight; the next item drains it after queueing its first chunk.
          pending = Pending{i, &work, std::move(scratch)};
          outcome = Outcome::kDone;
          break;
        }
        if (Status st = work.drain(*executor_, scratch, /*discard=*/false); !st.ok()) {
          if (!fail_this(st, "drain")) {
            return_scratch(std::move(scratch));
            turn.reset();
            return finish_rest(Outcome::kDeclined);
          }
          break;
        }
        outcome = Outcome::kDone;
        break;
      }
      if (chunks_in_turn >= kChunksPerTurn) {
        if (turnstile_.has_waiters_behind(turn->ticket())) {
          // Somebody waits: drain our chunk in flight, then rejoin the back of the queue.
          if (Status st = work.drain(*executor_, scratch, /*discard=*/false); !st.ok()) {
            if (!fail_this(st, "drain")) {
              return_scratch(std::move(scratch));
              turn.reset();
              return finish_rest(Outcome::kDeclined);
            }
            break;
          }
          turn.reset();
        } else {
          chunks_in_turn = 0;  // nobody waits: keep the turn
        }
      }
    }
    if (pending && pending->index == i) continue;  // reported by the next item
    if (*outcome == Outcome::kDone) work.commit(scratch);
    return_scratch(std::move(scratch));
    report(i, *outcome);  // runs while the turn is held; keep on_done cheap
  }
  if (!finish_pending()) finish_rest(Outcome::kDeclined);
}

}  // namespace facetrace::runtime
