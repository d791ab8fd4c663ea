/// @file
/// Fault soak (issue 13, docs/runtime.md "Soak"): worker threads issue mixed render and face requests on one
/// shared GpuBackend while device losses are injected at random; every request must complete with the right
/// result, no sample may be lost or counted twice, nothing may hang (a watchdog) and resident memory stays flat.
/// Two tests: `Soak.simulated_*` (cpu: the simulated executor, 1 000 losses by four injection routes) and
/// `SoakGpu.*` (gpu: the isolated executor with a real facetrace-gpud, 20 real sticky faults, the time each cost).
/// A test binary, not a `facetrace soak` command: it needs the test seams (the simulated executor and its tracer
/// and face ops, fault arming), which the CLI may not include (docs/design/layout.md §3).
///
/// Flags (after the gtest ones): --soak-threads N, --soak-faults N, --soak-seconds S (the bound: the soak fails
/// if the faults have not all fired by then), --soak-stall S (watchdog), --soak-seed N, --soak-baseline S (GPU:
/// the fault-free phase), --soak-gpu-on-sim 1 (the GPU soak on the simulated rig), --soak-report FILE (JSON
/// lines). The file is long through its checks, not through repetition: setup, one worker loop, two injectors,
/// one verdict.
#include <gtest/gtest.h>
#include <spdlog/sinks/base_sink.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cpu/trace_params.h"
#include "facetrace/core/parallel.h"
#include "facetrace/faces/accelerator.h"
#include "facetrace/faces/net.h"
#include "facetrace/runtime/backend.h"
#include "facetrace/runtime/testing/simulated_executor.h"
#include "facetrace/tracer/cpu_tracer.h"
#include "facetrace/tracer/renderer.h"
#include "gpu/gpu_accelerator.h"
#include "gpu/sim_ops.h"
#include "log.h"
#include "onnx_builder.h"
#include "sim_trace_op.h"

namespace facetrace::soak {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using faces::testing::OnnxBuilder;
using faces::testing::random_floats;

// ------------------------------------------------------------------------------------------------ configuration

struct Flags {
  int threads = -1, faults = -1;
  double seconds = -1, stall = -1, baseline = -1;
  std::uint32_t seed = 20261201;
  bool gpu_on_sim = false;
  std::string report;
};
Flags g_flags;

struct Config {
  int threads = 8;
  int faults = 1000;
  double seconds = 300;          // bound for all faults to fire
  double stall = 60;             // watchdog: no request finished for this long is a hang
  double baseline = 0;           // fault-free phase first (GPU: the reference for the cost of a fault)
  double warmup_fraction = 0.1;  // RSS baseline once this fraction of the faults fired
  double rss_band = 0.10;        // issue 13: resident memory flat within ±10 %
  // GPU soak: reported only (the shared arena's pages are touched lazily as slots grow). Under ASan too: its
  // quarantine keeps freed memory resident (up to 256 MB), so RSS says nothing there; LSan checks leaks instead.
#ifdef __SANITIZE_ADDRESS__
  bool check_rss = false;
#else
  bool check_rss = true;
#endif
  bool gpu = false;
};

Config configured(Config c) {
  if (g_flags.threads > 0) c.threads = g_flags.threads;
  if (g_flags.faults > 0) c.faults = g_flags.faults;
  if (g_flags.seconds > 0) c.seconds = g_flags.seconds;
  if (g_flags.stall > 0) c.stall = g_flags.stall;
  if (g_flags.baseline >= 0) c.baseline = g_flags.baseline;
  return c;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::uint64_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

// ------------------------------------------------------------------------------------------------ log sink

/// Counts warn+ logs of the "facetrace" logger: a device loss ("… lost …") is expected, anything else is a
/// finding (a detach, a failed recovery, a non-loss decline). Stores only the first few texts: memory stays flat.
class CountingSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::atomic<std::uint64_t> loss_logs{0}, unexpected{0};
  std::vector<std::string> first_unexpected() {
    std::lock_guard lock(mutex_);
    return texts_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (msg.level < spdlog::level::warn) return;
    std::string text(msg.payload.data(), msg.payload.size());
    if (msg.level == spdlog::level::warn && text.find("lost") != std::string::npos) {
      ++loss_logs;
      return;
    }
    ++unexpected;
    if (texts_.size() < 20) texts_.push_back(std::move(text));
  }
  void flush_() override {}

 private:
  std::vector<std::string> texts_;  // guarded by the base sink's mutex_
};

/// Installs a CountingSink on the facetrace logger for the scope.
struct SinkScope {
  std::shared_ptr<CountingSink> sink = std::make_shared<CountingSink>();
  SinkScope() { core::logger().sinks().push_back(sink); }
  ~SinkScope() {
    auto& sinks = core::logger().sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink), sinks.end());
  }
};

// ------------------------------------------------------------------------------------------------ work items

/// One render request template: the film starts with the CPU's [0, first) and gets [first, first + spp).
/// `want` is the CPU tracer's [0, first + spp). Each render must equal, bit for bit, the film made of its own
/// split: the prefix plus, per pixel in ascending sample order, every sample's value from the device that ran it
/// (`cpu` or `gpu`: XYZ per (pixel, sample), pixel-major; the device's from a fault-free request in test mode).
/// Where the device gives the CPU's bits per sample (the simulated op always; the GPU tracer by design,
/// docs/design/tracer.md §12), that is `want` whatever the split.
struct RenderCase {
  tracer::Scene scene;
  std::uint32_t first = 0, spp = 0;
  tracer::Film prefix, want;
  std::vector<float> cpu, gpu;
  bool same_bits = true;  // gpu == cpu
};

