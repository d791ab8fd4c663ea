/// @file
/// `facetrace render`: scene file (or the built-in diamond) → GPU or CPU tracer → PNG (+ optional EXR of the
/// sums); progress, the JSON summary, metrics and exit codes as docs/cli.md describes.
#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "exit_codes.h"
#include "facetrace/core/file.h"
#include "facetrace/core/text.h"
#include "facetrace/runtime/backend.h"
#include "facetrace/tracer/cpu_tracer.h"
#ifdef FT_HAVE_FARM
#include "facetrace/tracer/farm.h"  // farm::build_id() for the EXR's build attribute
#endif
#include "facetrace/tracer/output.h"
#include "facetrace/tracer/renderer.h"
#include "facetrace/tracer/scene_json.h"
#include "metrics.h"
#include "progress.h"
#include "signals.h"

namespace facetrace::cli {
namespace {

namespace tr = facetrace::tracer;
/// --json stays valid JSON whatever a string holds (docs/limits.md): bytes that are not UTF-8 become U+FFFD.
constexpr auto kReplace = nlohmann::json::error_handler_t::replace;

constexpr std::uint64_t kMaxSpp = 1u << 20;  // "sane": 1 M samples per pixel per run
constexpr std::uint64_t kMaxFirstSample = 1ull << 40;
constexpr std::uint64_t kMaxThreads = 4096;

// ---- inputs -----------------------------------------------------------------------------------------

struct RenderArgs {
  std::string scene_path;
  std::string output;
  std::string exr;
  std::string save_scene;
  std::string spp = "64";
  std::string first_sample = "0";
  std::string width, height, max_bounces;
  std::string device = "auto";
  std::string threads = "0";
  std::string progress = "auto";
  std::string metrics_file;
  bool json = false;
  bool quiet = false;
  bool hybrid = false;
};

/// Parses a decimal integer option in [lo, hi]; the error names the flag.
Expected<std::uint64_t> parse_count(const std::string& flag, const std::string& text, std::uint64_t lo,
                                    std::uint64_t hi) {
  std::uint64_t v = 0;
  const char* b = text.data();
  const char* e = b + text.size();
  if (!text.empty() && text[0] == '-')
    return invalid_argument(flag + ": must not be negative, got " + core::printable(text));
  const auto r = std::from_chars(b, e, v);
  if (text.empty() || r.ec == std::errc::invalid_argument || r.ptr != e)
    return invalid_argument(flag + ": expected a whole number, got \"" + core::printable(text) + "\"");
  if (r.ec == std::errc::result_out_of_range || v < lo || v > hi)
    return invalid_argument(flag + ": must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                            "], got " + core::printable(text));
  return v;
}

/// The output `path` must be a writable regular file or a new one in a writable directory: not a directory,
/// FIFO or device (core/file.h check_output_path).
Status check_writable_target(const std::string& flag, const std::string& path) {
  return core::check_output_path({flag, path});
}

void store_max(std::atomic<double>& a, double v) {
  double cur = a.load();
  while (v > cur && !a.compare_exchange_weak(cur, v)) {
  }
}

// ---- the command ----------------------------------------------------------------------------------------

/// Why the command stops: its exit code and the message printed after "facetrace render: ".
struct Failure {
  int code;
  std::string what;
};

/// An option error: kNotSupported is a failure of the build, anything else bad input.
Failure input_failure(const Status& st) {
  return {st.code() == Code::kNotSupported ? kExitFailure : kExitBadInput, st.what()};
}

/// The numeric options, the device and the progress mode, parsed and range-checked.
struct Options {
  std::uint64_t spp = 0, first = 0, threads = 0;
  std::optional<std::uint64_t> width, height, bounces;
  tr::RenderDevice device{};
  ProgressMode progress = ProgressMode::kAuto;
  bool hybrid = false;
};

/// Parses the options first: cheap checks before any file is read.
std::optional<Failure> parse_options(const RenderArgs& a, Options& o) {
  auto count = [](const std::string& flag, const std::string& text, std::uint64_t lo, std::uint64_t hi,
                  std::uint64_t& out) -> std::optional<Failure> {
    auto v = parse_count(flag, text, lo, hi);
    if (!v.ok()) return input_failure(v.status());
    out = *v;
    return std::nullopt;
  };
  auto optional_count = [&](const std::string& flag, const std::string& text, std::uint64_t hi,
                            std::optional<std::uint64_t>& out) -> std::optional<Failure> {
    if (text.empty()) return std::nullopt;
    std::uint64_t v = 0;
    if (auto f = count(flag, text, 1, hi, v)) return f;
    out = v;
    return std::nullopt;
  };
  if (auto f = count("--spp", a.spp, 1, kMaxSpp, o.spp)) return f;
  if (auto f = count("--first-sample", a.first_sample, 0, kMaxFirstSample, o.first)) return f;
  // the tracer's sample identity is 32-bit (docs/design/tracer.md §9): the whole range must fit below 2^32
  // (the renderer's bound: first + spp <= 2^32 - 1)
  if (o.first + o.spp > 0xFFFFFFFFull)
    return Failure{kExitBadInput, "--first-sample " + std::to_string(o.first) + " + --spp " + std::to_string(o.spp) +
                                      " is past the last sample range the tracer takes (first + spp <= 4294967295)"};
  if (auto f = count("--threads", a.threads, 0, kMaxThreads, o.threads)) return f;
  if (auto f = optional_count("--width", a.width, 7680, o.width)) return f;
  if (auto f = optional_count("--height", a.height, 4320, o.height)) return f;
  if (auto f = optional_count("--max-bounces", a.max_bounces, 128, o.bounces)) return f;
  auto device = tr::parse_render_device(a.device);
  if (!device.ok()) return input_failure(device.status());
  o.device = *device;
  if (a.hybrid && o.device == tr::RenderDevice::kCpu)
    return Failure{kExitBadInput, "--hybrid adds CPU lanes next to the GPU: it needs --device auto or gpu"};
  o.hybrid = a.hybrid;
  auto progress = parse_progress_mode(a.progress);
  if (!progress.ok()) return input_failure(progress.status());
  o.progress = a.quiet ? ProgressMode::kNone : *progress;
  return std::nullopt;
}

/// The scene (a file, or the built-in diamond) with the overrides applied, validated and within Tier 1; the
/// output targets checked, and the resolved scene saved when asked. Sets `output` to the PNG path. A scene
/// file that cannot be read is bad input (2); one that is read but invalid is an invalid job (42, permanent).
std::optional<Failure> prepare_scene(const RenderArgs& a, const Options& o, tr::Scene& scene,
                                     std::string& output) {
  output = a.output;
  if (a.scene_path.empty()) {
    scene = tr::builtin_diamond_scene();
    if (output.empty()) output = "diamond.png";
  } else {
    auto loaded = tr::load_scene_file(a.scene_path);
    if (!loaded.ok())
      return Failure{loaded.status().code() == Code::kIo ? kExitBadInput : kExitInvalidJob,
                     loaded.status().what()};
    scene = std::move(loaded).value();
    if (output.empty()) output = std::filesystem::path(a.scene_path).stem().string() + ".png";
  }
  if (o.width) scene.width = static_cast<std::uint32_t>(*o.width);
  if (o.height) scene.height = static_cast<std::uint32_t>(*o.height);
  if (o.bounces) scene.max_bounces = static_cast<std::uint32_t>(*o.bounces);
  if (Status st = tr::validate_scene(scene); !st.ok()) return Failure{kExitInvalidJob, st.what()};
  if (Status st = tr::tier_features(scene).status(); !st.ok())
    return Failure{kExitFailure, "not supported: " + st.what()};

  // No output may be an input or another output of this command (core/file.h check_outputs, which also runs
  // check_writable_target's checks on each).
  std::vector<core::NamedPath> inputs, outputs{{"-o", output}};
  if (!a.scene_path.empty()) inputs.push_back({"scene", a.scene_path});
  if (!a.exr.empty()) outputs.push_back({"--exr", a.exr});
  if (!a.metrics_file.empty()) outputs.push_back({"--metrics-file", a.metrics_file});
  if (!a.save_scene.empty()) outputs.push_back({"--save-scene", a.save_scene});
  if (Status st = core::check_outputs(inputs, outputs); !st.ok()) return Failure{kExitBadInput, st.what()};
  if (Status st = check_writable_target("-o", output); !st.ok()) return Failure{kExitBadInput, st.what()};
  if (!a.exr.empty())
    if (Status st = check_writable_target("--exr", a.exr); !st.ok()) return Failure{kExitBadInput, st.what()};
  if (!a.metrics_file.empty())
    if (Status st = check_writable_target("--metrics-file", a.metrics_file); !st.ok())
      return Failure{kExitBadInput, st.what()};
  if (!a.save_scene.empty()) {
    if (Status st = tr::save_scene_file(scene, a.save_scene); !st.ok())
      return Failure{kExitFailure, st.what()};
  }
  return std::nullopt;
}

/// --metrics-file: the render's counters (docs/cli.md "Metrics"), rewritten at start, every few seconds and at
/// the end. The GPU backend's counters are read only when the render may use the GPU (device cpu never
/// starts a GPU child); they are process totals, and this process renders once.
class MetricsSink {
 public:
  MetricsSink(std::string path, bool gpu) : path_(std::move(path)), gpu_(gpu) {}

