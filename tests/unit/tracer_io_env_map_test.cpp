/// @file
/// HDR environment map input (env_map.h, docs/design/tracer.md §6.1): Radiance RGBE pictures built byte by byte
/// here, with the texel values worked out by hand from the format (m·2^(e−136)); OpenEXR maps written with the
/// OpenEXR library; the sha256 check and the bad-input errors (docs/limits.md).
#include <ImfChannelList.h>
#include <ImfFrameBuffer.h>
#include <ImfHeader.h>
#include <ImfOutputFile.h>
#include <gtest/gtest.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "facetrace/core/sha256.h"
#include "facetrace/tracer/env_map.h"

namespace facetrace::tracer {
namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes header(const std::string& extra, const std::string& resolution) {
  const std::string h = "#?RADIANCE\n# made by a test\nFORMAT=32-bit_rle_rgbe\n" +
                        (extra.empty() ? "" : extra + "\n") + "\n" + resolution + "\n";
  return Bytes(h.begin(), h.end());
}

void append(Bytes& b, std::initializer_list<int> v) {
  for (int x : v) b.push_back(static_cast<std::uint8_t>(x));
}

std::string temp_file(const Bytes& b, const std::string& name) {
  const std::string path = ::testing::TempDir() + "ft_env_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
  return path;
}

TEST(EnvMapRgbe, flat_scanlines_decode_to_mantissa_times_two_to_the_exponent_minus_136) {
  // 2 x 1, flat (width < 8): (128, 64, 32, e=129) = (128, 64, 32)·2^-7 = (1, 0.5, 0.25); e = 0 is black.
  Bytes b = header("", "-Y 1 +X 2");
  append(b, {128, 64, 32, 129, 200, 100, 50, 0});
  auto m = decode_rgbe(b, "t.hdr");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->width, 2u);
  EXPECT_EQ(m->height, 1u);
  EXPECT_EQ(m->rgb, (std::vector<float>{1.0f, 0.5f, 0.25f, 0.0f, 0.0f, 0.0f}));
}

TEST(EnvMapRgbe, run_length_scanlines_and_exposure) {
  // 8 x 2, new-style runs. Row 0: r = run of 8 x 255, g = 8 literals 0..7, b = run of 8 x 16, e = run of 8 x 136
  // (2^0): texel x = (255, x, 16). Row 1: every channel a run of 8 x 1, e = 137: (2, 2, 2). EXPOSURE=2 halves all.
  Bytes b = header("EXPOSURE=2", "-Y 2 +X 8");
  append(b, {2, 2, 0, 8});
  append(b, {128 + 8, 255});
  append(b, {8, 0, 1, 2, 3, 4, 5, 6, 7});
  append(b, {128 + 8, 16});
  append(b, {128 + 8, 136});
  append(b, {2, 2, 0, 8});
  for (int c = 0; c < 3; ++c) append(b, {128 + 8, 1});
  append(b, {128 + 8, 137});
  auto m = decode_rgbe(b, "t.hdr");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ(m->rgb.size(), 8u * 2 * 3);
  for (int x = 0; x < 8; ++x) {
    EXPECT_EQ(m->rgb[x * 3 + 0], 127.5f) << x;
    EXPECT_EQ(m->rgb[x * 3 + 1], x / 2.0f) << x;
    EXPECT_EQ(m->rgb[x * 3 + 2], 8.0f) << x;
    for (int c = 0; c < 3; ++c) EXPECT_EQ(m->rgb[(8 + x) * 3 + c], 1.0f) << x;
  }
}

