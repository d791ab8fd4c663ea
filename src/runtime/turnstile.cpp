/// @file
/// Turnstile: FIFO ticket lock.
#include "facetrace/runtime/turnstile.h"

namespace facetrace::runtime {

Turnstile::Turn::~Turn() {
  if (owner_ != nullptr) owner_->release(ticket_);
}

std::uint64_t Turnstile::take_ticket() {
  std::lock_guard lock(mu_);
  return next_ticket_++;
}

Turnstile::Turn Turnstile::wait_for_turn(std::uint64_t ticket) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return now_serving_ == ticket; });
  return Turn(this, ticket);
}

bool Turnstile::has_waiters_behind(std::uint64_t ticket) const {
  std::lock_guard lock(mu_);
  return next_ticket_ > ticket + 1;
}

void Turnstile::release(std::uint64_t ticket) {
  {
    std::lock_guard lock(mu_);
    if (now_serving_ == ticket) ++now_serving_;
  }
  cv_.notify_all();
}

}  // namespace facetrace::runtime
