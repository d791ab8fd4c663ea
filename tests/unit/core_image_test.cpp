/// @file
/// Image decoding (libjpeg-turbo, libpng) of valid, unusual and hostile files, and the atomic PNG writer. The
/// inputs are made here with libjpeg and libpng's encoders (or byte by byte) from pixels whose decoded value is
/// known by construction.
#include <gtest/gtest.h>

// clang-format off: jpeglib.h needs <cstdio> first
#include <cstdio>
#include <jpeglib.h>
// clang-format on
#include <png.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "facetrace/core/file.h"
#include "facetrace/core/image.h"
#include "facetrace/core/status.h"

namespace facetrace {
namespace {

using Bytes = std::vector<std::uint8_t>;

// ---- encoders for the test inputs --------------------------------------------------------------------

/// A JPEG of `w`×`h` pixels of `comps` interleaved components in colour space `cs` (quality 100, no chroma
/// subsampling), `progressive` optional.
Bytes encode_jpeg(const Bytes& px, int w, int h, int comps, J_COLOR_SPACE cs, bool progressive = false) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = static_cast<JDIMENSION>(w);
  c.image_height = static_cast<JDIMENSION>(h);
  c.input_components = comps;
  c.in_color_space = cs;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 100, TRUE);
  for (int i = 0; i < c.num_components; ++i) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
  if (progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(px.data() + static_cast<std::size_t>(c.next_scanline) * w * comps);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  Bytes out(buf, buf + size);
  jpeg_destroy_compress(&c);
  std::free(buf);
  return out;
}

/// A PNG written with libpng's low-level API: `rows` are packed samples as the colour type and depth say
/// (16-bit samples big-endian).
struct PngSpec {
  int w = 0, h = 0, color_type = PNG_COLOR_TYPE_RGB, depth = 8;
  bool interlace = false;
  std::vector<png_color> palette;
  Bytes trns;  ///< palette alpha values
  Bytes data;  ///< h rows, back to back
};

Bytes encode_png(const PngSpec& s) {
  Bytes out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep d, png_size_t n) {
        auto* o = static_cast<Bytes*>(png_get_io_ptr(p));
        o->insert(o->end(), d, d + n);
      },
      nullptr);
  png_set_IHDR(png, info, static_cast<png_uint_32>(s.w), static_cast<png_uint_32>(s.h), s.depth, s.color_type,
               s.interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!s.palette.empty()) png_set_PLTE(png, info, s.palette.data(), static_cast<int>(s.palette.size()));
  if (!s.trns.empty()) png_set_tRNS(png, info, s.trns.data(), static_cast<int>(s.trns.size()), nullptr);
  png_write_info(png, info);
  if (!s.data.empty()) {
    const std::size_t stride = s.data.size() / static_cast<std::size_t>(s.h);
    std::vector<png_bytep> rows;
    for (int y = 0; y < s.h; ++y) rows.push_back(const_cast<png_bytep>(s.data.data() + y * stride));
    png_write_image(png, rows.data());
    png_write_end(png, nullptr);
  }
  png_destroy_write_struct(&png, &info);
  return out;
}

/// Decodes and expects success.
core::Image decode_ok(const Bytes& b) {
  auto im = core::decode_image(b);
  EXPECT_TRUE(im.ok()) << im.status().to_string();
  return im.ok() ? *im : core::Image{};
}

/// Decodes and expects kInvalidArgument whose message contains `part`.
void expect_refused(const Bytes& b, const std::string& part) {
  auto im = core::decode_image(b);
  ASSERT_FALSE(im.ok()) << "decoded a " << im->width << "x" << im->height << " image";
  EXPECT_EQ(im.status().code(), Code::kInvalidArgument) << im.status().to_string();
  EXPECT_NE(im.status().what().find(part), std::string::npos) << im.status().what();
}

/// Every pixel of `im` within `tol` of (r, g, b).
void expect_flat(const core::Image& im, int r, int g, int b, int tol) {
  ASSERT_FALSE(im.rgb.empty());
  for (std::size_t i = 0; i < im.rgb.size(); i += 3) {
    ASSERT_NEAR(im.rgb[i], r, tol) << "pixel " << i / 3;
    ASSERT_NEAR(im.rgb[i + 1], g, tol) << "pixel " << i / 3;
    ASSERT_NEAR(im.rgb[i + 2], b, tol) << "pixel " << i / 3;
  }
}

