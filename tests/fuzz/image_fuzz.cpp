/// @file
/// libFuzzer target: image decoding (core::decode_image: JPEG through libjpeg-turbo, PNG through libpng, EXIF
/// orientation from JPEG APP1 or PNG eXIf) and exif_orientation on the same bytes. Images that declare more than
/// 2^22 pixels but no more than the limit are skipped (declared_pixels).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "facetrace/core/image.h"
#include "fuzz_common.h"

namespace {

/// The size a PNG's IHDR or a JPEG's first SOF marker declares (0 when neither is found). An arithmetic-coded
/// JPEG of a few hundred bytes may legally declare 144 M pixels and decode them all from zero padding (seconds
/// even without ASan): a slow input within the documented limits, not a fault. Such sizes are skipped so that
/// the fuzzer's time goes to the parsers; sizes beyond the limits are still decoded (and must be refused).
std::uint64_t declared_pixels(const std::uint8_t* d, std::size_t n) {
  auto be = [&](std::size_t p, int bytes) {
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = v << 8 | d[p + i];
    return v;
  };
  if (n >= 24 && d[0] == 0x89 && d[1] == 'P' && std::memcmp(d + 12, "IHDR", 4) == 0) return be(16, 4) * be(20, 4);
  if (n < 4 || d[0] != 0xFF || d[1] != 0xD8) return 0;
  for (std::size_t p = 2; p + 9 <= n;) {
    const std::uint8_t m = d[p + 1];
    if (d[p] != 0xFF || m == 0xFF) {  // libjpeg skips extraneous bytes and fill bytes before a marker
      ++p;
      continue;
    }
    if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) return be(p + 5, 2) * be(p + 7, 2);
    if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {
      p += 2;
      continue;
    }
    p += 2 + be(p + 2, 2);
  }
  return 0;
}

constexpr std::uint64_t kSkipAbovePixels = std::uint64_t{1} << 22;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  facetrace::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace facetrace;
  const std::uint64_t pixels = declared_pixels(data, size);
  if (pixels > kSkipAbovePixels && pixels <= static_cast<std::uint64_t>(core::kMaxImagePixels)) return 0;
  const std::span<const std::uint8_t> bytes(data, size);
  const int orientation = core::exif_orientation(bytes);
  fuzz::check(orientation >= 1 && orientation <= 8, "exif_orientation is 1..8");
  auto image = core::decode_image(bytes);
  if (!image) {
    fuzz::check(!image.status().what().empty(), "a refused image names the problem");
    return 0;
  }
  fuzz::check(image->width > 0 && image->height > 0 && image->width <= core::kMaxImageSide &&
                  image->height <= core::kMaxImageSide,
              "a decoded image has a size within the limits");
  fuzz::check(image->rgb.size() == static_cast<std::size_t>(image->width) * image->height * 3,
              "rgb holds width·height·3 bytes");
  return 0;
}
