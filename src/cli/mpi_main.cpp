/// @file
/// facetrace-mpi: renders the work units of one job over MPI ranks and merges them (farm.md §2, §3).
///
///   mpirun -np 4 facetrace-mpi render job.json [--backend=auto|cpu|gpu] [--merge=canonical|reduce]
///          [--checkpoint parts/] [--cpu-fallback] [--png frame.png] [--exr sums.exr] [--sums frame.ftsum]
///
/// Flow: the local rank (OMPI_COMM_WORLD_LOCAL_RANK / SLURM_LOCALID, read before MPI_Init) goes to the GPU
/// child as FACETRACE_GPU_LOCAL_RANK and the child is spawned before MPI_Init (runtime.md §6: the parent
/// never initialises CUDA); every rank loads the job and checks it agrees with rank 0's; with --checkpoint,
/// rank 0 scans the folder for this job's partials and only the missing units are handed out, round-robin
/// (version 1 of farm.md §2); each rank renders its units in ascending order, appends each to its own
/// partial, and then:
///   canonical: sends each S_u to rank 0, which adds every unit in ascending order into one f64 film
///              (reading the checkpointed ones back from their partials): bit-identical for any rank count;
///   reduce:    adds its units in ascending order into its own f64 film, then one MPI_Reduce(MPI_SUM) to
///              rank 0.
/// A rank that stops (signal, GPU lost without --cpu-fallback, an error) tells rank 0 instead of sending its
/// next unit, so nobody waits for it; every rank then exits with the same code (the most severe one).
#include <mpi.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "exit_codes.h"
#include "facetrace/core/logging.h"
#include "facetrace/core/text.h"
#include "facetrace/runtime/executor.h"
#include "facetrace/runtime/recovery_policy.h"
#include "facetrace/runtime/testing/fault.h"
#include "facetrace/tracer/farm.h"
#include "facetrace/tracer/output.h"
#include "facetrace/tracer/renderer.h"
#include "facetrace/tracer/scene.h"
#include "signals.h"

