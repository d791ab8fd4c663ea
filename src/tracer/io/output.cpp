/// @file
/// Display path (docs/design/tracer.md §11.1) and linear EXR output (§11.2).
#include "facetrace/tracer/output.h"

#include <ImfChannelList.h>
#include <ImfFrameBuffer.h>
#include <ImfHeader.h>
#include <ImfIO.h>
#include <ImfInputFile.h>
#include <ImfOutputFile.h>
#include <ImfStringAttribute.h>
#include <png.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <system_error>

#include "facetrace/core/file.h"
#include "facetrace/core/image.h"

namespace facetrace::tracer {
namespace {

// XYZ → linear sRGB, D65 white (IEC 61966-2-1 primaries; matrix as derived by B. Lindbloom).
constexpr double kXyzToSrgb[3][3] = {{3.2404542, -1.5371385, -0.4985314},
                                     {-0.9692660, 1.8760108, 0.0415560},
                                     {0.0556434, -0.2040259, 1.0572252}};
// D65 white chromaticity (docs/design/tracer.md §11.1: the walk goes toward white).
constexpr double kWhiteX = 0.3127;
constexpr double kWhiteY = 0.3290;

constexpr const char* kAttrFirstSample = "facetrace.first_sample";
constexpr const char* kAttrSamples = "facetrace.samples";
constexpr const char* kAttrNonfinite = "facetrace.nonfinite";
constexpr const char* kAttrScene = "facetrace.scene";

/// OpenEXR's output stream into memory: the encoded file then reaches the disk through core::AtomicFile, whose
/// every write and the fsync are checked (an ofstream's last flush, in its destructor, is not).
class MemoryOStream final : public Imf::OStream {
 public:
  MemoryOStream() : Imf::OStream("memory") {}
  void write(const char c[], int n) override {
    const std::size_t end = pos_ + static_cast<std::size_t>(n);
    if (end > bytes_.size()) bytes_.resize(end);
    std::memcpy(bytes_.data() + pos_, c, static_cast<std::size_t>(n));
    pos_ = end;
  }
  std::uint64_t tellp() override { return pos_; }
  void seekp(std::uint64_t pos) override { pos_ = static_cast<std::size_t>(pos); }
  const std::vector<std::uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<std::uint8_t> bytes_;
  std::size_t pos_ = 0;
};

}  // namespace

double aces_curve(double y) {
  // docs/design/tracer.md §11.1 step 2
  if (!(y > 0)) return 0.0;
  return y * (2.51 * y + 0.03) / (y * (2.43 * y + 0.59) + 0.14);
}

void xyz_to_linear_srgb(const double xyz[3], double rgb[3]) {
  for (int c = 0; c < 3; ++c)
    rgb[c] = kXyzToSrgb[c][0] * xyz[0] + kXyzToSrgb[c][1] * xyz[1] + kXyzToSrgb[c][2] * xyz[2];
}

void gamut_walk_srgb(const double xyz[3], double rgb[3]) {
  // docs/design/tracer.md §11.1 step 3. For chromaticity p(t) = w + t·(p − w), each channel equals (Y/y(t))·M_c·v(t) with
  // v = (x, y, 1 − x − y); Y/y(t) > 0, and M_c·v(t) is affine in t, so the boundary is found in closed form.
  const double y_lum = xyz[1];
  const double sum = xyz[0] + xyz[1] + xyz[2];
  if (!(y_lum > 0) || !(sum > 0)) {
    rgb[0] = rgb[1] = rgb[2] = 0;
    return;
  }
  xyz_to_linear_srgb(xyz, rgb);
  if (rgb[0] >= 0 && rgb[1] >= 0 && rgb[2] >= 0) return;
  const double px = xyz[0] / sum, py = xyz[1] / sum;
  const double vw[3] = {kWhiteX, kWhiteY, 1 - kWhiteX - kWhiteY};
  const double vp[3] = {px, py, 1 - px - py};
  double t = 1.0;
  int limiting = -1;
  for (int c = 0; c < 3; ++c) {
    const double a = kXyzToSrgb[c][0] * vw[0] + kXyzToSrgb[c][1] * vw[1] + kXyzToSrgb[c][2] * vw[2];
    const double b = kXyzToSrgb[c][0] * vp[0] + kXyzToSrgb[c][1] * vp[1] + kXyzToSrgb[c][2] * vp[2];
    if (b < 0) {
      const double tc = a / (a - b);  // a > 0: white is inside the gamut
      if (tc < t) t = tc, limiting = c;
    }
  }
  const double x = kWhiteX + t * (px - kWhiteX);
  const double y = kWhiteY + t * (py - kWhiteY);
  const double walked[3] = {x * y_lum / y, y_lum, (1 - x - y) * y_lum / y};
  xyz_to_linear_srgb(walked, rgb);
  for (int c = 0; c < 3; ++c)
    if (c == limiting || rgb[c] < 0) rgb[c] = 0;  // exact boundary; rounding never leaves a negative
}

double srgb_encode(double x) {
  // docs/design/tracer.md §11.1 step 4
  if (x <= 0.0031308) return 12.92 * x;
  return 1.055 * std::pow(x, 1.0 / 2.4) - 0.055;
}

std::uint8_t quantise8(double v) {
  // docs/design/tracer.md §11.1 step 5
  if (!(v > 0)) return 0;
  if (v >= 1) return 255;
  return static_cast<std::uint8_t>(std::floor(v * 255.0 + 0.5));
}

void display_pixel(const float xyz_sum[3], std::uint32_t n, std::uint8_t rgba[4]) {
  rgba[3] = 255;
  if (n == 0) {
    rgba[0] = rgba[1] = rgba[2] = 0;
    return;
  }
  double xyz[3];
  for (int c = 0; c < 3; ++c) {
    const double v = static_cast<double>(xyz_sum[c]) / n;
    xyz[c] = std::isfinite(v) && v > 0 ? v : 0.0;
  }
  const double y = xyz[1];
  const double scale = y > 0 ? aces_curve(y) / y : 0.0;
  for (double& v : xyz) v *= scale;
  double rgb[3];
  gamut_walk_srgb(xyz, rgb);
  for (int c = 0; c < 3; ++c) rgba[c] = quantise8(srgb_encode(std::min(rgb[c], 1.0)));
}

Rgba8Image tonemap_film(const Film& film) {
  Rgba8Image img;
  img.width = film.width;
  img.height = film.height;
  img.rgba.assign(film.pixels() * 4, 0);
  const bool ok = film.xyz.size() == film.pixels() * 3 && film.samples.size() == film.pixels();
  if (!ok) return img;
  for (std::size_t p = 0; p < film.pixels(); ++p)
    display_pixel(&film.xyz[p * 3], film.samples[p], &img.rgba[p * 4]);
  return img;
}

Status write_png(const std::string& path, const Rgba8Image& image) {
  return core::write_png_pixels(path, image.width, image.height, core::PixelFormat::kRgba8, image.rgba);
}

Expected<Rgba8Image> read_png(const std::string& path) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&png, path.c_str()))
    return io_error(path + ": cannot read PNG: " + png.message);
  png.format = PNG_FORMAT_RGBA;
  Rgba8Image img;
  img.width = png.width;
  img.height = png.height;
  img.rgba.resize(PNG_IMAGE_SIZE(png));
  if (!png_image_finish_read(&png, nullptr, img.rgba.data(), 0, nullptr)) {
    const std::string why = png.message;
    png_image_free(&png);
    return io_error(path + ": cannot read PNG: " + why);
  }
  return img;
}

