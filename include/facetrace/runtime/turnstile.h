/// @file
/// Turnstile: FIFO ticket lock that shares the GPU between requests in turns of kChunksPerTurn chunks
/// (docs/design/tracer.md §10.3).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace facetrace::runtime {

/// Chunks a request may run per turn before it rejoins the back of the queue (about 300 ms of GPU work).
inline constexpr int kChunksPerTurn = 2;  // docs/design/tracer.md §10.3

/// FIFO ticket lock. Thread-safe. A ticket taken must be waited for (tickets are served strictly in order).
class Turnstile {
 public:
  /// Holding a Turn means holding the GPU; destroying it admits the next ticket. Move-only.
  class [[nodiscard]] Turn {
   public:
    Turn(Turn&& other) noexcept : owner_(other.owner_), ticket_(other.ticket_) { other.owner_ = nullptr; }
    Turn& operator=(Turn&&) = delete;
    Turn(const Turn&) = delete;
    ~Turn();
    std::uint64_t ticket() const { return ticket_; }

   private:
    friend class Turnstile;
    Turn(Turnstile* owner, std::uint64_t ticket) : owner_(owner), ticket_(ticket) {}
    Turnstile* owner_;
    std::uint64_t ticket_;
  };

  /// Takes the next ticket (FIFO position).
  std::uint64_t take_ticket();
  /// Blocks until `ticket` is served.
  Turn wait_for_turn(std::uint64_t ticket);
  /// take_ticket + wait_for_turn.
  Turn enter() { return wait_for_turn(take_ticket()); }
  /// True when some ticket was taken after `ticket` and is waiting.
  bool has_waiters_behind(std::uint64_t ticket) const;

 private:
  void release(std::uint64_t ticket);
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::uint64_t next_ticket_ = 0;
  std::uint64_t now_serving_ = 0;
};

}  // namespace facetrace::runtime