namespace facetrace::cli {
namespace {

namespace fs = std::filesystem;

// ---- arguments --------------------------------------------------------------------------------------------

struct Args {
  std::string job;
  std::string backend = "auto";
  std::string merge = "canonical";
  std::string checkpoint;
  std::string png, exr, sums;
  unsigned threads = 0;
  bool cpu_fallback = false;
  bool quiet = false;
};

enum class MergeMode { kCanonical, kReduce };

// ---- ranks ------------------------------------------------------------------------------------------------

/// The node-local rank as the launcher publishes it before MPI_Init (Open MPI, Slurm, MPICH/Hydra, PMI).
std::optional<int> local_rank_from_env() {
  for (const char* name :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "PMI_LOCAL_RANK"}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long r = std::strtol(v, &end, 10);
    if (*end == '\0' && r >= 0 && r < (1 << 20)) return static_cast<int>(r);
  }
  return std::nullopt;
}

/// Hands the local rank to the GPU child (it selects device local_rank mod cudaGetDeviceCount()), unless the
/// user already chose: an explicit FACETRACE_GPU_DEVICE or FACETRACE_GPU_LOCAL_RANK wins.
void export_local_rank(int local_rank) {
  if (std::getenv("FACETRACE_GPU_DEVICE") != nullptr) return;
  ::setenv("FACETRACE_GPU_LOCAL_RANK", std::to_string(local_rank).c_str(), /*overwrite=*/0);
}

/// Rank, size and who renders what. Unit `missing[i]` belongs to rank i mod size.
struct World {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;
  bool root() const { return rank == 0; }
};

/// One line on stderr, prefixed with the rank when there are several.
template <class... A>
void say(const World& w, const char* fmt, A... a) {
  std::string line = w.size > 1 ? "facetrace-mpi[" + std::to_string(w.rank) + "]: " : "facetrace-mpi: ";
  char buf[1024];
  std::snprintf(buf, sizeof buf, fmt, a...);
  line += buf;
  line += '\n';
  std::fputs(line.c_str(), stderr);
}

/// Every rank's code → the most severe one on every rank (143 > 130 > 129 > 43 > 42 > 2 > 1 > 0).
int agree(int code) {
  int out = code;
  MPI_Allreduce(&code, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

// ---- the job ----------------------------------------------------------------------------------------------

/// Loads the job on every rank and checks that each sees rank 0's (scene hash, spp, K, size, name).
std::optional<farm::Job> load_job(const World& w, const std::string& path, int& code) {
  auto job = farm::load_job_file(path);
  int mine = kExitOk;
  if (!job.ok()) {
    mine = job.status().code() == Code::kInvalidArgument ? kExitInvalidJob : kExitBadInput;
    if (w.root() || mine != kExitOk) say(w, "%s", job.status().what().c_str());
  }
  if ((code = agree(mine)) != kExitOk) return std::nullopt;
  // Rank 0's identity of the job; a rank that read another file (a stale copy on its node) refuses.
  struct Identity {
    std::uint8_t sha[32];
    std::uint64_t spp;
    std::uint32_t k, width, height;
  } id{}, root{};
  std::memcpy(id.sha, job->scene_sha256.data(), 32);
  id.spp = job->spp;
  id.k = job->unit_samples;
  id.width = job->scene.width;
  id.height = job->scene.height;
  root = id;
  MPI_Bcast(&root, sizeof root, MPI_BYTE, 0, MPI_COMM_WORLD);
  mine = std::memcmp(&root, &id, sizeof id) == 0 ? kExitOk : kExitInvalidJob;
  if (mine != kExitOk)
    say(w, "%s differs from rank 0's copy (scene, spp, unit_samples or size)", path.c_str());
  if ((code = agree(mine)) != kExitOk) return std::nullopt;
  if (Status tier = tracer::tier_features(job->scene).status(); !tier.ok()) {
    if (w.root()) say(w, "not supported: %s", tier.what().c_str());
    code = kExitFailure;
    return std::nullopt;
  }
  return std::move(job).value();
}

// ---- checkpoint scan (farm.md §3 "Restart") ---------------------------------------------------------------

/// Where a checkpointed unit lives.
struct StoredUnit {
  std::string path;
  std::size_t index = 0;  ///< its row in the partial's unit table
  farm::UnitEntry entry;
};

/// Rank 0: every unit of this job already in `dir` (same build, scene hash, size, K, spp), CRC-checked. Other
/// jobs' partials are left alone; a corrupt unit is reported and rendered again.
std::map<std::uint64_t, StoredUnit> scan_checkpoint(const World& w, const farm::Job& job,
                                                    const std::string& dir) {
  std::map<std::uint64_t, StoredUnit> found;
  std::error_code ec;
  std::vector<std::string> paths;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".ftp") paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  for (const std::string& p : paths) {
    auto h = farm::read_partial_header(p);
    if (!h.ok()) {
      say(w, "checkpoint: ignoring %s: %s", core::printable(p).c_str(), h.status().what().c_str());
      continue;
    }
    if (h->scene_sha256 != job.scene_sha256 || h->width != job.scene.width || h->height != job.scene.height ||
        h->unit_samples != job.unit_samples || h->spp != job.spp)
      continue;  // another job's partial
    if (h->build_id != farm::build_id()) {
      say(w, "checkpoint: ignoring %s: written by \"%s\", this is \"%s\"", core::printable(p).c_str(),
          core::printable(h->build_id).c_str(), farm::build_id().c_str());
      continue;
    }
    for (std::size_t i = 0; i < h->units.size(); ++i) {
      const farm::UnitEntry& e = h->units[i];
      if (found.count(e.unit)) {
        say(w, "checkpoint: unit %llu is in %s and %s; using the first",
            static_cast<unsigned long long>(e.unit), found[e.unit].path.c_str(), p.c_str());
        continue;
      }
      if (auto data = farm::read_partial_unit(p, *h, i); !data.ok()) {
        say(w, "checkpoint: %s; rendering it again", data.status().what().c_str());
        continue;
      }
      found[e.unit] = StoredUnit{p, i, e};
    }
  }
  return found;
}

/// The checkpointed units' indices, rank 0's list broadcast to every rank.
std::vector<std::uint64_t> broadcast_units(const World& w, std::vector<std::uint64_t> units) {
  std::uint64_t n = units.size();
  MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  if (!w.root()) units.resize(n);
  if (n) MPI_Bcast(units.data(), static_cast<int>(n), MPI_UINT64_T, 0, MPI_COMM_WORLD);
  return units;
}

// ---- rendering one rank's units ---------------------------------------------------------------------------

/// What a rank tells rank 0 about each of its units, ahead of the unit's f32 sums (canonical merge).
struct UnitMessage {
  std::uint64_t unit = 0;
  std::int32_t stop = 0;  ///< 0: the sums follow; else this rank's exit code, and nothing more comes from it
  std::uint8_t backend = 0;
  std::uint8_t pad[3] = {};
  std::uint64_t nonfinite = 0;
  std::uint32_t samples = 0;
  std::uint32_t pad2 = 0;
  double seconds = 0;
};
constexpr int kUnitTag = 12;

/// Renders units one at a time with the backend policy of farm.md §3: with --backend=gpu and no
/// --cpu-fallback, a unit that was (partly) redone on the CPU stops the rank (43 when the GPU was lost, 1
/// otherwise).
class UnitRenderer {
 public:
  UnitRenderer(const World& w, const farm::Job& job, const Args& a, const CancelOnSignals& signals)
      : w_(w), job_(job), a_(a), signals_(signals) {
    options_.threads = a.threads;
    options_.cancel = signals.flag();
    options_.device = a.backend == "cpu" ? tracer::RenderDevice::kCpu : tracer::RenderDevice::kAuto;
  }

  /// Checks the GPU when one is required; false (with code_ set) when the rank cannot start.
  bool start() {
    if (a_.backend != "gpu") return true;
    if (auto why = tracer::shared_gpu_backend().unavailable_reason()) {
      if (!a_.cpu_fallback) {
        say(w_, "--backend=gpu: no usable GPU: %s (no --cpu-fallback)", why->c_str());
        code_ = kExitGpuUnavailable;
        return false;
      }
      say(w_, "--backend=gpu: no usable GPU: %s; rendering on the CPU (--cpu-fallback)", why->c_str());
      options_.device = tracer::RenderDevice::kCpu;
    }
    return true;
  }

  /// The unit, or nullopt when the rank stops (code() then says why). With --backend=gpu and no
  /// --cpu-fallback only units rendered wholly on the GPU are kept: a unit during which the device was lost
  /// is redone from its start once the runtime has replaced the GPU child (farm.md §3), waiting out the
  /// recovery cool-down; when the replacement is refused, or a request is declined for another reason, the
  /// rank stops (43, resp. 1).
  std::optional<farm::UnitResult> render(std::uint64_t unit) {
    const bool strict =
        a_.backend == "gpu" && !a_.cpu_fallback && options_.device != tracer::RenderDevice::kCpu;
    for (int attempt = 1;; ++attempt) {
      if (signals_.cancelled()) return stop(signals_.exit_code());
      if (strict && !wait_for_gpu(unit)) return std::nullopt;
      inject_test_fault(unit);
      auto& gpu = tracer::shared_gpu_backend();
      const std::uint64_t recoveries = gpu.recoveries();
      const std::optional<std::string> lost_before = gpu.last_lost_reason();
      auto r = farm::render_unit(job_, unit, options_);
      if (!r.ok()) {
        if (r.status().code() == Code::kCancelled || signals_.cancelled()) return stop(signals_.exit_code());
        say(w_, "unit %llu: %s", static_cast<unsigned long long>(unit), r.status().what().c_str());
        return stop(r.status().code() == Code::kInvalidArgument ? kExitInvalidJob : kExitFailure);
      }
      if (!strict || r->backend == farm::UnitBackend::kGpu) return std::move(r).value();
      const bool lost =
          gpu.is_lost() || gpu.recoveries() != recoveries || gpu.last_lost_reason() != lost_before;
      if (!lost) {
        say(w_, "unit %llu: %u GPU requests declined (not a device loss); not kept (no --cpu-fallback)",
            static_cast<unsigned long long>(unit), r->report.declined);
        return stop(kExitFailure);
      }
      if (attempt >= kMaxAttempts) {
        say(w_, "unit %llu: the device was lost in %d attempts (%s); stopping (no --cpu-fallback)",
            static_cast<unsigned long long>(unit), attempt, gpu.last_lost_reason().value_or("?").c_str());
        return stop(kExitGpuUnavailable);
      }
      say(w_, "unit %llu: device lost (%s); redoing the unit on the GPU once the runtime has replaced it",
          static_cast<unsigned long long>(unit), gpu.last_lost_reason().value_or("?").c_str());
    }
  }

  int code() const { return code_; }

 private:
  static constexpr int kMaxAttempts = 3;  ///< renders of one unit that may end in a device loss

  std::optional<farm::UnitResult> stop(int code) {
    code_ = code;
    return std::nullopt;
  }

  /// True when the GPU is usable: at once, or after the runtime replaced a lost child within the cool-down
  /// (FACETRACE_GPU_COOLDOWN_S) plus a margin. False (code 43, or the signal's) otherwise.
  bool wait_for_gpu(std::uint64_t unit) {
    auto& gpu = tracer::shared_gpu_backend();
    if (!gpu.is_lost()) return true;
    const auto limit = runtime::RecoveryConfig::from_env().cool_down + std::chrono::seconds(15);
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < limit) {
      if (gpu.try_recover()) return true;
      if (signals_.wait_for(std::chrono::milliseconds(500))) {
        code_ = signals_.exit_code();
        return false;
      }
    }
    say(w_, "unit %llu: the GPU was lost (%s) and not replaced within %.0f s; stopping (no --cpu-fallback)",
        static_cast<unsigned long long>(unit), gpu.last_lost_reason().value_or("?").c_str(), limit.count());
    code_ = kExitGpuUnavailable;
    return false;
  }

  /// Test seam (tests/gpu/mpi_gpu_loss_test.sh): FACETRACE_MPI_TEST_FAULT_UNIT=U makes the GPU child fault
  /// (a real illegal-address kernel) just before this rank's first render of unit U.
  void inject_test_fault(std::uint64_t unit) {
    static const char* at = std::getenv("FACETRACE_MPI_TEST_FAULT_UNIT");
    if (at == nullptr || faulted_ || std::strtoull(at, nullptr, 10) != unit) return;
    faulted_ = true;
    if (runtime::Executor* ex = tracer::shared_gpu_backend().executor())
      (void)ex->inject_fault(runtime::FaultKind::kIllegalAddress);
  }

  bool faulted_ = false;

  const World& w_;
  const farm::Job& job_;
  const Args& a_;
  const CancelOnSignals& signals_;
  tracer::RenderOptions options_;
  int code_ = kExitOk;
};

/// This rank's partial file under --checkpoint (opened on the first unit).
class Checkpoint {
 public:
  Checkpoint(const World& w, const farm::Job& job, std::string dir, std::uint32_t capacity)
      : w_(w), job_(job), dir_(std::move(dir)), capacity_(capacity) {}

