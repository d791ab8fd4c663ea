/// @file
/// The canonical merge (docs/design/farm.md §1 "Merge"): F = Σ over units ascending of f64(S_u), whatever the files.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "facetrace/core/sha256.h"
#include "facetrace/core/text.h"
#include "facetrace/tracer/farm.h"

namespace facetrace::farm {
namespace {

/// The arguments as files: a directory stands for its *.ftp files (sorted); the same file twice counts once.
Expected<std::vector<std::string>> expand(const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::set<std::string> seen;
  auto add = [&](const fs::path& p) {
    std::error_code ec;
    const fs::path key = fs::weakly_canonical(p, ec);
    if (seen.insert(ec ? p.string() : key.string()).second) out.push_back(p.string());
  };
  for (const std::string& a : args) {
    std::error_code ec;
    if (fs::is_directory(a, ec)) {
      std::vector<fs::path> found;
      for (const auto& entry : fs::directory_iterator(a, ec))
        if (entry.path().extension() == ".ftp" && entry.path().filename().string()[0] != '.')
          found.push_back(entry.path());
      if (ec) return io_error(core::printable(a) + ": cannot list: " + ec.message());
      std::sort(found.begin(), found.end());
      for (const auto& f : found) add(f);
    } else {
      add(a);
    }
  }
  return out;
}

/// The first field on which two headers disagree, or empty.
std::string mismatch(const PartialHeader& a, const PartialHeader& b) {
  auto size = [](const PartialHeader& h) { return std::to_string(h.width) + "x" + std::to_string(h.height); };
  if (a.build_id != b.build_id)
    return "build (" + core::printable(a.build_id) + " vs " + core::printable(b.build_id) + ")";
  if (a.scene_sha256 != b.scene_sha256)
    return "scene (sha256 " + core::hex(a.scene_sha256).substr(0, 16) + "… vs " +
           core::hex(b.scene_sha256).substr(0, 16) + "…)";
  if (a.width != b.width || a.height != b.height) return "size (" + size(a) + " vs " + size(b) + ")";
  if (a.unit_samples != b.unit_samples)
    return "unit size K (" + std::to_string(a.unit_samples) + " vs " + std::to_string(b.unit_samples) + ")";
  if (a.spp != b.spp) return "spp (" + std::to_string(a.spp) + " vs " + std::to_string(b.spp) + ")";
  return {};
}

}  // namespace

CanonicalAccumulator::CanonicalAccumulator(std::uint32_t width, std::uint32_t height)
    : width_(width), height_(height), xyz_(std::size_t{width} * height * 3, 0.0) {}

Status CanonicalAccumulator::add(std::uint64_t unit, const float* xyz, std::size_t count) {
  if (count != xyz_.size())
    return invalid_argument("unit " + std::to_string(unit) + ": " + std::to_string(count / 3) +
                            " pixels, the film has " + std::to_string(xyz_.size() / 3));
  if (any_ && unit <= last_)
    return invalid_argument("unit " + std::to_string(unit) + " after unit " + std::to_string(last_) +
                            ": the canonical order is strictly ascending");
  for (std::size_t i = 0; i < count; ++i) xyz_[i] += static_cast<double>(xyz[i]);
  any_ = true;
  last_ = unit;
  return {};
}

std::string format_unit_list(const std::vector<std::uint64_t>& units, std::size_t max_ranges) {
  std::string out;
  std::size_t ranges = 0, i = 0;
  while (i < units.size()) {
    std::size_t j = i;
    while (j + 1 < units.size() && units[j + 1] == units[j] + 1) ++j;
    if (ranges == max_ranges) {
      std::size_t rest = 0;
      for (std::size_t k = i; k < units.size();) {
        std::size_t m = k;
        while (m + 1 < units.size() && units[m + 1] == units[m] + 1) ++m;
        ++rest;
        k = m + 1;
      }
      out += ", … (" + std::to_string(rest) + " more)";
      break;
    }
    if (!out.empty()) out += ", ";
    out += std::to_string(units[i]);
    if (j > i) out += "-" + std::to_string(units[j]);
    ++ranges;
    i = j + 1;
  }
  return out;
}

Expected<MergedFilm> merge_partials(const std::vector<std::string>& paths, const MergeOptions& options) {
  auto files = expand(paths);
  if (!files.ok()) return files.status();
  if (files->empty()) return invalid_argument("no partial files to merge (a directory holds none?)");
  std::vector<PartialHeader> headers;
  for (const std::string& f : *files) {
    auto h = read_partial_header(f);
    if (!h.ok()) return h.status();
    if (!headers.empty())
      if (const std::string why = mismatch(headers.front(), *h); !why.empty())
        return invalid_argument(core::printable(f) + " does not belong with " +
                                core::printable(files->front()) + ": different " + why);
    headers.push_back(std::move(h).value());
  }
  const PartialHeader& ref = headers.front();
  MergedFilm m;
  m.width = ref.width;
  m.height = ref.height;
  m.build_id = ref.build_id;
  m.job_name = ref.job_name;
  m.scene_json = ref.scene_json;
  m.scene_sha256 = ref.scene_sha256;
  m.unit_samples = ref.unit_samples;
  m.spp = ref.spp;
  Job shape;  // the unit map of the job the headers describe
  shape.spp = ref.spp;
  shape.unit_samples = ref.unit_samples;
  m.units_total = unit_count(shape);

  struct Ref {
    std::uint64_t unit;
    std::size_t file, entry;
  };
  std::vector<Ref> refs;
  for (std::size_t f = 0; f < headers.size(); ++f)
    for (std::size_t e = 0; e < headers[f].units.size(); ++e) {
      const UnitEntry& u = headers[f].units[e];
      const UnitSamples want = unit_samples(shape, u.unit);
      if (u.unit >= m.units_total || u.first_sample != want.first_sample || u.samples != want.samples)
        return io_error(core::printable((*files)[f]) + ": unit " + std::to_string(u.unit) +
                        ": corrupt: samples [" + std::to_string(u.first_sample) + ", +" +
                        std::to_string(u.samples) + ") do not match the job's unit map");
      refs.push_back({u.unit, f, e});
    }
  std::sort(refs.begin(), refs.end(), [](const Ref& a, const Ref& b) { return a.unit < b.unit; });
  for (std::size_t i = 1; i < refs.size(); ++i)
    if (refs[i].unit == refs[i - 1].unit)
      return invalid_argument("unit " + std::to_string(refs[i].unit) + " is in both " +
                              core::printable((*files)[refs[i - 1].file]) + " and " +
                              core::printable((*files)[refs[i].file]) + " (duplicated unit)");
  std::size_t r = 0;
  for (std::uint64_t u = 0; u < m.units_total; ++u) {
    if (r < refs.size() && refs[r].unit == u)
      ++r;
    else
      m.missing.push_back(u);
  }
  if (refs.empty()) return invalid_argument("the partials hold no finished unit");
  if (!m.missing.empty() && !options.allow_missing)
    return invalid_argument(std::to_string(m.missing.size()) + " of " + std::to_string(m.units_total) +
                            " units are missing: " + format_unit_list(m.missing) +
                            " (rerun their workers, or merge with --allow-missing)");

  CanonicalAccumulator acc(m.width, m.height);
  for (const Ref& ref_u : refs) {
    const UnitEntry& u = headers[ref_u.file].units[ref_u.entry];
    auto xyz = read_partial_unit((*files)[ref_u.file], headers[ref_u.file], ref_u.entry);
    if (!xyz.ok()) return xyz.status();
    FT_TRY(acc.add(u.unit, xyz->data(), xyz->size()));
    m.samples += u.samples;
    m.nonfinite += u.nonfinite;
    m.unit_seconds += u.seconds;
    ++m.units_merged;
    (u.backend == UnitBackend::kCpu ? m.cpu_units : u.backend == UnitBackend::kGpu ? m.gpu_units : m.mixed_units)++;
  }
  m.xyz = std::move(acc.xyz());
  return m;
}

tracer::Film to_film(const MergedFilm& merged) {
  tracer::Film film(merged.width, merged.height);
  for (std::size_t i = 0; i < film.xyz.size() && i < merged.xyz.size(); ++i)
    film.xyz[i] = static_cast<float>(merged.xyz[i]);
  std::fill(film.samples.begin(), film.samples.end(), static_cast<std::uint32_t>(merged.samples));
  film.nonfinite = merged.nonfinite;
  return film;
}

Status write_ftsum(const std::string& path, const MergedFilm& merged) {
  std::vector<std::uint8_t> head(64, 0);
  const char magic[8] = {'F', 'T', 'S', 'U', 'M', '1', '\0', '\0'};
  std::memcpy(head.data(), magic, 8);
  std::memcpy(head.data() + 8, &merged.width, 4);
  std::memcpy(head.data() + 12, &merged.height, 4);
  std::memcpy(head.data() + 16, &merged.samples, 8);
  std::memcpy(head.data() + 24, &merged.nonfinite, 8);
  std::memcpy(head.data() + 32, merged.scene_sha256.data(), 32);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error(core::printable(path) + ": cannot write: " + std::strerror(errno));
  auto write_all = [fd](const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    while (n > 0) {
      const ssize_t w = ::write(fd, b, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      b += w, n -= static_cast<std::size_t>(w);
    }
    return true;
  };
  const bool ok = write_all(head.data(), head.size()) &&
                  write_all(merged.xyz.data(), merged.xyz.size() * sizeof(double)) && ::fsync(fd) == 0;
  const std::string why = std::strerror(errno);
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return io_error(core::printable(path) +
                    ": cannot write: " + (ok ? std::string(std::strerror(errno)) : why));
  }
  return {};
}

}  // namespace facetrace::farm
