/// @file
/// Image decode (stb_image for JPEG and PNG), EXIF orientation, PNG output (libpng), drawing.
#include "facetrace/core/image.h"

#include <png.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "facetrace/core/file.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_JPEG
#define STBI_ONLY_PNG
#define STBI_NO_STDIO
#include <stb/stb_image.h>
#pragma GCC diagnostic pop

namespace facetrace::core {
namespace {

/// Largest image file read: the size decode_image accepts (stb_image takes an int length).
constexpr std::uint64_t kMaxImageFileBytes = std::uint64_t{1} << 31;

std::uint32_t rd(const std::uint8_t* p, bool le, int n) {
  std::uint32_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<std::uint32_t>(p[le ? i : n - 1 - i]) << (8 * i);
  return v;
}

// Orientation from a TIFF block (EXIF payload after "Exif\0\0").
int tiff_orientation(const std::uint8_t* t, std::size_t n) {
  if (n < 8) return 1;
  bool le;
  if (t[0] == 'I' && t[1] == 'I')
    le = true;
  else if (t[0] == 'M' && t[1] == 'M')
    le = false;
  else
    return 1;
  if (rd(t + 2, le, 2) != 42) return 1;
  const std::uint32_t ifd = rd(t + 4, le, 4);
  if (ifd > n - 2 || ifd < 8) return 1;
  const std::uint32_t count = rd(t + ifd, le, 2);
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::size_t e = ifd + 2 + static_cast<std::size_t>(i) * 12;
    if (e + 12 > n) return 1;
    if (rd(t + e, le, 2) == 0x0112 && rd(t + e + 2, le, 2) == 3) {  // Orientation, SHORT
      const std::uint32_t v = rd(t + e + 8, le, 2);
      return v >= 1 && v <= 8 ? static_cast<int>(v) : 1;
    }
  }
  return 1;
}

}  // namespace

int exif_orientation(std::span<const std::uint8_t> b) {
  const std::size_t n = b.size();
  if (n >= 4 && b[0] == 0xFF && b[1] == 0xD8) {  // JPEG: walk markers up to start of scan
    std::size_t p = 2;
    while (p + 4 <= n) {
      if (b[p] != 0xFF) return 1;
      const std::uint8_t m = b[p + 1];
      if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {
        p += 2;
        continue;
      }
      if (m == 0xDA || m == 0xD9) return 1;
      const std::size_t len = rd(&b[p + 2], false, 2);
      if (len < 2 || p + 2 + len > n) return 1;
      if (m == 0xE1 && len >= 8 && std::memcmp(&b[p + 4], "Exif\0\0", 6) == 0)
        return tiff_orientation(&b[p + 10], len - 8);
      p += 2 + len;
    }
    return 1;
  }
  if (n >= 8 && std::memcmp(b.data(), "\x89PNG\r\n\x1a\n", 8) == 0) {  // PNG: eXIf chunk
    std::size_t p = 8;
    while (p + 12 <= n) {
      const std::size_t len = rd(&b[p], false, 4);
      if (len > n - p - 12) return 1;
      if (std::memcmp(&b[p + 4], "eXIf", 4) == 0) return tiff_orientation(&b[p + 8], len);
      if (std::memcmp(&b[p + 4], "IDAT", 4) == 0) return 1;
      p += 12 + len;
    }
  }
  return 1;
}

Image apply_orientation(const Image& im, int o) {
  if (o < 2 || o > 8) return im;
  const bool swap = o >= 5;
  Image out;
  out.width = swap ? im.height : im.width;
  out.height = swap ? im.width : im.height;
  out.rgb.resize(im.rgb.size());
  const int W = im.width, H = im.height;
  for (int y = 0; y < out.height; ++y)
    for (int x = 0; x < out.width; ++x) {
      int sx = x, sy = y;  // source pixel shown at (x, y)
      switch (o) {
        case 2: sx = W - 1 - x; break;
        case 3: sx = W - 1 - x, sy = H - 1 - y; break;
        case 4: sy = H - 1 - y; break;
        case 5: sx = y, sy = x; break;
        case 6: sx = y, sy = H - 1 - x; break;
        case 7: sx = W - 1 - y, sy = H - 1 - x; break;
        case 8: sx = W - 1 - y, sy = x; break;
        default: break;
      }
      std::memcpy(&out.rgb[(static_cast<std::size_t>(y) * out.width + x) * 3],
                  &im.rgb[(static_cast<std::size_t>(sy) * W + sx) * 3], 3);
    }
  return out;
}

