/// @file
/// Display path (docs/design/tracer.md §11.1) and linear EXR output (§11.2).
#include "facetrace/tracer/output.h"

#include <ImfChannelList.h>
#include <ImfChromaticities.h>
#include <ImfDoubleAttribute.h>
#include <ImfFrameBuffer.h>
#include <ImfHeader.h>
#include <ImfIO.h>
#include <ImfInputPart.h>
#include <ImfIntAttribute.h>
#include <ImfMultiPartInputFile.h>
#include <ImfMultiPartOutputFile.h>
#include <ImfOutputPart.h>
#include <ImfPartType.h>
#include <ImfStandardAttributes.h>
#include <ImfStringAttribute.h>
#include <png.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <system_error>

#include "facetrace/core/file.h"
#include "facetrace/core/text.h"
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
// Typed attributes (docs/design/tracer.md §11.2), for tools that read EXR metadata without parsing strings.
constexpr const char* kAttrSamplesPerPixel = "samplesPerPixel";  // int
constexpr const char* kAttrFirstSampleTyped = "firstSample";     // double (exact below 2^53)
constexpr const char* kAttrRenderTime = "renderTime";            // double, seconds
constexpr const char* kAttrBuild = "build";                      // string

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
    return io_error(core::printable(path) + ": cannot read PNG: " + png.message);
  png.format = PNG_FORMAT_RGBA;
  Rgba8Image img;
  img.width = png.width;
  img.height = png.height;
  img.rgba.resize(PNG_IMAGE_SIZE(png));
  if (!png_image_finish_read(&png, nullptr, img.rgba.data(), 0, nullptr)) {
    const std::string why = png.message;
    png_image_free(&png);
    return io_error(core::printable(path) + ": cannot read PNG: " + why);
  }
  return img;
}

namespace {

/// The channel names of the sums part: X/Y/Z/N under the layer "sums", so no channel is a bare Z (which
/// compositors read as depth).
constexpr const char* kSumChannels[4] = {"sums.X", "sums.Y", "sums.Z", "sums.N"};
constexpr const char* kSumsPart = "sums";
constexpr const char* kBeautyPart = "beauty";

/// The typed attributes every part carries (docs/design/tracer.md §11.2).
void add_typed_attributes(Imf::Header& h, const ExrInfo& info) {
  h.insert(kAttrSamplesPerPixel, Imf::IntAttribute(static_cast<int>(info.samples)));
  h.insert(kAttrFirstSampleTyped, Imf::DoubleAttribute(static_cast<double>(info.first_sample)));
  h.insert(kAttrRenderTime, Imf::DoubleAttribute(info.render_seconds));
  if (!info.build.empty()) h.insert(kAttrBuild, Imf::StringAttribute(info.build));
  // Rec.709 primaries, D65 white: the beauty part's RGB. A shared attribute of multi-part files, so the sums part
  // carries it too; its channels are named X/Y/Z, not R/G/B, so no reader takes them for RGB.
  Imf::addChromaticities(h, Imf::Chromaticities());
}

}  // namespace