RenderCase render_case(std::uint32_t w, std::uint32_t h, std::uint32_t bounces, std::uint32_t first,
                       std::uint32_t spp) {
  RenderCase c;
  c.scene = tracer::builtin_diamond_scene();
  c.scene.width = w;
  c.scene.height = h;
  c.scene.max_bounces = bounces;
  c.first = first;
  c.spp = spp;
  c.prefix = tracer::Film(w, h);
  EXPECT_TRUE(tracer::cpu_accumulate(c.scene, 0, first, c.prefix, {}).ok());
  c.want = c.prefix;
  EXPECT_TRUE(tracer::cpu_accumulate(c.scene, first, spp, c.want, {}).ok());
  const auto params = tracer::make_trace_params(c.scene);
  const auto planes = tracer::make_facet_planes(c.scene);
  c.cpu.resize(std::size_t{w} * h * spp * 3);
  core::parallel_for(std::int64_t{w} * h, 0, [&](std::int64_t p) {
    for (std::uint32_t k = 0; k < spp; ++k) {
      const auto r = tracer::physics::trace_sample(params, planes.data(), static_cast<std::uint32_t>(p % w),
                                                   static_cast<std::uint32_t>(p / w), first + k);
      float* v = &c.cpu[(static_cast<std::size_t>(p) * spp + k) * 3];
      v[0] = r.x, v[1] = r.y, v[2] = r.z;
    }
  });
  return c;
}

/// The device's per-sample values of `c` from one fault-free request in test mode (return_tuples).
Status device_samples(runtime::GpuBackend& backend, RenderCase& c) {
  tracer::Film f(c.scene.width, c.scene.height);
  tracer::GpuChunkOptions o;
  o.return_tuples = true;
  tracer::TraceWorkload w(c.scene, c.first, c.spp, f, o);
  if (backend.accumulate(w) != runtime::Outcome::kDone)
    return internal_error("the device declined the reference");
  c.gpu = w.tuples();
  if (c.gpu.size() != c.cpu.size()) return internal_error("the device returned a wrong number of samples");
  c.same_bits = std::memcmp(c.gpu.data(), c.cpu.data(), c.cpu.size() * sizeof(float)) == 0;
  return {};
}

/// The sample ranges of a render in order, each with the device that committed it (the report's request_samples
/// and request_on_gpu). nullopt when the report does not add up.
std::optional<std::vector<std::pair<std::uint32_t, bool>>> split_of(const tracer::RenderReport& r,
                                                                    std::uint32_t spp) {
  std::vector<std::pair<std::uint32_t, bool>> out;
  if (r.request_on_gpu.size() != r.request_samples.size()) return std::nullopt;
  for (std::size_t k = 0; k < r.request_samples.size(); ++k)
    out.emplace_back(r.request_samples[k], r.request_on_gpu[k]);
  std::uint64_t total = 0, gpu = 0;
  for (auto [n, on_gpu] : out) total += n, gpu += on_gpu ? n : 0;
  if (total != spp || gpu != r.gpu_samples) return std::nullopt;
  return out;
}

/// The film of `c` with this split (ascending sample order per pixel, as both tracers sum).
tracer::Film split_film(const RenderCase& c, const std::vector<std::pair<std::uint32_t, bool>>& split) {
  tracer::Film f = c.prefix;
  for (std::size_t p = 0; p < f.pixels(); ++p) {
    std::uint32_t k = 0;
    for (auto [n, on_gpu] : split) {
      const std::vector<float>& src = on_gpu && !c.gpu.empty() ? c.gpu : c.cpu;
      for (std::uint32_t i = 0; i < n; ++i, ++k) {
        const float* v = &src[(p * c.spp + k) * 3];
        f.xyz[3 * p] += v[0];
        f.xyz[3 * p + 1] += v[1];
        f.xyz[3 * p + 2] += v[2];
      }
    }
    f.samples[p] += k;
  }
  return f;
}

/// A small convolutional net (conv, relu, batch norm, residual add, max pool, global average, gemm; two
/// outputs) with a `side`² input of 3 channels and `ch` channels inside.
std::vector<std::uint8_t> net_onnx(std::int64_t side, std::int64_t ch, std::uint32_t seed) {
  OnnxBuilder m(13);
  m.input("x", {1, 3, side, side}).output("feat", {1, 8}).output("map", {1, ch, side / 2, side / 2});
  m.init("w0", {ch, 3, 3, 3}, random_floats(static_cast<std::size_t>(ch * 27), seed + 1, -0.5f, 0.5f));
  m.init("b0", {ch}, random_floats(static_cast<std::size_t>(ch), seed + 2));
  m.init("w1", {ch, ch, 3, 3}, random_floats(static_cast<std::size_t>(ch * ch * 9), seed + 3, -0.2f, 0.2f));
  m.init("b1", {ch}, random_floats(static_cast<std::size_t>(ch), seed + 4));
  m.init("g", {ch}, random_floats(static_cast<std::size_t>(ch), seed + 5, 0.5f, 1.5f));
  m.init("be", {ch}, random_floats(static_cast<std::size_t>(ch), seed + 6));
  m.init("mu", {ch}, random_floats(static_cast<std::size_t>(ch), seed + 7));
  m.init("var", {ch}, random_floats(static_cast<std::size_t>(ch), seed + 8, 0.5f, 2.0f));
  m.init("wf", {8, ch}, random_floats(static_cast<std::size_t>(8 * ch), seed + 9));
  m.init("bf", {8}, random_floats(8, seed + 10));
  auto* c0 = m.node("Conv", {"x", "w0", "b0"}, {"c0"});
  OnnxBuilder::ints(c0, "kernel_shape", {3, 3});
  OnnxBuilder::ints(c0, "pads", {1, 1, 1, 1});
  m.node("Relu", {"c0"}, {"r0"});
  auto* c1 = m.node("Conv", {"r0", "w1", "b1"}, {"c1"});
  OnnxBuilder::ints(c1, "kernel_shape", {3, 3});
  OnnxBuilder::ints(c1, "pads", {1, 1, 1, 1});
  m.node("BatchNormalization", {"c1", "g", "be", "mu", "var"}, {"bn"});
  m.node("Add", {"bn", "r0"}, {"sum"});
  auto* pool = m.node("MaxPool", {"sum"}, {"map"});
  OnnxBuilder::ints(pool, "kernel_shape", {2, 2});
  OnnxBuilder::ints(pool, "strides", {2, 2});
  m.node("GlobalAveragePool", {"map"}, {"gap"});
  m.node("Flatten", {"gap"}, {"flat"});
  OnnxBuilder::int1(m.node("Gemm", {"flat", "wf", "bf"}, {"feat"}), "transB", 1);
  return m.bytes();
}

