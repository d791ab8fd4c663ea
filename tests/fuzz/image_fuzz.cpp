/// @file
/// libFuzzer target: image decoding (core::decode_image: JPEG through libjpeg-turbo, PNG through libpng, EXIF
/// orientation from JPEG APP1 or PNG eXIf) and exif_orientation on the same bytes.
#include <cstddef>
#include <cstdint>
#include <span>

#include "facetrace/core/image.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  facetrace::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace facetrace;
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