  /// Appends `unit` (synced before this returns). Non-ok: the exit code to stop with.
  int append(const farm::UnitResult& unit) {
    if (dir_.empty()) return kExitOk;
    if (!writer_) {
      auto opened = farm::PartialWriter::open(dir_, job_, unit.unit, capacity_);
      if (!opened.ok() && holds_nothing(unit.unit)) {
        // An earlier run's rank started here and finished nothing (this unit is missing): its empty file may
        // be too small for this run's share; replace it.
        std::error_code ec;
        fs::remove(fs::path(dir_) / farm::partial_file_name(job_.name, unit.unit), ec);
        opened = farm::PartialWriter::open(dir_, job_, unit.unit, capacity_);
      }
      if (!opened.ok()) {
        say(w_, "--checkpoint: %s", opened.status().what().c_str());
        return kExitFailure;
      }
      writer_.emplace(std::move(opened).value());
    }
    if (Status st = writer_->append(unit); !st.ok()) {
      say(w_, "--checkpoint: %s", st.what().c_str());
      return kExitFailure;
    }
    return kExitOk;
  }

 private:
  /// True when `dir_` holds this job's partial named after `first_unit` with no unit in it.
  bool holds_nothing(std::uint64_t first_unit) const {
    const auto h =
        farm::read_partial_header((fs::path(dir_) / farm::partial_file_name(job_.name, first_unit)).string());
    return h.ok() && h->units.empty() && h->scene_sha256 == job_.scene_sha256 &&
           h->build_id == farm::build_id();
  }

