/// @file
/// Prometheus text for --metrics-file (metrics.h).
#include "metrics.h"

#include <cctype>
#include <cstdio>
#include <string>

#include "facetrace/core/file.h"

namespace facetrace::cli {
namespace {

void family(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

/// A label value escaped as the exposition format asks (backslash, double quote, newline).
std::string escape_label(std::string_view v) {
  std::string s;
  for (char c : v) {
    if (c == '\\' || c == '"') s += '\\';
    if (c == '\n') {
      s += "\\n";
      continue;
    }
    s += c;
  }
  return s;
}

void sample(std::string& out, const std::string& name_and_labels, std::uint64_t v) {
  out += name_and_labels;
  out += ' ';
  out += std::to_string(v);
  out += '\n';
}

void sample(std::string& out, const std::string& name_and_labels, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  out += name_and_labels;
  out += ' ';
  out += buf;
  out += '\n';
}

}  // namespace

std::string loss_error_name(std::string_view reason) {
  const auto at = reason.find("cudaError");
  if (at != std::string_view::npos) {
    std::size_t end = at + 9;
    while (end < reason.size() && std::isalnum(static_cast<unsigned char>(reason[end]))) ++end;
    return std::string(reason.substr(at, end - at));
  }
  auto has = [&](std::string_view w) { return reason.find(w) != std::string_view::npos; };
  if (has("child") && (has("exit") || has("died") || has("signal") || has("closed"))) return "child_exited";
  if (has("deadline") || has("timed out") || has("timeout")) return "timeout";
  return "other";
}

std::string prometheus_text(const Metrics& m) {
  std::string out;
  family(out, "facetrace_requests_total", "counter", "Render requests by device and outcome.");
  sample(out, "facetrace_requests_total{device=\"gpu\",outcome=\"done\"}", m.requests_done_gpu);
  sample(out, "facetrace_requests_total{device=\"gpu\",outcome=\"declined\"}", m.requests_declined);
  sample(out, "facetrace_requests_total{device=\"gpu\",outcome=\"cancelled\"}", m.requests_cancelled);
  sample(out, "facetrace_requests_total{device=\"cpu\",outcome=\"done\"}", m.requests_done_cpu);
  family(out, "facetrace_device_losses_total", "counter", "GPU device losses by CUDA error name.");
  for (const auto& [name, n] : m.device_losses)
    sample(out, "facetrace_device_losses_total{error=\"" + escape_label(name) + "\"}", n);
  family(out, "facetrace_gpu_child_restarts_total", "counter",
         "Replacements of the GPU child process (or device) attempted after a loss.");
  sample(out, "facetrace_gpu_child_restarts_total", m.child_restarts);
  family(out, "facetrace_gpu_recoveries_total", "counter", "Replacements that brought the GPU back.");
  sample(out, "facetrace_gpu_recoveries_total", m.recoveries);
  family(out, "facetrace_ring_stalls_total", "counter", "Readback ring claims that found no free slot.");
  sample(out, "facetrace_ring_stalls_total", m.ring_stalls);
  family(out, "facetrace_paths_rendered_total", "counter", "Paths (pixel samples) rendered, by device.");
  sample(out, "facetrace_paths_rendered_total{device=\"gpu\"}", m.paths_gpu);
  sample(out, "facetrace_paths_rendered_total{device=\"cpu\"}", m.paths_cpu);
  family(out, "facetrace_elapsed_seconds", "gauge", "Wall time of the command so far.");
  sample(out, "facetrace_elapsed_seconds", m.seconds);
  family(out, "facetrace_progress_ratio", "gauge", "Fraction of the command's work done (0 to 1).");
  sample(out, "facetrace_progress_ratio", m.progress);
  family(out, "facetrace_finished", "gauge",
         "1 once the command has finished (then see facetrace_exit_code).");
  sample(out, "facetrace_finished", static_cast<std::uint64_t>(m.finished ? 1 : 0));
  if (m.finished) {
    family(out, "facetrace_exit_code", "gauge", "The command's process exit code (docs/cli.md).");
    sample(out, "facetrace_exit_code", static_cast<std::uint64_t>(m.exit_code));
  }
  return out;
}

Status write_metrics_file(const std::string& path, const Metrics& m) {
  return core::write_file_atomic(path, prometheus_text(m)).with_context("--metrics-file");
}

}  // namespace facetrace::cli