TEST(EnvMapRgbe, bad_pictures_are_named_errors) {
  struct Case {
    Bytes bytes;
    const char* says;
  };
  std::vector<Case> cases;
  cases.push_back({Bytes{'P', '6', '\n'}, "not a Radiance picture"});
  cases.push_back({Bytes{'#', '?', 'R', '\n', 'F'}, "ends before its blank line"});
  {
    std::string s = "#?RADIANCE\nFORMAT=32-bit_rle_xyze\n\n-Y 1 +X 1\n";
    cases.push_back({Bytes(s.begin(), s.end()), "FORMAT=32-bit_rle_xyze is not supported"});
  }
  cases.push_back({header("", "+Y 1 +X 1"), "only the standard"});
  cases.push_back({header("", "-Y 1 +X 1 junk"), "only the standard"});
  cases.push_back({header("EXPOSURE=-1", "-Y 1 +X 1"), "EXPOSURE=-1 is not a positive number"});
  cases.push_back({header("", "-Y 0 +X 4"), "each side must be in [1, 32768]"});
  cases.push_back({header("", "-Y 40000 +X 4"), "each side must be in [1, 32768]"});
  cases.push_back({header("", "-Y 16384 +X 16384"), "exceeds 67108864 texels"});
  {
    Bytes b = header("", "-Y 2 +X 2");
    append(b, {1, 2, 3, 130, 1, 2, 3, 130});  // one row of two: refused before anything is allocated
    cases.push_back({b, "2x2 needs at least 16 bytes of scanlines, the file has 8 (truncated?)"});
  }
  {
    Bytes b = header("", "-Y 1 +X 8");
    append(b, {2, 2, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0});  // padded to a row's 12-byte minimum
    cases.push_back({b, "gives a width other than 8"});
  }
  {
    Bytes b = header("", "-Y 1 +X 8");
    append(b, {2, 2, 0, 8, 128 + 9, 1, 0, 0, 0, 0, 0, 0});
    cases.push_back({b, "runs past its width"});
  }
  {
    Bytes b = header("", "-Y 1 +X 8");
    append(b, {2, 2, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0});
    cases.push_back({b, "is empty"});
  }
  {
    Bytes b = header("", "-Y 1 +X 8");
    append(b, {2, 2, 0, 8, 128 + 8});
    cases.push_back({b, "8x1 needs at least 12 bytes of scanlines, the file has 5"});
  }
  {
    Bytes b = header("", "-Y 1 +X 8");
    append(b, {2, 2, 0, 8, 8, 1, 2, 3, 4, 5, 6, 7, 8, 128 + 8});  // the green run has no value byte
    cases.push_back({b, "scanline 0 of 1 is truncated"});
  }
  {
    Bytes b = header("EXPOSURE=1e-45", "-Y 1 +X 1");
    append(b, {255, 255, 255, 255});  // 255·2^119 / 1e-45 overflows a float
    cases.push_back({b, "radiance must be finite and >= 0"});
  }
  for (const auto& c : cases) {
    auto m = decode_rgbe(c.bytes, "bad.hdr");
    ASSERT_FALSE(m.ok()) << c.says;
    EXPECT_EQ(m.status().code(), Code::kInvalidArgument) << c.says;
    EXPECT_NE(m.status().what().find("bad.hdr: "), std::string::npos) << m.status().what();
    EXPECT_NE(m.status().what().find(c.says), std::string::npos) << m.status().what();
  }
}

TEST(EnvMapLoad, reads_rgbe_by_its_magic_and_checks_the_sha256) {
  Bytes b = header("", "-Y 1 +X 1");
  append(b, {128, 128, 128, 136});
  const std::string path = temp_file(b, "one.hdr");
  const std::string sha = core::sha256_hex(b);
  for (const std::string& given : {sha, std::string(), std::string(sha.size(), 'x')}) {
    auto m = load_env_map(path, given);
    if (given.empty() || given == sha) {
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      EXPECT_EQ(m->rgb, (std::vector<float>{128.0f, 128.0f, 128.0f}));
    } else {
      ASSERT_FALSE(m.ok());
      EXPECT_NE(m.status().what().find("sha256 is " + sha + ", the scene names xxxx"), std::string::npos)
          << m.status().what();
    }
  }
  std::string upper = sha;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_TRUE(load_env_map(path, upper).ok());  // hex in either case
  ::unlink(path.c_str());

  const std::string other = temp_file(Bytes{'G', 'I', 'F', '8'}, "x.gif");
  auto m = load_env_map(other, "");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().what().find("not a Radiance .hdr or an OpenEXR file"), std::string::npos);
  ::unlink(other.c_str());

  auto missing = load_env_map(::testing::TempDir() + "ft_env_no_such.hdr", "");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kIo);

  // One byte over the file limit (a sparse file: nothing is written).
  const std::string big = temp_file({}, "big.hdr");
  ASSERT_EQ(::truncate(big.c_str(), static_cast<off_t>(kMaxEnvMapFileBytes + 1)), 0);
  auto too_big = load_env_map(big, "");
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), Code::kInvalidArgument);
  EXPECT_NE(too_big.status().what().find("1073741825 bytes exceeds the limit of 1073741824 bytes"),
            std::string::npos)
      << too_big.status().what();
  ::unlink(big.c_str());
}

