/// @file
/// ReadbackRing: pinned host slots that device results are copied into and collected from later, without
/// allocating or mapping per dispatch (docs/design/runtime.md §1–§3). The device side is reached through a CopyEngine:
/// CUDA in production (make_cuda_copy_engine), a fake in CPU tests.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "facetrace/core/status.h"

struct CUstream_st;  // cudaStream_t without <cuda_runtime.h>

namespace facetrace::runtime {

/// Slot states (docs/design/runtime.md §1); values are the spec's.
enum class SlotState : std::uint8_t { kFree = 0, kPending = 1, kReady = 2, kError = 3 };

/// "FREE", "PENDING", "READY", "ERROR".
std::string_view slot_state_name(SlotState s) noexcept;

/// Identifies one recorded copy. Plain data; travels in protocol messages.
struct RingTicket {
  std::uint64_t size_class = 0;  ///< bytes per slot of the class (a multiple of 4096)
  std::uint32_t slot = 0;        ///< index within the class
  std::uint32_t generation = 0;  ///< the ring's claim count at this claim; a mismatch means a stale ticket
  std::uint64_t byte_len = 0;    ///< bytes copied
};

/// Result of a non-blocking poll.
enum class PollResult : std::uint8_t { kPending, kReady, kError };

/// Live counters (docs/design/runtime.md §1 Stats); a copy.
struct RingStats {
  std::uint64_t dispatches = 0;      ///< successful record_copy calls
  std::uint64_t stalls = 0;          ///< record_copy found no FREE slot
  std::uint64_t peak_in_flight = 0;  ///< max of PENDING + READY after a claim
  std::uint64_t in_flight = 0;       ///< PENDING + READY now
  std::uint64_t slots = 0;           ///< slots carved, all classes
  std::uint64_t pinned_bytes = 0;    ///< bytes carved, all classes
  std::uint64_t budget_bytes = 0;    ///< the ring's byte budget
  std::uint32_t max_slots_per_class = 0;
  std::uint64_t reclaimed = 0;  ///< FREE slots given back to the budget so that another class could carve one
};

/// How a ring reaches the device. Implementations are not required to be thread-safe: the ring serialises
/// calls per slot.
class CopyEngine {
 public:
  virtual ~CopyEngine() = default;
  /// Creates the per-slot device state (completion events). Called when a slot is carved, never per copy.
  virtual Status create_slot(std::uint32_t id) = 0;
  /// After all work queued on `stream`, copies `bytes` from device `src` to host `dst` on the copy stream and
  /// records slot `id`'s completion event.
  virtual Status enqueue_copy(std::uint32_t id, void* dst, const void* src, std::uint64_t bytes,
                              CUstream_st* stream) = 0;
  /// The completion query: 0 = complete, 600 = not ready, any other value is a CUDA error code.
  virtual int query(std::uint32_t id) = 0;
};

/// The CUDA engine: a dedicated non-blocking copy stream, an out_ready event per slot recorded on the
/// caller's stream, the copy, and a timing-free done event per slot queried with cudaEventQuery. nullptr in a
/// build without CUDA. Call only in a process that may use CUDA.
std::unique_ptr<CopyEngine> make_cuda_copy_engine();

/// Ring configuration.
struct RingOptions {
  std::uint64_t budget_bytes = 256ull
                               << 20;  ///< all slots of all classes together (docs/design/runtime.md §2)
  std::uint32_t max_slots_per_class = 256;  ///< usually ReadbackRing::slots_from_env()
};

/// A set of rings, one per size class, carving slots lazily from a host region that was pinned or registered
/// at start-up; when a class finds no room, the least recently claimed FREE slots of other classes give theirs
/// back (docs/design/runtime.md §2 "Reclaiming"). Thread-safe. An event error marks the whole ring lost (sticky
/// codes) and every later call returns kDeviceLost.
class ReadbackRing {
 public:
  /// `host` must stay valid and page-locked for the ring's life.
  ReadbackRing(std::span<std::byte> host, RingOptions options, std::unique_ptr<CopyEngine> engine);
  ~ReadbackRing();
  ReadbackRing(const ReadbackRing&) = delete;
  ReadbackRing& operator=(const ReadbackRing&) = delete;

  /// class(len) = ⌈⌈len/4⌉·4 / 4096⌉·4096; kInvalidArgument for 0 or overflow.
  static Expected<std::uint64_t> size_class(std::uint64_t len);
  /// FACETRACE_READBACK_RING_SLOTS clamped to 2..256 (default 256), warning on 0/1, too large, unparsable.
  static std::uint32_t slots_from_env();