/// One face request template: a fixed batch through one net. A result must equal the CPU's bit for bit (a call
/// that fell back) or the device's fault-free result of the same batch bit for bit (fp32 is deterministic run to
/// run, docs/design/faces.md §4).
struct FaceCase {
  int net = 0;
  std::vector<std::vector<float>> inputs;
  std::vector<std::vector<faces::NamedTensor>> cpu, gpu;
  bool repeatable = true;  // a second fault-free run gave the same bits
};

std::vector<std::span<const float>> spans(const std::vector<std::vector<float>>& v) {
  return {v.begin(), v.end()};
}

bool same(const std::vector<std::vector<faces::NamedTensor>>& a,
          const std::vector<std::vector<faces::NamedTensor>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size()) return false;
    for (std::size_t o = 0; o < a[i].size(); ++o)
      if (a[i][o].data.size() != b[i][o].data.size() ||
          std::memcmp(a[i][o].data.data(), b[i][o].data.data(), a[i][o].data.size() * sizeof(float)) != 0)
        return false;
  }
  return true;
}

/// Where `got` differs most from the device's and the CPU's results of `c`, and the fp32 bar (Net::attach_checked).
std::string difference(const std::vector<std::vector<faces::NamedTensor>>& got, const FaceCase& c) {
  double dg = 0, dc = 0, peak = 0;
  std::size_t where = 0;
  for (std::size_t b = 0; b < got.size() && b < c.cpu.size(); ++b)
    for (std::size_t o = 0; o < got[b].size() && o < c.cpu[b].size(); ++o)
      for (std::size_t i = 0; i < got[b][o].data.size() && i < c.cpu[b][o].data.size(); ++i) {
        const double g = got[b][o].data[i];
        peak = std::max(peak, std::fabs(static_cast<double>(c.cpu[b][o].data[i])));
        dc = std::max(dc, std::fabs(g - c.cpu[b][o].data[i]));
        if (std::fabs(g - c.gpu[b][o].data[i]) > dg) dg = std::fabs(g - c.gpu[b][o].data[i]), where = b;
      }
  std::ostringstream o;
  o << "max |diff| " << dg << " from the device's (item " << where << "), " << dc
    << " from the CPU's (fp32 bar " << 1e-4 + 1e-3 * peak << ")";
  return o.str();
}

bool same_film(const tracer::Film& a, const tracer::Film& b) {
  return a.xyz.size() == b.xyz.size() &&
         std::memcmp(a.xyz.data(), b.xyz.data(), a.xyz.size() * sizeof(float)) == 0 &&
         a.nonfinite == b.nonfinite;
}

// ------------------------------------------------------------------------------------------------ the rig

/// The shared backend, the accelerator and the nets every worker uses.
struct Rig {
  std::unique_ptr<runtime::GpuBackend> backend;
  runtime::SimulatedExecutor* sim = nullptr;  // simulated rig only
  std::shared_ptr<faces::Accelerator> acc;
  std::vector<faces::Net> nets;      // the accelerator attached
  std::vector<faces::Net> cpu_nets;  // the same bytes, CPU only: the references
  std::vector<RenderCase> renders;
  std::vector<FaceCase> faces;
  unsigned render_threads = 1;  // CPU threads of a render's fallback
  bool tiny_chunks = false;     // simulated: random request and chunk sizes (device: the product's sizing)
};

/// Simulated faces ops run on this thread (the simulated op's `seen` hook counts them).
thread_local std::uint64_t t_face_ops = 0;

Status add_nets(Rig& rig, const std::vector<std::vector<std::uint8_t>>& models, int faces_per_net,
                std::uint32_t seed) {
  for (std::size_t k = 0; k < models.size(); ++k) {
    auto gpu = faces::Net::create(models[k]);
    auto cpu = faces::Net::create(models[k]);
    if (!gpu) return gpu.status();
    if (!cpu) return cpu.status();
    gpu->set_threads(1);
    cpu->set_threads(1);
    FT_TRY(gpu->attach_checked(rig.acc).with_context("attaching the soak's net " + std::to_string(k)));
    rig.nets.push_back(std::move(*gpu));
    rig.cpu_nets.push_back(std::move(*cpu));
    const auto& shape = rig.nets.back().input_shape();
    const std::size_t n = static_cast<std::size_t>(shape[1] * shape[2] * shape[3]);
    for (int b = 1; b <= faces_per_net; ++b) {
      FaceCase c;
      c.net = static_cast<int>(k);
      for (int i = 0; i < b; ++i) c.inputs.push_back(random_floats(n, seed++, 0.0f, 255.0f));
      auto cpu_out = rig.cpu_nets.back().run_batch(spans(c.inputs), shape);
      if (!cpu_out) return cpu_out.status();
      c.cpu = std::move(*cpu_out);
      auto gpu_out = rig.nets.back().run_batch(spans(c.inputs), shape);  // fault-free: the device's result
      if (!gpu_out) return gpu_out.status();
      c.gpu = std::move(*gpu_out);
      for (int rep = 0; rep < 5; ++rep) {  // deterministic run to run?
        auto again = rig.nets.back().run_batch(spans(c.inputs), shape);
        if (!again) return again.status();
        c.repeatable = c.repeatable && same(*again, c.gpu);
      }
      rig.faces.push_back(std::move(c));
    }
  }
  return {};
}

