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
  /// > 0: device time per tuple (ns) known from an earlier request of the same scene, so the first chunks are
  /// sized from it instead of a calibration launch (the render loop passes its last request's ns_per_tuple()).
  double ns_per_tuple_hint = 0.0;
  /// > 0: the slowest device time per tuple (ns) of a chunk of an earlier whole request of this render on this
  /// GPU child (the render loop passes peak_ns_per_tuple()); chunk waits then get the hang deadline derived from
  /// it (runtime::hang_deadline, docs/design/tracer.md §10.2) instead of the start-up one.
  double hang_ns_per_tuple_hint = 0.0;
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

  /// Chains this request after `previous`: the same film, and the sample range just before this one, run in one
  /// batch (GpuBackend::accumulate_batch) so that no drain separates them (docs/design/tracer.md §10.7). While
  /// `previous` has issued its last chunk but not yet committed, this request's chunks read their seeds from
  /// previous's collected sums instead of the film; if `previous` ends without Done, this request declines
  /// (its seeds would lack previous's samples), so a batch commits a prefix of its requests. `previous` must
  /// outlive this request. Call before the batch starts.
  void follow(TraceWorkload& previous) { previous_ = &previous; }

  Status can_run(const runtime::DeviceInfo& device) override;
  /// An HDR scene's map goes to the GPU child once, as a resident (docs/design/tracer.md §6.1).
  Status begin_turn(runtime::Executor& ex) override;
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
  /// The slowest device time per tuple of any chunk so far (or the hang hint if larger), ns.
  double peak_ns_per_tuple() const { return peak_ns_per_tuple_; }

 private:
  struct InFlight;
  /// Where a request stands, for the request that follows it (follow()).
  enum class Phase : std::uint8_t {
    kIdle,       ///< not started (or declined before its first chunk)
    kRunning,    ///< issuing chunks
    kIssued,     ///< last chunk issued, not yet drained: its sums are complete but for that chunk
    kCommitted,  ///< Done: the film holds its sums
    kEnded,      ///< ended without Done (failed, discarded)
  };
  Status collect(runtime::Executor& ex, std::span<std::byte> scratch, bool discard);
  std::uint32_t next_chunk_pixels() const;
  /// The seeds of pixels [next_pixel_, next_pixel_ + pixels): the film's, or previous's collected sums while
  /// it is pending (it may shorten `pixels` or collect previous's last chunk first). Non-ok: previous ended
  /// without Done, or collecting its chunk failed.
  Expected<const float*> seeds(runtime::Executor& ex, std::uint32_t& pixels);
  /// Non-ok once this request read seeds from a previous request that then ended without Done.
  Status check_previous() const;

  Scene scene_;
  Status tier_;
  std::string env_resident_;     ///< an HDR scene: the map's resident name (empty: the analytic environments)
  std::vector<std::byte> args_;  // TraceChunkArgs with the scene filled in
  std::uint32_t first_sample_, samples_;
  Film& film_;
  GpuChunkOptions options_;
  std::uint32_t next_pixel_ = 0;
  int chunks_ = 0;
  double ema_ns_per_tuple_ = 0.0;
  double peak_ns_per_tuple_ = 0.0;
  std::chrono::steady_clock::time_point last_done_{};
  std::unique_ptr<InFlight> in_flight_;  // the one chunk in flight (holds its arena block)
  TraceWorkload* previous_ = nullptr;    // follow()
  bool seeded_from_previous_ = false;
  Phase phase_ = Phase::kIdle;
  std::span<std::byte> scratch_;  // the backend's scratch of this request (a follower may collect into it)
  Status collect_error_;          // a follower's collect of our last chunk failed: drain reports it
  std::vector<float> sums_;  // the request's per-pixel sums (3 floats each), swapped into the film on Done
  std::vector<float> tuples_;
};

}  // namespace facetrace::tracer