  const World& w_;
  const farm::Job& job_;
  std::string dir_;
  std::uint32_t capacity_;
  std::optional<farm::PartialWriter> writer_;
};

// ---- the merged film --------------------------------------------------------------------------------------

/// Per-unit facts every merge adds up (then reduced as MPI_UINT64_T sums in reduce mode, farm.md §2).
struct Tally {
  std::uint64_t samples = 0, nonfinite = 0, units = 0, cpu = 0, gpu = 0, mixed = 0;
  double seconds = 0;
  void add(std::uint32_t n, std::uint64_t bad, farm::UnitBackend b, double s) {
    samples += n;
    nonfinite += bad;
    ++units;
    (b == farm::UnitBackend::kGpu ? gpu : b == farm::UnitBackend::kCpu ? cpu : mixed) += 1;
    seconds += s;
  }
};

farm::MergedFilm make_merged(const farm::Job& job, std::vector<double> xyz, const Tally& t) {
  farm::MergedFilm m;
  m.width = job.scene.width;
  m.height = job.scene.height;
  m.xyz = std::move(xyz);
  m.samples = t.samples;
  m.nonfinite = t.nonfinite;
  m.units_merged = t.units;
  m.units_total = farm::unit_count(job);
  m.cpu_units = t.cpu;
  m.gpu_units = t.gpu;
  m.mixed_units = t.mixed;
  m.unit_seconds = t.seconds;
  m.build_id = farm::build_id();
  m.job_name = job.name;
  m.scene_json = job.scene_json;
  m.scene_sha256 = job.scene_sha256;
  m.unit_samples = job.unit_samples;
  m.spp = job.spp;
  return m;
}

/// The outputs of rank 0 (PNG, EXR of the sums, raw f64 sums). Non-ok: kExitFailure.
int write_outputs(const World& w, const Args& a, const farm::MergedFilm& merged) {
  const tracer::Film film = farm::to_film(merged);
  std::vector<std::string> wrote;
  if (!a.png.empty()) {
    if (Status st = tracer::write_png(a.png, tracer::tonemap_film(film)); !st.ok()) {
      say(w, "%s", st.what().c_str());
      return kExitFailure;
    }
    wrote.push_back(a.png);
  }
  if (!a.exr.empty()) {
    tracer::ExrInfo info;
    info.first_sample = 0;
    info.samples = merged.samples;
    info.nonfinite = merged.nonfinite;
    info.scene_json = merged.scene_json;
    info.render_seconds = merged.unit_seconds;
    info.build = merged.build_id;
    if (Status st = tracer::write_exr(a.exr, film, info); !st.ok()) {
      say(w, "%s", st.what().c_str());
      return kExitFailure;
    }
    wrote.push_back(a.exr);
  }
  if (!a.sums.empty()) {
    if (Status st = farm::write_ftsum(a.sums, merged); !st.ok()) {
      say(w, "%s", st.what().c_str());
      return kExitFailure;
    }
    wrote.push_back(a.sums);
  }
  if (!a.quiet)
    for (const auto& p : wrote) std::printf("wrote %s\n", core::printable(p).c_str());
  return kExitOk;
}

/// Empty when `path` can be written: not a directory, in an existing writable directory; else why not.
std::string unwritable(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return core::printable(path) + " is a directory";
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec))
    return "cannot write " + core::printable(path) + ": directory " + core::printable(dir.string()) +
           " does not exist";
  if (::access(dir.c_str(), W_OK) != 0)
    return "cannot write " + core::printable(path) + ": directory " + core::printable(dir.string()) +
           " is not writable";
  return {};
}

