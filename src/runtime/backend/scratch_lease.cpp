/// @file
/// ScratchPool and ScratchLease: pooled host scratch returned by the lease's destructor.
#include "backend/scratch_lease.h"

#include <utility>

namespace facetrace::runtime {

ScratchLease::ScratchLease(ScratchLease&& o) noexcept
    : pool_(std::exchange(o.pool_, nullptr)), buffer_(std::move(o.buffer_)) {}

ScratchLease& ScratchLease::operator=(ScratchLease&& o) noexcept {
  if (this != &o) {
    give_back();
    pool_ = std::exchange(o.pool_, nullptr);
    buffer_ = std::move(o.buffer_);
  }
  return *this;
}

ScratchLease::~ScratchLease() { give_back(); }

void ScratchLease::give_back() noexcept {
  if (pool_ != nullptr && buffer_.capacity() != 0) pool_->put(std::move(buffer_));
  pool_ = nullptr;
  buffer_ = {};
}

ScratchLease ScratchPool::take(std::size_t bytes) {
  std::vector<std::byte> buffer;
  {
    std::lock_guard lock(mu_);
    if (!pool_.empty()) {
      buffer = std::move(pool_.back());
      pool_.pop_back();
    }
  }
  buffer.resize(bytes);
  return ScratchLease(this, std::move(buffer));
}

std::size_t ScratchPool::pooled() const {
  std::lock_guard lock(mu_);
  return pool_.size();
}

void ScratchPool::put(std::vector<std::byte> buffer) noexcept {
  std::lock_guard lock(mu_);
  if (pool_.size() < max_pooled_) pool_.push_back(std::move(buffer));
}

}  // namespace facetrace::runtime