runtime::RecoveryConfig soak_recovery() {
  runtime::RecoveryConfig rc;
  rc.cool_down =
      std::chrono::duration<double>(0.0);  // replace at once: the soak measures the replacement itself
  rc.max_attempts = 1000000;               // the product's 6 per hour would stop a soak at the 7th loss
  return rc;
}

// ------------------------------------------------------------------------------------------------ the soak

/// Shared counters and findings of one soak.
struct Stats {
  std::atomic<std::uint64_t> renders{0}, render_fallbacks{0}, gpu_samples{0}, cpu_samples{0};
  std::atomic<std::uint64_t> face_runs{0}, face_images{0}, face_cpu_results{0}, face_gpu_results{0};
  std::atomic<std::uint64_t> face_fallbacks{0}, face_mismatch_free{0}, face_mismatch_faulted{0};
  std::atomic<std::uint64_t> failures{0};
  std::atomic<std::int64_t> last_done_ns{0};
  std::mutex mu;
  std::vector<std::string> failure_texts;
  // Latencies (s) per render case and face case, fault-free phase and faulted phase; fallback flags.
  struct Sample {
    int kind, index;
    bool faulted_phase, fell_back;
    double seconds;
  };
  std::vector<Sample> samples;

  void fail(std::string what) {
    ++failures;
    std::lock_guard lock(mu);
    if (failure_texts.size() < 20) failure_texts.push_back(std::move(what));
  }
  void finished() { last_done_ns.store(Clock::now().time_since_epoch().count(), std::memory_order_release); }
};

/// What each worker is doing (the watchdog names it when nothing finishes).
struct WorkerState {
  std::atomic<int> kind{-1};  // -1 idle, 0 render, 1 faces
  std::atomic<int> index{0};
  std::atomic<std::int64_t> since_ns{0};
};

struct Soak {
  Rig& rig;
  Config cfg;
  Stats stats;
  std::vector<WorkerState> workers;
  std::atomic<bool> stop{false};
  std::atomic<bool> faulted_phase{false};
  std::atomic<int> next_render_fault{
      -1};  // > -1: the next render injects a fault before chunk k of a request
  std::mutex rss_mu;
  std::vector<std::uint64_t> rss;  // after the warm-up, every 250 ms

  Soak(Rig& r, Config c) : rig(r), cfg(c), workers(static_cast<std::size_t>(c.threads)) {}

  std::uint64_t fired() const {
    std::uint64_t n = 0;
    for (const auto& [why, count] : rig.backend->losses_by_reason()) n += count;
    return n;
  }

  void run_render(std::mt19937& rng, int index) {
    const RenderCase& c = rig.renders[static_cast<std::size_t>(index)];
    tracer::Film film = c.prefix;
    tracer::RenderOptions o;
    o.device = rng() % 2 ? tracer::RenderDevice::kGpu : tracer::RenderDevice::kAuto;
    o.threads = rig.render_threads;
    o.backend = rig.backend.get();
    if (rig.tiny_chunks) {
      static constexpr std::uint32_t kPerRequest[] = {0, 1, 2, 3, 5, 8};
      static constexpr std::uint32_t kChunkPixels[] = {0, 7, 33, 100, 257};
      o.samples_per_request = kPerRequest[rng() % 6];
      o.chunk.max_chunk_pixels = kChunkPixels[rng() % 5];
    }
    o.chunk.fault_after_chunks = next_render_fault.exchange(-1);
    const auto t0 = Clock::now();
    auto r = tracer::render(c.scene, c.first, c.spp, film, o);
    const double s = seconds_since(t0);
    const std::string what = "render case " + std::to_string(index) + ": ";
    if (!r.ok()) return stats.fail(what + r.status().to_string());
    if (r->gpu_samples + r->cpu_samples != c.spp)
      return stats.fail(what + "gpu " + std::to_string(r->gpu_samples) + " + cpu " +
                        std::to_string(r->cpu_samples) + " samples != " + std::to_string(c.spp));
    if (r->declined_by_loss != r->declined)
      return stats.fail(what + "a decline other than a loss: " +
                        (r->decline_reasons.empty() ? std::string("?") : r->decline_reasons.back()));
    for (std::size_t p = 0; p < film.samples.size(); ++p)
      if (film.samples[p] != c.first + c.spp)
        return stats.fail(what + "pixel " + std::to_string(p) + " counted " +
                          std::to_string(film.samples[p]) + " samples, want " +
                          std::to_string(c.first + c.spp));
    const auto split = split_of(*r, c.spp);
    if (!split) return stats.fail(what + "the report's requests do not add up to its samples");
    if (!same_film(film, split_film(c, *split)))
      return stats.fail(what + "sums differ from its split's per-sample reference (" +
                        std::to_string(r->declined) + " declined request(s))");
    if (c.same_bits && !same_film(film, c.want))
      return stats.fail(what + "sums differ from the CPU reference (" + std::to_string(r->declined) +
                        " declined request(s))");
    ++stats.renders;
    if (r->declined) ++stats.render_fallbacks;
    stats.gpu_samples += r->gpu_samples;
    stats.cpu_samples += r->cpu_samples;
    if (!cfg.gpu)
      return;  // the latencies are for the GPU soak's fault cost; the simulated soak keeps memory flat
    std::lock_guard lock(stats.mu);
    stats.samples.push_back({0, index, faulted_phase.load(), r->declined > 0, s});
  }

