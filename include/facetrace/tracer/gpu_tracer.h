/// @file
/// The GPU tracer on the device runtime: one request = (scene, first_sample, samples) run as chunks over
/// pixels through runtime::GpuBackend (docs/design/tracer.md §10). The film is written only on Done.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "facetrace/runtime/backend.h"
#include "facetrace/tracer/film.h"
#include "facetrace/tracer/scene.h"

namespace facetrace::tracer {

/// Chunk sizing (docs/design/tracer.md §10.2). Defaults are the spec's.
struct GpuChunkOptions {
  std::uint64_t first_chunk_tuples = 1000000;  ///< calibration launch
  double target_ms = 150.0;                    ///< later chunks aim at this duration (EMA α = 0.3)
  std::uint32_t max_chunk_pixels = 0;          ///< > 0 forces at most this many pixels per chunk (tests)
  bool return_tuples = false;                  ///< test mode: keep every tuple's XYZ (per-sample checks)
  int fault_after_chunks = -1;                 ///< test mode: inject a real device fault before chunk k
  /// Megakernel launch configuration by name (tuning; the names are in docs/gpu-tracer.md). Empty: the one
  /// FACETRACE_TRACER_KERNEL names (read once per process), else the default. An unknown name here declines.
  std::string kernel;
};

/// One tracer request as a runtime Workload. Not thread-safe; one request per object.
class TraceWorkload final : public runtime::Workload {
 public:
  /// `film` must outlive the request and match the scene size; it is written only by commit() (Done).
  TraceWorkload(const Scene& scene, std::uint32_t first_sample, std::uint32_t samples, Film& film,
                GpuChunkOptions options = {});
  ~TraceWorkload() override;

  Status can_run(const runtime::DeviceInfo& device) override;
  std::size_t scratch_bytes() const override;
  void seed_scratch(std::span<std::byte> scratch) override;
  Expected<bool> run_chunk(runtime::Executor& ex, std::span<std::byte> scratch) override;
  Status drain(runtime::Executor& ex, std::span<std::byte> scratch, bool discard) override;
  void commit(std::span<const std::byte> scratch) override;

  /// Chunks launched so far.
  int chunks() const { return chunks_; }
  /// Test mode (return_tuples): XYZ of every tuple, pixel-major, ascending sample; 3 floats per tuple.
  const std::vector<float>& tuples() const { return tuples_; }
  /// The moving average of device time per tuple, ns (0 before the first chunk finished).
  double ns_per_tuple() const { return ema_ns_per_tuple_; }

 private:
  struct InFlight;
  Status collect(runtime::Executor& ex, std::span<std::byte> scratch, bool discard);
  std::uint32_t next_chunk_pixels() const;

  Scene scene_;
  Status tier_;
  std::vector<std::byte> args_;  // TraceChunkArgs with the scene filled in
  std::uint32_t first_sample_, samples_;
  Film& film_;
  GpuChunkOptions options_;
  std::uint32_t next_pixel_ = 0;
  int chunks_ = 0;
  double ema_ns_per_tuple_ = 0.0;
  std::chrono::steady_clock::time_point last_done_{};
  std::unique_ptr<InFlight> in_flight_;  // the one chunk in flight (holds its arena block)
  std::vector<float> sums_;  // the request's per-pixel sums (3 floats each), swapped into the film on Done
  std::vector<float> tuples_;
};

}  // namespace facetrace::tracer