  /// Claims a FREE slot of the class for `bytes` and enqueues the copy from device `src` ordered after
  /// `stream`. Fails closed: kOutOfMemory "RingFull" naming the blocking slot and its state when no slot can
  /// be claimed (counts a stall), kDeviceLost after a sticky error, kInvalidArgument for a bad length.
  Expected<RingTicket> record_copy(const void* src, std::uint64_t bytes, CUstream_st* stream);
  /// Non-blocking. kInvalidArgument for a stale or already-collected ticket.
  Expected<PollResult> poll(const RingTicket& t);
  /// Lends the bytes of a READY ticket to `visitor`, then frees the slot. An ERROR ticket is collected as
  /// its error (the slot is freed). A PENDING ticket is refused (bytes are never read before the event).
  Status with_mapped(const RingTicket& t, const std::function<void(std::span<const std::byte>)>& visitor);
  /// Polls with backoff (32 µs doubling to 1 ms) until READY or ERROR; a deadline that passes is a hang:
  /// the ring is marked lost and kDeviceLost returned.
  Status wait(const RingTicket& t, std::chrono::steady_clock::time_point deadline);
  /// Offset of the ticket's bytes from the start of the host region (for arena-relative replies).
  Expected<std::uint64_t> host_offset(const RingTicket& t) const;

  /// A copy of the counters.
  RingStats stats() const;
  bool lost() const { return lost_.load(std::memory_order_acquire); }
  /// Why the ring is lost ("" when not).
  std::string lost_reason() const;
  /// Marks the ring lost (the device context calls this when another path saw a sticky error).
  void mark_lost(std::string reason);

 private:
  struct Slot {
    std::atomic<std::uint8_t> state{0};
    std::uint32_t generation = 0;
    std::uint32_t engine_id = 0;
    std::uint64_t byte_len = 0;
    std::uint64_t claim_seq = 0;
    int error_code = 0;
    std::byte* host = nullptr;
  };
  struct ClassRing {
    std::vector<std::unique_ptr<Slot>> slots;
    std::vector<std::uint32_t> free_list;  // LIFO
    std::vector<std::uint32_t> retired;    // indices whose slot gave its bytes back, to be carved again
    std::size_t live() const { return slots.size() - retired.size(); }
  };
  Expected<Slot*> find_locked(const RingTicket& t, ClassRing** ring = nullptr) const;
  PollResult refresh_locked(std::uint64_t size_class, std::uint32_t index, Slot& s);
  void free_locked(ClassRing& ring, std::uint32_t index, Slot& s);
  Status ring_full_locked(std::uint64_t size_class, ClassRing& ring);
  /// A new slot of class `size_class`: bytes from the budget's gaps, reclaiming FREE slots of other classes
  /// (least recently claimed first) until a gap fits; its index and engine id reused where one is spare.
  Expected<std::uint32_t> carve_locked(std::uint64_t size_class, ClassRing& ring);
  /// The offset of `bytes` contiguous budget bytes (first fit), or nothing.
  std::optional<std::uint64_t> take_gap_locked(std::uint64_t bytes);
  void give_gap_locked(std::uint64_t offset, std::uint64_t bytes);
  /// Retires the least recently claimed FREE slot outside class `keep`; false when there is none.
  bool reclaim_one_locked(std::uint64_t keep);

  std::span<std::byte> host_;
  RingOptions options_;
  std::unique_ptr<CopyEngine> engine_;
  mutable std::mutex mu_;
  std::map<std::uint64_t, ClassRing> rings_;
  std::map<std::uint64_t, std::uint64_t> gaps_;  // offset -> bytes of the budget no slot holds (coalesced)
  std::vector<std::uint32_t> spare_engine_ids_;  // engine slots (their events) of retired slots
  std::uint64_t carved_bytes_ = 0;
  std::uint32_t next_engine_id_ = 0;
  std::uint64_t claim_seq_ = 0;
  std::uint64_t reclaimed_ = 0;
  std::atomic<bool> lost_{false};
  std::string lost_reason_;
  std::atomic<std::uint64_t> dispatches_{0}, stalls_{0}, peak_in_flight_{0}, in_flight_{0}, slots_{0};
};

}  // namespace facetrace::runtime
