/// @file
/// `facetrace worker`: renders a job's work units [A, B) into one additive partial file (docs/design/farm.md §1); the
/// range comes from --units A:B or from an array index (--index-env VAR / --index I, with --units-per-index M).
/// Every finished unit is synced to the partial, so SIGTERM, SIGINT or SIGHUP lose only the unit in flight; a rerun
/// of the same command skips the units already present in --out.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "commands.h"
#include "exit_codes.h"
#include "facetrace/core/file.h"
#include "facetrace/core/text.h"
#include "facetrace/tracer/farm.h"
#include "signals.h"

namespace facetrace::cli {
namespace {

namespace fs = std::filesystem;

struct WorkerArgs {
  std::string job;
  std::string units;
  std::string index_env;
  std::string index;
  std::string units_per_index;
  std::string out = ".";
  std::string device = "auto";
  std::string threads = "0";
  bool quiet = false;
};

/// A whole decimal number (no sign, no spaces), or nullopt.
std::optional<std::uint64_t> whole(std::string_view text) {
  std::uint64_t v = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || r.ec != std::errc() || r.ptr != text.data() + text.size()) return std::nullopt;
  return v;
}

struct Range {
  std::uint64_t first = 0, end = 0;
};

/// The unit range from the flags (before clamping to the job). Errors name the flag.
Expected<Range> range_from_args(const WorkerArgs& a) {
  const int given = !a.units.empty() + !a.index_env.empty() + !a.index.empty();
  if (given != 1) return invalid_argument("give exactly one of --units A:B, --index-env VAR or --index I");
  if (!a.units.empty()) {
    if (!a.units_per_index.empty()) return invalid_argument("--units-per-index goes with --index-env or --index");
    const auto colon = a.units.find(':');
    const auto first = colon == std::string::npos ? std::nullopt : whole(std::string_view(a.units).substr(0, colon));
    const auto end = colon == std::string::npos ? std::nullopt : whole(std::string_view(a.units).substr(colon + 1));
    if (!first || !end || *end <= *first)
      return invalid_argument("--units: expected A:B with whole numbers A < B (half-open), got \"" +
                              core::printable(a.units) + "\"");
    return Range{*first, *end};
  }
  if (a.units_per_index.empty()) return invalid_argument("--index-env and --index need --units-per-index M");
  const auto m = whole(a.units_per_index);
  if (!m || *m == 0 || *m > (1u << 20))
    return invalid_argument("--units-per-index: expected a whole number in [1, 1048576], got \"" +
                            core::printable(a.units_per_index) + "\"");
  std::string text = a.index;
  std::string what = "--index";
  if (!a.index_env.empty()) {
    const char* v = std::getenv(a.index_env.c_str());
    if (!v)
      return invalid_argument("--index-env: the environment variable " + core::printable(a.index_env) +
                              " is not set");
    text = v;
    what = core::printable(a.index_env);
  }
  const auto i = whole(text);
  if (!i || *i > (1ull << 40))
    return invalid_argument(what + ": expected a whole number index, got \"" + core::printable(text) + "\"");
  return Range{*i * *m, (*i + 1) * *m};
}

/// Units of `job` already in compatible partials under `dir` (this job, build and scene); other files are skipped.
std::set<std::uint64_t> units_present(const std::string& dir, const farm::Job& job, bool quiet) {
  std::set<std::uint64_t> present;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".ftp" || name.rfind("part-" + job.name + "-", 0) != 0) continue;
    auto h = farm::read_partial_header(entry.path().string());
    if (!h.ok()) {
      if (!quiet) std::fprintf(stderr, "facetrace worker: ignoring %s\n", h.status().what().c_str());
      continue;
    }
    if (h->build_id != farm::build_id() || h->scene_sha256 != job.scene_sha256 || h->width != job.scene.width ||
        h->height != job.scene.height || h->unit_samples != job.unit_samples || h->spp != job.spp)
      continue;
    for (const farm::UnitEntry& u : h->units) present.insert(u.unit);
  }
  return present;
}

