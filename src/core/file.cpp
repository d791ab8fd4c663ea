/// @file
/// read_file (stat for a size hint, then a bounded read loop that stops one byte past the cap); AtomicFile
/// (exclusive temporary beside the target, fsync, rename); the pre-flight checks of output paths.
#include "facetrace/core/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <utility>

#include "facetrace/core/text.h"

namespace facetrace::core {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};

Status too_large(const std::string& path, const std::string& size, std::uint64_t max_bytes) {
  return invalid_argument(printable(path) + ": " + size + " bytes exceeds the limit of " +
                          std::to_string(max_bytes) + " bytes");
}

}  // namespace

Expected<std::vector<std::uint8_t>> read_file(const std::string& path, std::uint64_t max_bytes) {
  errno = 0;
  // Opened without blocking, so a FIFO cannot stall us before the check below refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return io_error(printable(path) + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool dir = S_ISDIR(st.st_mode);
    ::close(fd);
    return io_error(printable(path) + ": not a regular file (" +
                    (dir ? std::string("a directory") : std::string("a FIFO, device or socket")) +
                    "): scenes, jobs, photos, models and lists are read only from regular files");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) static_cast<void>(::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK));
  std::unique_ptr<std::FILE, FileCloser> f(::fdopen(fd, "rb"));
  if (!f) {
    const int err = errno;
    ::close(fd);
    return io_error(printable(path) + ": cannot open: " + std::strerror(err));
  }
  // The size from fstat is only a hint (the file may change under us); the loop below enforces the cap.
  std::uint64_t hint = 0;
  if (st.st_size > 0) hint = static_cast<std::uint64_t>(st.st_size);
  if (hint > max_bytes) return too_large(path, std::to_string(hint), max_bytes);

  std::vector<std::uint8_t> bytes;
  // One byte past the cap tells "exactly max_bytes" from "more"; never ask for more than that.
  const std::uint64_t limit = max_bytes == UINT64_MAX ? max_bytes : max_bytes + 1;
  bytes.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(hint + 1, limit)));
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  while (bytes.size() < limit) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, limit - bytes.size()));
    const std::size_t old = bytes.size();
    bytes.resize(old + want);
    errno = 0;
    const std::size_t got = std::fread(bytes.data() + old, 1, want, f.get());
    bytes.resize(old + got);
    if (got < want) {
      if (std::ferror(f.get())) return io_error(printable(path) + ": read error: " + std::strerror(errno));
      break;  // end of file
    }
  }
  if (bytes.size() > max_bytes) return too_large(path, "at least " + std::to_string(bytes.size()), max_bytes);
  return bytes;
}

// ---- output targets -------------------------------------------------------------------------------------

namespace {

namespace fs = std::filesystem;

constexpr int kMaxLinks = 40;  // as the kernel's own limit on a path walk (ELOOP)

std::string errno_text(int err) { return std::strerror(err); }

/// "a directory", "a FIFO", … for a file type that can never be an output; empty for a regular file.
std::string refused_kind(mode_t mode) {
  if (S_ISREG(mode)) return {};
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

/// The directory holding `target` ("." for a bare name).
std::string directory_of(const std::string& target) {
  const fs::path p(target);
  return p.has_parent_path() ? p.parent_path().string() : std::string(".");
}

/// A random suffix for a temporary's name (pid, a process-wide counter and 64 random bits: unique across
/// threads and processes, and unguessable like mkstemp's).
std::string temp_suffix() {
  static std::atomic<std::uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}() ^ (static_cast<std::uint64_t>(::getpid()) << 32) ^
                                   counter.fetch_add(1)};
  char buf[64];
  std::snprintf(buf, sizeof buf, "%d-%llu-%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(counter.fetch_add(1)),
                static_cast<unsigned long long>(rng()));
  return buf;
}

}  // namespace