// The hdr fuzzer's seeds (tests/fuzz/make_seeds.py, docs/testing.md "Fuzzing") are pictures that decode, except
// the one cut short on purpose. The EXR seed is a render's: its beauty part decodes in full, and is then refused
// for the negative linear-sRGB values of out-of-gamut colours (docs/design/tracer.md §6.1).
TEST(EnvMapLoad, the_fuzz_seeds_decode) {
  for (const char* name : {"flat.hdr", "runs.hdr", "wide.hdr", "truncated.hdr"}) {
    auto m = load_env_map(std::string(FT_FUZZ_CORPUS_DIR) + "/hdr/" + name, "");
    if (std::string(name) == "truncated.hdr") {
      EXPECT_FALSE(m.ok()) << name;
      continue;
    }
    ASSERT_TRUE(m.ok()) << name << ": " << m.status().to_string();
    EXPECT_EQ(m->rgb.size(), std::size_t{m->width} * m->height * 3) << name;
  }
  auto runs = load_env_map(std::string(FT_FUZZ_CORPUS_DIR) + "/hdr/runs.hdr", "");
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(runs->rgb[0], 127.5f);         // (255, 0, 16, e = 136) / EXPOSURE 2
  EXPECT_EQ(runs->rgb[4 * 3 + 2], 16.0f);  // the blue channel's second run: 32 / 2
  auto exr = load_env_map(std::string(FT_FUZZ_CORPUS_DIR) + "/hdr/render_16x12.exr", "");
  ASSERT_FALSE(exr.ok());
  EXPECT_NE(exr.status().what().find("radiance must be finite and >= 0"), std::string::npos)
      << exr.status().what();
}

// examples/maps/studio_small.hdr, written by examples/maps/make_studio_hdr.py: its size, its sha256 (as a scene
// names it) and the radiance its script documents for the key softbox, the floor and the background, within the
// RGBE quantisation (8-bit mantissas: 1/128 of the texel's largest channel).
TEST(EnvMapLoad, the_example_studio_map_is_the_one_its_script_describes) {
  const std::string path = std::string(FT_EXAMPLES_DIR) + "/maps/studio_small.hdr";
  auto m = load_env_map(path, "1ee8846551d9f2df56fae3b7ff7f74750760a32b3d2c740c3d24755b5730ba85");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ(m->width, 256u);
  ASSERT_EQ(m->height, 128u);
  // Column x: azimuth 360°·(x + ½)/256; row y: elevation 90° − 180°·(y + ½)/128.
  auto texel = [&](std::uint32_t x, std::uint32_t y, int c) {
    return m->rgb[(std::size_t{y} * 256 + x) * 3 + c];
  };
  const float key[3] = {8.0f, 7.6f, 7.0f};  // x 31: azimuth 44.3°; y 39: elevation 34.2°
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(texel(31, 39, c), key[c], 8.0f / 128) << c;
  EXPECT_NEAR(texel(100, 20, 0), 0.05f, 0.05f / 128);  // azimuth 141°, elevation 61.2°: the background
  EXPECT_NEAR(texel(0, 127, 1), 0.15f * (1 - 89.296875f / 90),
              0.002f / 128);  // the floor at elevation −89.3°
  auto wrong = load_env_map(path, std::string(64, '0'));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().what().find("sha256"), std::string::npos) << wrong.status().what();
}

/// Writes an EXR of w x h with the given channels (FLOAT), texel i channel c = value(i, c).
template <class F>
std::string write_exr(const std::string& name, int w, int h, const std::string& channels, F value) {
  const std::string path = ::testing::TempDir() + "ft_env_" + std::to_string(::getpid()) + "_" + name;
  Imf::Header hd(w, h);
  std::vector<std::vector<float>> planes(channels.size(),
                                         std::vector<float>(static_cast<std::size_t>(w * h)));
  Imf::FrameBuffer fb;
  for (std::size_t c = 0; c < channels.size(); ++c) {
    hd.channels().insert(std::string(1, channels[c]), Imf::Channel(Imf::FLOAT));
    for (int i = 0; i < w * h; ++i) planes[c][static_cast<std::size_t>(i)] = value(i, static_cast<int>(c));
    fb.insert(std::string(1, channels[c]),
              Imf::Slice(Imf::FLOAT, reinterpret_cast<char*>(planes[c].data()), sizeof(float),
                         sizeof(float) * static_cast<std::size_t>(w)));
  }
  Imf::OutputFile out(path.c_str(), hd);
  out.setFrameBuffer(fb);
  out.writePixels(h);
  return path;
}

