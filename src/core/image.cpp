/// @file
/// Image decode (libjpeg-turbo for JPEG, libpng for PNG, every library error a Status), EXIF orientation, the
/// PNG writer (libpng encodes in memory, core/file.h's AtomicFile writes), drawing.
#include "facetrace/core/image.h"

// clang-format off: jpeglib.h needs <cstdio> (FILE, size_t) first
#include <cstdio>
#include <jerror.h>
#include <jpeglib.h>
// clang-format on
#include <png.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csetjmp>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "facetrace/core/file.h"
#include "facetrace/core/text.h"

namespace facetrace::core {
namespace {

/// Largest image file read (decode_image refuses more).
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

namespace {

// ---- JPEG (libjpeg-turbo) ---------------------------------------------------------------------------

/// Most progressive scans accepted: a crafted progressive JPEG can hold thousands of tiny scans, each a full pass
/// over the coefficients (libjpeg-turbo's djpeg -maxscans guards the same way).
constexpr int kMaxJpegScans = 1000;

/// libjpeg's error manager, extended: every error (and the warnings that mean truncated or corrupt entropy data)
/// formats its message into `message` and longjmps back to decode_jpeg, never exit().
struct JpegErrors {
  jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void jpeg_fail(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

void jpeg_warning(j_common_ptr cinfo, int level) {
  // level −1 is a warning about the data; the two that mean the entropy data ended early are errors here (a
  // truncated photo is refused, not padded with grey). Trace messages (level ≥ 0) and other warnings pass.
  if (level < 0 && (cinfo->err->msg_code == JWRN_JPEG_EOF || cinfo->err->msg_code == JWRN_HIT_MARKER)) {
    auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
    (*cinfo->err->format_message)(cinfo, e->message);
    std::strncat(e->message, " (truncated or corrupt file)", sizeof e->message - std::strlen(e->message) - 1);
    std::longjmp(e->jump, 1);
  }
}

void jpeg_scan_limit(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  const auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->input_scan_number > kMaxJpegScans) {
    auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
    std::snprintf(e->message, sizeof e->message, "more than %d progressive scans", kMaxJpegScans);
    std::longjmp(e->jump, 1);
  }
}

/// Sets `why` for sizes beyond kMaxImageSide / kMaxImagePixels; true when the size is accepted.
bool size_ok(std::uint64_t w, std::uint64_t h, std::string& why) {
  if (w >= 1 && h >= 1 && w <= static_cast<std::uint64_t>(kMaxImageSide) &&
      h <= static_cast<std::uint64_t>(kMaxImageSide) && w * h <= static_cast<std::uint64_t>(kMaxImagePixels))
    return true;
  why = "size " + std::to_string(w) + "x" + std::to_string(h) + " beyond the limits (sides 1.." +
        std::to_string(kMaxImageSide) + ", at most " + std::to_string(kMaxImagePixels) + " pixels)";
  return false;
}

/// Decodes a JPEG (baseline, progressive, grey, YCbCr, RGB, CMYK/YCCK) into `out` as RGB. Returns false with
/// `why` set on any error. No C++ object with a destructor lives between setjmp and the libjpeg calls that may
/// longjmp: `out` and `why` belong to the caller.
bool decode_jpeg(std::span<const std::uint8_t> bytes, Image& out, std::string& why) {
  jpeg_decompress_struct cinfo;
  JpegErrors err;
  jpeg_progress_mgr progress;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_fail;
  err.mgr.emit_message = jpeg_warning;
  err.message[0] = '\0';
  progress.progress_monitor = jpeg_scan_limit;
  // volatile: read after a longjmp, so it must not live in a register the jump restores
  std::uint8_t* volatile row_buf = nullptr;
  if (setjmp(err.jump)) {
    why = std::string("JPEG: ") + err.message;
    jpeg_destroy_decompress(&cinfo);
    std::free(row_buf);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  cinfo.progress = &progress;
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  if (!size_ok(cinfo.image_width, cinfo.image_height, why)) {
    why = "JPEG: " + why;
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;  // libjpeg-turbo expands grey to RGB itself
  jpeg_start_decompress(&cinfo);
  const std::size_t w = cinfo.output_width, h = cinfo.output_height;
  const int comps = cinfo.output_components;
  if (w != cinfo.image_width || h != cinfo.image_height || comps != (cmyk ? 4 : 3)) {
    why = "JPEG: unexpected output layout";
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  out.width = static_cast<int>(w);
  out.height = static_cast<int>(h);
  try {
    out.rgb.resize(w * h * 3);
  } catch (const std::bad_alloc&) {
    why = "JPEG: out of memory for " + std::to_string(w) + "x" + std::to_string(h);
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  if (cmyk) row_buf = static_cast<std::uint8_t*>(std::malloc(w * 4));
  if (cmyk && !row_buf) {
    why = "JPEG: out of memory";
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  // Adobe's CMYK JPEGs store inverted values (255 = no ink), the usual kind; without the Adobe marker the values
  // are plain ink amounts.
  const bool inverted = cinfo.saw_Adobe_marker;
  while (cinfo.output_scanline < cinfo.output_height) {
    std::uint8_t* dst = out.rgb.data() + static_cast<std::size_t>(cinfo.output_scanline) * w * 3;
    JSAMPROW row = cmyk ? row_buf : dst;
    jpeg_read_scanlines(&cinfo, &row, 1);
    if (!cmyk) continue;
    for (std::size_t x = 0; x < w; ++x) {
      const std::uint8_t* p = row_buf + x * 4;
      const unsigned k = inverted ? p[3] : 255u - p[3];
      for (int c = 0; c < 3; ++c) {
        const unsigned v = inverted ? p[c] : 255u - p[c];  // 255 − ink
        dst[x * 3 + static_cast<std::size_t>(c)] = static_cast<std::uint8_t>((v * k + 127) / 255);
      }
    }
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  std::free(row_buf);
  return true;
}

// ---- PNG (libpng) -----------------------------------------------------------------------------------

/// libpng's error callback target and the in-memory reader's position.
struct PngState {
  jmp_buf jump;
  char message[400];
  /// The first warning, added to an error's message (libpng explains IHDR errors this way).
  char warning[200];
  const std::uint8_t* data;
  std::size_t size, pos;
};

[[noreturn]] void png_fail(png_structp png, png_const_charp msg) {
  auto* s = static_cast<PngState*>(png_get_error_ptr(png));
  if (s->warning[0])
    std::snprintf(s->message, sizeof s->message, "%s (%s)", msg, s->warning);
  else
    std::snprintf(s->message, sizeof s->message, "%s", msg);
  std::longjmp(s->jump, 1);
}

/// Warnings are benign on their own (an unknown chunk, a bad iCCP: decoding goes on); the first is kept.
void png_warn(png_structp png, png_const_charp msg) {
  auto* s = static_cast<PngState*>(png_get_error_ptr(png));
  if (!s->warning[0]) std::snprintf(s->warning, sizeof s->warning, "%s", msg);
}

void png_read_memory(png_structp png, png_bytep dst, png_size_t n) {
  auto* s = static_cast<PngState*>(png_get_io_ptr(png));
  if (n > s->size - s->pos) png_error(png, "truncated file (premature end of data)");
  std::memcpy(dst, s->data + s->pos, n);
  s->pos += n;
}

/// Decodes any PNG (grey, grey+alpha, palette, RGB, RGBA; 1..16 bits; interlaced) into `out` as 8-bit RGB: 16-bit
/// samples are scaled to 8, grey is replicated, palette expanded, alpha (and tRNS) dropped. Same setjmp rules as
/// decode_jpeg.
bool decode_png(std::span<const std::uint8_t> bytes, Image& out, std::string& why) {
  PngState st;
  st.message[0] = '\0';
  st.warning[0] = '\0';
  st.data = bytes.data();
  st.size = bytes.size();
  st.pos = 0;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &st, png_fail, png_warn);
  if (!png) {
    why = "PNG: out of memory";
    return false;
  }
  png_infop info = png_create_info_struct(png);
  // volatile: read after a longjmp (see decode_jpeg)
  png_bytep* volatile rows = nullptr;
  if (!info || setjmp(st.jump)) {
    why = std::string("PNG: ") + (st.message[0] ? st.message : "out of memory");
    png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
    std::free(rows);
    return false;
  }
  png_set_read_fn(png, &st, png_read_memory);
  png_set_user_limits(png, kMaxImageSide, kMaxImageSide);
  // text and ICC chunks; image rows are not chunk allocations
  png_set_chunk_malloc_max(png, std::size_t{64} << 20);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if (!size_ok(w, h, why)) {
    why = "PNG: " + why;
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  const int type = png_get_color_type(png, info);
  if (png_get_bit_depth(png, info) == 16) png_set_scale_16(png);
  if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (type == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (type == PNG_COLOR_TYPE_GRAY || type == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  if ((type & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS)) png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8 ||
      png_get_rowbytes(png, info) != std::size_t{w} * 3)
    png_error(png, "unexpected output layout");
  out.width = static_cast<int>(w);
  out.height = static_cast<int>(h);
  try {
    out.rgb.resize(std::size_t{w} * h * 3);
  } catch (const std::bad_alloc&) {
    png_error(png, "out of memory");
  }
  rows = static_cast<png_bytep*>(std::malloc(sizeof(png_bytep) * h));
  if (!rows) png_error(png, "out of memory");
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = out.rgb.data() + std::size_t{y} * w * 3;
  png_read_image(png, rows);
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  std::free(rows);
  return true;
}

}  // namespace

Expected<Image> decode_image(std::span<const std::uint8_t> bytes) {
  if (bytes.empty() || bytes.size() > kMaxImageFileBytes)
    return invalid_argument("image: " + std::to_string(bytes.size()) + " bytes (1.." +
                            std::to_string(kMaxImageFileBytes) + " accepted)");
  const bool jpeg = bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF;
  const bool png = bytes.size() >= 8 && std::memcmp(bytes.data(), "\x89PNG\r\n\x1a\n", 8) == 0;
  if (!jpeg && !png) return invalid_argument("image: not a JPEG or PNG (unknown signature)");
  Image im;
  std::string why;
  bool ok = false;
  try {
    ok = jpeg ? decode_jpeg(bytes, im, why) : decode_png(bytes, im, why);
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory,
                  std::string("image: out of memory decoding ") + (jpeg ? "JPEG" : "PNG"));
  }
  if (!ok) return invalid_argument("image: " + why);
  return apply_orientation(im, exif_orientation(bytes));
}

Expected<Image> load_image(const std::string& path) {
  auto bytes = read_file(path, kMaxImageFileBytes);
  if (!bytes) return bytes.status().with_context("image");
  if (bytes->empty()) return io_error("image '" + printable(path) + "': empty file");
  auto im = decode_image(*bytes);
  if (!im) return im.status().with_context(quoted(path));
  return im;
}

Status write_png_pixels(const std::string& path, std::uint32_t width, std::uint32_t height,
                        PixelFormat format, std::span<const std::uint8_t> pixels) {
  const bool rgba = format == PixelFormat::kRgba8;
  const std::size_t channels = rgba ? 4 : 3;
  if (width == 0 || height == 0 || pixels.size() != std::size_t{width} * height * channels)
    return invalid_argument(printable(path) + ": cannot write PNG: image buffer does not match " +
                            std::to_string(width) + "x" + std::to_string(height) +
                            (rgba ? " RGBA8" : " RGB8"));
  auto fail = [&](const std::string& why) {
    return io_error(printable(path) + ": cannot write PNG: " + why);
  };
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = width;
  png.height = height;
  png.format = rgba ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB;  // 8-bit sRGB: libpng writes the sRGB chunk
  // Encoded in memory first (into libpng's own worst-case bound, so one pass), then every byte reaches the disk
  // through the one atomic writer (core/file.h: exclusive temporary, checked writes, fsync, rename; the old file
  // kept on failure).
  png_alloc_size_t size = PNG_IMAGE_PNG_SIZE_MAX(png);
  std::unique_ptr<std::uint8_t[]> buffer(new (std::nothrow) std::uint8_t[size]);
  if (!buffer)
    return Status(Code::kOutOfMemory, printable(path) + ": cannot write PNG: " + std::to_string(size) +
                                          " bytes for the encoded image");
  const int encoded = png_image_write_to_memory(&png, buffer.get(), &size, 0, pixels.data(), 0, nullptr);
  const std::string why = png.message[0] ? png.message : "encoding failed";
  png_image_free(&png);
  if (!encoded) return fail(why);
  const std::span<const std::uint8_t> bytes(buffer.get(), size);
  if (Status st = write_file_atomic(path, bytes); !st.ok()) {
    std::string rest = st.what();  // "<path>: <step>: <OS error>"
    if (rest.rfind(printable(path) + ": ", 0) == 0) rest.erase(0, printable(path).size() + 2);
    return Status(st.code(), printable(path) + ": cannot write PNG: " + rest);
  }
  return {};
}

Status write_png(const std::string& path, const Image& im) {
  if (im.width < 1 || im.height < 1)
    return invalid_argument(printable(path) + ": cannot write PNG: image size " + std::to_string(im.width) +
                            "x" + std::to_string(im.height));
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