  /// The first write: its failure is bad input (checked before the render).
  Status start() { return enabled() ? write_metrics_file(path_, snapshot(0, 0)) : Status{}; }

  /// A rewrite during the render (at most every kPeriodS): progress and the backend's counters.
  void during(double fraction, double elapsed_s) {
    if (!enabled() || elapsed_s - last_s_ < kPeriodS) return;
    last_s_ = elapsed_s;
    warn_once(write_metrics_file(path_, snapshot(fraction, elapsed_s)));
  }

  /// The last write, with the report when the render produced one.
  void finish(const tr::RenderReport* report, std::uint64_t pixels, double elapsed_s, int exit_code) {
    if (!enabled()) return;
    Metrics m = snapshot(report ? 1.0 : 0.0, elapsed_s);
    if (report) {
      for (runtime::Outcome o : report->outcomes) {
        if (o == runtime::Outcome::kDone) ++m.requests_done_gpu;
        if (o == runtime::Outcome::kDeclined) ++m.requests_declined;
        if (o == runtime::Outcome::kCancelled) ++m.requests_cancelled;
      }
      m.requests_done_cpu = report->request_samples.size() - m.requests_done_gpu;
      m.paths_gpu = report->gpu_samples * pixels;
      m.paths_cpu = report->cpu_samples * pixels;
    }
    if (gpu_) {
      runtime::GpuBackend& b = tr::shared_gpu_backend();
      if (b.state() == runtime::BackendState::kReady && b.executor() != nullptr)
        if (auto ring = b.executor()->ring_stats(); ring.ok()) m.ring_stalls = ring->stalls;
    }
    m.finished = true;
    m.exit_code = exit_code;
    warn_once(write_metrics_file(path_, m));
  }

