/// @file
/// Whole files in and out: the capped reader, the one atomic writer that every output (PNG, EXR, partial,
/// scene, annotation) goes through, and the pre-flight checks a command runs on its output paths before any work.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "facetrace/core/status.h"

namespace facetrace::core {

/// Reads the whole file at `path`. Returns kIo naming the path and the OS error when it cannot be opened or read,
/// and kInvalidArgument naming the path, its size and `max_bytes` when it holds more than `max_bytes` bytes. The
/// cap also bounds the read itself: a file that grows while it is read never makes this read more than
/// `max_bytes + 1` bytes. An empty file gives an empty vector. Thread-safe (no shared state).
Expected<std::vector<std::uint8_t>> read_file(const std::string& path, std::uint64_t max_bytes);

/// The file a write to `path` lands in: `path` itself, or, when `path` is a symbolic link (a chain of them,
/// relative targets taken from the link's directory), the final target, which need not exist yet. A link is
/// written through, never replaced. Errors: kInvalidArgument for an empty path or a chain longer than 40 links
/// (naming `path`). Does not check the target's type; check_output_path() does. Thread-safe.
Expected<std::string> resolve_output_target(const std::string& path);

/// An output file under construction. create() makes a new, unique temporary file (exclusive create, a random
/// name ".<name>.tmp-…" that mkstemp would make) in the directory of the final target; write() fills it; commit()
/// flushes it to the disk (fsync), closes it and renames it over the target. Until commit() succeeds the target
/// is untouched: a failed write, a full disk, a file size limit or a destroyed uncommitted AtomicFile leave the
/// previous file exactly as it was and remove the temporary. The new file takes the mode of the file it replaces,
/// or 0666 less the umask. Two AtomicFiles for the same target (threads or processes) never see each other's
/// bytes: readers see one whole file or the other, and the last commit wins.
/// Move-only; one object is not thread-safe, distinct objects are independent.
class AtomicFile {
 public:
  /// Starts a write of `path` (symbolic links resolved as resolve_output_target()). Errors: kInvalidArgument
  /// naming `path` when the target is a directory, device, FIFO or socket (as check_output_path()); kIo naming
  /// `path` and the OS error (errno text) when the temporary cannot be created (e.g. the directory is missing or
  /// read-only).
  static Expected<AtomicFile> create(const std::string& path);

  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&& other) noexcept;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  /// Removes the temporary unless commit() succeeded.
  ~AtomicFile();

  /// The path given to create().
  const std::string& path() const noexcept { return path_; }
  /// The file commit() replaces (symbolic links resolved).
  const std::string& target() const noexcept { return target_; }
  /// The temporary's path, for a library that writes by file name (OpenEXR): it may reopen and truncate it.
  const std::string& temp_path() const noexcept { return temp_; }
  /// The temporary's descriptor (−1 after commit() or abandon()); stays owned by this object.
  int fd() const noexcept { return fd_; }

  /// Appends `bytes` (all of them: short writes and EINTR are retried). Errors: kIo naming `path` and the OS
  /// error, e.g. "No space left on device" or "File too large"; kInternal after commit()/abandon().
  Status write(std::span<const std::uint8_t> bytes);
  Status write(std::string_view text);
  /// fsync()s what was written so far (a partial file syncs after each unit). Errors: kIo naming `path`.
  Status sync();
  /// fsync, close, rename over target(), then a best-effort fsync of the directory. Errors: kIo naming `path`
  /// and the failing step with its OS error; the temporary is removed and the target kept.
  Status commit();
  /// Closes and removes the temporary now; the target stays as it was.
  void abandon() noexcept;

 private:
  AtomicFile() = default;
  Status fail(const std::string& step, int err);
  std::string path_, target_, temp_;
  int fd_ = -1;
  bool committed_ = false;
};

/// Writes `bytes` to `path` atomically through AtomicFile. Errors as AtomicFile::create(), write(), commit().
Status write_file_atomic(const std::string& path, std::span<const std::uint8_t> bytes);
/// The same for text.
Status write_file_atomic(const std::string& path, std::string_view text);

/// A path a command reads or writes, with what names it in an error message: the flag ("-o", "--exr") or the
/// argument ("scene").
struct NamedPath {
  std::string name;
  std::string path;
};

/// Pre-flight check of one output, before any work: kInvalidArgument, the message naming `name` and the path,
/// when the path is empty, is (or is a symbolic link to) a directory, a device, a FIFO or a socket, when its
/// directory does not exist or cannot be written into (permission, read-only file system), or when an existing
/// file there cannot be written. The directory is tested by creating and removing a uniquely named probe file
/// (access() alone misses a read-only mount seen by root and file systems that refuse new names). Thread-safe.
Status check_output_path(const NamedPath& output);

/// Pre-flight check of a command's outputs: check_output_path() on each, then kInvalidArgument when an output is
/// the same file as one of the inputs or as another output (after resolving symbolic links and relative paths;
/// existing files are compared by device and inode, so a hard link counts too). Inputs that do not exist are
/// skipped (their own reader reports them). Thread-safe.
Status check_outputs(std::span<const NamedPath> inputs, std::span<const NamedPath> outputs);

}  // namespace facetrace::core
