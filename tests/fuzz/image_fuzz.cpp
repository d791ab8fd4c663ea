/// @file
/// libFuzzer target: image decoding (core::decode_image: JPEG through libjpeg-turbo, PNG through libpng, EXIF
/// orientation from JPEG APP1 or PNG eXIf) and exif_orientation on the same bytes. Images that declare more than
/// 2^22 pixels but no more than the limit are skipped (declared_pixels).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <csetjmp>
#include <cstdio>
#include <span>

#include <jpeglib.h>

#include "facetrace/core/image.h"
#include "fuzz_common.h"

namespace {

struct HeaderErrors {
  jpeg_error_mgr mgr;
  jmp_buf jump;
};
[[noreturn]] void header_fail(j_common_ptr cinfo) {
  std::longjmp(reinterpret_cast<HeaderErrors*>(cinfo->err)->jump, 1);
}
void header_quiet(j_common_ptr, int) {}

/// The size libjpeg reads from a JPEG's header (0 when it cannot).
std::uint64_t jpeg_declared_pixels(const std::uint8_t* d, std::size_t n) {
  jpeg_decompress_struct cinfo;
  HeaderErrors err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = header_fail;
  err.mgr.emit_message = header_quiet;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return 0;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, d, static_cast<unsigned long>(n));
  jpeg_read_header(&cinfo, TRUE);
  const std::uint64_t pixels = std::uint64_t{cinfo.image_width} * cinfo.image_height;
  jpeg_destroy_decompress(&cinfo);
  return pixels;
}

/// The size a PNG's IHDR (always its first chunk) or a JPEG's header declares (0 when neither is found). An
/// arithmetic-coded JPEG of a few hundred bytes may legally declare 144 M pixels and decode them all from zero
/// padding (seconds even without ASan): a slow input within the documented limits, not a fault. Such sizes are
/// skipped so that the fuzzer's time goes to the parsers; sizes beyond the limits are still decoded (and must be
/// refused).
std::uint64_t declared_pixels(const std::uint8_t* d, std::size_t n) {
  auto be32 = [&](std::size_t p) {
    return std::uint64_t{d[p]} << 24 | std::uint64_t{d[p + 1]} << 16 | std::uint64_t{d[p + 2]} << 8 |
           d[p + 3];
  };
  if (n >= 24 && d[0] == 0x89 && d[1] == 'P' && std::memcmp(d + 12, "IHDR", 4) == 0)
    return be32(16) * be32(20);
  if (n >= 4 && d[0] == 0xFF && d[1] == 0xD8) return jpeg_declared_pixels(d, n);
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