Bytes flat(int w, int h, std::initializer_list<std::uint8_t> px) {
  Bytes b;
  for (int i = 0; i < w * h; ++i) b.insert(b.end(), px);
  return b;
}

/// Offset of the first JPEG marker `m` (0xFF m), or npos.
std::size_t find_marker(const Bytes& b, std::uint8_t m) {
  for (std::size_t i = 2; i + 1 < b.size(); ++i)
    if (b[i] == 0xFF && b[i + 1] == m) return i;
  return std::string::npos;
}

// ---- JPEG -------------------------------------------------------------------------------------------

TEST(ImageJpeg, dht_code_counts_summing_past_256_are_an_error_not_an_overflow) {
  // SOI, a baseline SOF0 (8×8, one component), then a DHT whose 16 code-length counts are 17 each: 272 codes,
  // more than the 256 symbols a table holds (the system stb_image 2.27 copied them into a 256-byte array). The
  // segment length covers all 272 values, so only the count check can refuse it.
  Bytes j = {0xFF, 0xD8,                                                                     // SOI
             0xFF, 0xC0, 0x00, 0x0B, 0x08, 0x00, 0x08, 0x00, 0x08, 0x01, 0x01, 0x11, 0x00};  // SOF0
  const int count = 17 * 16;
  const int len = 2 + 1 + 16 + count;
  j.insert(j.end(), {0xFF, 0xC4, static_cast<std::uint8_t>(len >> 8), static_cast<std::uint8_t>(len & 0xFF),
                     0x00});  // DC table 0
  for (int i = 0; i < 16; ++i) j.push_back(17);
  for (int i = 0; i < count; ++i) j.push_back(static_cast<std::uint8_t>(0x41 + i % 26));  // attacker bytes
  j.insert(j.end(), {0xFF, 0xDA, 0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x3F, 0x00});        // SOS
  j.insert(j.end(), 64, 0xAA);
  j.insert(j.end(), {0xFF, 0xD9});
  expect_refused(j, "JPEG: Bogus Huffman table definition");
}

TEST(ImageJpeg, rgb_grey_cmyk_and_progressive_decode_to_rgb) {
  const core::Image rgb = decode_ok(encode_jpeg(flat(16, 8, {200, 40, 90}), 16, 8, 3, JCS_RGB));
  EXPECT_EQ(rgb.width, 16);
  EXPECT_EQ(rgb.height, 8);
  expect_flat(rgb, 200, 40, 90, 2);
  expect_flat(decode_ok(encode_jpeg(flat(9, 7, {77}), 9, 7, 1, JCS_GRAYSCALE)), 77, 77, 77, 1);
  expect_flat(decode_ok(encode_jpeg(flat(16, 16, {10, 250, 128}), 16, 16, 3, JCS_RGB, true)), 10, 250, 128,
              2);
  // CMYK as Adobe writes it (libjpeg adds the Adobe marker; values inverted: 255 = no ink). No cyan, full
  // magenta and yellow, no black is red; half black on no ink is mid grey (255·128/255).
  expect_flat(decode_ok(encode_jpeg(flat(8, 8, {255, 0, 0, 255}), 8, 8, 4, JCS_CMYK)), 255, 0, 0, 2);
  expect_flat(decode_ok(encode_jpeg(flat(8, 8, {255, 255, 255, 128}), 8, 8, 4, JCS_CMYK)), 128, 128, 128, 2);
}

TEST(ImageJpeg, every_truncation_is_an_error_naming_the_problem) {
  Bytes px;
  for (int i = 0; i < 24 * 24 * 3; ++i) px.push_back(static_cast<std::uint8_t>((i * 131) ^ (i >> 5)));
  for (bool progressive : {false, true}) {
    const Bytes full = encode_jpeg(px, 24, 24, 3, JCS_RGB, progressive);
    ASSERT_TRUE(core::decode_image(full).ok());
    const std::size_t sos = find_marker(full, 0xDA);
    ASSERT_NE(sos, std::string::npos);
    for (std::size_t n = 3; n < full.size(); n += 5) {
      auto im = core::decode_image(Bytes(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n)));
      ASSERT_FALSE(im.ok()) << "prefix of " << n << " of " << full.size() << " bytes decoded";
      EXPECT_EQ(im.status().code(), Code::kInvalidArgument);
      EXPECT_EQ(im.status().what().rfind("image: JPEG: ", 0), 0u) << im.status().what();
      if (n > sos + 20) {  // inside the entropy-coded data
        EXPECT_NE(im.status().what().find("truncated or corrupt"), std::string::npos) << im.status().what();
      }
    }
  }
}