// ---- the two merges ---------------------------------------------------------------------------------------

/// A unit that does not fit the film (cannot happen with one job on every rank): the job ends.
int internal_failure(const World& w, const Status& st) {
  say(w, "internal error: %s", st.what().c_str());
  MPI_Abort(MPI_COMM_WORLD, kExitFailure);
  return kExitFailure;
}

/// The units this rank renders (ascending): missing[i] for i ≡ rank (mod size).
std::vector<std::uint64_t> my_units(const World& w, const std::vector<std::uint64_t>& missing) {
  std::vector<std::uint64_t> mine;
  for (std::size_t i = static_cast<std::size_t>(w.rank); i < missing.size();
       i += static_cast<std::size_t>(w.size))
    mine.push_back(missing[i]);
  return mine;
}

/// canonical: non-root ranks send each unit (header, then sums) as soon as it is rendered and checkpointed;
/// rank 0 walks the units in ascending order, rendering its own, receiving the others' from their owner (MPI
/// keeps one sender's messages in order, so the next one from the owner is that unit), reading checkpointed
/// ones back. Returns this rank's code; on rank 0 with code 0, `out` is the merged film.
int run_canonical(const World& w, const farm::Job& job, const std::vector<std::uint64_t>& missing,
                  const std::map<std::uint64_t, StoredUnit>& stored, UnitRenderer& renderer,
                  Checkpoint& checkpoint, std::optional<farm::MergedFilm>& out, bool quiet) {
  const std::size_t floats = std::size_t{job.scene.width} * job.scene.height * 3;
  const std::size_t bytes = sizeof(UnitMessage) + floats * sizeof(float);
  if (!w.root()) {
    std::vector<std::uint8_t> buf(bytes);
    for (std::uint64_t u : my_units(w, missing)) {
      UnitMessage m;
      m.unit = u;
      auto r = renderer.render(u);
      if (r) m.stop = checkpoint.append(*r);
      if (!r) m.stop = renderer.code();
      if (m.stop != kExitOk) {
        MPI_Send(&m, sizeof m, MPI_BYTE, 0, kUnitTag, MPI_COMM_WORLD);
        return m.stop;
      }
      m.backend = static_cast<std::uint8_t>(r->backend);
      m.nonfinite = r->nonfinite;
      m.samples = r->range.samples;
      m.seconds = r->seconds;
      std::memcpy(buf.data(), &m, sizeof m);
      std::memcpy(buf.data() + sizeof m, r->xyz.data(), floats * sizeof(float));
      MPI_Send(buf.data(), static_cast<int>(bytes), MPI_BYTE, 0, kUnitTag, MPI_COMM_WORLD);
    }
    return kExitOk;
  }

  // Rank 0.
  std::map<std::uint64_t, int> owner;
  for (std::size_t i = 0; i < missing.size(); ++i) owner[missing[i]] = static_cast<int>(i % w.size);
  std::vector<bool> stopped(static_cast<std::size_t>(w.size), false);
  int code = kExitOk;
  farm::CanonicalAccumulator acc(job.scene.width, job.scene.height);
  Tally tally;
  std::vector<std::uint8_t> buf(bytes);
  const std::uint64_t total = farm::unit_count(job);
  int next_percent = 10;
  for (std::uint64_t u = 0; u < total; ++u) {
    if (auto s = stored.find(u); s != stored.end()) {
      if (code != kExitOk) continue;
      auto h = farm::read_partial_header(s->second.path);
      auto data = h.ok() ? farm::read_partial_unit(s->second.path, *h, s->second.index)
                         : Expected<std::vector<float>>(h.status());
      if (!data.ok()) {
        say(w, "checkpoint: %s", data.status().what().c_str());
        code = kExitFailure;
        continue;
      }
      const farm::UnitEntry& e = s->second.entry;
      if (Status st = acc.add(u, data->data(), data->size()); !st.ok()) return internal_failure(w, st);
      tally.add(e.samples, e.nonfinite, e.backend, e.seconds);
    } else {
      const int from = owner.at(u);
      if (stopped[static_cast<std::size_t>(from)]) continue;
      if (from == 0) {
        if (code != kExitOk)
          continue;  // the merge failed already: rank 0 only keeps receiving, so nobody blocks
        auto r = renderer.render(u);
        int c = r ? checkpoint.append(*r) : renderer.code();
        if (c != kExitOk) {
          code = std::max(code, c);
          stopped[0] = true;
          continue;
        }
        if (Status st = acc.add(u, r->xyz.data(), r->xyz.size()); !st.ok()) return internal_failure(w, st);
        tally.add(r->range.samples, r->nonfinite, r->backend, r->seconds);
      } else {
        MPI_Status st;
        MPI_Recv(buf.data(), static_cast<int>(bytes), MPI_BYTE, from, kUnitTag, MPI_COMM_WORLD, &st);
        UnitMessage m;
        std::memcpy(&m, buf.data(), sizeof m);
        if (m.stop != kExitOk) {
          stopped[static_cast<std::size_t>(from)] = true;
          code = std::max(code, m.stop);
          continue;
        }
        if (m.unit != u) {
          say(w, "rank %d sent unit %llu where unit %llu was due", from,
              static_cast<unsigned long long>(m.unit), static_cast<unsigned long long>(u));
          MPI_Abort(MPI_COMM_WORLD, kExitFailure);
        }
        if (code != kExitOk) continue;
        if (Status st = acc.add(u, reinterpret_cast<const float*>(buf.data() + sizeof m), floats); !st.ok())
          return internal_failure(w, st);
        tally.add(m.samples, m.nonfinite, static_cast<farm::UnitBackend>(m.backend), m.seconds);
      }
    }
    if (!quiet && total >= 10 && (u + 1) * 100 >= next_percent * total && code == kExitOk) {
      say(w, "%d%% (%llu of %llu units)", next_percent, static_cast<unsigned long long>(u + 1),
          static_cast<unsigned long long>(total));
      next_percent = static_cast<int>((u + 1) * 100 / total / 10 * 10 + 10);
    }
  }
  if (code == kExitOk) out = make_merged(job, std::move(acc.xyz()), tally);
  return code;
}

