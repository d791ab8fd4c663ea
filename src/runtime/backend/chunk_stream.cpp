/// @file
/// ChunkStream: GpuBackend's one chunk loop, for single requests and batches (docs/design/tracer.md §10.3–10.6).
#include "backend/chunk_stream.h"

#include "log.h"

namespace facetrace::runtime {

void ChunkStream::run() {
  if (!b_.executor_ || b_.never_had_gpu_) {
    note_decline_rest(
        {Code::kNotSupported, b_.none_reason_.empty() ? std::string("no GPU") : b_.none_reason_});
    report_rest(Outcome::kDeclined);
    return;
  }
  if (b_.is_lost() && !b_.try_recover()) {
    note_decline_rest(lost_reason());
    report_rest(Outcome::kDeclined);
    return;
  }
  const auto info = b_.device_info();
  for (std::size_t i = 0; i < items_.size(); ++i) {
    if (cancelled()) {
      cancel_rest();
      return;
    }
    if (info) {
      if (Status st = items_[i]->can_run(*info); !st.ok()) {
        FT_LOG_DEBUG("GPU declined request {}: {}", i, st.to_string());
        if (!finish_pending()) {
          decline_rest();
          return;
        }
        note_decline(i, st);
        report(i, Outcome::kDeclined);  // declined alone
        continue;
      }
    }
    if (!run_item(i)) return;
  }
  if (!finish_pending()) decline_rest();
}

bool ChunkStream::run_item(std::size_t i) {
  Workload& work = *items_[i];
  Executor& ex = *b_.executor_;
  ScratchLease scratch = b_.scratch_->take(work.scratch_bytes());
  work.seed_scratch(scratch.bytes());
  bool need_begin = true;
  bool first_chunk = true;
  for (;;) {
    // A request rejoins the back of the queue for every turn (docs/design/tracer.md §10.3).
    if (!turn_) {
      turn_.emplace(b_.turnstile_.enter());
      chunks_in_turn_ = 0;
      need_begin = true;
    }
    if (b_.is_lost()) return decline_rest();  // lost while we waited
    if (need_begin) {
      if (Status st = work.begin_turn(ex); !st.ok()) return failed(i, st, "begin_turn");
      need_begin = false;
    }
    if (cancelled()) {
      discard(work, scratch);
      return cancel_rest();
    }
    auto more = work.run_chunk(ex, scratch.bytes());
    if (!more) {
      discard(work, scratch);
      return failed(i, more.status(), "run_chunk");
    }
    if (first_chunk) {
      first_chunk = false;
      // This item's first chunk is queued behind the pending item's last one: now collect that.
      if (!finish_pending()) {
        discard(work, scratch);
        return decline_rest();
      }
    }
    ++chunks_in_turn_;
    if (!*more) return last_chunk_issued(i, std::move(scratch));
    // After kChunksPerTurn chunks the turn ends if somebody waits; while nobody does, keep the turn and the
    // chunk in flight (no drain, so the device never idles at a turn boundary).
    if (chunks_in_turn_ >= kChunksPerTurn) {
      if (b_.turnstile_.has_waiters_behind(turn_->ticket())) {
        // Drain before giving the turn away so the device is idle for the next request.
        if (Status st = work.drain(ex, scratch.bytes(), /*discard=*/false); !st.ok())
          return failed(i, st, "drain");
        turn_.reset();
      } else {
        chunks_in_turn_ = 0;
      }
    }
  }
}

bool ChunkStream::last_chunk_issued(std::size_t i, ScratchLease scratch) {
  Workload& work = *items_[i];
  if (i + 1 < items_.size()) {
    // Keep the last chunk in flight; the next item drains it after queueing its first chunk.
    pending_.emplace(Pending{i, &work, std::move(scratch)});
    return true;
  }
  if (Status st = work.drain(*b_.executor_, scratch.bytes(), /*discard=*/false); !st.ok())
    return failed(i, st, "drain");
  // A cancellation that arrived while the last chunk ran still cancels (the caller's buffer stays untouched).
  const Outcome o = cancelled() ? Outcome::kCancelled : Outcome::kDone;
  if (o == Outcome::kDone) work.commit(scratch.bytes());
  report(i, o);
  return true;
}

bool ChunkStream::finish_pending() {
  if (!pending_) return true;
  Pending p = std::move(*pending_);
  pending_.reset();
  Outcome o = Outcome::kDone;
  if (Status st = p.work->drain(*b_.executor_, p.scratch.bytes(), /*discard=*/false); !st.ok()) {
    b_.note_error(st, "drain");
    if (b_.is_lost()) return false;  // not reported: the caller declines it with the rest
    o = Outcome::kDeclined;
    note_decline(p.index, st);
  }
  if (o == Outcome::kDone) p.work->commit(p.scratch.bytes());
  report(p.index, o);  // runs while the turn is held; keep on_done cheap
  return true;
}

bool ChunkStream::failed(std::size_t i, const Status& st, const char* what) {
  b_.note_error(st, what);
  // The pending item finishes first, so that reports stay in input order.
  if (b_.is_lost() || !finish_pending()) return decline_rest();
  note_decline(i, st);
  report(i, Outcome::kDeclined);
  return true;
}

bool ChunkStream::cancel_rest() {
  if (!finish_pending()) return decline_rest();
  report_rest(Outcome::kCancelled);
  return false;
}

bool ChunkStream::decline_rest() {
  turn_.reset();
  if (pending_) note_decline(pending_->index, lost_reason());
  pending_.reset();
  note_decline_rest(lost_reason());
  report_rest(Outcome::kDeclined);
  return false;
}

void ChunkStream::discard(Workload& work, ScratchLease& scratch) {
  // The request ends here either way; a failure is the device's and the next hook reports it.
  if (Status st = work.drain(*b_.executor_, scratch.bytes(), /*discard=*/true); !st.ok())
    FT_LOG_DEBUG("GPU: discarding the chunk in flight failed: {}", st.to_string());
}

void ChunkStream::report(std::size_t i, Outcome o) {
  reported_ = i + 1;
  on_done_(i, o);
}

void ChunkStream::note_decline(std::size_t i, const Status& st) {
  if (i < why_.size()) why_[i] = st.ok() ? Status(Code::kDeclined, "declined") : st;
}

void ChunkStream::note_decline_rest(const Status& st) {
  for (std::size_t i = reported_; i < items_.size(); ++i) note_decline(i, st);
}

Status ChunkStream::lost_reason() const {
  return {Code::kDeviceLost, "GPU lost: " + b_.last_lost_reason().value_or("device lost")};
}

void ChunkStream::report_rest(Outcome o) {
  for (std::size_t i = reported_; i < items_.size(); ++i) report(i, o);
}

}  // namespace facetrace::runtime
