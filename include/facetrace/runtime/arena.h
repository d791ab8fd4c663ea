/// @file
/// SharedArena: one memfd-backed host region shared by the parent and the GPU child (docs/design/runtime.md §6). The
/// child registers all of it with cudaHostRegister; its first `ring_bytes` hold the readback slots, the rest
/// is the transfer region the parent hands out in blocks for op inputs and outputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>

#include "facetrace/core/status.h"

namespace facetrace::runtime {

/// A byte range inside the arena (offset from its base). Plain data; travels in protocol messages.
struct ArenaRange {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
};

class SharedArena;

/// A block of the transfer region, returned to the arena when destroyed. Move-only.
class ArenaBlock {
 public:
  ArenaBlock() = default;
  ArenaBlock(ArenaBlock&& o) noexcept;
  ArenaBlock& operator=(ArenaBlock&& o) noexcept;
  ArenaBlock(const ArenaBlock&) = delete;
  ArenaBlock& operator=(const ArenaBlock&) = delete;
  ~ArenaBlock();
  /// The range to pass in an OpCall.
  ArenaRange range() const { return range_; }
  /// Host view (the parent writes inputs and reads outputs here).
  std::span<std::byte> bytes() const;
  bool empty() const { return arena_ == nullptr; }

 private:
  friend class SharedArena;
  ArenaBlock(SharedArena* arena, ArenaRange r) : arena_(arena), range_(r) {}
  SharedArena* arena_ = nullptr;
  ArenaRange range_{};
};

/// The shared region. Thread-safe allocation. Lives as long as the executor (and across child respawns).
class SharedArena {
 public:
  /// Creates a memfd of `ring_bytes + transfer_bytes` (each rounded up to 2 MiB) and maps it.
  static Expected<std::shared_ptr<SharedArena>> create(std::uint64_t ring_bytes,
                                                       std::uint64_t transfer_bytes);
  /// Maps an inherited memfd (the child side). Takes ownership of `fd`.
  static Expected<std::shared_ptr<SharedArena>> from_fd(int fd, std::uint64_t ring_bytes,
                                                        std::uint64_t transfer_bytes);
  ~SharedArena();
  SharedArena(const SharedArena&) = delete;
  SharedArena& operator=(const SharedArena&) = delete;

  std::byte* base() const { return base_; }
  std::uint64_t size() const { return ring_bytes_ + transfer_bytes_; }
  /// The readback-slot region [0, ring_bytes).
  std::span<std::byte> ring_region() const { return {base_, static_cast<std::size_t>(ring_bytes_)}; }
  std::uint64_t ring_bytes() const { return ring_bytes_; }
  std::uint64_t transfer_bytes() const { return transfer_bytes_; }
  /// The memfd (the parent passes it to the child).
  int fd() const { return fd_; }
  /// View of `r`, or an empty span when it lies outside the arena.
  std::span<std::byte> view(ArenaRange r) const;

  /// A block of at least `bytes` (256-byte aligned) from the transfer region; kOutOfMemory when full.
  Expected<ArenaBlock> allocate(std::uint64_t bytes);
  /// Bytes currently handed out.
  std::uint64_t bytes_in_use() const;

 private:
  friend class ArenaBlock;
  SharedArena() = default;
  void free_block(ArenaRange r);
  int fd_ = -1;
  std::byte* base_ = nullptr;
  std::uint64_t ring_bytes_ = 0;
  std::uint64_t transfer_bytes_ = 0;
  mutable std::mutex mu_;
  std::map<std::uint64_t, std::uint64_t> free_;  // offset -> size, coalesced
  std::uint64_t in_use_ = 0;
};

}  // namespace facetrace::runtime
