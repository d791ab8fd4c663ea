/// @file
/// `facetrace render`: scene file (or the built-in diamond) → CPU tracer → PNG (+ optional EXR of the sums).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include "commands.h"
#include "exit_codes.h"
#include "facetrace/core/file.h"
#include "facetrace/tracer/cpu_tracer.h"
#include "facetrace/tracer/output.h"
#include "facetrace/tracer/renderer.h"
#include "facetrace/tracer/scene_json.h"

namespace facetrace::cli {
namespace {

namespace tr = facetrace::tracer;

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
  bool quiet = false;
};

/// Parses a decimal integer option in [lo, hi]; the error names the flag.
Expected<std::uint64_t> parse_count(const std::string& flag, const std::string& text, std::uint64_t lo,
                                    std::uint64_t hi) {
  std::uint64_t v = 0;
  const char* b = text.data();
  const char* e = b + text.size();
  if (!text.empty() && text[0] == '-') return invalid_argument(flag + ": must not be negative, got " + text);
  const auto r = std::from_chars(b, e, v);
  if (text.empty() || r.ec == std::errc::invalid_argument || r.ptr != e)
    return invalid_argument(flag + ": expected a whole number, got \"" + text + "\"");
  if (r.ec == std::errc::result_out_of_range || v < lo || v > hi)
    return invalid_argument(flag + ": must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                            "], got " + text);
  return v;
}

/// The output `path` must be a writable regular file or a new one in a writable directory: not a directory,
/// FIFO or device (core/file.h check_output_path).
Status check_writable_target(const std::string& flag, const std::string& path) {
  return core::check_output_path({flag, path});
}

// ---- cancellation and progress ------------------------------------------------------------------------

std::atomic<bool> g_cancel{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the SIGINT handler needs a lock-free flag");

extern "C" void on_sigint(int) {
  g_cancel.store(true);
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process at once
}

/// Installs the SIGINT → cancel handler for its lifetime.
class SigintScope {
 public:
  SigintScope() {
    g_cancel.store(false);
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_);
  }
  ~SigintScope() { sigaction(SIGINT, &old_, nullptr); }
  SigintScope(const SigintScope&) = delete;
  SigintScope& operator=(const SigintScope&) = delete;

 private:
  struct sigaction old_ {};
};

/// Progress on stderr: a bar redrawn ≤ 10×/s on a terminal, a line per 25 % otherwise, nothing when quiet.
class Progress {
 public:
  explicit Progress(bool quiet) : quiet_(quiet), tty_(::isatty(STDERR_FILENO) == 1) {}

  void update(double fraction, double elapsed_s) {
    if (quiet_) return;
    fraction = std::clamp(fraction, 0.0, 1.0);
    if (tty_) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(fraction * kWidth);
      std::string bar(static_cast<std::size_t>(filled), '#');
      bar.resize(kWidth, '-');
      char eta[32] = "";
      if (fraction > 0.02 && fraction < 1)
        std::snprintf(eta, sizeof eta, "  ETA %.0f s", elapsed_s * (1 - fraction) / fraction);
      std::fprintf(stderr, "\r[%s] %3d%%  %.1f s%s   ", bar.c_str(), static_cast<int>(fraction * 100),
                   elapsed_s, eta);
      std::fflush(stderr);
      drawn_ = true;
    } else {
      while (next_line_ <= 75 && fraction * 100 >= next_line_) {
        std::fprintf(stderr, "render: %d%% (%.1f s)\n", next_line_, elapsed_s);
        next_line_ += 25;
      }
    }
  }
  void finish() {
    if (drawn_) std::fprintf(stderr, "\n");
    drawn_ = false;
  }

 private:
  bool quiet_;
  bool tty_;
  bool drawn_ = false;
  int next_line_ = 25;
};

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

/// An option or scene error: kNotSupported is a failure of the build, anything else bad input.
Failure input_failure(const Status& st) {
  return {st.code() == Code::kNotSupported ? kExitFailure : kExitBadInput, st.what()};
}