 private:
  static constexpr double kPeriodS = 2.0;
  bool enabled() const { return !path_.empty(); }
  Metrics snapshot(double fraction, double elapsed_s) const {
    Metrics m;
    m.seconds = elapsed_s;
    m.progress = fraction;
    if (gpu_) {
      const runtime::GpuBackend& b = tr::shared_gpu_backend();
      for (const auto& [reason, n] : b.losses_by_reason()) m.device_losses[loss_error_name(reason)] += n;
      m.child_restarts = b.recovery_attempts();
      m.recoveries = b.recoveries();
    }
    return m;
  }
  void warn_once(const Status& st) {
    if (st.ok() || warned_) return;
    warned_ = true;
    std::fprintf(stderr, "facetrace render: warning: %s (the render goes on)\n", st.what().c_str());
  }
  std::string path_;
  bool gpu_;
  double last_s_ = 0;
  bool warned_ = false;
};

/// What the render loop hands back: the report (or error), the progress reached and the wall time.
struct RenderRun {
  Expected<tr::RenderReport> result{Status(Code::kInternal, "render did not run")};
  double fraction = 0;
  double seconds = 0;
};

/// Renders on a worker thread (GPU requests with CPU fallback, tracer::render) while this thread draws the
/// progress (--progress) and rewrites the metrics file; SIGINT, SIGTERM and SIGHUP cancel (signals.h).
RenderRun render_with_progress(const tr::Scene& scene, const Options& o, unsigned nthreads, tr::Film& film,
                               const CancelOnSignals& signals, MetricsSink& metrics) {
  RenderRun run;
  std::atomic<double> fraction{0};
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;  // under mu: the loop below wakes at once when the render ends, not at its next poll
  const std::uint64_t total = film.pixels() * o.spp;
  ProgressReporter progress(o.progress, "render", total);
  auto paths_at = [total](double f) { return static_cast<std::uint64_t>(std::clamp(f, 0.0, 1.0) * total); };
  const auto t0 = std::chrono::steady_clock::now();
  {
    std::thread worker([&] {
      tr::RenderOptions opt;
      opt.device = o.device;
      opt.threads = nthreads;
      opt.hybrid = o.hybrid;
      opt.hybrid_threads = o.threads == 0 ? 0 : nthreads;
      opt.cancel = signals.flag();
      opt.progress = [&](double f) { store_max(fraction, f); };
      run.result = tr::render(scene, o.first, static_cast<std::uint32_t>(o.spp), film, opt);
      // The render's own time, taken here: the summary's paths/s must not include the progress loop's latency.
      run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::lock_guard lock(mu);
      finished = true;
      cv.notify_one();
    });
    std::unique_lock lock(mu);
    while (!cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return finished; })) {
      lock.unlock();
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double f = fraction.load();
      progress.update(paths_at(f), elapsed);
      metrics.during(f, elapsed);
      lock.lock();
    }
    lock.unlock();
    worker.join();
  }
  run.fraction = run.result.ok() ? 1.0 : fraction.load();
  progress.finish(paths_at(run.fraction), run.seconds);
  return run;
}

