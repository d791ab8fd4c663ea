/// @file
/// Private: the backend's pooled host scratch (docs/design/tracer.md §10.3). A request leases a buffer from the pool for
/// its lifetime; the lease gives it back when destroyed, on every path (no manual returns).
#pragma once

#include <cstddef>
#include <mutex>
#include <span>
#include <vector>

namespace facetrace::runtime {

class ScratchPool;

/// A scratch buffer on loan from a ScratchPool. Move-only; returned to the pool by the destructor.
class ScratchLease {
 public:
  ScratchLease(ScratchLease&& o) noexcept;
  ScratchLease& operator=(ScratchLease&& o) noexcept;
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  ~ScratchLease();

  std::span<std::byte> bytes() { return buffer_; }
  std::span<const std::byte> bytes() const { return buffer_; }

 private:
  friend class ScratchPool;
  ScratchLease(ScratchPool* pool, std::vector<std::byte> buffer) : pool_(pool), buffer_(std::move(buffer)) {}
  void give_back() noexcept;

  ScratchPool* pool_ = nullptr;
  std::vector<std::byte> buffer_;
};

/// At most `max_pooled` buffers kept between requests; the rest are freed. Thread-safe.
class ScratchPool {
 public:
  explicit ScratchPool(std::size_t max_pooled) : max_pooled_(max_pooled) { pool_.reserve(max_pooled); }
  ScratchPool(const ScratchPool&) = delete;
  ScratchPool& operator=(const ScratchPool&) = delete;

  /// A buffer of exactly `bytes` (a pooled one resized when there is one; contents unspecified).
  ScratchLease take(std::size_t bytes);
  /// Buffers pooled now.
  std::size_t pooled() const;

 private:
  friend class ScratchLease;
  void put(std::vector<std::byte> buffer) noexcept;  // never allocates: the pool's capacity is reserved

  const std::size_t max_pooled_;
  mutable std::mutex mu_;
  std::vector<std::vector<std::byte>> pool_;
};

}  // namespace facetrace::runtime
