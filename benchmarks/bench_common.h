/// @file
/// The one benchmark helper (docs/design/style.md §10): median/p10/p90 of repeated runs, the run context (host, CPU model,
/// GPU, driver, git sha, date, build type), JSON lines on stdout and a table on stderr. Every benchmark uses it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "facetrace/runtime/device_info.h"

namespace facetrace::bench {

/// One JSON line's fields, in the order they were added.
using Json = nlohmann::ordered_json;

/// Summary of the timed runs of one case, in milliseconds.
struct Stats {
  double median_ms = 0;
  double p10_ms = 0;
  double p90_ms = 0;
};

/// The q-quantile (q in [0, 1]) of `values` by linear interpolation between the closest ranks; 0 when empty.
double percentile(std::vector<double> values, double q);

/// Median, p10 and p90 of `ms` (percentile()).
Stats summarize(const std::vector<double>& ms);

/// Runs `run` `warmup` times untimed, then `iters` times timed with steady_clock, sleeping `pause` after each
/// run so clocks settle. `run` returns false to stop early (an error it has reported): nullopt then. Returns the
/// timed durations in milliseconds.
template <class F>
std::optional<std::vector<double>> time_runs(int warmup, int iters, F&& run,
                                             std::chrono::milliseconds pause = std::chrono::milliseconds(0)) {
  std::vector<double> ms;
  ms.reserve(static_cast<std::size_t>(iters > 0 ? iters : 0));
  for (int i = 0; i < warmup + iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!run()) return std::nullopt;
    const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) ms.push_back(t);
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
  }
  return ms;
}

/// The GPU a benchmark ran on, as the run context reports it.
struct GpuFacts {
  std::string name;    ///< "NVIDIA H200"
  std::string driver;  ///< CUDA driver API version, "13.0"
  std::string cuda;    ///< CUDA runtime version, "12.8"
};

/// The facts of the runtime's public device info (versions as "major.minor").
GpuFacts gpu_facts(const runtime::DeviceInfo& info);

/// Where and what ran: one per process, attached to every JSON line.
struct RunContext {
  std::string host;       ///< gethostname()
  std::string cpu_model;  ///< /proc/cpuinfo "model name" ("unknown" elsewhere)
  std::string git_sha;    ///< `git describe --always --dirty` of the source tree when the benchmark was built
  std::string date;       ///< UTC start time, ISO 8601
  std::string build;      ///< CMake build type of the benchmark ("Release")
  std::optional<GpuFacts> gpu;  ///< nullopt: no GPU used by this run (JSON null)
};

/// The context of this process; `gpu` as given.
RunContext run_context(std::optional<GpuFacts> gpu = std::nullopt);

/// `v` rounded to `digits` decimals, so that JSON lines carry the precision of a measurement, not of a double.
double rounded(double v, int digits);

/// A line's leading fields: {"bench": bench, "case": cas}.
Json line(const std::string& bench, const std::string& cas);

/// Appends "iters", "warmup", "median_ms", "p10_ms", "p90_ms" (3 decimals; 6 with `fine`).
void add_stats(Json& j, const Stats& s, int iters, int warmup, bool fine = false);

/// Appends the context ("build", "host", "cpu_model", "gpu", "driver", "cuda", "git_sha", "date"; the GPU
/// fields null without a GPU) and prints `j` as one line on stdout, flushed.
void emit(Json j, const RunContext& context);

/// A table for stderr, columns sized to their widest cell.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  /// Adds a row (missing cells are blank, extra ones dropped).
  void add(std::vector<std::string> cells);
  /// Prints the header, a rule and the rows to stderr.
  void print() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

/// printf-style formatting of one value into a cell ("%.2f").
std::string cell(const char* format, double v);

}  // namespace facetrace::bench
