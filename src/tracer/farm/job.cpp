/// @file
/// Farm jobs and work units (docs/design/farm.md §1): the job file, the unit → sample-range map, render_unit.
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "facetrace/core/file.h"
#include "facetrace/core/sha256.h"
#include "facetrace/core/text.h"
#include "facetrace/tracer/farm.h"
#include "facetrace/tracer/scene_json.h"
#include "farm_git_sha.h"  // generated at build time: FT_FARM_GIT_SHA (cmake/bench_git_sha.cmake)

namespace facetrace::farm {
namespace {

constexpr std::uint64_t kMaxSpp = kMaxJobSpp;
constexpr std::uint32_t kMaxUnitSamples = kMaxJobUnitSamples;
constexpr std::uint64_t kMaxJobBytes = 16u << 20;  // a job file (with an inline scene) is small

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

/// A whole number in [lo, hi] from field `key`; the error names the field.
Expected<std::uint64_t> whole(const nlohmann::json& j, const std::string& where, const char* key,
                              std::uint64_t lo, std::uint64_t hi) {
  const auto& v = j.at(key);
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
    return invalid_argument(
        where + ": " + key + ": expected a whole number ≥ 0, got " +
        core::printable(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
  const auto x = v.get<std::uint64_t>();
  if (x < lo || x > hi)
    return invalid_argument(where + ": " + key + ": must be in [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "], got " + std::to_string(x));
  return x;
}

}  // namespace

const std::string& build_id() {
  static const std::string id = std::string("facetrace ") + FT_FARM_VERSION + " " + FT_FARM_GIT_SHA;
  return id;
}

std::string_view unit_backend_name(UnitBackend backend) {
  switch (backend) {
    case UnitBackend::kCpu: return "cpu";
    case UnitBackend::kGpu: return "gpu";
    case UnitBackend::kMixed: return "gpu+cpu";
  }
  return "?";
}

std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  uLong c = crc;
  while (size > 0) {  // zlib takes uInt lengths
    const uInt n = static_cast<uInt>(std::min<std::size_t>(size, 1u << 30));
    c = ::crc32(c, p, n);
    p += n;
    size -= n;
  }
  return static_cast<std::uint32_t>(c);
}

Expected<Job> make_job(std::string name, tracer::Scene scene, std::uint64_t spp, std::uint32_t unit_samples) {
  if (!valid_name(name))
    return invalid_argument("job name \"" + core::printable(name) + "\": expected 1 to 64 of [A-Za-z0-9._-]");
  if (spp < 1 || spp > kMaxSpp)
    return invalid_argument("spp: must be in [1, " + std::to_string(kMaxSpp) + "], got " +
                            std::to_string(spp));
  if (unit_samples < 1 || unit_samples > kMaxUnitSamples)
    return invalid_argument("unit_samples: must be in [1, " + std::to_string(kMaxUnitSamples) + "], got " +
                            std::to_string(unit_samples));
  if (const std::uint64_t units = (spp + unit_samples - 1) / unit_samples; units > kMaxJobUnits)
    return invalid_argument("spp " + std::to_string(spp) + " in units of " + std::to_string(unit_samples) +
                            " makes " + std::to_string(units) + " units, more than " +
                            std::to_string(kMaxJobUnits) + ": use a larger unit_samples");
  FT_TRY(tracer::validate_scene(scene));
  Job job;
  job.name = std::move(name);
  job.scene = std::move(scene);
  job.spp = spp;
  job.unit_samples = unit_samples;
  tracer::SceneJsonOptions canonical;  // docs/design/farm.md §1: the hash is of the canonical one-line JSON
  canonical.indent = -1;
  job.scene_json = tracer::scene_to_json(job.scene, canonical);
  // The hash names an HDR map by its sha256, not its path (the same job on machines that mount it elsewhere).
  tracer::SceneJsonOptions identity = canonical;
  identity.map_by_sha256 = true;
  const std::string id = tracer::scene_to_json(job.scene, identity);
  job.scene_sha256 = core::sha256({reinterpret_cast<const std::uint8_t*>(id.data()), id.size()});
  return job;
}

Expected<Job> parse_job(std::string_view text, const std::string& base_dir, const std::string& default_name,
                        std::string_view source) {
  const std::string where = core::printable(source);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return invalid_argument(where + ": not valid JSON");
  if (!j.is_object()) return invalid_argument(where + ": a job is a JSON object");
  static const char* kKeys[] = {"name", "scene", "spp", "unit_samples", "width", "height", "max_bounces"};
  for (const auto& [key, value] : j.items())
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys))
      return invalid_argument(where + ": unknown field \"" + core::printable(key) +
                              "\" (expected name, scene, spp, unit_samples, width, height, max_bounces)");
  for (const char* key : {"scene", "spp", "unit_samples"})
    if (!j.contains(key)) return invalid_argument(where + ": missing field \"" + key + "\"");

