/// @file
/// RampWorkload: the runtime's own test workload (ops::kFillRamp). Adds base + step·i to every element of a
/// float buffer, `chunk` elements per chunk, with one chunk in flight. A worked example of the Workload seam.
#pragma once

#include <optional>
#include <span>

#include "facetrace/runtime/backend.h"

namespace facetrace::runtime {

class RampWorkload final : public Workload {
 public:
  /// `out` must outlive the request; it is written only on Done.
  RampWorkload(std::span<float> out, float base, float step, std::uint64_t chunk);
  std::size_t scratch_bytes() const override { return out_.size_bytes(); }
  void seed_scratch(std::span<std::byte> scratch) override;
  Expected<bool> run_chunk(Executor& ex, std::span<std::byte> scratch) override;
  Status drain(Executor& ex, std::span<std::byte> scratch, bool discard) override;
  void commit(std::span<const std::byte> scratch) override;
  /// Chunks run so far.
  int chunks_run() const { return chunks_run_; }

 private:
  Status add_ticket(Executor& ex, std::span<std::byte> scratch, bool discard);
  std::span<float> out_;
  float base_, step_;
  std::uint64_t chunk_;
  std::uint64_t next_ = 0;
  int chunks_run_ = 0;
  std::optional<RingTicket> in_flight_;
  std::uint64_t in_flight_first_ = 0;
};

}  // namespace facetrace::runtime