Expected<Image> decode_image(std::span<const std::uint8_t> bytes) {
  if (bytes.empty() || bytes.size() > static_cast<std::size_t>(1) << 31)
    return invalid_argument("image: " + std::to_string(bytes.size()) + " bytes");
  const int len = static_cast<int>(bytes.size());
  int w = 0, h = 0, c = 0;
  if (!stbi_info_from_memory(bytes.data(), len, &w, &h, &c))
    return invalid_argument("image: not a decodable JPEG or PNG");
  if (w < 1 || h < 1 || w > kMaxImageSide || h > kMaxImageSide ||
      static_cast<std::int64_t>(w) * h > kMaxImagePixels)
    return invalid_argument("image: size " + std::to_string(w) + "x" + std::to_string(h) +
                            " beyond the limits");
  unsigned char* px = stbi_load_from_memory(bytes.data(), len, &w, &h, &c, 3);
  if (!px) return invalid_argument(std::string("image: decode failed (") + stbi_failure_reason() + ")");
  Image im;
  im.width = w;
  im.height = h;
  im.rgb.assign(px, px + static_cast<std::size_t>(w) * h * 3);
  stbi_image_free(px);
  return apply_orientation(im, exif_orientation(bytes));
}

Expected<Image> load_image(const std::string& path) {
  auto bytes = read_file(path, kMaxImageFileBytes);
  if (!bytes) return bytes.status().with_context("image");
  if (bytes->empty()) return io_error("image '" + path + "': empty file");
  auto im = decode_image(*bytes);
  if (!im) return im.status().with_context("'" + path + "'");
  return im;
}

Status write_png_pixels(const std::string& path, std::uint32_t width, std::uint32_t height,
                        PixelFormat format, std::span<const std::uint8_t> pixels) {
  const bool rgba = format == PixelFormat::kRgba8;
  const std::size_t channels = rgba ? 4 : 3;
  if (width == 0 || height == 0 || pixels.size() != std::size_t{width} * height * channels)
    return invalid_argument(path + ": cannot write PNG: image buffer does not match " +
                            std::to_string(width) + "x" + std::to_string(height) +
                            (rgba ? " RGBA8" : " RGB8"));
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = width;
  png.height = height;
  png.format = rgba ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB;  // 8-bit sRGB: libpng writes the sRGB chunk
  errno = 0;
  if (!png_image_write_to_file(&png, path.c_str(), 0, pixels.data(), 0, nullptr)) {
    const std::string why = png.message[0] ? png.message : (errno ? std::strerror(errno) : "unknown error");
    png_image_free(&png);
    return io_error(path + ": cannot write PNG: " + why);
  }
  return {};
}

Status write_png(const std::string& path, const Image& im) {
  if (im.width < 1 || im.height < 1)
    return invalid_argument(path + ": cannot write PNG: image size " + std::to_string(im.width) + "x" +
                            std::to_string(im.height));
  return write_png_pixels(path, static_cast<std::uint32_t>(im.width), static_cast<std::uint32_t>(im.height),
                          PixelFormat::kRgb8, im.rgb);
}

void draw_rect(Image& im, float x0, float y0, float x1, float y1, std::uint8_t r, std::uint8_t g,
               std::uint8_t b, int t) {
  auto put = [&](int x, int y) {
    if (x < 0 || y < 0 || x >= im.width || y >= im.height) return;
    std::uint8_t* p = &im.rgb[(static_cast<std::size_t>(y) * im.width + x) * 3];
    p[0] = r, p[1] = g, p[2] = b;
  };
  if (!(std::isfinite(x0) && std::isfinite(y0) && std::isfinite(x1) && std::isfinite(y1))) return;
  const int ix0 = static_cast<int>(std::clamp(std::floor(x0), -1.0f, static_cast<float>(im.width)));
  const int iy0 = static_cast<int>(std::clamp(std::floor(y0), -1.0f, static_cast<float>(im.height)));
  const int ix1 = static_cast<int>(std::clamp(std::floor(x1), -1.0f, static_cast<float>(im.width)));
  const int iy1 = static_cast<int>(std::clamp(std::floor(y1), -1.0f, static_cast<float>(im.height)));
  for (int k = 0; k < t; ++k) {
    for (int x = ix0; x <= ix1; ++x) put(x, iy0 + k), put(x, iy1 - k);
    for (int y = iy0; y <= iy1; ++y) put(ix0 + k, y), put(ix1 - k, y);
  }
}

void draw_dot(Image& im, float x, float y, int radius, std::uint8_t r, std::uint8_t g, std::uint8_t b) {
  if (!std::isfinite(x) || !std::isfinite(y)) return;
  draw_rect(im, x - static_cast<float>(radius), y - static_cast<float>(radius),
            x + static_cast<float>(radius), y + static_cast<float>(radius), r, g, b, radius + 1);
}

}  // namespace facetrace::core