Expected<std::string> resolve_output_target(const std::string& path) {
  if (path.empty()) return invalid_argument("output path is empty");
  std::string cur = path;
  for (int hops = 0; hops <= kMaxLinks; ++hops) {
    struct stat st {};
    if (::lstat(cur.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return cur;  // missing, or not a link
    std::error_code ec;
    const fs::path to = fs::read_symlink(cur, ec);
    if (ec) return io_error(printable(path) + ": cannot read the symbolic link " + cur + ": " + ec.message());
    cur = to.is_absolute() ? to.string() : (fs::path(cur).parent_path() / to).lexically_normal().string();
  }
  return invalid_argument(printable(path) + ": more than " + std::to_string(kMaxLinks) +
                          " levels of symbolic links (a loop?)");
}

Expected<AtomicFile> AtomicFile::create(const std::string& path) {
  auto target = resolve_output_target(path);
  if (!target) return target.status();
  AtomicFile f;
  f.path_ = path;
  f.target_ = *target;
  bool keep_mode = false;
  mode_t mode = 0;
  struct stat st {};
  if (::stat(f.target_.c_str(), &st) == 0) {
    if (const std::string kind = refused_kind(st.st_mode); !kind.empty())
      return invalid_argument(printable(path) + ": is " + kind + ", not a file that can be replaced");
    mode = st.st_mode & 07777;
    keep_mode = true;
  }
  const fs::path parent = fs::path(f.target_).parent_path();
  // At most 200 bytes of the name, so that the temporary's name stays within NAME_MAX (255).
  const std::string base = fs::path(f.target_).filename().string().substr(0, 200);
  for (int attempt = 0; attempt < 100; ++attempt) {
    f.temp_ = (parent / ("." + base + ".tmp-" + temp_suffix())).string();
    // Exclusive create, as mkstemp does, but with 0666 so that the umask applies as for any new file.
    f.fd_ = ::open(f.temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (f.fd_ >= 0 || errno != EEXIST) break;
  }
  if (f.fd_ < 0) {
    const int err = errno;
    f.temp_.clear();
    return io_error(printable(path) + ": cannot create a temporary file in " +
                    printable(directory_of(f.target_)) + ": " + errno_text(err));
  }
  if (keep_mode && ::fchmod(f.fd_, mode) != 0) {
    const int err = errno;
    f.abandon();
    return io_error(printable(path) + ": cannot set the mode of " + f.temp_ + ": " + errno_text(err));
  }
  return f;
}

AtomicFile::AtomicFile(AtomicFile&& o) noexcept
    : path_(std::move(o.path_)),
      target_(std::move(o.target_)),
      temp_(std::move(o.temp_)),
      fd_(o.fd_),
      committed_(o.committed_) {
  o.fd_ = -1;
  o.temp_.clear();
  o.committed_ = true;
}

AtomicFile& AtomicFile::operator=(AtomicFile&& o) noexcept {
  if (this != &o) {
    abandon();
    path_ = std::move(o.path_);
    target_ = std::move(o.target_);
    temp_ = std::move(o.temp_);
    fd_ = o.fd_;
    committed_ = o.committed_;
    o.fd_ = -1;
    o.temp_.clear();
    o.committed_ = true;
  }
  return *this;
}

AtomicFile::~AtomicFile() { abandon(); }

void AtomicFile::abandon() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
}

Status AtomicFile::fail(const std::string& step, int err) {
  abandon();
  return io_error(printable(path_) + ": " + step + ": " + errno_text(err));
}

Status AtomicFile::write(std::span<const std::uint8_t> bytes) {
  if (fd_ < 0) return internal_error(printable(path_) + ": write after the file was committed or abandoned");
  const std::uint8_t* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("write error", errno);
    }
    if (n == 0) return fail("write error", EIO);
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  return {};
}

Status AtomicFile::write(std::string_view text) {
  return write(
      std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
}

Status AtomicFile::sync() {
  if (fd_ < 0) return internal_error(printable(path_) + ": sync after the file was committed or abandoned");
  if (::fsync(fd_) != 0) return fail("fsync", errno);
  return {};
}

Status AtomicFile::commit() {
  if (fd_ < 0) return internal_error(printable(path_) + ": commit after the file was committed or abandoned");
  if (::fsync(fd_) != 0) return fail("fsync", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return fail("close", errno);
  if (::rename(temp_.c_str(), target_.c_str()) != 0)
    return fail("cannot rename " + printable(temp_) + " to " + printable(target_), errno);
  committed_ = true;
  temp_.clear();
  // Best effort: makes the rename itself durable; a file system that cannot sync a directory still has the file.
  const int dfd = ::open(directory_of(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

Status write_file_atomic(const std::string& path, std::span<const std::uint8_t> bytes) {
  auto f = AtomicFile::create(path);
  if (!f) return f.status();
  FT_TRY(f->write(bytes));
  return f->commit();
}

Status write_file_atomic(const std::string& path, std::string_view text) {
  return write_file_atomic(
      path, std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
}

// ---- pre-flight checks ----------------------------------------------------------------------------------

Status check_output_path(const NamedPath& out) {
  const std::string who = out.name.empty() ? printable(out.path) : out.name + " " + printable(out.path);
  if (out.path.empty()) return invalid_argument((out.name.empty() ? "output" : out.name) + ": empty path");
  auto target = resolve_output_target(out.path);
  if (!target)
    return invalid_argument(out.name.empty() ? target.status().what()
                                             : out.name + ": " + target.status().what());
  const bool link = *target != out.path;
  const std::string through =
      link ? " (the symbolic link's target " + printable(*target) + ")" : std::string();
  struct stat st {};
  if (::stat(target->c_str(), &st) == 0) {
    if (const std::string kind = refused_kind(st.st_mode); !kind.empty())
      return invalid_argument(who + ": is " + kind + through + "; an output must be a regular file");
    if (::access(target->c_str(), W_OK) != 0)
      return invalid_argument(who + ": cannot be written" + through + ": " + errno_text(errno));
  }
  const std::string dir = directory_of(*target);
  const std::string shown_dir = printable(dir);
  if (::stat(dir.c_str(), &st) != 0)
    return invalid_argument(who + ": cannot write there: directory " + dir + " " +
                            (errno == ENOENT ? std::string("does not exist") : errno_text(errno)));
  if (!S_ISDIR(st.st_mode))
    return invalid_argument(who + ": cannot write there: " + dir + " is not a directory");
  // A probe file, created exclusively and removed at once: the only test that sees everything a later create
  // would (permissions for root too, a read-only or full inode table, a file system that refuses new names).
  const std::string probe =
      (fs::path(*target).parent_path() / (".facetrace-probe.tmp-" + temp_suffix())).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return invalid_argument(who + ": cannot write in directory " + dir + ": " + errno_text(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return {};
}

namespace {

/// What identifies a file: its device and inode when it exists, else (not created yet) its absolute path with
/// every symbolic link resolved.
struct FileIdentity {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string path;
};

FileIdentity identify(const std::string& path) {
  FileIdentity id;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {  // follows every link: an existing file needs no path at all
    id.exists = true;
    id.dev = st.st_dev;
    id.ino = st.st_ino;
    return id;
  }
  auto target = resolve_output_target(path);
  const std::string t = target ? *target : path;
  std::error_code ec;
  const fs::path canon = fs::weakly_canonical(fs::absolute(t, ec), ec);
  id.path = ec ? fs::absolute(t, ec).lexically_normal().string() : canon.string();
  return id;
}

std::string describe(const NamedPath& p) {
  return p.name.empty() ? printable(p.path) : p.name + " " + printable(p.path);
}

}  // namespace

Status check_outputs(std::span<const NamedPath> inputs, std::span<const NamedPath> outputs) {
  for (const NamedPath& o : outputs) FT_TRY(check_output_path(o));
  // Existing files are keyed by device and inode (hard links, any spelling); an output that does not exist yet
  // by its resolved absolute path. Maps keep a command with thousands of outputs (annotations) n log n.
  std::map<std::pair<dev_t, ino_t>, const NamedPath*> existing_inputs, existing_outputs;
  std::map<std::string, const NamedPath*> new_outputs;
  for (const NamedPath& i : inputs) {
    if (i.path.empty()) continue;
    const FileIdentity id = identify(i.path);
    if (id.exists) existing_inputs.emplace(std::make_pair(id.dev, id.ino), &i);
  }
  for (const NamedPath& o : outputs) {
    const FileIdentity id = identify(o.path);
    if (id.exists) {
      const auto key = std::make_pair(id.dev, id.ino);
      if (auto it = existing_inputs.find(key); it != existing_inputs.end())
        return invalid_argument(describe(o) + ": is the same file as the input " + describe(*it->second) +
                                "; refusing to overwrite an input");
      if (auto [it, fresh] = existing_outputs.emplace(key, &o); !fresh)
        return invalid_argument(describe(o) + ": is the same file as the output " + describe(*it->second) +
                                "; each output needs its own file");
    } else if (auto [it, fresh] = new_outputs.emplace(id.path, &o); !fresh) {
      return invalid_argument(describe(o) + ": is the same file as the output " + describe(*it->second) +
                              "; each output needs its own file");
    }
  }
  return {};
}

}  // namespace facetrace::core
