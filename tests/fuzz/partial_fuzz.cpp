/// @file
/// libFuzzer target: partial files (.ftp, docs/design/farm.md §1 "Partial file") and the merge. The input's
/// first byte is a set of flags, the rest is the file. Every CRC in the format would stop a mutation at once, so
/// with kFixCrcs the target recomputes them (preamble, each header copy, and with kFixUnitCrcs each unit block
/// listed) before the file is read: the fuzzer then reaches the checks behind them.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "facetrace/tracer/farm.h"
#include "fuzz_common.h"

namespace {

constexpr std::uint8_t kFixCrcs = 1, kFixUnitCrcs = 2, kAllowMissing = 4, kTwice = 8;
// The layout of partial.cpp (docs/design/farm.md §1 "Partial file").
constexpr std::size_t kPreamble = 4096, kSlotFixed = 208, kEntry = 48;

std::string g_path;

template <class T>
T get(const std::vector<std::uint8_t>& b, std::size_t off) {
  T v{};
  if (off + sizeof v <= b.size()) std::memcpy(&v, b.data() + off, sizeof v);
  return v;
}
template <class T>
void put(std::vector<std::uint8_t>& b, std::size_t off, T v) {
  if (off + sizeof v <= b.size()) std::memcpy(b.data() + off, &v, sizeof v);
}

void fix_crcs(std::vector<std::uint8_t>& f, bool units) {
  using facetrace::farm::crc32;
  if (f.size() < kPreamble) return;
  put<std::uint32_t>(f, 16, crc32(f.data(), 16));
  const std::uint64_t slot = get<std::uint32_t>(f, 12);
  if (slot == 0 || slot > (64u << 20)) return;
  const std::uint64_t body = kPreamble + 2 * slot;
  for (int s = 0; s < 2; ++s) {
    const std::uint64_t base = kPreamble + s * slot;
    if (base + slot > f.size()) return;
    const std::uint32_t used = get<std::uint32_t>(f, base + 8);
    if (used < kSlotFixed + 4 || used > slot) continue;
    if (units) {
      const std::uint32_t count = get<std::uint32_t>(f, base + 12);
      const std::uint64_t block =
          std::uint64_t{get<std::uint32_t>(f, base + 176)} * get<std::uint32_t>(f, base + 180) * 12;
      for (std::uint64_t i = 0; i < count && kSlotFixed + kEntry * (i + 1) <= used; ++i) {
        const std::uint64_t off = body + i * block;
        if (block == 0 || block > f.size() || off > f.size() - block) break;
        put<std::uint32_t>(f, base + kSlotFixed + kEntry * i + 32, crc32(f.data() + off, block));
      }
    }
    put<std::uint32_t>(f, base + used - 4, crc32(f.data() + base, used - 4));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  facetrace::fuzz::quiet_logs();
  const char* tmp = std::getenv("TMPDIR");
  const std::filesystem::path dir =
      std::filesystem::path(tmp && *tmp ? tmp : "/tmp") / ("ft-fuzz-partial-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  g_path = (dir / "part-fuzz-0.ftp").string();
  std::atexit([] { std::filesystem::remove_all(std::filesystem::path(g_path).parent_path()); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace facetrace;
  if (size == 0) return 0;
  const std::uint8_t flags = data[0];
  std::vector<std::uint8_t> file(data + 1, data + size);
  if (flags & kFixCrcs) fix_crcs(file, (flags & kFixUnitCrcs) != 0);
  {
    std::FILE* f = std::fopen(g_path.c_str(), "wb");
    fuzz::check(f != nullptr, "the scratch partial can be written");
    fuzz::check(std::fwrite(file.data(), 1, file.size(), f) == file.size() && std::fclose(f) == 0,
                "the scratch partial is written whole");
  }
  auto header = farm::read_partial_header(g_path);
  if (!header) {
    fuzz::check(!header.status().what().empty(), "a refused partial names the problem");
    return 0;
  }
  for (std::size_t i = 0; i < header->units.size(); ++i) {
    auto unit = farm::read_partial_unit(g_path, *header, i);
    if (unit)
      fuzz::check(unit->size() == std::size_t{header->width} * header->height * 3, "a unit block is W·H·3");
  }
  farm::MergeOptions options;
  options.allow_missing = (flags & kAllowMissing) != 0;
  std::vector<std::string> paths{g_path};
  if (flags & kTwice) paths.push_back(std::filesystem::path(g_path).parent_path().string());
  auto merged = farm::merge_partials(paths, options);
  if (merged) {
    fuzz::check(merged->xyz.size() == std::size_t{merged->width} * merged->height * 3,
                "the merged film is W·H·3");
    fuzz::check(merged->units_merged + merged->missing.size() == merged->units_total,
                "merged and missing units add up to the job's");
  }
  return 0;
}
