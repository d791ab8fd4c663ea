/// @file
/// The partial file `.ftp` (docs/design/farm.md §1 "Partial file"): a preamble written once, two copies of the header
/// (the unit table) rewritten alternately, then one 12 B/pixel f32 XYZ block per unit. A unit's block is synced
/// before the header copy that lists it, and the older copy is the one overwritten, so a crash at any point
/// leaves a file whose newest valid header lists only complete units.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <utility>

#include "facetrace/core/sha256.h"
#include "facetrace/core/text.h"
#include "facetrace/tracer/farm.h"

namespace facetrace::farm {
namespace {

static_assert(std::endian::native == std::endian::little, "partial files are little-endian; so is this host");

constexpr char kMagic[8] = {'F', 'T', 'P', 'A', 'R', 'T', '1', '\0'};
constexpr std::uint32_t kVersion = 1;
constexpr std::uint64_t kPreambleBytes = 4096;
constexpr std::uint64_t kSlotAlign = 4096;
constexpr std::size_t kNameBytes = 64;
constexpr std::size_t kSlotFixed = 208;  // bytes before the unit table
constexpr std::size_t kEntryBytes = 48;
constexpr std::uint64_t kMaxSlotBytes = 64ull << 20;
constexpr std::uint32_t kMaxSide = 65536;  // above every scene's width and height (docs/design/tracer.md §2)

std::string errno_text() { return std::strerror(errno); }

// ---- little-endian field codec (the host is little-endian: plain copies) ----------------------------------

template <class T>
void put(std::vector<std::uint8_t>& b, std::size_t off, T v) {
  std::memcpy(b.data() + off, &v, sizeof v);
}
template <class T>
T get(const std::uint8_t* b, std::size_t off) {
  T v;
  std::memcpy(&v, b + off, sizeof v);
  return v;
}
void put_name(std::vector<std::uint8_t>& b, std::size_t off, const std::string& s) {
  std::memcpy(b.data() + off, s.data(), std::min(s.size(), kNameBytes - 1));
}
bool get_name(const std::uint8_t* b, std::size_t off, std::string& out) {
  const auto* p = reinterpret_cast<const char*>(b + off);
  const std::size_t n = strnlen(p, kNameBytes);
  if (n == kNameBytes) return false;
  out.assign(p, n);
  return true;
}

std::uint64_t slot_bytes_for(std::uint32_t capacity, std::size_t json_bytes) {
  const std::uint64_t used = kSlotFixed + std::uint64_t{kEntryBytes} * capacity + json_bytes + 4;
  return (used + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
}

std::uint64_t block_bytes(const PartialHeader& h) { return std::uint64_t{h.width} * h.height * 12; }

/// One header copy: the sequence number, then the header, then its CRC-32.
std::vector<std::uint8_t> encode_slot(const PartialHeader& h, std::uint64_t sequence, std::uint64_t slot_bytes) {
  std::vector<std::uint8_t> b(slot_bytes, 0);
  const std::size_t used = kSlotFixed + kEntryBytes * h.capacity + h.scene_json.size() + 4;
  put<std::uint64_t>(b, 0, sequence);
  put<std::uint32_t>(b, 8, static_cast<std::uint32_t>(used));
  put<std::uint32_t>(b, 12, static_cast<std::uint32_t>(h.units.size()));
  put_name(b, 16, h.build_id);
  put_name(b, 80, h.job_name);
  std::memcpy(b.data() + 144, h.scene_sha256.data(), 32);
  put<std::uint32_t>(b, 176, h.width);
  put<std::uint32_t>(b, 180, h.height);
  put<std::uint32_t>(b, 184, h.unit_samples);
  put<std::uint32_t>(b, 188, h.capacity);
  put<std::uint64_t>(b, 192, h.spp);
  put<std::uint32_t>(b, 200, static_cast<std::uint32_t>(h.scene_json.size()));
  for (std::size_t i = 0; i < h.units.size(); ++i) {
    const UnitEntry& e = h.units[i];
    const std::size_t o = kSlotFixed + kEntryBytes * i;
    put<std::uint64_t>(b, o, e.unit);
    put<std::uint64_t>(b, o + 8, e.first_sample);
    put<std::uint32_t>(b, o + 16, e.samples);
    put<std::uint8_t>(b, o + 20, static_cast<std::uint8_t>(e.backend));
    put<std::uint64_t>(b, o + 24, e.nonfinite);
    put<std::uint32_t>(b, o + 32, e.crc32);
    put<double>(b, o + 40, e.seconds);
  }
  std::memcpy(b.data() + kSlotFixed + kEntryBytes * h.capacity, h.scene_json.data(), h.scene_json.size());
  put<std::uint32_t>(b, used - 4, crc32(b.data(), used - 4));
  return b;
}

/// Decodes one header copy; false when it is absent (sequence 0), torn or inconsistent.
bool decode_slot(const std::uint8_t* b, std::uint64_t slot_bytes, PartialHeader& h, std::uint64_t& sequence) {
  sequence = get<std::uint64_t>(b, 0);
  const std::uint32_t used = get<std::uint32_t>(b, 8);
  if (sequence == 0 || used < kSlotFixed + 4 || used > slot_bytes) return false;
  if (get<std::uint32_t>(b, used - 4) != crc32(b, used - 4)) return false;
  const std::uint32_t count = get<std::uint32_t>(b, 12);
  h.capacity = get<std::uint32_t>(b, 188);
  const std::uint32_t json_bytes = get<std::uint32_t>(b, 200);
  if (count > h.capacity || kSlotFixed + std::uint64_t{kEntryBytes} * h.capacity + json_bytes + 4 != used)
    return false;
  if (!get_name(b, 16, h.build_id) || !get_name(b, 80, h.job_name)) return false;
  std::memcpy(h.scene_sha256.data(), b + 144, 32);
  h.width = get<std::uint32_t>(b, 176);
  h.height = get<std::uint32_t>(b, 180);
  h.unit_samples = get<std::uint32_t>(b, 184);
  h.spp = get<std::uint64_t>(b, 192);
  h.units.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    UnitEntry& e = h.units[i];
    const std::size_t o = kSlotFixed + kEntryBytes * i;
    e.unit = get<std::uint64_t>(b, o);
    e.first_sample = get<std::uint64_t>(b, o + 8);
    e.samples = get<std::uint32_t>(b, o + 16);
    const auto be = get<std::uint8_t>(b, o + 20);
    if (be < 1 || be > 3) return false;
    e.backend = static_cast<UnitBackend>(be);
    e.nonfinite = get<std::uint64_t>(b, o + 24);
    e.crc32 = get<std::uint32_t>(b, o + 32);
    e.seconds = get<double>(b, o + 40);
  }
  h.scene_json.assign(reinterpret_cast<const char*>(b) + kSlotFixed + kEntryBytes * h.capacity, json_bytes);
  return true;
}

std::vector<std::uint8_t> encode_preamble(std::uint64_t slot_bytes) {
  std::vector<std::uint8_t> b(kPreambleBytes, 0);
  std::memcpy(b.data(), kMagic, 8);
  put<std::uint32_t>(b, 8, kVersion);
  put<std::uint32_t>(b, 12, static_cast<std::uint32_t>(slot_bytes));
  put<std::uint32_t>(b, 16, crc32(b.data(), 16));
  return b;
}

bool pread_all(int fd, void* buf, std::size_t n, std::uint64_t off) {
  auto* p = static_cast<std::uint8_t*>(buf);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r, n -= static_cast<std::size_t>(r), off += static_cast<std::uint64_t>(r);
  }
  return true;
}

bool pwrite_all(int fd, const void* buf, std::size_t n, std::uint64_t off) {
  const auto* p = static_cast<const std::uint8_t*>(buf);
  while (n > 0) {
    const ssize_t r = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r, n -= static_cast<std::size_t>(r), off += static_cast<std::uint64_t>(r);
  }
  return true;
}

/// A file descriptor closed on scope exit unless released.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

/// The header of an open partial plus where its parts lie.
struct Layout {
  PartialHeader header;
  std::uint64_t slot_bytes = 0;
  std::uint64_t sequence = 0;  ///< of the copy read
  std::uint64_t file_bytes = 0;
  std::uint64_t body_offset() const { return kPreambleBytes + 2 * slot_bytes; }
};

Expected<Layout> read_layout(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io_error(core::printable(path) + ": cannot stat: " + errno_text());
  Layout l;
  l.file_bytes = static_cast<std::uint64_t>(st.st_size);
  std::uint8_t pre[20];
  if (l.file_bytes < kPreambleBytes || !pread_all(fd, pre, sizeof pre, 0)) {
    if (l.file_bytes >= 8 && pread_all(fd, pre, 8, 0) && std::memcmp(pre, kMagic, 8) == 0)
      return io_error(core::printable(path) + ": truncated: " + std::to_string(l.file_bytes) +
                      " bytes, shorter than the header");
    return io_error(core::printable(path) + ": not a facetrace partial (no FTPART1 magic)");
  }
  if (std::memcmp(pre, kMagic, 8) != 0)
    return io_error(core::printable(path) + ": not a facetrace partial (no FTPART1 magic)");
  const auto version = get<std::uint32_t>(pre, 8);
  if (get<std::uint32_t>(pre, 16) != crc32(pre, 16))
    return io_error(core::printable(path) + ": corrupt: preamble CRC mismatch");
  if (version != kVersion)
    return io_error(core::printable(path) + ": partial format version " + std::to_string(version) +
                    " is not supported (this " + "build reads version " + std::to_string(kVersion) + ")");
  l.slot_bytes = get<std::uint32_t>(pre, 12);
  if (l.slot_bytes == 0 || l.slot_bytes % kSlotAlign != 0 || l.slot_bytes > kMaxSlotBytes)
    return io_error(core::printable(path) + ": corrupt: header size " + std::to_string(l.slot_bytes));
  if (l.file_bytes < l.body_offset())
    return io_error(core::printable(path) + ": truncated: " + std::to_string(l.file_bytes) +
                    " bytes, shorter than the header (" + std::to_string(l.body_offset()) + ")");
  std::vector<std::uint8_t> slot(l.slot_bytes);
  bool any = false;
  for (int s = 0; s < 2; ++s) {
    if (!pread_all(fd, slot.data(), slot.size(), kPreambleBytes + s * l.slot_bytes))
      return io_error(core::printable(path) + ": cannot read the header: " + errno_text());
    PartialHeader h;
    std::uint64_t seq = 0;
    if (decode_slot(slot.data(), l.slot_bytes, h, seq) && (!any || seq > l.sequence)) {
      l.header = std::move(h);
      l.sequence = seq;
      any = true;
    }
  }
  if (!any) return io_error(core::printable(path) + ": corrupt: neither copy of the header passes its CRC");
  l.header.version = version;
  // Values no job can have (farm.h kMaxJob*; no scene is wider or taller than kMaxSide): later sizes and the
  // merge's unit map are computed from them.
  const PartialHeader& h = l.header;
  if (h.width < 1 || h.height < 1 || h.width > kMaxSide || h.height > kMaxSide)
    return io_error(path + ": corrupt: image size " + std::to_string(h.width) + "x" +
                    std::to_string(h.height));
  if (h.unit_samples < 1 || h.unit_samples > kMaxJobUnitSamples || h.spp < 1 || h.spp > kMaxJobSpp ||
      (h.spp + h.unit_samples - 1) / h.unit_samples > kMaxJobUnits)
    return io_error(path + ": corrupt: spp " + std::to_string(h.spp) + " in units of " +
                    std::to_string(h.unit_samples) + " is no job's");
  const std::uint64_t need = l.body_offset() + l.header.units.size() * block_bytes(l.header);
  if (l.file_bytes < need) {
    const std::size_t first_short =
        static_cast<std::size_t>((l.file_bytes - l.body_offset()) / std::max<std::uint64_t>(1, block_bytes(l.header)));
    return io_error(core::printable(path) + ": truncated: unit " +
                    std::to_string(l.header.units[first_short].unit) + " needs bytes up to " +
                    std::to_string(l.body_offset() + (first_short + 1) * block_bytes(l.header)) +
                    ", the file has " + std::to_string(l.file_bytes));
  }
  return l;
}

bool same_job(const PartialHeader& h, const Job& job) {
  return h.build_id == build_id() && h.scene_sha256 == job.scene_sha256 && h.width == job.scene.width &&
         h.height == job.scene.height && h.unit_samples == job.unit_samples && h.spp == job.spp;
}

}  // namespace