int fail(int code, const std::string& what) {
  std::fprintf(stderr, "facetrace worker: %s\n", what.c_str());
  return code;
}

int run_worker(const WorkerArgs& a) {
  auto device = tracer::parse_render_device(a.device);
  if (!device.ok()) return fail(kExitBadInput, device.status().what());
  const auto threads = whole(a.threads);
  if (!threads || *threads > 4096) return fail(kExitBadInput, "--threads: expected a whole number in [0, 4096]");
  auto range = range_from_args(a);
  if (!range.ok()) return fail(kExitBadInput, range.status().what());

  auto job = farm::load_job_file(a.job);
  // As for render's scene (docs/cli.md "Exit codes"): a job file that cannot be read is bad input (2), one
  // that was read but is not a valid job is permanent (42).
  if (!job.ok()) return fail(job.status().code() == Code::kIo ? kExitBadInput : kExitInvalidJob, job.status().what());
  if (Status st = tracer::tier_features(job->scene).status(); !st.ok())
    return fail(kExitInvalidJob, core::printable(a.job) + ": not supported: " + st.what());
  const std::uint64_t total = farm::unit_count(*job);
  Range r = *range;
  if (r.first >= total) {
    if (!a.units.empty())
      return fail(kExitBadInput, "--units " + core::printable(a.units) + ": the job has units [0, " +
                                     std::to_string(total) + ")");
    if (!a.quiet)
      std::fprintf(stderr, "worker: units [%llu, %llu) are past the job's %llu units: nothing to do\n",
                   static_cast<unsigned long long>(r.first), static_cast<unsigned long long>(r.end),
                   static_cast<unsigned long long>(total));
    return kExitOk;
  }
  r.end = std::min(r.end, total);

  std::error_code ec;
  fs::create_directories(a.out, ec);
  if (!fs::is_directory(a.out, ec))
    return fail(kExitBadInput, "--out: " + core::printable(a.out) + " is not a directory");
  const std::string part_path = (fs::path(a.out) / farm::partial_file_name(job->name, r.first)).string();
  const core::NamedPath inputs[] = {{"--job", a.job}};
  const core::NamedPath outputs[] = {{"--out", part_path}};
  if (Status st = core::check_outputs(inputs, outputs); !st.ok()) return fail(kExitBadInput, st.what());

  const std::set<std::uint64_t> present = units_present(a.out, *job, a.quiet);
  std::vector<std::uint64_t> todo;
  for (std::uint64_t u = r.first; u < r.end; ++u)
    if (!present.count(u)) todo.push_back(u);
  const auto skipped = (r.end - r.first) - todo.size();
  if (todo.empty()) {
    if (!a.quiet)
      std::fprintf(stderr, "worker: units [%llu, %llu) of %s are all present in %s: nothing to do\n",
                   static_cast<unsigned long long>(r.first), static_cast<unsigned long long>(r.end),
                   job->name.c_str(), core::printable(a.out).c_str());
    return kExitOk;
  }

  // The partial is named after the range's first unit, so rerunning the command resumes it. When that file belongs
  // to this job but was made for a shorter range, the new units go to a partial named after the first of them.
  std::uint64_t file_first = r.first;
  if (auto h = farm::read_partial_header(part_path);
      h.ok() && h->scene_sha256 == job->scene_sha256 && h->capacity < r.end - r.first)
    file_first = todo.front();
  CancelOnSignals signals;  // before the file exists: a signal from here on ends with the finished units synced
  auto writer =
      farm::PartialWriter::open(a.out, *job, file_first, static_cast<std::uint32_t>(r.end - file_first));
  if (!writer.ok())
    return fail(writer.status().code() == Code::kInvalidArgument ? kExitBadInput : kExitFailure,
                writer.status().what());
  if (!a.quiet)
    std::fprintf(
        stderr, "worker: %s units [%llu, %llu) of %llu (%u x %u, %u samples each), %zu to render%s -> %s\n",
        job->name.c_str(), static_cast<unsigned long long>(r.first), static_cast<unsigned long long>(r.end),
        static_cast<unsigned long long>(total), job->scene.width, job->scene.height, job->unit_samples,
        todo.size(), skipped ? (", " + std::to_string(skipped) + " already present").c_str() : "",
        core::printable(writer->path()).c_str());

  tracer::RenderOptions opt;
  opt.device = *device;
  opt.threads = static_cast<unsigned>(*threads);
  opt.cancel = signals.flag();
  std::size_t done = 0;
  double seconds = 0;
  for (const std::uint64_t u : todo) {
    if (signals.cancelled()) break;
    auto unit = farm::render_unit(*job, u, opt);
    if (!unit.ok()) {
      if (unit.status().code() == Code::kCancelled) break;
      const bool gpu_required = *device == tracer::RenderDevice::kGpu &&
                                (unit.status().code() == Code::kNotSupported ||
                                 unit.status().code() == Code::kDeviceLost);
      return fail(gpu_required ? kExitGpuUnavailable : kExitFailure,
                  unit.status().what() + " (" + std::to_string(done) + " units finished and kept in " +
                      writer->path() + ")");
    }
    if (Status st = writer->append(*unit); !st.ok()) return fail(kExitFailure, st.what());
    // The next units start at the request size the last one reached (≈ 100 ms of work, the render loop's target)
    // instead of ramping up from one sample again; the bits do not depend on the split (docs/design/tracer.md §9 G3).
    if (unit->seconds > 0 && unit->range.samples > 0) {
      const double per_sample = unit->seconds / unit->range.samples;
      opt.samples_per_request = static_cast<std::uint32_t>(std::clamp(0.1 / per_sample, 1.0, 2048.0));
    }
    ++done;
    seconds += unit->seconds;
    if (!a.quiet)
      std::fprintf(stderr, "worker: unit %llu (samples %llu+%u) on %s in %.2f s  [%zu/%zu]\n",
                   static_cast<unsigned long long>(u), static_cast<unsigned long long>(unit->range.first_sample),
                   unit->range.samples, std::string(farm::unit_backend_name(unit->backend)).c_str(), unit->seconds,
                   done, todo.size());
  }
  if (signals.cancelled()) {
    std::fprintf(stderr,
                 "facetrace worker: interrupted by %s: %zu of %zu units finished and kept in %s; rerun the same "
                 "command to render the rest\n",
                 signal_name(signals.signal_number()), done, todo.size(), writer->path().c_str());
    return signals.exit_code();
  }
  if (!a.quiet)
    std::printf("worker: %zu units rendered in %.2f s (%zu already present) -> %s\n", done, seconds, skipped,
                writer->path().c_str());
  return kExitOk;
}

}  // namespace