/// Writes the PNG and, when asked, the EXR of the sums with the compact scene in its header; appends every
/// path written to `files`.
std::optional<Failure> write_outputs(const RenderArgs& a, const Options& o, const tr::Scene& scene,
                                     const tr::Film& film, const std::string& output, double seconds,
                                     std::vector<std::string>& files) {
  if (Status st = tr::write_png(output, tr::tonemap_film(film)); !st.ok())
    return Failure{kExitFailure, st.what()};
  files.push_back(output);
  if (!a.exr.empty()) {
    tr::ExrInfo info;
    info.first_sample = o.first;
    info.samples = o.spp;
    info.nonfinite = film.nonfinite;
    info.render_seconds = seconds;
#ifdef FT_HAVE_FARM
    info.build = facetrace::farm::build_id();
#endif
    tr::SceneJsonOptions compact;
    compact.indent = -1;
    info.scene_json = tr::scene_to_json(scene, compact);
    if (Status st = tr::write_exr(a.exr, film, info); !st.ok()) return Failure{kExitFailure, st.what()};
    files.push_back(a.exr);
  }
  return std::nullopt;
}

/// docs/cli.md "Devices": with --device gpu only requests lost with the device may be redone on the CPU (the
/// renderer refuses every other decline with kDeclined), and only if the GPU came back: 43 when it is still
/// lost at the end, 1 should any other decline get here. nullopt: nothing to object to. Under --device auto a
/// decline is no failure (the renderer warns once; the summary counts them).
std::optional<Failure> judge_fallbacks(const Options& o, const tr::RenderReport& r) {
  if (r.declined == 0 || o.device != tr::RenderDevice::kGpu) return std::nullopt;
  const runtime::GpuBackend& b = tr::shared_gpu_backend();
  const std::string n = std::to_string(r.declined) + " GPU request" + (r.declined == 1 ? "" : "s");
  if (b.is_lost())
    return Failure{kExitGpuUnavailable, "--device gpu: the GPU was lost (" +
                                            b.last_lost_reason().value_or("?") + ") and not recovered; " + n +
                                            " rendered on the CPU instead"};
  if (r.declined_by_loss == r.declined) return std::nullopt;
  return Failure{kExitFailure, "--device gpu: " + n + " declined by the GPU and rendered on the CPU instead"};
}