Status write_exr(const std::string& path, const Film& film, const ExrInfo& info) {
  if (film.width == 0 || film.height == 0 || film.xyz.size() != film.pixels() * 3 ||
      film.samples.size() != film.pixels())
    return invalid_argument(path + ": cannot write EXR: film buffers do not match " +
                            std::to_string(film.width) + "x" + std::to_string(film.height));
  // Encoded in memory, then written atomically (a unique temporary beside the target, fsync, rename), so readers
  // (farm merges) never see a half-written file and a failed write leaves the old one.
  MemoryOStream encoded;
  try {
    Imf::Header header(static_cast<int>(film.width), static_cast<int>(film.height));
    header.compression() = Imf::ZIP_COMPRESSION;
    header.channels().insert("X", Imf::Channel(Imf::FLOAT));
    header.channels().insert("Y", Imf::Channel(Imf::FLOAT));
    header.channels().insert("Z", Imf::Channel(Imf::FLOAT));
    header.channels().insert("N", Imf::Channel(Imf::UINT));
    header.insert(kAttrFirstSample, Imf::StringAttribute(std::to_string(info.first_sample)));
    header.insert(kAttrSamples, Imf::StringAttribute(std::to_string(info.samples)));
    header.insert(kAttrNonfinite, Imf::StringAttribute(std::to_string(info.nonfinite)));
    if (!info.scene_json.empty()) header.insert(kAttrScene, Imf::StringAttribute(info.scene_json));
    const std::size_t row_f = sizeof(float) * 3 * film.width;
    char* xyz = reinterpret_cast<char*>(const_cast<float*>(film.xyz.data()));
    char* n = reinterpret_cast<char*>(const_cast<std::uint32_t*>(film.samples.data()));
    Imf::FrameBuffer fb;
    fb.insert("X", Imf::Slice(Imf::FLOAT, xyz, sizeof(float) * 3, row_f));
    fb.insert("Y", Imf::Slice(Imf::FLOAT, xyz + sizeof(float), sizeof(float) * 3, row_f));
    fb.insert("Z", Imf::Slice(Imf::FLOAT, xyz + 2 * sizeof(float), sizeof(float) * 3, row_f));
    fb.insert("N", Imf::Slice(Imf::UINT, n, sizeof(std::uint32_t), sizeof(std::uint32_t) * film.width));
    {
      Imf::OutputFile file(encoded, header);
      file.setFrameBuffer(fb);
      file.writePixels(static_cast<int>(film.height));
    }
  } catch (const std::exception& e) {
    return io_error(path + ": cannot write EXR: " + e.what());
  }
  if (Status st = core::write_file_atomic(path, encoded.bytes()); !st.ok()) {
    std::string rest = st.what();  // "<path>: <step>: <OS error>"
    if (rest.rfind(path + ": ", 0) == 0) rest.erase(0, path.size() + 2);
    return Status(st.code(), path + ": cannot write EXR: " + rest);
  }
  return {};
}

