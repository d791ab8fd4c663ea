/// @file
/// ReadbackRing core: size classes, lazy slots under a byte budget, LIFO free lists, fail-closed states and
/// live stats (docs/design/runtime.md §1–§3). Device work goes through a CopyEngine.
#include "facetrace/runtime/readback_ring.h"

#include <algorithm>
#include <limits>
#include <string>
#include <thread>

#include "log.h"
#include "facetrace/core/env.h"
#include "facetrace/runtime/cuda_errors.h"

namespace facetrace::runtime {
namespace {

constexpr std::uint64_t kClassGranularity = 4096;  // docs/design/runtime.md §1 size classes
constexpr std::int64_t kMinSlots = 2, kMaxSlots = 256,
                       kDefaultSlots = 256;  // docs/design/runtime.md §1 slot count

std::string slot_name(std::uint64_t size_class, std::uint32_t index) {
  return "slot " + std::to_string(index) + " of class " + std::to_string(size_class);
}

}  // namespace

std::string_view slot_state_name(SlotState s) noexcept {
  switch (s) {
    case SlotState::kFree: return "FREE";
    case SlotState::kPending: return "PENDING";
    case SlotState::kReady: return "READY";
    case SlotState::kError: return "ERROR";
  }
  return "?";
}

Expected<std::uint64_t> ReadbackRing::size_class(std::uint64_t len) {
  if (len == 0) return invalid_argument("readback length 0: nothing to copy");
  if (len > std::numeric_limits<std::uint64_t>::max() - 2 * kClassGranularity)
    return invalid_argument("readback length " + std::to_string(len) + " overflows the size classes");
  const std::uint64_t words = (len + 3) / 4 * 4;
  return (words + kClassGranularity - 1) / kClassGranularity * kClassGranularity;
}

std::uint32_t ReadbackRing::slots_from_env() {
  return static_cast<std::uint32_t>(
      core::env_int_clamped("FACETRACE_READBACK_RING_SLOTS", kDefaultSlots, kMinSlots, kMaxSlots));
}

ReadbackRing::ReadbackRing(std::span<std::byte> host, RingOptions options, std::unique_ptr<CopyEngine> engine)
    : host_(host), options_(options), engine_(std::move(engine)) {
  options_.max_slots_per_class =
      std::clamp<std::uint32_t>(options_.max_slots_per_class, kMinSlots, kMaxSlots);
  options_.budget_bytes = std::min<std::uint64_t>(options_.budget_bytes, host_.size());
  if (options_.budget_bytes > 0) gaps_[0] = options_.budget_bytes;
}

ReadbackRing::~ReadbackRing() {
  const RingStats s = stats();
  FT_LOG_INFO("readback ring: {} dispatches, {} stalls, peak {} in flight, {} slots, {} pinned bytes, {} reclaimed",
              s.dispatches, s.stalls, s.peak_in_flight, s.slots, s.pinned_bytes, s.reclaimed);
}

std::string ReadbackRing::lost_reason() const {
  std::lock_guard lock(mu_);
  return lost_reason_;
}

void ReadbackRing::mark_lost(std::string reason) {
  std::lock_guard lock(mu_);
  if (!lost_.load()) lost_reason_ = std::move(reason);
  lost_.store(true, std::memory_order_release);
}

RingStats ReadbackRing::stats() const {
  RingStats s;
  s.dispatches = dispatches_.load(std::memory_order_relaxed);
  s.stalls = stalls_.load(std::memory_order_relaxed);
  s.peak_in_flight = peak_in_flight_.load(std::memory_order_relaxed);
  s.in_flight = in_flight_.load(std::memory_order_relaxed);
  s.slots = slots_.load(std::memory_order_relaxed);
  {
    std::lock_guard lock(mu_);
    s.pinned_bytes = carved_bytes_;
    s.reclaimed = reclaimed_;
  }
  s.budget_bytes = options_.budget_bytes;
  s.max_slots_per_class = options_.max_slots_per_class;
  return s;
}

Expected<RingTicket> ReadbackRing::record_copy(const void* src, std::uint64_t bytes, CUstream_st* stream) {
  auto cls = size_class(bytes);
  if (!cls) return cls.status();
  const std::uint64_t c = *cls;
  std::lock_guard lock(mu_);
  if (lost_.load(std::memory_order_acquire))
    return Status(Code::kDeviceLost, "readback ring is lost: " + lost_reason_);
  ClassRing& ring = rings_[c];
  std::uint32_t index = 0;
  if (!ring.free_list.empty()) {
    index = ring.free_list.back();
    const auto st = static_cast<SlotState>(ring.slots[index]->state.load(std::memory_order_acquire));
    if (st != SlotState::kFree) {
      // Never recycle a slot whose result was not collected (fail closed, docs/design/runtime.md §1).
      return internal_error(slot_name(c, index) + " is " + std::string(slot_state_name(st)) +
                            " but was on the free list: collect its ticket first");
    }
    ring.free_list.pop_back();
  } else if (ring.live() < options_.max_slots_per_class) {
    auto carved = carve_locked(c, ring);
    if (!carved) {
      Status st = carved.status();
      if (ring.live() == 0) rings_.erase(c);  // a class that never got a slot leaves nothing behind
      return st;
    }
    index = *carved;
  } else {
    return ring_full_locked(c, ring);
  }
  Slot& s = *ring.slots[index];
  s.generation = static_cast<std::uint32_t>(claim_seq_ + 1);  // unique per claim, across classes
  s.byte_len = bytes;
  s.error_code = 0;
  s.claim_seq = ++claim_seq_;
  s.state.store(static_cast<std::uint8_t>(SlotState::kPending), std::memory_order_release);
  if (Status st = engine_->enqueue_copy(s.engine_id, s.host, src, bytes, stream); !st.ok()) {
    s.state.store(static_cast<std::uint8_t>(SlotState::kFree), std::memory_order_release);
    ring.free_list.push_back(index);
    if (st.code() == Code::kDeviceLost) {
      lost_reason_ = st.what();
      lost_.store(true, std::memory_order_release);
    }
    return st.with_context("readback ring: record_copy into " + slot_name(c, index));
  }
  dispatches_.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t now = in_flight_.fetch_add(1, std::memory_order_relaxed) + 1;
  std::uint64_t peak = peak_in_flight_.load(std::memory_order_relaxed);
  while (now > peak && !peak_in_flight_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  return RingTicket{c, index, s.generation, bytes};
}

Expected<std::uint32_t> ReadbackRing::carve_locked(std::uint64_t c, ClassRing& ring) {
  std::optional<std::uint64_t> offset = take_gap_locked(c);
  while (!offset && reclaim_one_locked(c)) offset = take_gap_locked(c);
  if (!offset) return ring_full_locked(c, ring);
  const bool revive = !ring.retired.empty();  // a retired index of this class is carved again first
  const auto index = static_cast<std::uint32_t>(revive ? ring.retired.back() : ring.slots.size());
  std::uint32_t engine_id = 0;
  if (!spare_engine_ids_.empty()) {  // its events exist already: no CUDA call on this path
    engine_id = spare_engine_ids_.back();
    spare_engine_ids_.pop_back();
  } else {
    engine_id = next_engine_id_;
    if (Status st = engine_->create_slot(engine_id); !st.ok()) {
      give_gap_locked(*offset, c);
      if (st.code() == Code::kDeviceLost) {
        lost_reason_ = st.what();
        lost_.store(true, std::memory_order_release);
      }
      return st.with_context("readback ring: creating " + slot_name(c, index));
    }
    ++next_engine_id_;
  }
  if (revive) {
    ring.retired.pop_back();
  } else {
    ring.slots.push_back(std::make_unique<Slot>());
  }
  Slot& s = *ring.slots[index];
  s.host = host_.data() + *offset;
  s.engine_id = engine_id;
  s.state.store(static_cast<std::uint8_t>(SlotState::kFree), std::memory_order_release);
  carved_bytes_ += c;
  slots_.fetch_add(1, std::memory_order_relaxed);
  return index;
}

std::optional<std::uint64_t> ReadbackRing::take_gap_locked(std::uint64_t bytes) {
  for (auto it = gaps_.begin(); it != gaps_.end(); ++it) {
    if (it->second < bytes) continue;
    const std::uint64_t offset = it->first, left = it->second - bytes;
    gaps_.erase(it);
    if (left > 0) gaps_[offset + bytes] = left;
    return offset;
  }
  return std::nullopt;
}

void ReadbackRing::give_gap_locked(std::uint64_t offset, std::uint64_t bytes) {
  auto next = gaps_.lower_bound(offset);
  if (next != gaps_.end() && next->first == offset + bytes) {  // joins the gap after it
    bytes += next->second;
    next = gaps_.erase(next);
  }
  if (next != gaps_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {  // and the gap before it
      prev->second += bytes;
      return;
    }
  }
  gaps_[offset] = bytes;
}

bool ReadbackRing::reclaim_one_locked(std::uint64_t keep) {
  ClassRing* victim_ring = nullptr;
  std::uint64_t victim_class = 0;
  std::uint32_t victim = 0;
  for (auto& [cls, ring] : rings_) {
    if (cls == keep) continue;
    for (std::uint32_t i : ring.free_list) {
      const Slot& s = *ring.slots[i];
      if (victim_ring == nullptr || s.claim_seq < victim_ring->slots[victim]->claim_seq) {
        victim_ring = &ring;
        victim_class = cls;
        victim = i;
      }
    }
  }
  if (victim_ring == nullptr) return false;
  Slot& s = *victim_ring->slots[victim];
  auto& fl = victim_ring->free_list;
  fl.erase(std::find(fl.begin(), fl.end(), victim));
  give_gap_locked(static_cast<std::uint64_t>(s.host - host_.data()), victim_class);
  spare_engine_ids_.push_back(s.engine_id);
  s.host = nullptr;
  victim_ring->retired.push_back(victim);
  carved_bytes_ -= victim_class;
  slots_.fetch_sub(1, std::memory_order_relaxed);
  ++reclaimed_;
  if (victim_ring->live() == 0) rings_.erase(victim_class);  // its tickets were all collected
  return true;
}

Status ReadbackRing::ring_full_locked(std::uint64_t c, ClassRing& ring) {
  stalls_.fetch_add(1, std::memory_order_relaxed);
  // Poll the oldest PENDING slot once: it may have completed (it then becomes READY, still not reusable).
  Slot* oldest = nullptr;
  std::uint32_t oldest_index = 0;
  for (std::uint32_t i = 0; i < ring.slots.size(); ++i) {
    Slot& s = *ring.slots[i];
    if (static_cast<SlotState>(s.state.load()) == SlotState::kPending &&
        (oldest == nullptr || s.claim_seq < oldest->claim_seq)) {
      oldest = &s;
      oldest_index = i;
    }
  }
  if (oldest != nullptr) refresh_locked(c, oldest_index, *oldest);
  const std::string head =
      "RingFull: no FREE slot in class " + std::to_string(c) + " (" + std::to_string(ring.live()) +
      " slots, cap " + std::to_string(options_.max_slots_per_class) + ", budget " +
      std::to_string(carved_bytes_) + "/" + std::to_string(options_.budget_bytes) + " bytes): ";
  for (SlotState want : {SlotState::kReady, SlotState::kError, SlotState::kPending}) {
    for (std::uint32_t i = 0; i < ring.slots.size(); ++i) {
      if (static_cast<SlotState>(ring.slots[i]->state.load()) != want) continue;
      switch (want) {
        case SlotState::kReady:
          return {Code::kOutOfMemory, head + slot_name(c, i) +
                                          " is READY and uncollected: collect tickets before recording more"};
        case SlotState::kError:
          return {Code::kOutOfMemory,
                  head + slot_name(c, i) +
                      " is ERROR and uncollected: collect its ticket to receive the error "
                      "before the slot can be reused"};
        default:
          return {Code::kOutOfMemory,
                  head + slot_name(c, i) +
                      " is PENDING (copy in flight): wait for and collect tickets, or back "
                      "off"};
      }
    }
  }
  std::uint64_t widest_gap = 0;
  for (const auto& [offset, bytes] : gaps_) widest_gap = std::max(widest_gap, bytes);
  return {Code::kOutOfMemory,
          head + "the rest of the readback budget is held by " +
              std::to_string(in_flight_.load(std::memory_order_relaxed)) +
              " uncollected slots of other classes (widest free gap " + std::to_string(widest_gap) +
              " bytes): collect their tickets, or raise FACETRACE_READBACK_BUDGET_MB"};
}

Expected<ReadbackRing::Slot*> ReadbackRing::find_locked(const RingTicket& t, ClassRing** out) const {
  auto it = rings_.find(t.size_class);
  if (it == rings_.end() || t.slot >= it->second.slots.size())
    return invalid_argument("unknown ticket: " + slot_name(t.size_class, t.slot) + " does not exist");
  Slot* s = it->second.slots[t.slot].get();
  if (s->generation != t.generation)
    return invalid_argument("stale ticket: " + slot_name(t.size_class, t.slot) + " is at generation " +
                            std::to_string(s->generation) + ", the ticket is for generation " +
                            std::to_string(t.generation));
  if (static_cast<SlotState>(s->state.load()) == SlotState::kFree)
    return invalid_argument("stale ticket: " + slot_name(t.size_class, t.slot) +
                            " is FREE: this ticket was already collected");
  if (s->byte_len != t.byte_len)  // a forged or corrupted ticket would lend bytes past the slot's copy
    return invalid_argument("bad ticket: " + slot_name(t.size_class, t.slot) + " holds " +
                            std::to_string(s->byte_len) + " bytes, the ticket says " + std::to_string(t.byte_len));
  if (out != nullptr) *out = const_cast<ClassRing*>(&it->second);
  return s;
}

PollResult ReadbackRing::refresh_locked(std::uint64_t c, std::uint32_t index, Slot& s) {
  const auto st = static_cast<SlotState>(s.state.load(std::memory_order_acquire));
  if (st == SlotState::kReady) return PollResult::kReady;
  if (st == SlotState::kError) return PollResult::kError;
  const int q = engine_->query(s.engine_id);
  if (q == 0) {
    s.state.store(static_cast<std::uint8_t>(SlotState::kReady), std::memory_order_release);
    return PollResult::kReady;
  }
  if (q == 600) return PollResult::kPending;
  s.error_code = q;
  s.state.store(static_cast<std::uint8_t>(SlotState::kError), std::memory_order_release);
  if (classify_cuda_error(q) == ErrorClass::kSticky) {
    const Status lost = cuda_status(q, "cudaEventQuery(" + slot_name(c, index) + ")", __FILE__, __LINE__);
    if (!lost_.load()) lost_reason_ = lost.what();
    lost_.store(true, std::memory_order_release);
  }
  return PollResult::kError;
}

void ReadbackRing::free_locked(ClassRing& ring, std::uint32_t index, Slot& s) {
  s.state.store(static_cast<std::uint8_t>(SlotState::kFree), std::memory_order_release);
  ring.free_list.push_back(index);
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
}

Expected<PollResult> ReadbackRing::poll(const RingTicket& t) {
  std::lock_guard lock(mu_);
  auto s = find_locked(t);
  if (!s) return s.status();
  return refresh_locked(t.size_class, t.slot, **s);
}

Status ReadbackRing::with_mapped(const RingTicket& t,
                                 const std::function<void(std::span<const std::byte>)>& visitor) {
  std::lock_guard lock(mu_);
  ClassRing* ring = nullptr;
  auto found = find_locked(t, &ring);
  if (!found) return found.status();
  Slot& s = **found;
  switch (refresh_locked(t.size_class, t.slot, s)) {
    case PollResult::kPending:
      return invalid_argument(
          slot_name(t.size_class, t.slot) +
          " is PENDING: its bytes are not valid before the completion event; poll or wait "
          "first");
    case PollResult::kReady:
      visitor(std::span<const std::byte>(s.host, static_cast<std::size_t>(s.byte_len)));
      free_locked(*ring, t.slot, s);
      return {};
    case PollResult::kError: {
      const int code = s.error_code;
      free_locked(*ring, t.slot, s);
      Status err = cuda_status(code, "cudaEventQuery", __FILE__, __LINE__);
      return err.with_context(slot_name(t.size_class, t.slot) + " is ERROR, collected as its error");
    }
  }
  return internal_error("unreachable");
}

Status ReadbackRing::wait(const RingTicket& t, std::chrono::steady_clock::time_point deadline) {
  auto backoff = std::chrono::microseconds(32);  // docs/design/runtime.md §1 wait: 32 µs doubling to 1 ms
  // Poll without sleeping for the first 20 µs: a sleep's timer slack is longer than most copies take.
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
  for (;;) {
    auto r = poll(t);
    if (!r) return r.status();
    if (*r == PollResult::kReady) return {};
    if (*r == PollResult::kError) {
      std::lock_guard lock(mu_);
      auto s = find_locked(t);
      const int code = s ? (*s)->error_code : 999;
      return {classify_cuda_error(code) == ErrorClass::kSticky ? Code::kDeviceLost : Code::kDeclined,
              slot_name(t.size_class, t.slot) + " is ERROR: " + std::string(cuda_error_name(code)) + " (" +
                  std::to_string(code) + ")"};
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string why = "readback of " + slot_name(t.size_class, t.slot) +
                        " did not complete before its deadline: the device hangs";
      mark_lost(why);
      return {Code::kDeviceLost, why};
    }
    if (std::chrono::steady_clock::now() < spin_until) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min<std::chrono::microseconds>(backoff * 2, std::chrono::milliseconds(1));
  }
}

Expected<std::uint64_t> ReadbackRing::host_offset(const RingTicket& t) const {
  std::lock_guard lock(mu_);
  auto s = find_locked(t);
  if (!s) return s.status();
  return static_cast<std::uint64_t>((*s)->host - host_.data());
}

}  // namespace facetrace::runtime
