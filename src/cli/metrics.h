/// @file
/// Private: `--metrics-file PATH` (docs/cli.md "Metrics"): the Prometheus text exposition format of one command's
/// counters, rewritten whole (temporary file in the same directory, fsync, rename) so that a node exporter's
/// textfile collector or a sidecar never reads half a file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "facetrace/core/status.h"

namespace facetrace::cli {

/// The counters, all totals since the command started.
struct Metrics {
  std::uint64_t requests_done_gpu = 0;  ///< GPU requests that committed
  std::uint64_t requests_done_cpu = 0;  ///< requests the CPU rendered (declined ones included)
  std::uint64_t requests_declined = 0;  ///< GPU requests declined (redone on the CPU)
  std::uint64_t requests_cancelled = 0;
  std::map<std::string, std::uint64_t> device_losses;  ///< by CUDA error name (loss_error_name)
  std::uint64_t child_restarts = 0;  ///< replacements of the GPU child (or device) attempted
  std::uint64_t recoveries = 0;      ///< replacements that brought the GPU back
  std::uint64_t ring_stalls = 0;     ///< readback ring claims that found no free slot
  std::uint64_t paths_gpu = 0;       ///< paths (pixel samples) rendered on the GPU
  std::uint64_t paths_cpu = 0;
  double seconds = 0;     ///< wall time so far
  double progress = 0;    ///< fraction of the command's work done, 0..1
  bool finished = false;  ///< the final rewrite (the command is about to exit)
  int exit_code = 0;      ///< meaningful when finished
};

/// The CUDA error enumerator a loss reason names ("cudaErrorIllegalAddress"), else a short word for what it
/// is: "child_exited", "timeout", or "other".
std::string loss_error_name(std::string_view reason);

/// The Prometheus text format (version 0.0.4) of `m`: # HELP and # TYPE lines, one sample per line.
std::string prometheus_text(const Metrics& m);

/// Rewrites `path` with prometheus_text(m) atomically. kIo naming the path and the errno text on failure.
Status write_metrics_file(const std::string& path, const Metrics& m);

}  // namespace facetrace::cli