std::string partial_file_name(const std::string& job_name, std::uint64_t first_unit) {
  return "part-" + job_name + "-" + std::to_string(first_unit) + ".ftp";
}

Expected<PartialHeader> read_partial_header(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) return io_error(core::printable(path) + ": cannot open: " + errno_text());
  auto l = read_layout(fd.fd, path);
  if (!l.ok()) return l.status();
  return std::move(l->header);
}

Expected<std::vector<float>> read_partial_unit(const std::string& path, const PartialHeader& header,
                                               std::size_t index) {
  if (index >= header.units.size())
    return invalid_argument(core::printable(path) + ": no table entry " + std::to_string(index));
  const UnitEntry& e = header.units[index];
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) return io_error(core::printable(path) + ": cannot open: " + errno_text());
  const std::uint64_t slot = slot_bytes_for(header.capacity, header.scene_json.size());
  const std::uint64_t bytes = block_bytes(header);
  const std::uint64_t off = kPreambleBytes + 2 * slot + index * bytes;
  std::vector<float> xyz(static_cast<std::size_t>(bytes / 4));
  if (!pread_all(fd.fd, xyz.data(), bytes, off))
    return io_error(core::printable(path) + ": unit " + std::to_string(e.unit) + ": truncated (cannot read " +
                    std::to_string(bytes) + " bytes at offset " + std::to_string(off) + ")");
  if (crc32(xyz.data(), bytes) != e.crc32)
    return io_error(core::printable(path) + ": unit " + std::to_string(e.unit) + ": corrupt: CRC mismatch");
  return xyz;
}