/// reduce: every rank adds its units in ascending order into its own f64 film (rank 0 also the checkpointed
/// ones, merged into that order), then one MPI_Reduce(MPI_SUM) in slices of at most 2^31 − 1 doubles.
int run_reduce(const World& w, const farm::Job& job, const std::vector<std::uint64_t>& missing,
               const std::map<std::uint64_t, StoredUnit>& stored, UnitRenderer& renderer,
               Checkpoint& checkpoint, std::optional<farm::MergedFilm>& out) {
  std::vector<std::uint64_t> units = my_units(w, missing);
  if (w.root())
    for (const auto& [u, s] : stored) units.push_back(u);
  std::sort(units.begin(), units.end());
  farm::CanonicalAccumulator acc(job.scene.width, job.scene.height);
  Tally tally;
  int code = kExitOk;
  for (std::uint64_t u : units) {
    if (auto s = w.root() ? stored.find(u) : stored.end(); s != stored.end()) {
      auto h = farm::read_partial_header(s->second.path);
      auto data = h.ok() ? farm::read_partial_unit(s->second.path, *h, s->second.index)
                         : Expected<std::vector<float>>(h.status());
      if (!data.ok()) {
        say(w, "checkpoint: %s", data.status().what().c_str());
        code = kExitFailure;
        break;
      }
      if (Status st = acc.add(u, data->data(), data->size()); !st.ok()) return internal_failure(w, st);
      tally.add(s->second.entry.samples, s->second.entry.nonfinite, s->second.entry.backend,
                s->second.entry.seconds);
      continue;
    }
    auto r = renderer.render(u);
    code = r ? checkpoint.append(*r) : renderer.code();
    if (code != kExitOk) break;
    if (Status st = acc.add(u, r->xyz.data(), r->xyz.size()); !st.ok()) return internal_failure(w, st);
    tally.add(r->range.samples, r->nonfinite, r->backend, r->seconds);
  }
  if ((code = agree(code)) != kExitOk) return code;

  std::vector<double>& film = acc.xyz();
  constexpr std::size_t kSlice = 0x7FFFFFFF;  // MPI counts are int
  for (std::size_t off = 0; off < film.size(); off += kSlice) {
    const int n = static_cast<int>(std::min(kSlice, film.size() - off));
    if (w.root())
      MPI_Reduce(MPI_IN_PLACE, film.data() + off, n, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    else
      MPI_Reduce(film.data() + off, nullptr, n, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  }
  std::uint64_t counts[6] = {tally.samples, tally.nonfinite, tally.units, tally.cpu, tally.gpu, tally.mixed};
  std::uint64_t sums[6] = {};
  MPI_Reduce(counts, sums, 6, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  double seconds = 0;
  MPI_Reduce(&tally.seconds, &seconds, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  if (w.root()) {
    Tally all{sums[0], sums[1], sums[2], sums[3], sums[4], sums[5], seconds};
    out = make_merged(job, std::move(film), all);
  }
  return kExitOk;
}

// ---- the command ------------------------------------------------------------------------------------------

int run(const Args& a, CancelOnSignals& signals) {
  const MergeMode mode = a.merge == "reduce" ? MergeMode::kReduce : MergeMode::kCanonical;

  // Before MPI_Init: the local rank for the GPU child, and the child itself (spawn + exec before any MPI
  // transport is up; farm.md §2).
  World w;
  const std::optional<int> env_local = local_rank_from_env();
  if (env_local) {
    export_local_rank(*env_local);
    if (a.backend != "cpu") (void)tracer::shared_gpu_backend();
  }
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &w.local_rank);
  MPI_Comm_size(node, &w.local_size);
  MPI_Comm_free(&node);
  if (!env_local) {
    export_local_rank(w.local_rank);
    if (a.backend != "cpu") (void)tracer::shared_gpu_backend();
  }
  const auto t0 = std::chrono::steady_clock::now();

  int code = kExitOk;
  std::optional<farm::Job> job = load_job(w, a.job, code);
  if (!job) return code;

  // Rank 0's outputs must be writable before anything is rendered.
  int mine = kExitOk;
  if (w.root())
    for (const std::string* out : {&a.png, &a.exr, &a.sums})
      if (!out->empty())
        if (std::string why = unwritable(*out); !why.empty()) {
          say(w, "%s", why.c_str());
          mine = kExitBadInput;
        }
  if ((code = agree(mine)) != kExitOk) return code;

  // The checkpointed units (rank 0 reads the folder), then who renders what.
  std::map<std::uint64_t, StoredUnit> stored;
  if (!a.checkpoint.empty()) {
    std::error_code ec;
    fs::create_directories(a.checkpoint, ec);
    if (!fs::is_directory(a.checkpoint, ec)) {
      say(w, "--checkpoint: %s is not a directory that can be created", a.checkpoint.c_str());
      mine = kExitBadInput;
    } else if (w.root()) {
      stored = scan_checkpoint(w, *job, a.checkpoint);
    }
  }
  if ((code = agree(mine)) != kExitOk) return code;
  std::vector<std::uint64_t> done_units;
  for (const auto& [u, s] : stored) done_units.push_back(u);
  done_units = broadcast_units(w, std::move(done_units));
  std::vector<std::uint64_t> missing;
  {
    std::size_t d = 0;
    for (std::uint64_t u = 0, total = farm::unit_count(*job); u < total; ++u) {
      if (d < done_units.size() && done_units[d] == u) {
        ++d;
        continue;
      }
      missing.push_back(u);
    }
  }
  if (w.root() && !a.quiet)
    say(w,
        "%s: %ux%u, %llu spp in %llu units of %u samples; %zu checkpointed, %zu to render on %d rank(s), %s "
        "merge",
        job->name.c_str(), job->scene.width, job->scene.height, static_cast<unsigned long long>(job->spp),
        static_cast<unsigned long long>(farm::unit_count(*job)), job->unit_samples, done_units.size(),
        missing.size(), w.size, mode == MergeMode::kReduce ? "reduce" : "canonical");

  Args local = a;
  if (local.threads == 0)  // the node's cores shared by its ranks
    local.threads = std::max(1u, std::thread::hardware_concurrency() / static_cast<unsigned>(w.local_size));
  UnitRenderer renderer(w, *job, local, signals);
  mine = renderer.start() ? kExitOk : renderer.code();
  if ((code = agree(mine)) != kExitOk) return code;
  Checkpoint checkpoint(w, *job, a.checkpoint, static_cast<std::uint32_t>(my_units(w, missing).size()));

  std::optional<farm::MergedFilm> merged;
  code = mode == MergeMode::kReduce
             ? run_reduce(w, *job, missing, stored, renderer, checkpoint, merged)
             : run_canonical(w, *job, missing, stored, renderer, checkpoint, merged, a.quiet);
  code = agree(code);
  if (code == kExitOk && w.root()) {
    code = write_outputs(w, a, *merged);
    if (code == kExitOk && !a.quiet) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double paths =
          static_cast<double>(job->scene.width) * job->scene.height * static_cast<double>(merged->samples);
      std::printf(
          "merged %llu units (%llu spp; %llu gpu, %llu cpu, %llu gpu+cpu) from %d rank(s) in %.2f s: "
          "%.2f M paths/s, %llu non-finite\n",
          static_cast<unsigned long long>(merged->units_merged),
          static_cast<unsigned long long>(merged->samples),
          static_cast<unsigned long long>(merged->gpu_units),
          static_cast<unsigned long long>(merged->cpu_units),
          static_cast<unsigned long long>(merged->mixed_units), w.size, s, paths / s / 1e6,
          static_cast<unsigned long long>(merged->nonfinite));
    }
  }
  MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);  // rank 0's output failure is everyone's
  if (code != kExitOk && w.root())
    say(w, "%s",
        code == kExitGpuUnavailable ? "stopped: a rank's GPU is unavailable or lost (exit 43)"
        : code >= 128               ? "interrupted; finished units are in the checkpoint partials"
                                    : "failed; nothing merged");
  return code;
}

}  // namespace
}  // namespace facetrace::cli