Status write_exr(const std::string& path, const Film& film, const ExrInfo& info) {
  if (film.width == 0 || film.height == 0 || film.xyz.size() != film.pixels() * 3 ||
      film.samples.size() != film.pixels())
    return invalid_argument(core::printable(path) + ": cannot write EXR: film buffers do not match " +
                            std::to_string(film.width) + "x" + std::to_string(film.height));
  if (info.samples > static_cast<std::uint64_t>(std::numeric_limits<int>::max()))
    return invalid_argument(core::printable(path) + ": cannot write EXR: samplesPerPixel " +
                            std::to_string(info.samples) + " does not fit the int attribute");
  // The beauty part: each pixel's average XYZ as linear Rec.709 RGB (same primaries and white as sRGB),
  // unclipped (negative where outside the gamut), 0 where no sample was counted.
  std::vector<float> rgb(film.pixels() * 3, 0.0f);
  for (std::size_t p = 0; p < film.pixels(); ++p) {
    if (film.samples[p] == 0) continue;
    double xyz[3], lin[3];
    for (int c = 0; c < 3; ++c) xyz[c] = static_cast<double>(film.xyz[p * 3 + c]) / film.samples[p];
    xyz_to_linear_srgb(xyz, lin);
    for (int c = 0; c < 3; ++c) rgb[p * 3 + c] = static_cast<float>(lin[c]);
  }
  // Encoded in memory, then written atomically (a unique temporary beside the target, fsync, rename), so readers
  // (farm merges) never see a half-written file and a failed write leaves the old one.
  MemoryOStream encoded;
  try {
    // Part 0 is what a viewer shows first: the beauty. Part 1 holds the raw sums (additive across renders).
    Imf::Header headers[2] = {Imf::Header(static_cast<int>(film.width), static_cast<int>(film.height)),
                              Imf::Header(static_cast<int>(film.width), static_cast<int>(film.height))};
    Imf::Header& beauty = headers[0];
    Imf::Header& sums = headers[1];
    beauty.setName(kBeautyPart);
    sums.setName(kSumsPart);
    for (Imf::Header& h : headers) {
      h.setType(Imf::SCANLINEIMAGE);
      h.compression() = Imf::ZIP_COMPRESSION;
      add_typed_attributes(h, info);
    }
    beauty.channels().insert("R", Imf::Channel(Imf::FLOAT));
    beauty.channels().insert("G", Imf::Channel(Imf::FLOAT));
    beauty.channels().insert("B", Imf::Channel(Imf::FLOAT));
    for (int c = 0; c < 3; ++c) sums.channels().insert(kSumChannels[c], Imf::Channel(Imf::FLOAT));
    sums.channels().insert(kSumChannels[3], Imf::Channel(Imf::UINT));
    sums.insert(kAttrFirstSample, Imf::StringAttribute(std::to_string(info.first_sample)));
    sums.insert(kAttrSamples, Imf::StringAttribute(std::to_string(info.samples)));
    sums.insert(kAttrNonfinite, Imf::StringAttribute(std::to_string(info.nonfinite)));
    if (!info.scene_json.empty()) sums.insert(kAttrScene, Imf::StringAttribute(info.scene_json));

    const std::size_t row_f = sizeof(float) * 3 * film.width;
    char* xyz = reinterpret_cast<char*>(const_cast<float*>(film.xyz.data()));
    char* n = reinterpret_cast<char*>(const_cast<std::uint32_t*>(film.samples.data()));
    char* lin = reinterpret_cast<char*>(rgb.data());
    Imf::FrameBuffer beauty_fb, sums_fb;
    for (int c = 0; c < 3; ++c) {
      beauty_fb.insert(std::string(1, "RGB"[c]), Imf::Slice(Imf::FLOAT, lin + c * sizeof(float), sizeof(float) * 3, row_f));
      sums_fb.insert(kSumChannels[c], Imf::Slice(Imf::FLOAT, xyz + c * sizeof(float), sizeof(float) * 3, row_f));
    }
    sums_fb.insert(kSumChannels[3], Imf::Slice(Imf::UINT, n, sizeof(std::uint32_t), sizeof(std::uint32_t) * film.width));
    {
      Imf::MultiPartOutputFile file(encoded, headers, 2);
      Imf::OutputPart beauty_out(file, 0);
      beauty_out.setFrameBuffer(beauty_fb);
      beauty_out.writePixels(static_cast<int>(film.height));
      Imf::OutputPart sums_out(file, 1);
      sums_out.setFrameBuffer(sums_fb);
      sums_out.writePixels(static_cast<int>(film.height));
    }
  } catch (const std::exception& e) {
    return io_error(core::printable(path) + ": cannot write EXR: " + e.what());
  }
  if (Status st = core::write_file_atomic(path, encoded.bytes()); !st.ok()) {
    std::string rest = st.what();  // "<path>: <step>: <OS error>"
    if (rest.rfind(core::printable(path) + ": ", 0) == 0) rest.erase(0, core::printable(path).size() + 2);
    return Status(st.code(), core::printable(path) + ": cannot write EXR: " + rest);
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
    Imf::MultiPartInputFile file(path.c_str());
    // The sums part by name; a single-part file of an earlier facetrace holds bare X/Y/Z/N channels.
    int part = -1;
    for (int i = 0; i < file.parts(); ++i)
      if (file.header(i).hasName() && file.header(i).name() == kSumsPart) part = i;
    const bool legacy = part < 0 && file.parts() == 1 && file.header(0).channels().findChannel("X") != nullptr;
    if (legacy) part = 0;
    if (part < 0)
      return io_error(core::printable(path) + ": EXR has no \"sums\" part (not a facetrace sums file?)");
    const Imf::Header& h = file.header(part);
    const auto dw = h.dataWindow();
    if (dw.min.x != 0 || dw.min.y != 0)
      return io_error(core::printable(path) + ": EXR data window must start at (0,0), got (" +
                      std::to_string(dw.min.x) + "," + std::to_string(dw.min.y) + ")");
    const auto width = static_cast<std::uint32_t>(dw.max.x - dw.min.x + 1);
    const auto height = static_cast<std::uint32_t>(dw.max.y - dw.min.y + 1);
    const char* legacy_names[4] = {"X", "Y", "Z", "N"};
    const char* const* names = legacy ? legacy_names : kSumChannels;
    for (int c = 0; c < 4; ++c) {
      const Imf::PixelType type = c < 3 ? Imf::FLOAT : Imf::UINT;
      const Imf::Channel* ch = h.channels().findChannel(names[c]);
      if (!ch)
        return io_error(core::printable(path) + ": EXR has no channel " + names[c] +
                        " (not a facetrace sums file?)");
      if (ch->type != type)
        return io_error(core::printable(path) + ": EXR channel " + names[c] + " has type " +
                        std::to_string(ch->type) + ", expected " + (type == Imf::FLOAT ? "FLOAT" : "UINT"));
    }
    if (!parse_u64_attr(h, kAttrFirstSample, out.info.first_sample) ||
        !parse_u64_attr(h, kAttrSamples, out.info.samples) ||
        !parse_u64_attr(h, kAttrNonfinite, out.info.nonfinite))
      return io_error(core::printable(path) + ": EXR facetrace.* attribute is not a decimal integer");
    if (const auto* a = h.findTypedAttribute<Imf::StringAttribute>(kAttrScene)) out.info.scene_json = a->value();
    if (const auto* a = h.findTypedAttribute<Imf::DoubleAttribute>(kAttrRenderTime)) out.info.render_seconds = a->value();
    if (const auto* a = h.findTypedAttribute<Imf::StringAttribute>(kAttrBuild)) out.info.build = a->value();
    out.film = Film(width, height);
    out.film.nonfinite = out.info.nonfinite;
    const std::size_t row_f = sizeof(float) * 3 * width;
    char* xyz = reinterpret_cast<char*>(out.film.xyz.data());
    char* n = reinterpret_cast<char*>(out.film.samples.data());
    Imf::FrameBuffer fb;
    for (int c = 0; c < 3; ++c)
      fb.insert(names[c], Imf::Slice(Imf::FLOAT, xyz + c * sizeof(float), sizeof(float) * 3, row_f));
    fb.insert(names[3], Imf::Slice(Imf::UINT, n, sizeof(std::uint32_t), sizeof(std::uint32_t) * width));
    Imf::InputPart in(file, part);
    in.setFrameBuffer(fb);
    in.readPixels(dw.min.y, dw.max.y);
  } catch (const std::exception& e) {
    return io_error(core::printable(path) + ": cannot read EXR: " + e.what());
  }
  return out;
}

}  // namespace facetrace::tracer