// ---- the writer ------------------------------------------------------------------------------------------

struct PartialWriter::State {
  int fd = -1;
  std::string path;
  PartialHeader header;
  std::uint64_t slot_bytes = 0;
  std::uint64_t sequence = 0;
  ~State() {
    if (fd >= 0) ::close(fd);
  }
};

PartialWriter::PartialWriter(State* state) : state_(state) {}
PartialWriter::PartialWriter(PartialWriter&& o) noexcept : state_(std::exchange(o.state_, nullptr)) {}
PartialWriter& PartialWriter::operator=(PartialWriter&& o) noexcept {
  if (this != &o) {
    delete state_;
    state_ = std::exchange(o.state_, nullptr);
  }
  return *this;
}
PartialWriter::~PartialWriter() { delete state_; }
const PartialHeader& PartialWriter::header() const { return state_->header; }
const std::string& PartialWriter::path() const { return state_->path; }

Expected<PartialWriter> PartialWriter::open(const std::string& dir, const Job& job, std::uint64_t first_unit,
                                            std::uint32_t capacity) {
  namespace fs = std::filesystem;
  if (capacity == 0) return invalid_argument("a partial needs room for at least one unit");
  const std::string path = (fs::path(dir) / partial_file_name(job.name, first_unit)).string();
  auto st = std::make_unique<State>();
  st->path = path;
  for (int attempt = 0; attempt < 2; ++attempt) {
    Fd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    if (fd.fd >= 0) {  // resume an existing partial
      if (::flock(fd.fd, LOCK_EX | LOCK_NB) != 0)
        return io_error(core::printable(path) + ": another process is writing this partial (" + errno_text() +
                        ")");
      auto l = read_layout(fd.fd, path);
      if (!l.ok()) return l.status();
      if (!same_job(l->header, job))
        return invalid_argument(core::printable(path) + ": exists and belongs to another job or build (" +
                                core::printable(l->header.build_id) + ", scene " +
                                core::hex(l->header.scene_sha256).substr(0, 12) + ", " +
                                std::to_string(l->header.width) + "x" + std::to_string(l->header.height) +
                                "); use another --out directory or remove it");
      if (l->header.capacity < capacity)
        return invalid_argument(core::printable(path) + ": exists with room for " +
                                std::to_string(l->header.capacity) + " units, this range needs " +
                                std::to_string(capacity) +
                                "; use the range it was made for or another --out directory");
      st->header = std::move(l->header);
      st->slot_bytes = l->slot_bytes;
      st->sequence = l->sequence;
      st->fd = fd.release();
      return PartialWriter(st.release());
    }
    if (errno != ENOENT) return io_error(core::printable(path) + ": cannot open: " + errno_text());

    // Create: a temporary in the same directory, complete and synced, then linked into place (never replacing).
    PartialHeader& h = st->header;
    h.version = kVersion;
    h.build_id = build_id();
    h.job_name = job.name;
    h.scene_sha256 = job.scene_sha256;
    h.width = job.scene.width;
    h.height = job.scene.height;
    h.unit_samples = job.unit_samples;
    h.spp = job.spp;
    h.capacity = capacity;
    h.scene_json = job.scene_json;
    h.units.clear();
    st->slot_bytes = slot_bytes_for(capacity, h.scene_json.size());
    if (st->slot_bytes > kMaxSlotBytes) return invalid_argument("a partial's unit table is limited to fewer units");
    std::string tmpl = (fs::path(dir) / ("." + partial_file_name(job.name, first_unit) + ".XXXXXX")).string();
    Fd tmp(::mkstemp(tmpl.data()));
    if (tmp.fd < 0)
      return io_error(core::printable(path) + ": cannot create a temporary in " + dir + ": " + errno_text());
    ::fchmod(tmp.fd, 0644);
    const auto pre = encode_preamble(st->slot_bytes);
    const auto slot = encode_slot(h, 1, st->slot_bytes);
    const std::vector<std::uint8_t> empty(st->slot_bytes, 0);
    const bool written = pwrite_all(tmp.fd, pre.data(), pre.size(), 0) &&
                         pwrite_all(tmp.fd, slot.data(), slot.size(), kPreambleBytes) &&
                         pwrite_all(tmp.fd, empty.data(), empty.size(), kPreambleBytes + st->slot_bytes) &&
                         ::fsync(tmp.fd) == 0 && ::flock(tmp.fd, LOCK_EX | LOCK_NB) == 0;
    if (!written) {
      const std::string why = errno_text();
      ::unlink(tmpl.c_str());
      return io_error(core::printable(path) + ": cannot write: " + why);
    }
    const int linked = ::link(tmpl.c_str(), path.c_str());
    const int link_errno = errno;
    ::unlink(tmpl.c_str());
    if (linked != 0) {
      if (link_errno == EEXIST) continue;  // another worker created it first: open theirs
      errno = link_errno;
      return io_error(core::printable(path) + ": cannot create: " + errno_text());
    }
    Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dfd.fd >= 0) ::fsync(dfd.fd);
    st->sequence = 1;
    st->fd = tmp.release();
    return PartialWriter(st.release());
  }
  return io_error(core::printable(path) + ": cannot create or open");
}