int main(int argc, char** argv) {
  using namespace facetrace::cli;
  facetrace::core::init_logging_from_env();
  CLI::App app{
      "facetrace-mpi: renders a farm job's work units over MPI ranks and merges them (docs/farm.md)"};
  app.require_subcommand(1);
  Args a;
  auto* render =
      app.add_subcommand("render", "Render every unit of JOB over the ranks; rank 0 writes the merge");
  render->add_option("job", a.job, "job file (JSON: docs/farm.md \"Job file\")")
      ->required()
      ->type_name("JOB");
  render->add_option("--backend", a.backend, "auto | cpu | gpu (default auto)")
      ->check(CLI::IsMember({"auto", "cpu", "gpu"}));
  render
      ->add_option("--merge", a.merge,
                   "canonical (bit-identical for any rank count; default) | reduce (faster)")
      ->check(CLI::IsMember({"canonical", "reduce"}));
  render
      ->add_option(
          "--checkpoint", a.checkpoint,
          "folder of partials: each rank appends its finished units; a rerun renders only the missing")
      ->type_name("DIR");
  render->add_flag(
      "--cpu-fallback", a.cpu_fallback,
      "--backend=gpu: a rank whose GPU is unavailable or lost continues on the CPU (else exit 43)");
  render->add_option("--png", a.png, "tone-mapped PNG (default <job name>.png unless --exr or --sums)")
      ->type_name("FILE");
  render->add_option("--exr", a.exr, "EXR of the merged linear XYZ sums")->type_name("FILE");
  render->add_option("--sums", a.sums, "raw f64 sums (.ftsum)")->type_name("FILE");
  render->add_option("--threads", a.threads, "CPU threads per rank (default: the node's cores / its ranks)")
      ->check(CLI::Range(0u, 4096u));
  render->add_flag("-q,--quiet", a.quiet, "no progress and no summary");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitBadInput;
  }
  if (a.png.empty() && a.exr.empty() && a.sums.empty())
    a.png = std::filesystem::path(a.job).stem().string() + ".png";
  int code = kExitOk;
  {
    CancelOnSignals signals;
    code = run(a, signals);
  }
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised) MPI_Finalize();
  return code;
}