/// Exit code of a failed render: --device gpu without a usable GPU is 43 (retry elsewhere), except when the
/// GPU is there but this build cannot use it ("not supported: no kernel image …", a driver too old): 1.
Failure render_failure(const Options& o, const Status& st) {
  if (st.code() == Code::kInvalidArgument) return {kExitBadInput, st.what()};
  if (o.device == tr::RenderDevice::kGpu && st.code() == Code::kNotSupported &&
      st.what().find("no usable GPU") != std::string::npos &&
      st.what().find("not supported") == std::string::npos)
    return {kExitGpuUnavailable, st.what()};
  return {kExitFailure, st.what()};
}

int run_render(const RenderArgs& a) {
  auto fail = [&a](const Failure& f) {
    std::fprintf(stderr, "facetrace render: %s\n", f.what.c_str());
    if (a.json)
      std::printf("%s\n", nlohmann::json{{"ok", false}, {"exit_code", f.code}, {"error", f.what}}
                              .dump(-1, ' ', false, kReplace)
                              .c_str());
    return f.code;
  };
  Options o;
  if (auto f = parse_options(a, o)) return fail(*f);
  tr::Scene scene;
  std::string output;
  if (auto f = prepare_scene(a, o, scene, output)) return fail(*f);
  MetricsSink metrics(a.metrics_file, o.device != tr::RenderDevice::kCpu);
  if (Status st = metrics.start(); !st.ok()) return fail({kExitBadInput, st.what()});

  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const unsigned nthreads = o.threads == 0 ? hw : static_cast<unsigned>(o.threads);
  if (!a.quiet)
    std::fprintf(stderr, "rendering %ux%u x %llu spp (%s, %s, %u bounces), device %s\n", scene.width,
                 scene.height, static_cast<unsigned long long>(o.spp),
                 core::printable(scene.material.name).c_str(),
                 std::string(tr::lighting_preset_name(scene.lighting_preset)).c_str(), scene.max_bounces,
                 a.device.c_str());

  tr::Film film(scene.width, scene.height);
  CancelOnSignals signals;
  const RenderRun run = render_with_progress(scene, o, nthreads, film, signals, metrics);
  const tr::RenderReport* report = run.result.ok() ? &*run.result : nullptr;
  auto finish = [&](const Failure& f) {
    metrics.finish(report, film.pixels(), run.seconds, f.code);
    return fail(f);
  };
  if (run.result.status().code() == Code::kCancelled || signals.cancelled())
    return finish({signals.exit_code(), std::string("cancelled by ") + signal_name(signals.signal_number()) +
                                            " at " + std::to_string(static_cast<int>(run.fraction * 100)) +
                                            " %; nothing written"});
  if (!run.result.ok()) return finish(render_failure(o, run.result.status()));
  std::vector<std::string>
      files;  // every file the command wrote (the metrics file is a side channel: not listed)
  if (!a.save_scene.empty()) files.push_back(a.save_scene);
  if (auto f = write_outputs(a, o, scene, film, output, run.seconds, files)) return finish(*f);
  const tr::RenderReport& r = *run.result;
  const std::optional<Failure> fallback = judge_fallbacks(o, r);
  const int code = fallback ? fallback->code : kExitOk;
  metrics.finish(report, film.pixels(), run.seconds, code);

  const double paths = static_cast<double>(film.pixels()) * static_cast<double>(o.spp);
  if (a.json) {
    nlohmann::json j{{"ok", code == kExitOk},
                     {"exit_code", code},
                     {"device", r.device},
                     {"width", scene.width},
                     {"height", scene.height},
                     {"spp", o.spp},
                     {"first_sample", o.first},
                     {"seconds", run.seconds},
                     {"gpu_start_seconds", r.gpu_start_seconds},
                     {"paths", static_cast<std::uint64_t>(paths)},
                     {"paths_per_s", paths / run.seconds},
                     {"declined", r.declined},
                     {"declined_by_loss", r.declined_by_loss},
                     {"decline_reasons", r.decline_reasons},
                     {"gpu_samples", r.gpu_samples},
                     {"cpu_samples", r.cpu_samples},
                     {"hybrid_stopped", r.hybrid_stopped},
                     {"nonfinite", film.nonfinite},
                     {"files", files}};
    if (fallback) j["error"] = fallback->what;
    std::printf("%s\n", j.dump(-1, ' ', false, kReplace).c_str());
  } else if (!a.quiet) {
    const std::string where =
        r.cpu_samples ? r.device + " (" + std::to_string(nthreads) + " CPU threads)" : r.device;
    std::printf("rendered %ux%u x %llu spp on %s in %.2f s: %.2f M paths/s", scene.width, scene.height,
                static_cast<unsigned long long>(o.spp), where.c_str(), run.seconds,
                paths / run.seconds / 1e6);
    // The GPU child's start is paid once per process (bench_tracer leaves it out): show the rate without it.
    if (r.gpu_samples && r.gpu_start_seconds >= 0.01 && run.seconds > r.gpu_start_seconds)
      std::printf(" (%.2f M paths/s after %.2f s of GPU start-up)",
                  paths / (run.seconds - r.gpu_start_seconds) / 1e6, r.gpu_start_seconds);
    std::printf(", %llu non-finite", static_cast<unsigned long long>(film.nonfinite));
    if (r.declined) std::printf(", %u GPU requests declined and redone on the CPU", r.declined);
    std::printf("\n");
    for (const std::string& f : files) std::printf("wrote %s\n", core::printable(f).c_str());
  }
  if (fallback) std::fprintf(stderr, "facetrace render: %s (outputs written)\n", fallback->what.c_str());
  return code;
}

}  // namespace

