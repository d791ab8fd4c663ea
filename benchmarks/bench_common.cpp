/// @file
/// bench_common: statistics, run context, JSON lines and the stderr table shared by the benchmarks.
#include "bench_common.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>

#include "bench_git_sha.h"  // generated at build time: FT_BENCH_GIT_SHA

#ifndef FT_BUILD_TYPE
#define FT_BUILD_TYPE "unknown"
#endif

namespace facetrace::bench {
namespace {

std::string version(int v) {
  if (v <= 0) return "n/a";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    const auto first = line.find_first_not_of(" \t", colon + 1);
    return first == std::string::npos ? std::string("unknown") : line.substr(first);
  }
  return "unknown";
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

Stats summarize(const std::vector<double>& ms) {
  return {percentile(ms, 0.5), percentile(ms, 0.1), percentile(ms, 0.9)};
}

GpuFacts gpu_facts(const runtime::DeviceInfo& info) {
  return {info.name, version(info.driver_version), version(info.runtime_version)};
}

RunContext run_context(std::optional<GpuFacts> gpu) {
  RunContext c;
  c.host = host_name();
  c.cpu_model = cpu_model();
  c.git_sha = FT_BENCH_GIT_SHA;
  c.date = utc_now();
  c.build = FT_BUILD_TYPE;
  c.gpu = std::move(gpu);
  return c;
}

double rounded(double v, int digits) {
  if (!std::isfinite(v)) return v;
  const double scale = std::pow(10.0, digits);
  return std::round(v * scale) / scale;
}

Json line(const std::string& bench, const std::string& cas) {
  Json j;
  j["bench"] = bench;
  j["case"] = cas;
  return j;
}

void add_stats(Json& j, const Stats& s, int iters, int warmup, bool fine) {
  const int d = fine ? 6 : 3;
  j["iters"] = iters;
  j["warmup"] = warmup;
  j["median_ms"] = rounded(s.median_ms, d);
  j["p10_ms"] = rounded(s.p10_ms, d);
  j["p90_ms"] = rounded(s.p90_ms, d);
}

void emit(Json j, const RunContext& c) {
  j["build"] = c.build;
  j["host"] = c.host;
  j["cpu_model"] = c.cpu_model;
  if (c.gpu) {
    j["gpu"] = c.gpu->name;
    j["driver"] = c.gpu->driver;
    j["cuda"] = c.gpu->cuda;
  } else {
    j["gpu"] = nullptr;
    j["driver"] = nullptr;
    j["cuda"] = nullptr;
  }
  j["git_sha"] = c.git_sha;
  j["date"] = c.date;
  std::printf("%s\n", j.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
  std::fflush(stdout);
}

void Table::add(std::vector<std::string> cells) {
  cells.resize(header_.size());
  rows_.push_back(std::move(cells));
}

void Table::print() const {
  std::vector<std::size_t> w(header_.size());
  for (std::size_t c = 0; c < header_.size(); ++c) {
    w[c] = header_[c].size();
    for (const auto& r : rows_) w[c] = std::max(w[c], r[c].size());
  }
  auto print_row = [&](const std::vector<std::string>& r) {
    std::string s;
    for (std::size_t c = 0; c < r.size(); ++c) {
      if (c) s += "  ";
      s += r[c] + std::string(w[c] - r[c].size(), ' ');
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    std::fprintf(stderr, "%s\n", s.c_str());
  };
  print_row(header_);
  std::vector<std::string> rule;
  for (std::size_t c = 0; c < header_.size(); ++c) rule.emplace_back(w[c], '-');
  print_row(rule);
  for (const auto& r : rows_) print_row(r);
}

std::string cell(const char* format, double v) {
  char b[64];
  std::snprintf(b, sizeof b, format, v);
  return b;
}

}  // namespace facetrace::bench
