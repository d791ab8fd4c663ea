/// @file
/// Display path (ACES, gamut walk, sRGB, quantisation), PNG writing and EXR round trips (docs/design/tracer.md §11).
#include <gtest/gtest.h>
#include <ImfChannelList.h>
#include <ImfChromaticitiesAttribute.h>
#include <ImfDoubleAttribute.h>
#include <ImfFrameBuffer.h>
#include <ImfHeader.h>
#include <ImfInputPart.h>
#include <ImfIntAttribute.h>
#include <ImfMultiPartInputFile.h>
#include <ImfStringAttribute.h>
#include <png.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "facetrace/tracer/output.h"

namespace ft = facetrace::tracer;
namespace fs = std::filesystem;

namespace {

// Linear sRGB → XYZ luminance row (inverse of the XYZ → sRGB matrix, D65).
double luminance_of(const double rgb[3]) {
  return 0.2126729 * rgb[0] + 0.7151522 * rgb[1] + 0.0721750 * rgb[2];
}

constexpr double kD65[3] = {0.3127 / 0.3290, 1.0, (1 - 0.3127 - 0.3290) / 0.3290};

fs::path temp_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::temp_directory_path() /
                 ("facetrace_io_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST(Aces, matches_the_curve_at_known_luminances) {
  EXPECT_EQ(ft::aces_curve(0.0), 0.0);
  EXPECT_EQ(ft::aces_curve(-1.0), 0.0);
  EXPECT_NEAR(ft::aces_curve(1.0), 0.8037974683544302, 1e-12);
  EXPECT_NEAR(ft::aces_curve(0.18), 0.2668989203894968, 1e-12);
  EXPECT_NEAR(ft::aces_curve(1000.0), 1.0326833630617789, 1e-12);  // tends to 2.51/2.43 > 1: clipped later
}

TEST(Srgb, curve_has_exact_endpoints_and_a_continuous_threshold) {
  EXPECT_EQ(ft::srgb_encode(0.0), 0.0);
  EXPECT_NEAR(ft::srgb_encode(1.0), 1.0, 1e-15);
  EXPECT_NEAR(ft::srgb_encode(0.0031308), 12.92 * 0.0031308, 1e-15);  // linear segment up to the threshold
  const double above = ft::srgb_encode(std::nextafter(0.0031308, 1.0));
  EXPECT_NEAR(above, 0.040449936, 1e-6);  // the power segment meets it
  EXPECT_NEAR(ft::srgb_encode(0.5), 0.735356983052449, 1e-12);
}

TEST(Quantise, rounds_half_up_and_clamps) {
  EXPECT_EQ(ft::quantise8(0.0), 0);
  EXPECT_EQ(ft::quantise8(-0.5), 0);
  EXPECT_EQ(ft::quantise8(1.0), 255);
  EXPECT_EQ(ft::quantise8(2.0), 255);
  EXPECT_EQ(ft::quantise8(0.5), 128);  // 127.5 + 0.5
  EXPECT_EQ(ft::quantise8(126.49 / 255.0), 126);
  EXPECT_EQ(ft::quantise8(std::nan("")), 0);
}

TEST(Srgb, d65_white_maps_to_equal_channels) {
  double rgb[3];
  ft::xyz_to_linear_srgb(kD65, rgb);
  for (double c : rgb) EXPECT_NEAR(c, 1.0, 5e-4);
}

TEST(GamutWalk, leaves_in_gamut_colours_alone) {
  const double xyz[3] = {0.3, 0.35, 0.4};
  double direct[3], walked[3];
  ft::xyz_to_linear_srgb(xyz, direct);
  ft::gamut_walk_srgb(xyz, walked);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(walked[c], direct[c]);
}

TEST(GamutWalk, keeps_luminance_and_hue_line_and_ends_with_nonnegative_channels) {
  // Spectral 520 nm (CIE 1931 CMF), a red with negative green, a saturated blue.
  const double cases[][3] = {
      {0.06327, 0.71, 0.07825}, {0.2, 0.1, 0.05}, {0.3, 0.5, 2.0}, {0.1741, 0.005, 0.8}};
  for (const auto& xyz : cases) {
    double direct[3], rgb[3];
    ft::xyz_to_linear_srgb(xyz, direct);
    ASSERT_LT(std::min({direct[0], direct[1], direct[2]}), 0.0) << "test colour should be out of gamut";
    ft::gamut_walk_srgb(xyz, rgb);
    EXPECT_GE(rgb[0], 0.0);
    EXPECT_GE(rgb[1], 0.0);
    EXPECT_GE(rgb[2], 0.0);
    EXPECT_EQ(std::min({rgb[0], rgb[1], rgb[2]}), 0.0) << "the walk stops on the gamut boundary";
    EXPECT_NEAR(luminance_of(rgb), xyz[1], 1e-5 * xyz[1]);
    // Chromaticity stays on the segment from white to the original colour.
    const double s = xyz[0] + xyz[1] + xyz[2];
    const double px = xyz[0] / s - 0.3127, py = xyz[1] / s - 0.3290;
    // Back to XYZ via the inverse matrix (sRGB → XYZ, D65).
    const double X = 0.4124564 * rgb[0] + 0.3575761 * rgb[1] + 0.1804375 * rgb[2];
    const double Y = luminance_of(rgb);
    const double Z = 0.0193339 * rgb[0] + 0.1191920 * rgb[1] + 0.9503041 * rgb[2];
    const double qx = X / (X + Y + Z) - 0.3127, qy = Y / (X + Y + Z) - 0.3290;
    EXPECT_NEAR(px * qy - py * qx, 0.0, 1e-5);
    EXPECT_GT(px * qx + py * qy, 0.0);
    EXPECT_LE(qx * qx + qy * qy, px * px + py * py);
  }
}

TEST(GamutWalk, black_for_nonpositive_luminance) {
  const double xyz[3] = {0.5, 0.0, 0.2};
  double rgb[3] = {1, 1, 1};
  ft::gamut_walk_srgb(xyz, rgb);
  EXPECT_EQ(rgb[0], 0.0);
  EXPECT_EQ(rgb[1], 0.0);
  EXPECT_EQ(rgb[2], 0.0);
}

namespace {

// A 3×2 film with known averages; expected bytes computed independently (bisection walk in Python).
ft::Film synthetic_film() {
  ft::Film f(3, 2);
  auto set = [&](int p, double x, double y, double z, std::uint32_t n) {
    f.xyz[p * 3 + 0] = static_cast<float>(x * n);
    f.xyz[p * 3 + 1] = static_cast<float>(y * n);
    f.xyz[p * 3 + 2] = static_cast<float>(z * n);
    f.samples[p] = n;
  };
  set(0, 0, 0, 0, 0);                                         // no samples: black
  set(1, kD65[0], kD65[1], kD65[2], 4);                       // white, Y = 1
  set(2, kD65[0] * 0.18, kD65[1] * 0.18, kD65[2] * 0.18, 8);  // 18 % grey
  set(3, 0.2, 0.1, 0.05, 2);                                  // red, negative green: walks
  set(4, 0.06327, 0.71, 0.07825, 1);                          // 520 nm: walks
  set(5, kD65[0] * 100, kD65[1] * 100, kD65[2] * 100, 16);    // very bright: clips to white
  return f;
}
const std::uint8_t kExpectedRgb[6][3] = {{0, 0, 0},    {232, 232, 232}, {141, 141, 141},
                                         {199, 0, 68}, {0, 252, 166},   {255, 255, 255}};

}  // namespace

TEST(Display, tonemaps_a_synthetic_film_to_the_expected_bytes) {
  const ft::Rgba8Image img = ft::tonemap_film(synthetic_film());
  ASSERT_EQ(img.rgba.size(), 6u * 4);
  for (int p = 0; p < 6; ++p) {
    for (int c = 0; c < 3; ++c)
      EXPECT_EQ(img.rgba[p * 4 + c], kExpectedRgb[p][c]) << "pixel " << p << " ch " << c;
    EXPECT_EQ(img.rgba[p * 4 + 3], 255);
  }
}

TEST(Png, writes_rgba8_that_libpng_reads_back) {
  const fs::path dir = temp_dir();
  const std::string path = (dir / "synthetic.png").string();
  ASSERT_TRUE(ft::write_png(path, ft::tonemap_film(synthetic_film())).ok());

  // Read with libpng directly (not through read_png) and check the stored format.
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  ASSERT_TRUE(png_image_begin_read_from_file(&png, path.c_str())) << png.message;
  EXPECT_EQ(png.width, 3u);
  EXPECT_EQ(png.height, 2u);
  EXPECT_EQ(png.format, static_cast<png_uint_32>(PNG_FORMAT_RGBA));
  std::vector<std::uint8_t> pixels(PNG_IMAGE_SIZE(png));
  ASSERT_TRUE(png_image_finish_read(&png, nullptr, pixels.data(), 0, nullptr)) << png.message;
  for (int p = 0; p < 6; ++p)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(pixels[p * 4 + c], kExpectedRgb[p][c]) << "pixel " << p;

  auto again = ft::read_png(path);
  ASSERT_TRUE(again.ok()) << again.status().what();
  EXPECT_EQ(again->rgba, pixels);
  fs::remove_all(dir);
}

TEST(Png, errors_name_the_file) {
  const std::string path = "/nonexistent-dir-facetrace/x.png";
  const facetrace::Status st = ft::write_png(path, ft::tonemap_film(synthetic_film()));
  EXPECT_EQ(st.code(), facetrace::Code::kIo);
  EXPECT_NE(st.what().find(path), std::string::npos) << st.what();
  auto r = ft::read_png(path);
  EXPECT_EQ(r.status().code(), facetrace::Code::kIo);
  EXPECT_NE(r.status().what().find(path), std::string::npos);
  ft::Rgba8Image bad;
  bad.width = 2;
  bad.height = 2;
  EXPECT_EQ(ft::write_png("x.png", bad).code(), facetrace::Code::kInvalidArgument);
}

TEST(Exr, round_trips_sums_counts_and_header_bit_exactly) {
  ft::Film film(17, 9);
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> u(0.0f, 50.0f);
  for (auto& v : film.xyz) v = u(rng);
  film.xyz[0] = 0.0f;
  film.xyz[1] = 1e-40f;   // denormal
  film.xyz[2] = 3.4e38f;  // near FLT_MAX
  for (std::size_t i = 0; i < film.samples.size(); ++i)
    film.samples[i] = static_cast<std::uint32_t>(i * 977u);
  film.samples[3] = 0xFFFFFFFFu;
  film.nonfinite = 42;
  ft::ExrInfo info;
  info.first_sample = 0x1'0000'0005ull;  // > 2^32: kept exactly (decimal string attribute)
  info.samples = 64;
  info.nonfinite = film.nonfinite;
  info.scene_json = "{\"width\": 17}";
  info.render_seconds = 2.5;
  info.build = "facetrace test";

  const fs::path dir = temp_dir();
  const std::string path = (dir / "sums.exr").string();
  ASSERT_TRUE(ft::write_exr(path, film, info).ok());
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  auto back = ft::read_exr(path);
  ASSERT_TRUE(back.ok()) << back.status().what();
  EXPECT_EQ(back->film.width, 17u);
  EXPECT_EQ(back->film.height, 9u);
  ASSERT_EQ(back->film.xyz.size(), film.xyz.size());
  EXPECT_EQ(std::memcmp(back->film.xyz.data(), film.xyz.data(), film.xyz.size() * sizeof(float)), 0);
  EXPECT_EQ(back->film.samples, film.samples);
  EXPECT_EQ(back->film.nonfinite, 42u);
  EXPECT_EQ(back->info.first_sample, info.first_sample);
  EXPECT_EQ(back->info.samples, 64u);
  EXPECT_EQ(back->info.scene_json, info.scene_json);
  EXPECT_EQ(back->info.render_seconds, 2.5);
  EXPECT_EQ(back->info.build, "facetrace test");
  fs::remove_all(dir);
}

// The layout compositors see, read with OpenEXR directly: part 0 "beauty" (R, G, B = average XYZ in linear
// Rec.709, with Rec.709 chromaticities), part 1 "sums" (no bare Z channel), typed attributes on both.
TEST(Exr, has_a_beauty_part_and_a_sums_part_with_typed_attributes) {
  ft::Film film(3, 2);
  for (std::size_t i = 0; i < film.xyz.size(); ++i) film.xyz[i] = 0.25f * static_cast<float>(i + 1);
  for (std::size_t p = 0; p < film.pixels(); ++p) film.samples[p] = static_cast<std::uint32_t>(p % 3);  // p 0, 3: N = 0
  ft::ExrInfo info;
  info.first_sample = 128;
  info.samples = 2;
  info.render_seconds = 0.75;
  info.build = "facetrace 0.1 abc";
  const fs::path dir = temp_dir();
  const std::string path = (dir / "parts.exr").string();
  ASSERT_TRUE(ft::write_exr(path, film, info).ok());

  Imf::MultiPartInputFile file(path.c_str());
  ASSERT_EQ(file.parts(), 2);
  EXPECT_EQ(file.header(0).name(), "beauty");
  EXPECT_EQ(file.header(1).name(), "sums");
  std::vector<std::string> sums_channels;
  for (auto it = file.header(1).channels().begin(); it != file.header(1).channels().end(); ++it)
    sums_channels.push_back(it.name());
  EXPECT_EQ(sums_channels, (std::vector<std::string>{"sums.N", "sums.X", "sums.Y", "sums.Z"}));
  for (int part = 0; part < 2; ++part) {
    const Imf::Header& h = file.header(part);
    for (auto it = h.channels().begin(); it != h.channels().end(); ++it) EXPECT_STRNE(it.name(), "Z");
    const auto* spp = h.findTypedAttribute<Imf::IntAttribute>("samplesPerPixel");
    ASSERT_NE(spp, nullptr);
    EXPECT_EQ(spp->value(), 2);
    const auto* first = h.findTypedAttribute<Imf::DoubleAttribute>("firstSample");
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(first->value(), 128.0);
    const auto* time = h.findTypedAttribute<Imf::DoubleAttribute>("renderTime");
    ASSERT_NE(time, nullptr);
    EXPECT_EQ(time->value(), 0.75);
    const auto* build = h.findTypedAttribute<Imf::StringAttribute>("build");
    ASSERT_NE(build, nullptr);
    EXPECT_EQ(build->value(), "facetrace 0.1 abc");
    const auto* chroma = h.findTypedAttribute<Imf::ChromaticitiesAttribute>("chromaticities");
    ASSERT_NE(chroma, nullptr);  // ITU-R BT.709 primaries, D65 white
    EXPECT_FLOAT_EQ(chroma->value().red.x, 0.64f);
    EXPECT_FLOAT_EQ(chroma->value().red.y, 0.33f);
    EXPECT_FLOAT_EQ(chroma->value().green.x, 0.30f);
    EXPECT_FLOAT_EQ(chroma->value().green.y, 0.60f);
    EXPECT_FLOAT_EQ(chroma->value().blue.x, 0.15f);
    EXPECT_FLOAT_EQ(chroma->value().blue.y, 0.06f);
    EXPECT_FLOAT_EQ(chroma->value().white.x, 0.3127f);
    EXPECT_FLOAT_EQ(chroma->value().white.y, 0.3290f);
  }
  const auto& b = file.header(0);
  ASSERT_NE(b.channels().findChannel("R"), nullptr);
  ASSERT_NE(b.channels().findChannel("G"), nullptr);
  ASSERT_NE(b.channels().findChannel("B"), nullptr);
  std::vector<float> rgb(film.pixels() * 3, -1.0f);
  Imf::FrameBuffer fb;
  for (int c = 0; c < 3; ++c)
    fb.insert(std::string(1, "RGB"[c]), Imf::Slice(Imf::FLOAT, reinterpret_cast<char*>(rgb.data() + c),
                                                    sizeof(float) * 3, sizeof(float) * 3 * film.width));
  Imf::InputPart beauty(file, 0);
  beauty.setFrameBuffer(fb);
  beauty.readPixels(0, 1);
  // XYZ → linear Rec.709 (IEC 61966-2-1; B. Lindbloom's D65 matrix), applied to the average by hand.
  const double m[3][3] = {{3.2404542, -1.5371385, -0.4985314},
                          {-0.9692660, 1.8760108, 0.0415560},
                          {0.0556434, -0.2040259, 1.0572252}};
  for (std::size_t p = 0; p < film.pixels(); ++p) {
    const double n = film.samples[p];
    for (int c = 0; c < 3; ++c) {
      double want = 0;
      if (n > 0)
        for (int k = 0; k < 3; ++k) want += m[c][k] * film.xyz[p * 3 + k] / n;
      EXPECT_NEAR(rgb[p * 3 + c], want, 1e-6 * (1 + std::abs(want))) << "pixel " << p << " channel " << c;
    }
  }
  fs::remove_all(dir);
}

TEST(Exr, errors_name_the_file) {
  const fs::path dir = temp_dir();
  const std::string missing = (dir / "missing.exr").string();
  auto r = ft::read_exr(missing);
  EXPECT_EQ(r.status().code(), facetrace::Code::kIo);
  EXPECT_NE(r.status().what().find(missing), std::string::npos) << r.status().what();

  const std::string not_exr = (dir / "text.exr").string();
  std::ofstream(not_exr) << "not an exr";
  r = ft::read_exr(not_exr);
  EXPECT_EQ(r.status().code(), facetrace::Code::kIo);
  EXPECT_NE(r.status().what().find(not_exr), std::string::npos);

  const std::string unwritable = (dir / "no" / "such" / "dir.exr").string();
  const facetrace::Status st = ft::write_exr(unwritable, ft::Film(2, 2), {});
  EXPECT_EQ(st.code(), facetrace::Code::kIo);
  EXPECT_NE(st.what().find(unwritable), std::string::npos) << st.what();

  ft::Film broken(2, 2);
  broken.samples.pop_back();
  EXPECT_EQ(ft::write_exr((dir / "b.exr").string(), broken, {}).code(), facetrace::Code::kInvalidArgument);
  fs::remove_all(dir);
}