  std::string name = default_name;
  if (j.contains("name")) {
    if (!j["name"].is_string()) return invalid_argument(where + ": name: expected a string");
    name = j["name"].get<std::string>();
  }
  const auto& s = j["scene"];
  tracer::Scene scene;
  if (s.is_object()) {
    auto parsed = tracer::scene_from_json(s.dump(), where + ": scene");
    if (!parsed.ok()) return parsed.status();
    scene = std::move(parsed).value();
  } else if (s.is_string() && s.get<std::string>() == "builtin:diamond") {
    scene = tracer::builtin_diamond_scene();
  } else if (s.is_string()) {
    std::filesystem::path p(s.get<std::string>());
    if (p.is_relative()) p = std::filesystem::path(base_dir) / p;
    auto loaded = tracer::load_scene_file(p.string());
    if (!loaded.ok()) return loaded.status().with_context(where + ": scene");
    scene = std::move(loaded).value();
  } else {
    return invalid_argument(where + ": scene: expected an object, a file path or \"builtin:diamond\"");
  }
  auto spp = whole(j, where, "spp", 1, kMaxSpp);
  if (!spp.ok()) return spp.status();
  auto k = whole(j, where, "unit_samples", 1, kMaxUnitSamples);
  if (!k.ok()) return k.status();
  const struct {
    const char* key;
    std::uint64_t hi;
    std::uint32_t* field;
  } overrides[] = {{"width", 7680, &scene.width},
                   {"height", 4320, &scene.height},
                   {"max_bounces", 128, &scene.max_bounces}};
  for (const auto& o : overrides) {
    if (!j.contains(o.key)) continue;
    auto v = whole(j, where, o.key, 1, o.hi);
    if (!v.ok()) return v.status();
    *o.field = static_cast<std::uint32_t>(*v);
  }
  auto job = make_job(std::move(name), std::move(scene), *spp, static_cast<std::uint32_t>(*k));
  if (!job.ok()) return job.status().with_context(where);
  return job;
}

Expected<Job> load_job_file(const std::string& path) {
  auto bytes = core::read_file(path, kMaxJobBytes);
  if (!bytes.ok()) return bytes.status();
  const std::filesystem::path p(path);
  const std::string text(bytes->begin(), bytes->end());
  return parse_job(text, p.has_parent_path() ? p.parent_path().string() : ".", p.stem().string(), path);
}

std::uint64_t unit_count(const Job& job) {
  return job.unit_samples ? (job.spp + job.unit_samples - 1) / job.unit_samples : 0;
}

UnitSamples unit_samples(const Job& job, std::uint64_t unit) {
  UnitSamples r;
  r.first_sample = unit * job.unit_samples;
  if (r.first_sample >= job.spp) return {r.first_sample, 0};
  r.samples = static_cast<std::uint32_t>(std::min<std::uint64_t>(job.unit_samples, job.spp - r.first_sample));
  return r;
}

Expected<UnitResult> render_unit(const Job& job, std::uint64_t unit, const tracer::RenderOptions& options) {
  const std::uint64_t total = unit_count(job);
  if (unit >= total)
    return invalid_argument("unit " + std::to_string(unit) + " is outside the job's units [0, " +
                            std::to_string(total) + ")");
  UnitResult out;
  out.unit = unit;
  out.range = unit_samples(job, unit);
  tracer::Film film(job.scene.width, job.scene.height);  // docs/design/farm.md §1: each unit starts from zero
  const auto t0 = std::chrono::steady_clock::now();
  auto report = tracer::render(job.scene, out.range.first_sample, out.range.samples, film, options);
  if (!report.ok()) return report.status().with_context("unit " + std::to_string(unit));
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const std::uint32_t n : film.samples)
    if (n != out.range.samples)
      return internal_error("unit " + std::to_string(unit) + ": a pixel counted " + std::to_string(n) +
                            " samples, expected " + std::to_string(out.range.samples));
  out.report = std::move(report).value();
  out.backend = out.report.gpu_samples == 0   ? UnitBackend::kCpu
                : out.report.cpu_samples == 0 ? UnitBackend::kGpu
                                              : UnitBackend::kMixed;
  out.nonfinite = film.nonfinite;
  out.xyz = std::move(film.xyz);
  return out;
}

}  // namespace facetrace::farm
