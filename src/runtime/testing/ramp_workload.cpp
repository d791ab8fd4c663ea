/// @file
/// RampWorkload: the runtime's test workload over ops::kFillRamp.
#include "facetrace/runtime/testing/ramp_workload.h"

#include <algorithm>
#include <cstring>

namespace facetrace::runtime {

RampWorkload::RampWorkload(std::span<float> out, float base, float step, std::uint64_t chunk)
    : out_(out), base_(base), step_(step), chunk_(std::max<std::uint64_t>(chunk, 1)) {}

void RampWorkload::seed_scratch(std::span<std::byte> scratch) {
  std::memcpy(scratch.data(), out_.data(), out_.size_bytes());
}

Status RampWorkload::add_ticket(Executor& ex, std::span<std::byte> scratch, bool discard) {
  if (!in_flight_) return {};
  const RingTicket t = *in_flight_;
  const std::uint64_t first = in_flight_first_;
  in_flight_.reset();
  return ex.collect(t, std::chrono::milliseconds(10000), [&](std::span<const std::byte> bytes) {
    if (discard) return;
    auto* dst = reinterpret_cast<float*>(scratch.data()) + first;
    const auto* src = reinterpret_cast<const float*>(bytes.data());
    for (std::size_t i = 0; i < bytes.size() / sizeof(float); ++i) dst[i] += src[i];
  });
}

Expected<bool> RampWorkload::run_chunk(Executor& ex, std::span<std::byte> scratch) {
  const std::uint64_t total = out_.size();
  if (next_ >= total) {
    FT_TRY(add_ticket(ex, scratch, false));
    return false;
  }
  FillRampArgs a;
  a.first = next_;
  a.count = std::min<std::uint64_t>(chunk_, total - next_);
  a.base = base_;
  a.step = step_;
  a.buffer = static_cast<std::uint32_t>(chunks_run_ % 2);
  OpCall call;
  call.op = ops::kFillRamp;
  call.args = std::as_bytes(std::span(&a, 1));
  call.deadline = std::chrono::milliseconds(10000);
  auto reply = ex.invoke(call);
  if (!reply) return reply.status();
  if (reply->tickets.size() != 1) return internal_error("fill_ramp returned no ticket");
  // One chunk in flight: collect the previous one while this one runs.
  FT_TRY(add_ticket(ex, scratch, false));
  in_flight_ = reply->tickets[0];
  in_flight_first_ = a.first;
  next_ += a.count;
  ++chunks_run_;
  return next_ < total;
}

Status RampWorkload::drain(Executor& ex, std::span<std::byte> scratch, bool discard) {
  return add_ticket(ex, scratch, discard);
}

void RampWorkload::commit(std::span<const std::byte> scratch) {
  std::memcpy(out_.data(), scratch.data(), out_.size_bytes());
}

}  // namespace facetrace::runtime