TEST(ImageJpeg, huge_declared_dimensions_are_refused_before_decoding) {
  Bytes j = encode_jpeg(flat(16, 16, {1, 2, 3}), 16, 16, 3, JCS_RGB);
  const std::size_t sof = find_marker(j, 0xC0);
  ASSERT_NE(sof, std::string::npos);
  j[sof + 5] = 0xEA, j[sof + 6] = 0x60;  // height 60000
  j[sof + 7] = 0xEA, j[sof + 8] = 0x60;  // width 60000
  expect_refused(j, "JPEG: size 60000x60000 beyond the limits");
}

TEST(ImageJpeg, exif_orientation_still_applies) {
  // 2×1: left red, right blue; EXIF orientation 6 (rotate 90° clockwise to view) → 1×2, red on top.
  Bytes j = encode_jpeg(Bytes{255, 0, 0, 0, 0, 255}, 2, 1, 3, JCS_RGB);
  const Bytes app1 = {0xFF, 0xE1, 0x00, 0x22, 'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 42, 0, 0, 0, 8,
                      0,    1,    0x01, 0x12, 0,   3,   0,   0,   0, 1, 0,   6,   0, 0,  0, 0, 0, 0};
  j.insert(j.begin() + 2, app1.begin(), app1.end());
  ASSERT_EQ(core::exif_orientation(j), 6);
  const core::Image im = decode_ok(j);
  ASSERT_EQ(im.width, 1);
  ASSERT_EQ(im.height, 2);
  EXPECT_GT(im.rgb[0], 150);  // red on top
  EXPECT_GT(im.rgb[5], 150);  // blue below
}

TEST(ImageDecode, unknown_and_empty_data_are_refused) {
  expect_refused(Bytes{'G', 'I', 'F', '8', '9', 'a', 0, 0}, "not a JPEG or PNG");
  expect_refused(Bytes{}, "0 bytes");
}

TEST(ImageJpeg, a_progressive_file_with_thousands_of_scans_is_refused) {
  // The last scan of a progressive JPEG (an AC refinement) repeated 1100 times: libjpeg only warns about the bogus
  // progression and would decode every copy; the scan cap ends it.
  Bytes px;
  for (int i = 0; i < 16 * 16 * 3; ++i) px.push_back(static_cast<std::uint8_t>(i * 29));
  const Bytes j = encode_jpeg(px, 16, 16, 3, JCS_RGB, true);
  std::size_t last_sos = std::string::npos;
  for (std::size_t i = 2; i + 1 < j.size(); ++i)
    if (j[i] == 0xFF && j[i + 1] == 0xDA) last_sos = i;
  ASSERT_NE(last_sos, std::string::npos);
  const Bytes scan(j.begin() + static_cast<std::ptrdiff_t>(last_sos), j.end() - 2);  // up to EOI
  Bytes many(j.begin(), j.end() - 2);
  for (int k = 0; k < 1100; ++k) many.insert(many.end(), scan.begin(), scan.end());
  many.insert(many.end(), {0xFF, 0xD9});
  expect_refused(many, "JPEG: more than 1000 progressive scans");
  Bytes few(j.begin(), j.end() - 2);  // 20 extra copies: decoded (warnings only)
  for (int k = 0; k < 20; ++k) few.insert(few.end(), scan.begin(), scan.end());
  few.insert(few.end(), {0xFF, 0xD9});
  EXPECT_TRUE(core::decode_image(few).ok());
}

TEST(ImageDecode, flipped_bytes_decode_or_fail_cleanly) {
  // Every 3rd byte of a baseline and a progressive JPEG and of a PNG inverted, one at a time: each result is an
  // image or kInvalidArgument (under ASan: no invalid access either).
  Bytes px;
  for (int i = 0; i < 20 * 12 * 3; ++i) px.push_back(static_cast<std::uint8_t>((i * 97) ^ (i >> 4)));
  PngSpec png{20, 12, PNG_COLOR_TYPE_RGB, 8, false, {}, {}, px};
  const Bytes files[] = {encode_jpeg(px, 20, 12, 3, JCS_RGB), encode_jpeg(px, 20, 12, 3, JCS_RGB, true),
                         encode_png(png)};
  for (const Bytes& f : files)
    for (std::size_t i = 0; i < f.size(); i += 3) {
      Bytes b = f;
      b[i] ^= 0xFF;
      auto im = core::decode_image(b);
      if (im.ok()) {
        EXPECT_EQ(im->rgb.size(), static_cast<std::size_t>(im->width) * im->height * 3);
      } else {
        EXPECT_EQ(im.status().code(), Code::kInvalidArgument)
            << "byte " << i << ": " << im.status().to_string();
      }
    }
}