void register_render(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<RenderArgs>();
  auto* cmd = app.add_subcommand(
      "render", "Render a gem scene (JSON, see docs/scene-format.md; default: the built-in diamond) to PNG");
  cmd->add_option("scene", args->scene_path, "scene JSON file (default: built-in round brilliant diamond)")
      ->type_name("FILE");
  cmd->add_option("-o,--output", args->output, "PNG to write (default: diamond.png, or <scene name>.png)")
      ->type_name("FILE");
  cmd->add_option("--exr", args->exr, "also write the linear XYZ sums and sample counts (additive) as EXR")
      ->type_name("FILE");
  cmd->add_option("--spp", args->spp, "samples per pixel (default 64)")->type_name("N");
  cmd->add_option("--first-sample", args->first_sample, "first absolute sample index (default 0)")
      ->type_name("S");
  cmd->add_option("--width", args->width, "image width (overrides the scene)")->type_name("W");
  cmd->add_option("--height", args->height, "image height (overrides the scene)")->type_name("H");
  cmd->add_option("--max-bounces", args->max_bounces, "path length limit, 1..128 (overrides the scene)")
      ->type_name("B");
  cmd->add_option("--device", args->device,
                  "auto | cpu | gpu (default auto; gpu fails instead of falling back to the CPU)")
      ->type_name("DEVICE");
  cmd->add_option("--threads", args->threads, "CPU threads (default 0 = all cores)")->type_name("N");
  cmd->add_option("--save-scene", args->save_scene, "write the resolved scene (after overrides) as JSON")
      ->type_name("FILE");
  cmd->add_option(
         "--progress", args->progress,
         "auto | bar | lines | json | none on stderr (default auto: a bar on a terminal, else a line "
         "per percent)")
      ->type_name("MODE");
  cmd->add_flag("--hybrid", args->hybrid,
                "CPU lanes next to the GPU: --threads CPU threads (default all but two) trace samples after each "
                "GPU batch, committed in sample order (docs/design/tracer.md §10.7)");
  cmd->add_flag("--json", args->json, "print one JSON summary object on stdout instead of the summary lines");
  cmd->add_option("--metrics-file", args->metrics_file,
                  "keep Prometheus text metrics in FILE (rewritten atomically every 2 s and at the end)")
      ->type_name("FILE");
  cmd->add_flag("-q,--quiet", args->quiet, "no progress and no summary (--json still prints its object)");
  cmd->callback([args, &exit_code] { exit_code = run_render(*args); });
}

}  // namespace facetrace::cli