/// The numeric options and the device, parsed and range-checked.
struct Options {
  std::uint64_t spp = 0, first = 0, threads = 0;
  std::optional<std::uint64_t> width, height, bounces;
  tr::RenderDevice device{};
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
  if (auto f = count("--threads", a.threads, 0, kMaxThreads, o.threads)) return f;
  if (auto f = optional_count("--width", a.width, 7680, o.width)) return f;
  if (auto f = optional_count("--height", a.height, 4320, o.height)) return f;
  if (auto f = optional_count("--max-bounces", a.max_bounces, 128, o.bounces)) return f;
  auto device = tr::parse_render_device(a.device);
  if (!device.ok()) return input_failure(device.status());
  o.device = *device;
  return std::nullopt;
}

/// The scene (a file, or the built-in diamond) with the overrides applied, validated and within Tier 1; the
/// output targets checked, and the resolved scene saved when asked. Sets `output` to the PNG path.
std::optional<Failure> prepare_scene(const RenderArgs& a, const Options& o, tr::Scene& scene,
                                     std::string& output) {
  output = a.output;
  if (a.scene_path.empty()) {
    scene = tr::builtin_diamond_scene();
    if (output.empty()) output = "diamond.png";
  } else {
    auto loaded = tr::load_scene_file(a.scene_path);
    if (!loaded.ok()) return Failure{kExitBadInput, loaded.status().what()};
    scene = std::move(loaded).value();
    if (output.empty()) output = std::filesystem::path(a.scene_path).stem().string() + ".png";
  }
  if (o.width) scene.width = static_cast<std::uint32_t>(*o.width);
  if (o.height) scene.height = static_cast<std::uint32_t>(*o.height);
  if (o.bounces) scene.max_bounces = static_cast<std::uint32_t>(*o.bounces);
  if (Status st = tr::validate_scene(scene); !st.ok()) return Failure{kExitBadInput, st.what()};
  if (Status st = tr::tier_features(scene).status(); !st.ok())
    return Failure{kExitFailure, "not supported: " + st.what()};

  // No output may be an input or another output of this command (core/file.h check_outputs, which also runs
  // check_writable_target's checks on each).
  std::vector<core::NamedPath> inputs, outputs{{"-o", output}};
  if (!a.scene_path.empty()) inputs.push_back({"scene", a.scene_path});
  if (!a.exr.empty()) outputs.push_back({"--exr", a.exr});
  if (!a.save_scene.empty()) outputs.push_back({"--save-scene", a.save_scene});
  if (Status st = core::check_outputs(inputs, outputs); !st.ok()) return Failure{kExitBadInput, st.what()};
  if (Status st = check_writable_target("-o", output); !st.ok()) return Failure{kExitBadInput, st.what()};
  if (!a.exr.empty())
    if (Status st = check_writable_target("--exr", a.exr); !st.ok()) return Failure{kExitBadInput, st.what()};
  if (!a.save_scene.empty()) {
    if (Status st = tr::save_scene_file(scene, a.save_scene); !st.ok())
      return Failure{kExitFailure, st.what()};
  }
  return std::nullopt;
}

/// What the render loop hands back: the report (or error), the progress reached and the wall time.
struct RenderRun {
  Expected<tr::RenderReport> result{Status(Code::kInternal, "render did not run")};
  double fraction = 0;
  double seconds = 0;
};

