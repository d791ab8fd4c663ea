/// @file
/// Farm rendering (docs/design/farm.md §1): jobs, deterministic work units, additive partial files (.ftp) and the
/// canonical merge. Any grouping of units into workers or ranks merges to identical bits.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "facetrace/core/status.h"
#include "facetrace/tracer/film.h"
#include "facetrace/tracer/renderer.h"
#include "facetrace/tracer/scene.h"

namespace facetrace::farm {

// ---- jobs and units --------------------------------------------------------------------------------------

/// A job: one frame of a scene, `spp` samples per pixel cut into units of `unit_samples` (K) samples.
/// Unit u covers the absolute samples [u·K, min((u+1)·K, spp)) of every pixel (docs/design/farm.md §1).
struct Job {
  std::string name;                ///< names the partial files: part-<name>-<first unit>.ftp
  tracer::Scene scene;             ///< after the job's width/height overrides, validated
  std::uint64_t spp = 0;           ///< samples per pixel of the whole frame, 1..2^32−1
  std::uint32_t unit_samples = 0;  ///< K, 1..65536
  std::string scene_json;          ///< canonical scene JSON (scene_to_json, one line)
  /// core::sha256 of the canonical scene JSON with an HDR map named by its sha256 alone (SceneJsonOptions::
  /// map_by_sha256): equal to scene_json's hash except for HDR scenes.
  std::array<std::uint8_t, 32> scene_sha256{};
};

/// A job's limits (docs/design/farm.md §1): spp, K, and C = ⌈spp / K⌉ units (every unit is a row of a partial's table
/// and of the merge's unit map). make_job refuses a job past them; a partial file whose header is past them is corrupt.
inline constexpr std::uint64_t kMaxJobSpp = 0xFFFFFFFFull;  ///< the renderer's sample indices are 32-bit
inline constexpr std::uint32_t kMaxJobUnitSamples = 65536;  ///< a unit is one request-sized chunk
inline constexpr std::uint64_t kMaxJobUnits = std::uint64_t{1} << 24;

/// Builds a job from a scene (validated, Tier 1 checked by the renderer later). Errors: kInvalidArgument naming
/// the bad value (name not [A-Za-z0-9._-]{1,64}, spp, K, more than kMaxJobUnits units, the scene).
Expected<Job> make_job(std::string name, tracer::Scene scene, std::uint64_t spp, std::uint32_t unit_samples);

/// Parses a job file's text (schema: docs/design/farm.md §1 "Job file"). A relative "scene" path is resolved against
/// `base_dir`; `default_name` is used when the job has no "name". `source` names the text in messages.
/// Errors: kInvalidArgument ("<source>: <field>: <reason>"), kIo (the scene file cannot be read).
Expected<Job> parse_job(std::string_view text, const std::string& base_dir, const std::string& default_name,
                        std::string_view source = "<string>");

/// Reads a job file; the default name is the file's stem. Errors: as parse_job(), kIo naming `path`.
Expected<Job> load_job_file(const std::string& path);

/// C = ⌈spp / K⌉, the number of units of the job.
std::uint64_t unit_count(const Job& job);

/// The sample range of unit `u` (< unit_count(job)).
struct UnitSamples {
  std::uint64_t first_sample = 0;
  std::uint32_t samples = 0;
};
UnitSamples unit_samples(const Job& job, std::uint64_t unit);

/// CRC-32 (IEEE 802.3, reflected 0xEDB88320, as zlib's crc32) of `size` bytes, continuing from `crc` (0 to start).
std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t crc = 0);

/// The build identity recorded in partials: "facetrace <version> <git describe>" (merge refuses a mix).
const std::string& build_id();

/// Which backend rendered a unit.
enum class UnitBackend : std::uint8_t { kCpu = 1, kGpu = 2, kMixed = 3 };
std::string_view unit_backend_name(UnitBackend backend);

/// One rendered unit: S_u, its sums traced into a zeroed f32 film (12 B per pixel).
struct UnitResult {
  std::uint64_t unit = 0;
  UnitSamples range;
  std::vector<float> xyz;  ///< 3 floats per pixel, row-major
  std::uint64_t nonfinite = 0;
  UnitBackend backend = UnitBackend::kCpu;
  double seconds = 0;  ///< wall time of the render
  tracer::RenderReport report;
};

/// Renders unit `unit` of `job` into a zeroed film with tracer::render (so the result depends only on the job,
/// the unit and the backend). Errors: kInvalidArgument (unit out of range), the renderer's (kCancelled when
/// options.cancel was raised: discard the unit, kNotSupported ...).
Expected<UnitResult> render_unit(const Job& job, std::uint64_t unit,
                                 const tracer::RenderOptions& options = {});

// ---- partial files (docs/design/farm.md §1 "Partial file") ----------------------------------------------------

/// One row of a partial's unit table.
struct UnitEntry {
  std::uint64_t unit = 0;
  std::uint64_t first_sample = 0;
  std::uint32_t samples = 0;
  UnitBackend backend = UnitBackend::kCpu;
  std::uint64_t nonfinite = 0;
  std::uint32_t crc32 = 0;  ///< of the unit's 12·W·H bytes of f32 XYZ, little-endian
  double seconds = 0;       ///< render wall time
};

