/// @file
/// Test and benchmark seam: an Accelerator that forwards to another and counts the programs it ran and the runs it
/// handed back to the CPU (declined or failed), so that a GPU test or a timed GPU row cannot pass on the CPU
/// fallback unnoticed (docs/design/faces.md §4). detect_yunet is not forwarded: the default declines, so YuNet
/// detection takes the counted run_program path.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "facetrace/faces/accelerator.h"

namespace facetrace::faces::testing {

class CountingAccelerator final : public Accelerator {
 public:
  explicit CountingAccelerator(std::shared_ptr<Accelerator> inner) : inner_(std::move(inner)) {}
  std::optional<Expected<std::vector<float>>> conv(const ConvJob& job, std::span<const float> input) override {
    return inner_->conv(job, input);
  }
  std::optional<Expected<ProgramOutputs>> run_program(const Program& program,
                                                      std::span<const std::span<const float>> inputs) override {
    auto r = inner_->run_program(program, inputs);
    if (r && r->ok())
      ++ran;
    else
      ++fell_back;
    return r;
  }
  std::string device() const override { return inner_->device(); }
  Precision precision() const override { return inner_->precision(); }
  std::uint64_t resident_bytes() const override { return inner_->resident_bytes(); }
  std::uint64_t generation() const override { return inner_->generation(); }

  std::atomic<std::uint64_t> ran{0}, fell_back{0};

 private:
  std::shared_ptr<Accelerator> inner_;
};

}  // namespace facetrace::faces::testing