  void run_faces(int index) {
    const FaceCase& c = rig.faces[static_cast<std::size_t>(index)];
    const faces::Net& net = rig.nets[static_cast<std::size_t>(c.net)];
    const std::uint64_t ops0 = t_face_ops;
    const auto t0 = Clock::now();
    auto r = net.run_batch(spans(c.inputs), net.input_shape());
    const double s = seconds_since(t0);
    const std::string what = "face case " + std::to_string(index) + ": ";
    if (!r.ok()) return stats.fail(what + r.status().to_string());
    const bool is_gpu = same(*r, c.gpu), is_cpu = same(*r, c.cpu);
    if (!is_gpu && !is_cpu) {
      // A replacement child plans with the first child's conv choices (docs/design/faces.md §8.2 "Plan
      // choices"), so every GPU result is the fault-free device's, bit for bit.
      ++(faulted_phase.load() ? stats.face_mismatch_faulted : stats.face_mismatch_free);
      return stats.fail(what + "outputs equal neither the CPU's nor the device's fault-free ones (" +
                        std::to_string(c.inputs.size()) + " images, net " + std::to_string(c.net) + ", " +
                        (faulted_phase.load() ? "faulted" : "fault-free") + " phase, after " +
                        std::to_string(rig.backend->recoveries()) + " replacements): " + difference(*r, c));
    }
    ++stats.face_runs;
    stats.face_images += c.inputs.size();
    if (is_cpu) ++stats.face_cpu_results;
    if (is_gpu) ++stats.face_gpu_results;
    // Simulated device: this thread's op count says whether the call ran there (its results equal the CPU's).
    const bool fell_back = rig.sim ? t_face_ops == ops0 : is_cpu && !is_gpu;
    if (fell_back) ++stats.face_fallbacks;
    if (!cfg.gpu) return;
    std::lock_guard lock(stats.mu);
    stats.samples.push_back({1, index, faulted_phase.load(), fell_back, s});
  }

  void worker(int id, std::uint32_t seed) {
    std::mt19937 rng(seed);
    WorkerState& me = workers[static_cast<std::size_t>(id)];
    while (!stop.load(std::memory_order_acquire)) {
      const bool render = rng() % 2 == 0;
      const int index = static_cast<int>(rng() % (render ? rig.renders.size() : rig.faces.size()));
      me.index = index;
      me.since_ns = Clock::now().time_since_epoch().count();
      me.kind = render ? 0 : 1;
      if (render)
        run_render(rng, index);
      else
        run_faces(index);
      me.kind = -1;
      stats.finished();
    }
  }

  /// Watchdog and RSS sampler: a hang (no request finished for cfg.stall seconds) prints what every worker is
  /// doing and ends the process, so ctest reports it instead of timing out silently.
  void watchdog() {
    bool sampling = false;
    const auto warm = static_cast<std::uint64_t>(cfg.faults * cfg.warmup_fraction);
    while (!stop.load(std::memory_order_acquire)) {
      std::this_thread::sleep_for(250ms);
      const auto last =
          Clock::time_point(Clock::duration(stats.last_done_ns.load(std::memory_order_acquire)));
      if (seconds_since(last) > cfg.stall) {
        std::fprintf(
            stderr, "soak watchdog: no request finished for %.0f s (a hang); %llu faults fired; backend %s\n",
            cfg.stall, static_cast<unsigned long long>(fired()), rig.backend->is_lost() ? "lost" : "ready");
        for (std::size_t i = 0; i < workers.size(); ++i) {
          const int kind = workers[i].kind.load();
          const auto since = Clock::time_point(Clock::duration(workers[i].since_ns.load()));
          std::fprintf(stderr, "  worker %zu: %s case %d for %.1f s\n", i,
                       kind < 0    ? "idle"
                       : kind == 0 ? "render"
                                   : "faces",
                       workers[i].index.load(), seconds_since(since));
        }
        std::fflush(stderr);
        std::_Exit(3);
      }
      if (!sampling && faulted_phase.load() && fired() >= std::max<std::uint64_t>(warm, 1)) sampling = true;
      if (sampling) {
        std::lock_guard lock(rss_mu);
        rss.push_back(resident_bytes());
      }
    }
  }