Status PartialWriter::append(const UnitResult& unit) {
  State& s = *state_;
  PartialHeader& h = s.header;
  const std::uint64_t bytes = block_bytes(h);
  if (unit.xyz.size() * sizeof(float) != bytes)
    return invalid_argument(core::printable(s.path) + ": unit " + std::to_string(unit.unit) + " has " +
                            std::to_string(unit.xyz.size() / 3) + " pixels, the partial " +
                            std::to_string(h.width) + "x" + std::to_string(h.height));
  for (const UnitEntry& e : h.units)
    if (e.unit == unit.unit)
      return invalid_argument(core::printable(s.path) + ": unit " + std::to_string(unit.unit) +
                              " is already in it");
  if (h.units.size() >= h.capacity)
    return invalid_argument(core::printable(s.path) + ": the unit table is full (" +
                            std::to_string(h.capacity) + " units)");
  UnitEntry e;
  e.unit = unit.unit;
  e.first_sample = unit.range.first_sample;
  e.samples = unit.range.samples;
  e.backend = unit.backend;
  e.nonfinite = unit.nonfinite;
  e.crc32 = crc32(unit.xyz.data(), bytes);
  e.seconds = unit.seconds;
  const std::uint64_t off = kPreambleBytes + 2 * s.slot_bytes + h.units.size() * bytes;
  if (!pwrite_all(s.fd, unit.xyz.data(), bytes, off) || ::fdatasync(s.fd) != 0)
    return io_error(core::printable(s.path) + ": unit " + std::to_string(unit.unit) +
                    ": cannot write: " + errno_text());
  h.units.push_back(e);
  const std::uint64_t seq = s.sequence + 1;
  const auto slot = encode_slot(h, seq, s.slot_bytes);
  // Copy (seq mod 2) is older than the copy holding s.sequence: overwrite it, keep the newest intact.
  if (!pwrite_all(s.fd, slot.data(), slot.size(), kPreambleBytes + (seq % 2 == 1 ? 0 : s.slot_bytes)) ||
      ::fsync(s.fd) != 0) {
    h.units.pop_back();
    return io_error(core::printable(s.path) + ": unit " + std::to_string(unit.unit) +
                    ": cannot write the header: " + errno_text());
  }
  s.sequence = seq;
  return {};
}

}  // namespace facetrace::farm