TEST(EnvMapLoad, reads_the_rgb_channels_of_an_exr_and_refuses_bad_texels) {
  const std::string rgba = write_exr("rgba.exr", 3, 2, "RGBA", [](int i, int c) { return i * 10.0f + c; });
  auto m = load_env_map(rgba, "");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->width, 3u);
  EXPECT_EQ(m->height, 2u);
  for (int i = 0; i < 6; ++i)
    for (int c = 0; c < 3; ++c)  // R, G, B were written as channels 0, 1, 2 of "RGBA"; A is left out
      EXPECT_EQ(m->rgb[static_cast<std::size_t>(i * 3 + c)], i * 10.0f + c) << i << " " << c;
  ::unlink(rgba.c_str());

  const std::string y = write_exr("y.exr", 2, 2, "Y", [](int, int) { return 1.0f; });
  m = load_env_map(y, "");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().what().find("has no R channel"), std::string::npos) << m.status().what();
  ::unlink(y.c_str());

  for (float v : {-1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    const std::string p =
        write_exr("bad.exr", 2, 2, "RGB", [v](int i, int c) { return i == 3 && c == 0 ? v : 0.5f; });
    m = load_env_map(p, "");
    ASSERT_FALSE(m.ok()) << v;
    EXPECT_NE(m.status().what().find("texel (1, 1) channel "), std::string::npos) << m.status().what();
    EXPECT_NE(m.status().what().find("radiance must be finite and >= 0"), std::string::npos)
        << m.status().what();
    ::unlink(p.c_str());
  }

  // Hostile headers, refused before OpenEXR allocates what they declare: an attribute of 2^31 - 1 bytes, and a
  // data window of 2^31 rows.
  {
    const std::string ok = write_exr("ok.exr", 4, 4, "RGB", [](int, int) { return 1.0f; });
    std::ifstream f(ok, std::ios::binary);
    const Bytes good((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    ::unlink(ok.c_str());
    const auto find = [&](const std::string& key) {
      const auto it = std::search(good.begin(), good.end(), key.begin(), key.end());
      EXPECT_NE(it, good.end()) << key;
      return static_cast<std::size_t>(it - good.begin()) + key.size() + 1;  // past the null
    };
    // `good` with the int32 at `at` set to `v` is refused, saying `says`.
    const auto patched_is_refused = [&](std::size_t at, std::int32_t v, const char* name,
                                        const std::string& says) {
      Bytes b = good;
      std::memcpy(b.data() + at, &v, 4);
      const std::string p = temp_file(b, name);
      auto r = load_env_map(p, "");
      ::unlink(p.c_str());
      ASSERT_FALSE(r.ok()) << name;
      EXPECT_NE(r.status().what().find(says), std::string::npos) << r.status().what();
    };
    const std::size_t chlist = find(std::string("channels\0chlist", 15));  // its size, then "B\0", type, …
    patched_is_refused(chlist, 0x7fffffff, "huge_attr.exr",
                       "EXR header attribute channels declares 2147483647 bytes");
    // Channel B (the first in the list) with a y sampling of 720896.
    patched_is_refused(chlist + 4 + 2 + 12, 720896, "sub.exr", "EXR channel B is subsampled (1 x 720896)");
    const std::size_t box =
        find(std::string("dataWindow\0box2i", 16)) + 4;  // past the size: min x, y, max x, y
    patched_is_refused(box + 12, 0x7ffffffe, "tall.exr",
                       "4x2147483647 texels: each side must be in [1, 32768]");
  }

  // Truncated: the first half of a valid file.
  const std::string whole = write_exr("whole.exr", 64, 64, "RGB", [](int i, int) { return i * 0.25f; });
  std::ifstream in(whole, std::ios::binary);
  Bytes bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes.resize(bytes.size() / 2);
  const std::string half = temp_file(bytes, "half.exr");
  m = load_env_map(half, "");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().what().find("cannot read EXR environment map"), std::string::npos)
      << m.status().what();
  ::unlink(whole.c_str());
  ::unlink(half.c_str());
}

}  // namespace
}  // namespace facetrace::tracer