  /// Simulated injector: a loss by one of four routes at random, the next one once it fired (or after 500 ms
  /// when its route found no taker), with a random gap of 0..1 ms.
  void inject_simulated(std::uint32_t seed, Clock::time_point deadline) {
    std::mt19937 rng(seed);
    faulted_phase = true;
    while (fired() < static_cast<std::uint64_t>(cfg.faults) && Clock::now() < deadline) {
      while (rig.backend->is_lost() && Clock::now() < deadline) std::this_thread::sleep_for(50us);
      // A loss shows as the lost flag or, when a replacement came first, as one more attempt (both atomics:
      // cheap to poll; fired() copies the backend's map).
      const std::uint64_t attempts = rig.backend->recovery_attempts();
      auto hit = [&] { return rig.backend->is_lost() || rig.backend->recovery_attempts() != attempts; };
      switch (rng() % 4) {
        case 0: rig.sim->arm_loss_on_invoke(1 + static_cast<int>(rng() % 4)); break;  // any op, any request
        case 1: faces::gpu::arm_fault(*rig.acc, runtime::FaultKind::kSimulatedLoss); break;  // in a face turn
        case 2: next_render_fault = static_cast<int>(rng() % 3); break;  // a render, before chunk 0..2
        default:  // outside any turn: the next request to touch the executor finds it lost
          (void)rig.backend->executor()->inject_fault(runtime::FaultKind::kSimulatedLoss);
      }
      const auto armed = Clock::now();
      while (!hit() && seconds_since(armed) < 0.5 && Clock::now() < deadline)
        std::this_thread::sleep_for(50us);
      if (!hit()) {
        rig.sim->arm_loss_on_invoke(0);
        next_render_fault = -1;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 1000));
    }
    rig.sim->arm_loss_on_invoke(0);
    next_render_fault = -1;
  }

  /// One real fault's timeline (seconds from its injection).
  struct FaultTiming {
    int route;
    double lost = -1, recovered = -1;
  };
  std::vector<FaultTiming> timings;

  /// GPU injector: a real sticky error (FaultKind::kIllegalAddress: a kernel writing through a bad pointer in
  /// the child) every 0.5–1.5 s, by two routes: outside any turn (two in three: it lands in whatever the eight
  /// workers have in flight, renders and face runs) and inside a face run's turn. Exactly one loss per fault
  /// (the render route of the simulated soak can fire once per request of one render). Records when the backend
  /// saw the loss and when the replacement child was up.
  void inject_gpu(std::uint32_t seed, Clock::time_point deadline) {
    std::mt19937 rng(seed);
    faulted_phase = true;
    for (int i = 0; i < cfg.faults && Clock::now() < deadline; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500 + rng() % 1000));
      while (rig.backend->is_lost() && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
      const std::uint64_t rec0 = rig.backend->recoveries(), lost0 = fired();
      FaultTiming t{i % 3 == 2 ? 1 : 0};
      const auto t0 = Clock::now();
      if (t.route == 0) {
        Status st = rig.backend->executor()->inject_fault(runtime::FaultKind::kIllegalAddress);
        if (st.code() != Code::kDeviceLost) stats.fail("fault " + std::to_string(i) + ": " + st.to_string());
      } else {
        faces::gpu::arm_fault(*rig.acc, runtime::FaultKind::kIllegalAddress);
      }
      while (fired() == lost0 && Clock::now() < deadline) std::this_thread::sleep_for(100us);
      t.lost = seconds_since(t0);
      while (rig.backend->recoveries() == rec0 && Clock::now() < deadline) std::this_thread::sleep_for(100us);
      t.recovered = seconds_since(t0);
      timings.push_back(t);
    }
  }

  void run() {
    stats.finished();
    std::vector<std::thread> threads;
    for (int i = 0; i < cfg.threads; ++i)
      threads.emplace_back([this, i] { worker(i, 1000u + static_cast<std::uint32_t>(i) + g_flags.seed); });
    std::thread dog([this] { watchdog(); });
    if (cfg.baseline > 0) std::this_thread::sleep_for(std::chrono::duration<double>(cfg.baseline));
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(cfg.seconds));
    if (cfg.gpu)
      inject_gpu(g_flags.seed, deadline);
    else
      inject_simulated(g_flags.seed, deadline);
    stop = true;
    for (auto& t : threads) t.join();
    dog.join();
  }
};