namespace {

bool parse_u64_attr(const Imf::Header& h, const char* name, std::uint64_t& out) {
  const auto* a = h.findTypedAttribute<Imf::StringAttribute>(name);
  if (!a) return true;  // optional
  const std::string& s = a->value();
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace

Expected<ExrFilm> read_exr(const std::string& path) {
  ExrFilm out;
  try {
    Imf::InputFile file(path.c_str());
    const Imf::Header& h = file.header();
    const auto dw = h.dataWindow();
    if (dw.min.x != 0 || dw.min.y != 0)
      return io_error(path + ": EXR data window must start at (0,0), got (" + std::to_string(dw.min.x) + "," +
                      std::to_string(dw.min.y) + ")");
    const auto width = static_cast<std::uint32_t>(dw.max.x - dw.min.x + 1);
    const auto height = static_cast<std::uint32_t>(dw.max.y - dw.min.y + 1);
    const struct {
      const char* name;
      Imf::PixelType type;
    } needed[] = {{"X", Imf::FLOAT}, {"Y", Imf::FLOAT}, {"Z", Imf::FLOAT}, {"N", Imf::UINT}};
    for (const auto& c : needed) {
      const Imf::Channel* ch = h.channels().findChannel(c.name);
      if (!ch) return io_error(path + ": EXR has no channel " + c.name + " (not a facetrace sums file?)");
      if (ch->type != c.type)
        return io_error(path + ": EXR channel " + c.name + " has type " + std::to_string(ch->type) +
                        ", expected " + (c.type == Imf::FLOAT ? "FLOAT" : "UINT"));
    }
    if (!parse_u64_attr(h, kAttrFirstSample, out.info.first_sample) ||
        !parse_u64_attr(h, kAttrSamples, out.info.samples) ||
        !parse_u64_attr(h, kAttrNonfinite, out.info.nonfinite))
      return io_error(path + ": EXR facetrace.* attribute is not a decimal integer");
    if (const auto* a = h.findTypedAttribute<Imf::StringAttribute>(kAttrScene))
      out.info.scene_json = a->value();
    out.film = Film(width, height);
    out.film.nonfinite = out.info.nonfinite;
    const std::size_t row_f = sizeof(float) * 3 * width;
    char* xyz = reinterpret_cast<char*>(out.film.xyz.data());
    char* n = reinterpret_cast<char*>(out.film.samples.data());
    Imf::FrameBuffer fb;
    fb.insert("X", Imf::Slice(Imf::FLOAT, xyz, sizeof(float) * 3, row_f));
    fb.insert("Y", Imf::Slice(Imf::FLOAT, xyz + sizeof(float), sizeof(float) * 3, row_f));
    fb.insert("Z", Imf::Slice(Imf::FLOAT, xyz + 2 * sizeof(float), sizeof(float) * 3, row_f));
    fb.insert("N", Imf::Slice(Imf::UINT, n, sizeof(std::uint32_t), sizeof(std::uint32_t) * width));
    file.setFrameBuffer(fb);
    file.readPixels(dw.min.y, dw.max.y);
  } catch (const std::exception& e) {
    return io_error(path + ": cannot read EXR: " + e.what());
  }
  return out;
}

}  // namespace facetrace::tracer