/// Renders on a worker thread (GPU requests with CPU fallback, tracer::render) while this thread draws the
/// progress bar; SIGINT cancels.
RenderRun render_with_progress(const tr::Scene& scene, const Options& o, unsigned nthreads, bool quiet,
                               tr::Film& film) {
  RenderRun run;
  std::atomic<double> fraction{0};
  std::atomic<bool> finished{false};
  Progress progress(quiet);
  const auto t0 = std::chrono::steady_clock::now();
  {
    SigintScope sigint;
    std::thread worker([&] {
      tr::RenderOptions opt;
      opt.device = o.device;
      opt.threads = nthreads;
      opt.cancel = &g_cancel;
      opt.progress = [&](double f) { store_max(fraction, f); };
      run.result = tr::render(scene, o.first, static_cast<std::uint32_t>(o.spp), film, opt);
      // Here, not after the loop below: that one notices the end only at its next 100 ms poll.
      run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      finished.store(true);
    });
    while (!finished.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!finished.load()) progress.update(fraction.load(), elapsed);
    }
    worker.join();
  }
  if (run.result.ok()) progress.update(1.0, run.seconds);
  progress.finish();
  run.fraction = fraction.load();
  return run;
}

/// Writes the PNG and, when asked, the EXR of the sums with the compact scene in its header.
std::optional<Failure> write_outputs(const RenderArgs& a, const Options& o, const tr::Scene& scene,
                                     const tr::Film& film, const std::string& output) {
  if (Status st = tr::write_png(output, tr::tonemap_film(film)); !st.ok())
    return Failure{kExitFailure, st.what()};
  if (!a.exr.empty()) {
    tr::ExrInfo info;
    info.first_sample = o.first;
    info.samples = o.spp;
    info.nonfinite = film.nonfinite;
    tr::SceneJsonOptions compact;
    compact.indent = -1;
    info.scene_json = tr::scene_to_json(scene, compact);
    if (Status st = tr::write_exr(a.exr, film, info); !st.ok()) return Failure{kExitFailure, st.what()};
  }
  return std::nullopt;
}

int run_render(const RenderArgs& a) {
  auto fail = [](const Failure& f) {
    std::fprintf(stderr, "facetrace render: %s\n", f.what.c_str());
    return f.code;
  };
  Options o;
  if (auto f = parse_options(a, o)) return fail(*f);
  tr::Scene scene;
  std::string output;
  if (auto f = prepare_scene(a, o, scene, output)) return fail(*f);

  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const unsigned nthreads = o.threads == 0 ? hw : static_cast<unsigned>(o.threads);
  if (!a.quiet)
    std::fprintf(stderr, "rendering %ux%u x %llu spp (%s, %s, %u bounces), device %s\n", scene.width,
                 scene.height, static_cast<unsigned long long>(o.spp), scene.material.name.c_str(),
                 std::string(tr::lighting_preset_name(scene.lighting_preset)).c_str(), scene.max_bounces,
                 a.device.c_str());

  tr::Film film(scene.width, scene.height);
  const RenderRun run = render_with_progress(scene, o, nthreads, a.quiet, film);
  if (run.result.status().code() == Code::kCancelled || g_cancel.load())
    return fail({kExitCancelled, "cancelled at " + std::to_string(static_cast<int>(run.fraction * 100)) +
                                     " %; nothing written"});
  if (!run.result.ok())
    return fail({run.result.status().code() == Code::kInvalidArgument ? kExitBadInput : kExitFailure,
                 run.result.status().what()});
  if (auto f = write_outputs(a, o, scene, film, output)) return fail(*f);

  if (!a.quiet) {
    const double paths = static_cast<double>(film.pixels()) * static_cast<double>(o.spp);
    const tr::RenderReport& r = *run.result;
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
    std::printf("wrote %s\n", output.c_str());
    if (!a.exr.empty()) std::printf("wrote %s\n", a.exr.c_str());
  }
  return kExitOk;
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
  cmd->add_option("--device", args->device, "auto | cpu | gpu (default auto)")->type_name("DEVICE");
  cmd->add_option("--threads", args->threads, "CPU threads (default 0 = all cores)")->type_name("N");
  cmd->add_option("--save-scene", args->save_scene, "write the resolved scene (after overrides) as JSON")
      ->type_name("FILE");
  cmd->add_flag("-q,--quiet", args->quiet, "no progress bar and no summary");
  cmd->callback([args, &exit_code] { exit_code = run_render(*args); });
}

}  // namespace facetrace::cli