/// The verdict shared by both tests; `out` gets one JSON object of figures.
void check(Soak& s, std::ostringstream& out) {
  Rig& rig = s.rig;
  Stats& st = s.stats;
  for (const auto& f : st.failure_texts) ADD_FAILURE() << f;
  EXPECT_EQ(st.failures.load(), 0u);
  EXPECT_GE(s.fired(), static_cast<std::uint64_t>(s.cfg.faults)) << "not every fault fired in time";
  EXPECT_GT(st.renders.load(), 0u);
  EXPECT_GT(st.face_runs.load(), 0u);
  EXPECT_GT(st.render_fallbacks.load(), 0u) << "no render fell back: the faults missed the renders";
  EXPECT_GT(st.face_fallbacks.load(), 0u) << "no face run fell back: the faults missed the face runs";
  // The device comes back, once per loss, and the nets keep their accelerator through every loss.
  // The last loss's replacement may still be starting on the backend's recovery thread, during which
  // try_recover declines (docs/design/tracer.md §10.5): wait for it (10 s at most), recovering here if none runs.
  bool back = false;
  for (int i = 0; i < 500 && !back; ++i) {
    back = !rig.backend->is_lost() || rig.backend->try_recover();
    if (!back) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(back) << rig.backend->last_lost_reason().value_or("");
  EXPECT_EQ(rig.backend->recoveries(), s.fired()) << "one replacement per loss";
  EXPECT_EQ(rig.backend->recovery_attempts(), rig.backend->recoveries()) << "a replacement failed";
  for (std::size_t k = 0; k < rig.nets.size(); ++k) {
    EXPECT_TRUE(rig.nets[k].accelerator().has_value())
        << "net " << k << " detached: " << rig.nets[k].detach_reason().value_or("?");
  }
  // Nothing left behind: no ring slot in flight, the scratch pool within its bound.
  if (back) {
    auto ring = rig.backend->executor()->ring_stats();
    ASSERT_TRUE(ring.ok()) << ring.status().to_string();
    EXPECT_EQ(ring->in_flight, 0u) << "ring slots left in flight";
  }
  EXPECT_LE(rig.backend->pooled_scratch(), runtime::kMaxPooledScratch);
  // Resident memory flat after the warm-up (issue 13: ±10 %).
  std::uint64_t lo = 0, hi = 0, base = 0;
  {
    std::lock_guard lock(s.rss_mu);
    ASSERT_GE(s.rss.size(), 4u) << "too few RSS samples after the warm-up";
    base = s.rss.front();
    lo = *std::min_element(s.rss.begin(), s.rss.end());
    hi = *std::max_element(s.rss.begin(), s.rss.end());
  }
  if (s.cfg.check_rss) {
    EXPECT_LE(static_cast<double>(hi), static_cast<double>(base) * (1 + s.cfg.rss_band))
        << "resident memory grew: " << base << " -> " << hi << " bytes";
    EXPECT_GE(static_cast<double>(lo), static_cast<double>(base) * (1 - s.cfg.rss_band))
        << "resident memory fell: " << base << " -> " << lo << " bytes";
  }
  out << "\"faults\":" << s.fired() << ",\"recoveries\":" << rig.backend->recoveries()
      << ",\"renders\":" << st.renders << ",\"render_fallbacks\":" << st.render_fallbacks
      << ",\"gpu_spp\":" << st.gpu_samples << ",\"cpu_spp\":" << st.cpu_samples
      << ",\"face_runs\":" << st.face_runs << ",\"face_images\":" << st.face_images
      << ",\"face_fallbacks\":" << st.face_fallbacks
      << ",\"face_mismatch_fault_free_phase\":" << st.face_mismatch_free
      << ",\"face_mismatch_faulted_phase\":" << st.face_mismatch_faulted
      << ",\"face_cpu_results\":" << st.face_cpu_results << ",\"face_gpu_results\":" << st.face_gpu_results
      << ",\"rss_base_mb\":" << base / 1048576.0 << ",\"rss_min_mb\":" << lo / 1048576.0
      << ",\"rss_max_mb\":" << hi / 1048576.0;
}

void write_report(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  if (!g_flags.report.empty()) std::ofstream(g_flags.report, std::ios::app) << line << "\n";
}

// ------------------------------------------------------------------------------------------------ tests

/// The simulated rig: a simulated executor with the tracer's and the faces' simulated ops, a replacement that
/// takes 1 ms (requests arrive while it starts), small render cases with random request and chunk sizes.
void simulated_rig(Rig& rig) {
  runtime::ExecutorOptions eo;
  eo.ring_bytes = 8ull << 20;
  eo.transfer_bytes = 32ull << 20;
  auto ex = runtime::make_simulated_executor(eo);
  rig.sim = ex.get();
  tracer::testing::add_sim_trace_op(*rig.sim);
  faces::gpu::SimFacesOptions so;
  so.seen = [](runtime::OpId) { ++t_face_ops; };  // handlers run on the invoking thread
  faces::gpu::add_faces_sim_op(*rig.sim, so);
  rig.sim->set_restart_delay(1ms);
  rig.backend =
      runtime::GpuBackend::with_executor(std::move(ex), runtime::SteadyClock::instance(), soak_recovery());
  auto acc = faces::gpu::make_gpu_accelerator_on(*rig.backend, {});
  ASSERT_TRUE(acc.ok()) << acc.status().to_string();
  rig.acc = *acc;
  rig.tiny_chunks = true;
  rig.renders.push_back(render_case(19, 13, 8, 0, 9));
  rig.renders.push_back(render_case(24, 16, 6, 5, 12));
  rig.renders.push_back(render_case(11, 31, 8, 100, 7));
  for (auto& c : rig.renders) {
    ASSERT_TRUE(device_samples(*rig.backend, c).ok());
    ASSERT_TRUE(c.same_bits) << "the simulated op runs the CPU physics";
  }
  ASSERT_TRUE(add_nets(rig, {net_onnx(16, 8, 10), net_onnx(8, 4, 20)}, 4, 500).ok());
  for (const auto& c : rig.faces)
    ASSERT_TRUE(same(c.gpu, c.cpu)) << "the simulated op runs the CPU interpreter";
}

TEST(Soak, simulated_executor_eight_threads_survive_a_thousand_random_losses_exactly) {
  const Config cfg = configured(Config{});
  SinkScope logs;
  Rig rig;
  simulated_rig(rig);
  if (HasFatalFailure()) return;
  Soak soak(rig, cfg);
  const auto t0 = Clock::now();
  soak.run();
  const double wall = seconds_since(t0);
  std::ostringstream out;
  out << "{\"soak\":\"simulated\",\"threads\":" << cfg.threads << ",\"seconds\":" << wall << ",";
  check(soak, out);
  EXPECT_EQ(logs.sink->unexpected.load(), 0u);
  for (const auto& m : logs.sink->first_unexpected()) ADD_FAILURE() << "unexpected log: " << m;
  out << ",\"loss_logs\":" << logs.sink->loss_logs << "}";
  write_report(out.str());
}

/// Median of `v` (0 when empty).
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

TEST(SoakGpu, twenty_real_sticky_faults_during_renders_and_face_runs_cost_only_their_replacement) {
  Config base;
  base.faults = 20;
  base.seconds = 120;
  base.baseline = 15;
  base.gpu = true;
  base.warmup_fraction = 0.25;
  base.check_rss = false;
  const Config cfg = configured(base);
  SinkScope logs;
  Rig rig;
  if (g_flags
          .gpu_on_sim) {  // the GPU soak's injector and figures on the simulated rig (a check without a GPU)
    simulated_rig(rig);
    if (HasFatalFailure()) return;
  } else {
    rig.backend = runtime::GpuBackend::with_executor(runtime::make_isolated_executor(),
                                                     runtime::SteadyClock::instance(), soak_recovery());
    if (auto why = rig.backend->unavailable_reason()) GTEST_SKIP() << "no usable GPU child: " << *why;
    auto acc = faces::gpu::make_gpu_accelerator_on(*rig.backend, {});
    ASSERT_TRUE(acc.ok()) << acc.status().to_string();
    rig.acc = *acc;
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    rig.render_threads = std::max(1u, cores / static_cast<unsigned>(cfg.threads));
    rig.renders.push_back(render_case(128, 128, 8, 0, 64));
    rig.renders.push_back(render_case(96, 64, 8, 16, 128));
    rig.renders.push_back(render_case(200, 150, 6, 0, 32));
    for (auto& c : rig.renders) {
      Status st = device_samples(*rig.backend, c);
      ASSERT_TRUE(st.ok()) << st.to_string();
      std::size_t differ = 0;
      for (std::size_t i = 0; i < c.cpu.size(); ++i) differ += c.cpu[i] != c.gpu[i];
      write_report("{\"render_case\":\"" + std::to_string(c.scene.width) + "x" +
                   std::to_string(c.scene.height) + "\",\"spp\":" + std::to_string(c.spp) +
                   ",\"sample_values_differing_from_the_cpu\":" + std::to_string(differ) +
                   ",\"of\":" + std::to_string(c.cpu.size()) + "}");
    }
    Status st = add_nets(rig, {net_onnx(64, 32, 10), net_onnx(32, 16, 20)}, 4, 500);
    ASSERT_TRUE(st.ok()) << st.to_string();
    for (std::size_t i = 0; i < rig.faces.size(); ++i)
      write_report("{\"face_case\":" + std::to_string(i) + ",\"net\":" + std::to_string(rig.faces[i].net) +
                   ",\"images\":" + std::to_string(rig.faces[i].inputs.size()) +
                   ",\"equals_cpu\":" + (same(rig.faces[i].gpu, rig.faces[i].cpu) ? "true" : "false") +
                   ",\"repeatable\":" + (rig.faces[i].repeatable ? "true" : "false") + "}");
  }

  Soak soak(rig, cfg);
  const auto t0 = Clock::now();
  soak.run();
  const double wall = seconds_since(t0);
  std::ostringstream out;
  out << "{\"soak\":\"gpu\",\"device\":\"" << rig.backend->adapter_label().value_or("?")
      << "\",\"threads\":" << cfg.threads << ",\"seconds\":" << wall << ",";
  check(soak, out);
  EXPECT_EQ(logs.sink->unexpected.load(), 0u);
  for (const auto& m : logs.sink->first_unexpected()) ADD_FAILURE() << "unexpected log: " << m;
  // The cost of the faults: every request that fell back, against the median of its case without faults.
  std::vector<std::vector<double>> free_s[2];
  free_s[0].resize(rig.renders.size());
  free_s[1].resize(rig.faces.size());
  double excess = 0;
  std::uint64_t affected = 0, free_n = 0, faulted_n = 0;
  double free_t = 0, faulted_t = 0;
  for (const auto& x : soak.stats.samples)
    if (!x.faulted_phase) free_s[x.kind][static_cast<std::size_t>(x.index)].push_back(x.seconds);
  for (const auto& x : soak.stats.samples) {
    (x.faulted_phase ? faulted_n : free_n)++;
    (x.faulted_phase ? faulted_t : free_t) += x.seconds;
    if (x.faulted_phase && x.fell_back) {
      ++affected;
      excess += x.seconds - median(free_s[x.kind][static_cast<std::size_t>(x.index)]);
    }
  }
  std::vector<double> outage;
  for (const auto& t : soak.timings) outage.push_back(t.recovered - t.lost);
  out << ",\"fault_free_requests\":" << free_n << ",\"fault_free_mean_s\":" << (free_n ? free_t / free_n : 0)
      << ",\"faulted_requests\":" << faulted_n
      << ",\"faulted_mean_s\":" << (faulted_n ? faulted_t / faulted_n : 0) << ",\"fell_back\":" << affected
      << ",\"excess_s_per_fault\":" << excess / std::max<std::size_t>(1, soak.timings.size())
      << ",\"outage_median_s\":" << median(outage)
      << ",\"outage_max_s\":" << (outage.empty() ? 0 : *std::max_element(outage.begin(), outage.end()))
      << "}";
  write_report(out.str());
  static constexpr const char* kRoutes[] = {"outside a turn", "in a face run"};
  for (std::size_t i = 0; i < soak.timings.size(); ++i) {
    std::ostringstream f;
    f << "{\"fault\":" << i << ",\"route\":\"" << kRoutes[soak.timings[i].route]
      << "\",\"lost_after_s\":" << soak.timings[i].lost
      << ",\"recovered_after_s\":" << soak.timings[i].recovered << "}";
    write_report(f.str());
  }
  EXPECT_EQ(soak.timings.size(), static_cast<std::size_t>(cfg.faults));
  EXPECT_EQ(soak.fired(), soak.timings.size()) << "one loss per injected fault";
}

}  // namespace
}  // namespace facetrace::soak

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);  // removes the gtest flags
  using facetrace::soak::g_flags;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    const bool number = end && *end == '\0' && !value.empty();
    if (flag == "--soak-report") {
      g_flags.report = value;
      continue;
    }
    if (!number || v < 0 || v > 1e7) {
      std::fprintf(stderr, "soak_test: %s needs a number in [0, 1e7], got '%s'\n", flag.c_str(),
                   value.c_str());
      return 2;
    }
    if (flag == "--soak-threads")
      g_flags.threads = static_cast<int>(v);
    else if (flag == "--soak-faults")
      g_flags.faults = static_cast<int>(v);
    else if (flag == "--soak-seconds")
      g_flags.seconds = v;
    else if (flag == "--soak-stall")
      g_flags.stall = v;
    else if (flag == "--soak-baseline")
      g_flags.baseline = v;
    else if (flag == "--soak-seed")
      g_flags.seed = static_cast<std::uint32_t>(v);
    else if (flag == "--soak-gpu-on-sim")
      g_flags.gpu_on_sim = v != 0;
    else {
      std::fprintf(stderr,
                   "soak_test: unknown flag '%s' "
                   "(--soak-threads/faults/seconds/stall/baseline/seed/gpu-on-sim/report)\n",
                   flag.c_str());
      return 2;
    }
  }
  if (argc % 2 == 0) {
    std::fprintf(stderr, "soak_test: flag '%s' has no value\n", argv[argc - 1]);
    return 2;
  }
  return RUN_ALL_TESTS();
}