void register_worker(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<WorkerArgs>();
  auto* cmd = app.add_subcommand(
      "worker", "Render work units of a job file into an additive partial (docs/farm.md): --units A:B, or an array "
                "index with --units-per-index");
  cmd->add_option("--job", args->job, "job file (JSON: scene, spp, unit_samples; docs/farm.md)")
      ->type_name("FILE")
      ->required();
  cmd->add_option("--units", args->units, "half-open unit range A:B")->type_name("A:B");
  cmd->add_option("--index-env", args->index_env,
                  "environment variable holding the array index I (SLURM_ARRAY_TASK_ID, JOB_COMPLETION_INDEX, ...)")
      ->type_name("VAR");
  cmd->add_option("--index", args->index, "the array index I itself")->type_name("I");
  cmd->add_option("--units-per-index", args->units_per_index, "M: index I renders units [I*M, (I+1)*M)")
      ->type_name("M");
  cmd->add_option("--out", args->out, "directory of the partial files (created if missing; default .)")
      ->type_name("DIR");
  cmd->add_option("--device", args->device, "auto | cpu | gpu (default auto)")->type_name("DEVICE");
  cmd->add_option("--threads", args->threads, "CPU threads (default 0 = all cores)")->type_name("N");
  cmd->add_flag("-q,--quiet", args->quiet, "no per-unit lines and no summary");
  cmd->callback([args, &exit_code] { exit_code = run_worker(*args); });
}

}  // namespace facetrace::cli