// ---- PNG --------------------------------------------------------------------------------------------

TEST(ImagePng, grey_palette_16_bit_alpha_and_interlaced_decode_to_rgb) {
  PngSpec grey{3, 2, PNG_COLOR_TYPE_GRAY, 8, false, {}, {}, {0, 100, 255, 7, 8, 9}};
  EXPECT_EQ(decode_ok(encode_png(grey)).rgb,
            (Bytes{0, 0, 0, 100, 100, 100, 255, 255, 255, 7, 7, 7, 8, 8, 8, 9, 9, 9}));
  PngSpec grey1{8, 1, PNG_COLOR_TYPE_GRAY, 1, false, {}, {}, {0b10100000}};  // 1-bit: 1 → 255
  const core::Image g1 = decode_ok(encode_png(grey1));
  ASSERT_EQ(g1.rgb.size(), 24u);
  EXPECT_EQ(g1.rgb[0], 255);
  EXPECT_EQ(g1.rgb[3], 0);
  EXPECT_EQ(g1.rgb[6], 255);
  EXPECT_EQ(g1.rgb[21], 0);
  // palette with tRNS: the colours, alpha dropped
  PngSpec pal{2, 1, PNG_COLOR_TYPE_PALETTE, 8, false, {{10, 20, 30}, {40, 50, 60}}, {0, 128}, {1, 0}};
  EXPECT_EQ(decode_ok(encode_png(pal)).rgb, (Bytes{40, 50, 60, 10, 20, 30}));
  // 16-bit samples scale to round(v·255/65535): 0xABCD → 171.14 → 171, 0x00FF → 0.99 → 1, 0x8080 → 128
  PngSpec rgb16{1, 1, PNG_COLOR_TYPE_RGB, 16, false, {}, {}, {0xAB, 0xCD, 0x00, 0xFF, 0xFF, 0xFF}};
  EXPECT_EQ(decode_ok(encode_png(rgb16)).rgb, (Bytes{171, 1, 255}));
  // grey + alpha and 16-bit RGBA: alpha dropped, not composited
  PngSpec ga{2, 1, PNG_COLOR_TYPE_GRAY_ALPHA, 8, false, {}, {}, {50, 0, 200, 255}};
  EXPECT_EQ(decode_ok(encode_png(ga)).rgb, (Bytes{50, 50, 50, 200, 200, 200}));
  PngSpec rgba16{1, 1, PNG_COLOR_TYPE_RGB_ALPHA, 16, false, {}, {}, {0xFF, 0xFF, 0, 0, 0x80, 0x80, 0, 0}};
  EXPECT_EQ(decode_ok(encode_png(rgba16)).rgb, (Bytes{255, 0, 128}));
  // Adam7 interlaced 9×9 RGB: rows come back in place
  PngSpec inter{9, 9, PNG_COLOR_TYPE_RGB, 8, true, {}, {}, {}};
  for (int i = 0; i < 9 * 9 * 3; ++i) inter.data.push_back(static_cast<std::uint8_t>(i * 7));
  EXPECT_EQ(decode_ok(encode_png(inter)).rgb, inter.data);
}

TEST(ImagePng, truncation_and_corruption_are_errors) {
  PngSpec s{20, 20, PNG_COLOR_TYPE_RGB, 8, false, {}, {}, {}};
  for (int i = 0; i < 20 * 20 * 3; ++i) s.data.push_back(static_cast<std::uint8_t>((i * 131) ^ (i >> 3)));
  const Bytes full = encode_png(s);
  ASSERT_TRUE(core::decode_image(full).ok());
  for (std::size_t n = 8; n < full.size(); n += 9) {
    auto im = core::decode_image(Bytes(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n)));
    ASSERT_FALSE(im.ok()) << "prefix of " << n << " of " << full.size() << " bytes decoded";
    EXPECT_EQ(im.status().what().rfind("image: PNG: ", 0), 0u) << im.status().what();
  }
  Bytes flipped = full;
  flipped[full.size() / 2] ^= 0x55;  // inside IDAT: the CRC no longer matches
  expect_refused(flipped, "image: PNG: ");
  Bytes cut(full.begin(), full.end() - 12);  // IEND missing
  expect_refused(cut, "truncated");
}