/// A partial's header (the newest valid copy of the two it holds).
struct PartialHeader {
  std::uint32_t version = 0;
  std::string build_id;
  std::string job_name;
  std::array<std::uint8_t, 32> scene_sha256{};
  std::uint32_t width = 0, height = 0;
  std::uint32_t unit_samples = 0;  ///< K
  std::uint64_t spp = 0;           ///< of the whole job
  std::uint32_t capacity = 0;      ///< unit table slots
  std::string scene_json;          ///< canonical scene JSON
  std::vector<UnitEntry> units;    ///< in the order written (ascending by construction)
};

/// `part-<job>-<first_unit>.ftp`.
std::string partial_file_name(const std::string& job_name, std::uint64_t first_unit);

/// Reads and checks a partial's header: magic, version, header CRC, sizes, that the file is long enough for
/// every unit the table lists (otherwise kIo "<path>: truncated: unit U ..."). Does not read the unit blocks.
/// Errors: kIo naming `path` and what is wrong.
Expected<PartialHeader> read_partial_header(const std::string& path);

/// Reads the f32 XYZ block of the `index`-th table entry and verifies its CRC. Errors: kIo naming the path and
/// the unit ("<path>: unit U: CRC mismatch", "... truncated").
Expected<std::vector<float>> read_partial_unit(const std::string& path, const PartialHeader& header,
                                               std::size_t index);

/// An open partial file being written; holds an exclusive lock (flock) on it. Move-only.
class PartialWriter {
 public:
  /// Opens `dir`/partial_file_name(job.name, first_unit) for appending, creating it (atomically: written as a
  /// temporary, then linked into place) with a table of `capacity` units when absent. An existing file must
  /// belong to the same job (build, scene hash, size, K, spp) and have room. Errors: kInvalidArgument (another
  /// job's or build's file by that name, no room: the message says which), kIo (cannot create / lock: another
  /// process writes it).
  static Expected<PartialWriter> open(const std::string& dir, const Job& job, std::uint64_t first_unit,
                                      std::uint32_t capacity);

  PartialWriter(PartialWriter&&) noexcept;
  PartialWriter& operator=(PartialWriter&&) noexcept;
  PartialWriter(const PartialWriter&) = delete;
  PartialWriter& operator=(const PartialWriter&) = delete;
  ~PartialWriter();

  /// Appends a finished unit: writes its block, syncs, then rewrites the older of the two header copies and
  /// syncs again, so a crash at any point leaves the file with every earlier unit intact. Errors:
  /// kInvalidArgument (wrong size, unit already present, table full), kIo naming the path.
  Status append(const UnitResult& unit);

  const PartialHeader& header() const;
  const std::string& path() const;

 private:
  struct State;
  explicit PartialWriter(State* state);
  State* state_ = nullptr;
};

// ---- merge (docs/design/farm.md §1 "Merge") ---------------------------------------------------------------------

/// The canonical film: F = Σ over units ascending of f64(S_u).
struct MergedFilm {
  std::uint32_t width = 0, height = 0;
  std::vector<double> xyz;    ///< 3 doubles per pixel, row-major
  std::uint64_t samples = 0;  ///< N: samples per pixel merged
  std::uint64_t nonfinite = 0;
  std::uint64_t units_merged = 0;
  std::uint64_t units_total = 0;       ///< C of the job
  std::vector<std::uint64_t> missing;  ///< units absent (merged anyway with allow_missing)
  std::uint64_t cpu_units = 0, gpu_units = 0, mixed_units = 0;
  double unit_seconds = 0;  ///< Σ of the units' render times
  std::string build_id, job_name, scene_json;
  std::array<std::uint8_t, 32> scene_sha256{};
  std::uint32_t unit_samples = 0;
  std::uint64_t spp = 0;
};

/// Adds units in ascending order into one f64 film (the MPI root and merge_partials use it).
class CanonicalAccumulator {
 public:
  CanonicalAccumulator(std::uint32_t width, std::uint32_t height);
  /// Adds S_u; units must arrive in strictly ascending order. Errors: kInvalidArgument (order, size).
  Status add(std::uint64_t unit, const float* xyz, std::size_t count);
  std::vector<double>& xyz() { return xyz_; }
  const std::vector<double>& xyz() const { return xyz_; }

 private:
  std::uint32_t width_, height_;
  bool any_ = false;
  std::uint64_t last_ = 0;
  std::vector<double> xyz_;
};

struct MergeOptions {
  bool allow_missing = false;
};

/// Merges partial files (a directory argument stands for its *.ftp files). Checks every header agrees on build,
/// scene hash, W, H, K and spp; verifies every CRC; refuses a duplicated unit, and a missing one unless
/// allow_missing. Errors: kInvalidArgument (mismatch, duplicate, missing: naming the files and units), kIo
/// (unreadable, corrupt or truncated partial: naming the file and unit).
Expected<MergedFilm> merge_partials(const std::vector<std::string>& paths, const MergeOptions& options = {});

/// "0-3, 7, 9-12": ascending unit indices as ranges, at most `max_ranges` then "… (N more)".
std::string format_unit_list(const std::vector<std::uint64_t>& units, std::size_t max_ranges = 16);

/// The merged film as a tracer::Film (f32 sums rounded from the f64 ones, N in every pixel) for the PNG/EXR.
tracer::Film to_film(const MergedFilm& merged);

/// Writes the raw f64 sums: magic "FTSUM1\0\0", u32 W, u32 H, u64 N, u64 nonfinite, 32 B scene sha256, then
/// 3·W·H little-endian doubles. Errors: kIo naming `path`.
Status write_ftsum(const std::string& path, const MergedFilm& merged);

}  // namespace facetrace::farm
