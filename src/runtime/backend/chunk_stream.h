/// @file
/// Private: the one chunk loop of GpuBackend (docs/design/tracer.md §10.3–10.6). A single request is a stream of one
/// item; a batch is one continuous stream of items, so both run the same turns, cancellation, failure and
/// loss handling.
#pragma once

#include <atomic>
#include <cstddef>
#include <optional>
#include <span>

#include "backend/scratch_lease.h"
#include "facetrace/runtime/backend.h"

namespace facetrace::runtime {

/// Runs `items` through the device in turns of kChunksPerTurn chunks. When an item has issued its last chunk,
/// that chunk stays in flight ("pending") until the next item's first chunk is queued behind it; only then is
/// it drained, committed and reported. `on_done` fires exactly once per item, in input order (nothing later is
/// reported before the pending item). An item whose can_run or hooks fail is declined alone; a device loss
/// declines every item not yet reported; cancellation cancels the current item and all later ones.
class ChunkStream {
 public:
  ChunkStream(GpuBackend& backend, std::span<Workload* const> items, const std::atomic<bool>* cancel,
              const BatchCallback& on_done)
      : b_(backend), items_(items), cancel_(cancel), on_done_(on_done) {}
  ChunkStream(const ChunkStream&) = delete;
  ChunkStream& operator=(const ChunkStream&) = delete;

  /// Runs every item (call once).
  void run();
  /// Before run(): every item reported kDeclined gets its reason in `why[index]` (GpuBackend::accumulate's
  /// `why` rules).
  void record_declines(std::span<Status> why) { why_ = why; }

 private:
  /// An item whose last chunk is still in flight.
  struct Pending {
    std::size_t index;
    Workload* work;
    ScratchLease scratch;
  };

  /// Runs item `i`'s chunks. False when the stream ended early (every remaining item reported).
  bool run_item(std::size_t i);
  /// The item's last chunk is issued: keep it pending for the next item, or drain and report it.
  bool last_chunk_issued(std::size_t i, ScratchLease scratch);
  /// Drains, commits and reports the pending item. False when the device was lost.
  bool finish_pending();
  /// Item `i` failed in `what`: declined alone, or, after a loss, the whole rest.
  bool failed(std::size_t i, const Status& st, const char* what);
  /// Cancellation: the pending item finishes, the rest is cancelled. Always false.
  bool cancel_rest();
  /// A device loss: the turn is given back and every unreported item (the pending one too) declined.
  bool decline_rest();
  /// Waits for `work`'s chunk in flight and throws its results away (cancellation, a failed chunk).
  void discard(Workload& work, ScratchLease& scratch);
  bool cancelled() const { return cancel_ != nullptr && cancel_->load(std::memory_order_acquire); }
  void report(std::size_t i, Outcome o);
  void report_rest(Outcome o);
  /// Records the reason of item `i`'s decline (when recording).
  void note_decline(std::size_t i, const Status& st);
  /// Records `st` for every unreported item.
  void note_decline_rest(const Status& st);
  /// The reason of a decline caused by the device being lost.
  Status lost_reason() const;

  GpuBackend& b_;
  std::span<Workload* const> items_;
  const std::atomic<bool>* cancel_;
  const BatchCallback& on_done_;
  std::size_t reported_ = 0;  ///< items [0, reported_) are reported
  std::optional<Pending> pending_;
  std::optional<Turnstile::Turn> turn_;
  int chunks_in_turn_ = 0;
  std::span<Status> why_;
};

}  // namespace facetrace::runtime
