/// @file
/// The render loop: a GPU lane and a CPU lane over one sample cursor (docs/design/tracer.md §10.7). The GPU lane
/// runs requests through runtime::GpuBackend when asked and able; a request lost with the device goes back to the
/// cursor and the CPU lane takes small slices until the replacement GPU child is up; any other declined request is
/// traced on the CPU — nothing lost, nothing counted twice, every range committed in ascending sample order.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "facetrace/core/status.h"
#include "facetrace/runtime/backend.h"
#include "facetrace/tracer/film.h"
#include "facetrace/tracer/gpu_tracer.h"
#include "facetrace/tracer/scene.h"

namespace facetrace::tracer {

/// Which device renders.
enum class RenderDevice : std::uint8_t {
  kAuto,  ///< the GPU when one is usable, else the CPU
  kCpu,   ///< the CPU tracer only
  kGpu,   ///< the GPU only: an error when there is no usable GPU, the scene needs a tier the GPU lacks, or a
          ///< request is declined for any reason but a device loss (those alone fall back to the CPU)
};

/// Parses "auto" / "cpu" / "gpu"; kInvalidArgument naming the value otherwise.
Expected<RenderDevice> parse_render_device(const std::string& name);

struct RenderOptions {
  RenderDevice device = RenderDevice::kAuto;
  unsigned threads = 0;                           ///< CPU threads (0 = all)
  const std::atomic<bool>* cancel = nullptr;      ///< checked before every GPU chunk and between CPU tiles
  std::function<void(double fraction)> progress;  ///< overall fraction done, from the rendering thread(s)
  /// 0: adaptive requests (100 ms target, ≤ 4× growth, ≤ 2048; once sized, run as batches of chained
  /// requests, docs/design/tracer.md §10.7). > 0: every request this size (the last one the rest).
  std::uint32_t samples_per_request = 0;
  /// Hybrid mode (off by default): while each batch of chained GPU requests runs, a CPU lane traces the samples
  /// right after the batch on `hybrid_threads` threads, one sample at a time, and they are committed after the
  /// batch in ascending order: the additions of tracing them onto the film directly (docs/design/tracer.md §10.7).
  bool hybrid = false;
  unsigned hybrid_threads = 0;  ///< 0: all hardware threads but two (the GPU lane's host work keeps those)
  /// The lane stops after two batches in a row where the GPU alone (at its rate without the lane) would not
  /// have taken more than this many times what the batch and the lane took, or once one CPU sample takes longer
  /// than its share of a batch (docs/design/tracer.md §10.7); 0 keeps it to the end, one sample or more per batch.
  double hybrid_min_gain = 1.0;
  GpuChunkOptions chunk;                   ///< GPU chunk sizing (tests may force tiny chunks)
  runtime::GpuBackend* backend = nullptr;  ///< null: shared_gpu_backend()
};

/// What happened.
struct RenderReport {
  std::string device;             ///< "gpu: NVIDIA H200 (...)", "cpu", or "gpu+cpu" after fallbacks
  std::uint64_t gpu_samples = 0;  ///< samples per pixel rendered on the GPU
  std::uint64_t cpu_samples = 0;  ///< samples per pixel rendered on the CPU
  /// Hybrid mode: why the CPU lane stopped before the end (it did not pay for itself next to the GPU,
  /// docs/design/tracer.md §10.7); empty while it ran to the end or was not asked for.
  std::string hybrid_stopped;
  std::uint32_t declined = 0;     ///< GPU requests declined
  /// Of those, declined because the device was lost: their samples went back to the cursor (CPU slices until the
  /// replacement child was up, then the GPU again). The others were traced on the CPU whole.
  std::uint32_t declined_by_loss = 0;
  std::vector<std::string> decline_reasons;    ///< one per declined request: "samples [a, b): why"
  std::vector<runtime::Outcome> outcomes;      ///< one per GPU request attempted, in order
  std::vector<std::uint32_t> request_samples;  ///< every GPU request's or CPU slice's samples, in order
  std::vector<bool> request_on_gpu;            ///< parallel to request_samples: the GPU rendered it
  double seconds = 0;
  /// Of `seconds`: getting the GPU backend (the process's first use starts the GPU child; ≈ 0 afterwards).
  double gpu_start_seconds = 0;
};

/// Adds samples [first_sample, first_sample + samples) of every pixel to `film` (additive, ascending order
/// per pixel). Errors: kInvalidArgument (scene, film size), kNotSupported (Tier 2/3 scene, or --device gpu
/// with no usable GPU: the message says why), kDeclined (--device gpu and the GPU declined a request for a
/// reason other than a device loss: the message names the samples and why), kCancelled (film then holds a prefix of whole requests plus
/// possibly a partial CPU request: discard it).
Expected<RenderReport> render(const Scene& scene, std::uint64_t first_sample, std::uint32_t samples,
                              Film& film, const RenderOptions& options = {});

/// The process-wide GPU backend (FACETRACE_GPU_ISOLATION picks the executor), created on first use.
/// Registers the tracer's device ops for the in-process executor. Thread-safe.
runtime::GpuBackend& shared_gpu_backend();

}  // namespace facetrace::tracer
