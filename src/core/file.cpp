/// @file
/// read_file: stat for a size hint, then a bounded read loop that stops one byte past the cap.
#include "facetrace/core/file.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <sys/stat.h>

namespace facetrace::core {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};

Status too_large(const std::string& path, const std::string& size, std::uint64_t max_bytes) {
  return invalid_argument(path + ": " + size + " bytes exceeds the limit of " + std::to_string(max_bytes) +
                          " bytes");
}

}  // namespace

Expected<std::vector<std::uint8_t>> read_file(const std::string& path, std::uint64_t max_bytes) {
  errno = 0;
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) return io_error(path + ": cannot open: " + std::strerror(errno));
  // The size from fstat is only a hint (the file may change under us); the loop below enforces the cap.
  std::uint64_t hint = 0;
  struct stat st {};
  if (::fstat(::fileno(f.get()), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
    hint = static_cast<std::uint64_t>(st.st_size);
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
      if (std::ferror(f.get())) return io_error(path + ": read error: " + std::strerror(errno));
      break;  // end of file
    }
  }
  if (bytes.size() > max_bytes) return too_large(path, "at least " + std::to_string(bytes.size()), max_bytes);
  return bytes;
}

}  // namespace facetrace::core
