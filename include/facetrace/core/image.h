/// @file
/// The one image type (8-bit RGB) and the one PNG writer (libpng): JPEG (libjpeg-turbo) and PNG (libpng) decode
/// with EXIF orientation, atomic PNG output of RGB or RGBA pixels, simple drawing.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "facetrace/core/status.h"

namespace facetrace::core {

/// Interleaved 8-bit RGB, rows top to bottom: rgb.size() == width·height·3.
struct Image {
  int width = 0;
  int height = 0;
  std::vector<std::uint8_t> rgb;
};

/// Largest accepted side and pixel count of a decoded image.
inline constexpr int kMaxImageSide = 65536;
inline constexpr std::int64_t kMaxImagePixels = std::int64_t{1} << 28;

/// Decodes JPEG (baseline or progressive; grey, YCbCr, RGB, CMYK or YCCK) or PNG (any colour type, 1..16 bits,
/// interlaced) bytes to 8-bit RGB — grey replicated, palettes expanded, 16-bit scaled, alpha and tRNS dropped — and
/// applies the EXIF orientation (JPEG APP1 or PNG eXIf). The declared size is checked against the limits before
/// any pixel is allocated. kInvalidArgument naming the problem for anything else: an unknown signature, a size
/// beyond the limits, a truncated file, corrupt data (libjpeg's / libpng's message, e.g. "JPEG: Bogus Huffman
/// table definition"), more than 1000 progressive scans; kOutOfMemory. Never aborts. Thread-safe.
Expected<Image> decode_image(std::span<const std::uint8_t> bytes);
/// Reads and decodes a file. kIo when it cannot be read.
Expected<Image> load_image(const std::string& path);
/// Layout of the interleaved 8-bit pixels given to write_png_pixels().
enum class PixelFormat : std::uint8_t { kRgb8, kRgba8 };

/// Writes interleaved 8-bit sRGB pixels (rows top to bottom, no row padding) as a PNG through libpng; the file
/// carries the sRGB chunk. Atomic: the PNG is written to a temporary file in the same directory, flushed, synced
/// and renamed over `path`, so `path` is either the old file or the whole new one; on failure the temporary is
/// removed. Errors: kInvalidArgument naming `path` when a side is 0 or pixels.size() is not width·height·channels;
/// kIo naming `path` and the reason (every write, flush, sync, close and rename is checked: a full disk or a file
/// size limit is reported, e.g. "File too large"). Thread-safe.
Status write_png_pixels(const std::string& path, std::uint32_t width, std::uint32_t height,
                        PixelFormat format, std::span<const std::uint8_t> pixels);
/// Writes an RGB image as a PNG (write_png_pixels with kRgb8). Errors as write_png_pixels().
Status write_png(const std::string& path, const Image& image);

/// The EXIF orientation tag (1..8) of JPEG or PNG bytes; 1 when absent or unreadable.
int exif_orientation(std::span<const std::uint8_t> bytes);
/// Applies an EXIF orientation (1..8; others leave the image as is), returning the upright image.
Image apply_orientation(const Image& image, int orientation);

/// Draws an axis-aligned rectangle outline (pixel coordinates, clipped to the image).
void draw_rect(Image& image, float x0, float y0, float x1, float y1, std::uint8_t r, std::uint8_t g,
               std::uint8_t b, int thickness = 2);
/// Draws a filled square dot of half-size `radius` centred on (x, y), clipped to the image.
void draw_dot(Image& image, float x, float y, int radius, std::uint8_t r, std::uint8_t g, std::uint8_t b);

}  // namespace facetrace::core