TEST(ImagePng, huge_declared_dimensions_are_refused_before_decoding) {
  // The header (IHDR with a valid CRC) and the start of an IDAT chunk: libpng reads up to IDAT's header, then the
  // size check refuses the image before any row is allocated.
  auto header_only = [](int w, int h) {
    Bytes b = encode_png(PngSpec{w, h, PNG_COLOR_TYPE_RGB, 8, false, {}, {}, {}});
    b.insert(b.end(), {0, 0, 0x10, 0, 'I', 'D', 'A', 'T'});
    return b;
  };
  expect_refused(header_only(70000, 1), "PNG: Invalid IHDR data (Image width exceeds user limit in IHDR)");
  expect_refused(header_only(30000, 30000), "PNG: size 30000x30000 beyond the limits");
}

// ---- the atomic writer ------------------------------------------------------------------------------

core::Image noise(int w, int h) {
  core::Image im{w, h, {}};
  std::uint32_t x = 0x2545F491u;
  for (int i = 0; i < w * h * 3; ++i) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    im.rgb.push_back(static_cast<std::uint8_t>(x));
  }
  return im;
}

/// Entries of `dir` other than `keep`.
std::vector<std::string> others_in(const std::string& dir, const std::string& keep) {
  std::vector<std::string> r;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename() != keep) r.push_back(e.path().filename().string());
  return r;
}

TEST(ImageWritePng, a_file_size_limit_is_an_io_error_and_leaves_the_old_file_whole) {
  const std::string dir = ::testing::TempDir() + "core_image_test_fsize";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/out.png";
  const core::Image small = noise(4, 4);
  ASSERT_TRUE(core::write_png(path, small).ok());
  // A child process under RLIMIT_FSIZE (SIGXFSZ ignored, so write() fails with EFBIG as on a full disk) writes
  // 30 KB of noise over it and reports the Status through a pipe.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit lim{8192, 8192};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    const Status st = core::write_png(path, noise(100, 100));
    const std::string msg = std::to_string(static_cast<int>(st.code())) + " " + st.what();
    const ssize_t w = ::write(fds[1], msg.data(), msg.size());
    ::_exit(w == static_cast<ssize_t>(msg.size()) ? 0 : 3);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) msg.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "child status " << wstatus;
  EXPECT_EQ(msg.rfind(std::to_string(static_cast<int>(Code::kIo)) + " ", 0), 0u) << msg;
  EXPECT_NE(msg.find(path + ": cannot write PNG: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;
  // the old annotation is still there, whole, and no temporary file is left
  auto bytes = core::read_file(path, 1 << 20);
  ASSERT_TRUE(bytes.ok());
  auto back = core::decode_image(*bytes);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->rgb, small.rgb);
  EXPECT_TRUE(others_in(dir, "out.png").empty());
  std::filesystem::remove_all(dir);
}

TEST(ImageWritePng, replaces_the_file_and_leaves_no_temporary) {
  const std::string dir = ::testing::TempDir() + "core_image_test_replace";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/a.png";
  ASSERT_TRUE(core::write_png(path, noise(3, 3)).ok());
  const core::Image second = noise(7, 5);
  ASSERT_TRUE(core::write_png(path, second).ok());
  auto bytes = core::read_file(path, 1 << 20);
  ASSERT_TRUE(bytes.ok());
  auto back = core::decode_image(*bytes);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->rgb, second.rgb);
  EXPECT_TRUE(others_in(dir, "a.png").empty());
  // a directory where the file should go: refused before any temporary is made, the directory untouched
  std::filesystem::create_directories(dir + "/sub.png");
  const Status st = core::write_png(dir + "/sub.png", second);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.what().find(dir + "/sub.png: cannot write PNG: is a directory"), std::string::npos) << st.what();
  std::vector<std::string> left = others_in(dir, "a.png");
  EXPECT_EQ(left, std::vector<std::string>{"sub.png"});
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace facetrace
