/// @file
/// SharedArena: memfd region shared with the GPU child; first-fit allocator over the transfer region.
#include "facetrace/runtime/arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <string>

namespace facetrace::runtime {
namespace {

constexpr std::uint64_t kRound = 2ull << 20;
constexpr std::uint64_t kAlign = 256;

std::uint64_t round_up(std::uint64_t v, std::uint64_t m) { return (v + m - 1) / m * m; }

}  // namespace

ArenaBlock::ArenaBlock(ArenaBlock&& o) noexcept : arena_(o.arena_), range_(o.range_) { o.arena_ = nullptr; }

ArenaBlock& ArenaBlock::operator=(ArenaBlock&& o) noexcept {
  if (this != &o) {
    if (arena_ != nullptr) arena_->free_block(range_);
    arena_ = o.arena_;
    range_ = o.range_;
    o.arena_ = nullptr;
  }
  return *this;
}

ArenaBlock::~ArenaBlock() {
  if (arena_ != nullptr) arena_->free_block(range_);
}

std::span<std::byte> ArenaBlock::bytes() const {
  if (arena_ == nullptr) return {};
  return arena_->view(range_);
}

Expected<std::shared_ptr<SharedArena>> SharedArena::create(std::uint64_t ring_bytes,
                                                           std::uint64_t transfer_bytes) {
  const int fd = memfd_create("facetrace-arena", MFD_CLOEXEC);
  if (fd < 0) return io_error(std::string("memfd_create failed: ") + std::strerror(errno));
  const std::uint64_t total = round_up(ring_bytes, kRound) + round_up(transfer_bytes, kRound);
  if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
    const int e = errno;
    close(fd);
    return io_error("ftruncate of the arena to " + std::to_string(total) +
                    " bytes failed: " + std::strerror(e));
  }
  return from_fd(fd, ring_bytes, transfer_bytes);
}

Expected<std::shared_ptr<SharedArena>> SharedArena::from_fd(int fd, std::uint64_t ring_bytes,
                                                            std::uint64_t transfer_bytes) {
  std::shared_ptr<SharedArena> a(new SharedArena());
  a->fd_ = fd;
  a->ring_bytes_ = round_up(ring_bytes, kRound);
  a->transfer_bytes_ = round_up(transfer_bytes, kRound);
  void* p = mmap(nullptr, a->size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return io_error("mmap of the " + std::to_string(a->size()) +
                    "-byte arena failed: " + std::strerror(errno));
  a->base_ = static_cast<std::byte*>(p);
  if (a->transfer_bytes_ > 0) a->free_[a->ring_bytes_] = a->transfer_bytes_;
  return a;
}

SharedArena::~SharedArena() {
  if (base_ != nullptr) munmap(base_, size());
  if (fd_ >= 0) close(fd_);
}

std::span<std::byte> SharedArena::view(ArenaRange r) const {
  if (r.size == 0 || r.offset > size() || r.size > size() - r.offset) return {};
  return {base_ + r.offset, static_cast<std::size_t>(r.size)};
}

Expected<ArenaBlock> SharedArena::allocate(std::uint64_t bytes) {
  const std::uint64_t need = round_up(bytes == 0 ? 1 : bytes, kAlign);
  std::lock_guard lock(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const std::uint64_t off = it->first;
    const std::uint64_t rest = it->second - need;
    free_.erase(it);
    if (rest > 0) free_[off + need] = rest;
    in_use_ += need;
    return ArenaBlock(this, ArenaRange{off, need});
  }
  return Status(Code::kOutOfMemory, "shared arena: no free block of " + std::to_string(need) + " bytes (" +
                                        std::to_string(in_use_) + " of " + std::to_string(transfer_bytes_) +
                                        " in use; raise FACETRACE_TRANSFER_ARENA_MB)");
}

std::uint64_t SharedArena::bytes_in_use() const {
  std::lock_guard lock(mu_);
  return in_use_;
}

void SharedArena::free_block(ArenaRange r) {
  std::lock_guard lock(mu_);
  in_use_ -= r.size;
  auto [it, inserted] = free_.emplace(r.offset, r.size);
  if (!inserted) return;
  auto next = std::next(it);
  if (next != free_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_.erase(it);
    }
  }
}

}  // namespace facetrace::runtime
