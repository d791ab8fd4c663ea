/// @file
/// HDR environment maps, the input side (env_map.h; docs/design/tracer.md §6.1): a small Radiance RGBE reader
/// and OpenEXR through its library, both from the bytes whose sha256 was checked.
#include "facetrace/tracer/env_map.h"

#include <ImfChannelList.h>
#include <ImfFrameBuffer.h>
#include <ImfHeader.h>
#include <ImfIO.h>
#include <ImfInputFile.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string_view>

#include "facetrace/core/file.h"
#include "facetrace/core/sha256.h"
#include "facetrace/core/text.h"
#include "facetrace/tracer/scene.h"

namespace facetrace::tracer {
namespace {

Status bad(const std::string& what, const std::string& problem) {
  return invalid_argument(core::printable(what) + ": " + problem);
}

/// The map's size against the limits (env_map.h, docs/limits.md), before anything is allocated.
Status check_size(const std::string& what, std::int64_t w, std::int64_t h, std::uint64_t max_texels) {
  if (w < 1 || h < 1 || w > kMaxEnvMapSide || h > kMaxEnvMapSide)
    return bad(what, "environment map of " + std::to_string(w) + "x" + std::to_string(h) +
                         " texels: each side must be in [1, " + std::to_string(kMaxEnvMapSide) + "]");
  if (static_cast<std::uint64_t>(w) * static_cast<std::uint64_t>(h) > max_texels)
    return bad(what, "environment map of " + std::to_string(w) + "x" + std::to_string(h) +
                         " texels exceeds " + std::to_string(max_texels) + " texels");
  return {};
}

/// Every texel finite and ≥ 0 (what shading and importance sampling need), else the first bad one and where.
Status check_texels(const std::string& what, const EnvMap& m) {
  for (std::size_t i = 0; i < m.rgb.size(); ++i) {
    const float v = m.rgb[i];
    if (std::isfinite(v) && v >= 0.0f) continue;
    const std::size_t t = i / 3;
    char where[160];
    std::snprintf(where, sizeof where, "texel (%zu, %zu) channel %c is %g: radiance must be finite and >= 0",
                  t % m.width, t / m.width, "RGB"[i % 3], static_cast<double>(v));
    return bad(what, where);
  }
  return {};
}

// ---- Radiance RGBE -------------------------------------------------------------------------------------------

/// One header line (without its '\n') from `bytes` at `pos`; false at the end of the bytes or past 4096 bytes.
bool next_line(std::span<const std::uint8_t> bytes, std::size_t& pos, std::string& line) {
  line.clear();
  while (pos < bytes.size()) {
    const char c = static_cast<char>(bytes[pos++]);
    if (c == '\n') return true;
    if (line.size() >= 4096) return false;
    line.push_back(c);
  }
  return false;
}

float rgbe_channel(std::uint8_t m, std::uint8_t e) {
  return e == 0 ? 0.0f : std::ldexp(static_cast<float>(m), static_cast<int>(e) - 136);
}

}  // namespace

Expected<EnvMap> decode_rgbe(std::span<const std::uint8_t> bytes, const std::string& what,
                             std::uint64_t max_texels) {
  std::size_t pos = 0;
  std::string line;
  if (!next_line(bytes, pos, line) || line.rfind("#?", 0) != 0)
    return bad(what, "not a Radiance picture (it must start with \"#?RADIANCE\" or \"#?RGBE\")");
  double exposure = 1.0;
  for (;;) {
    if (!next_line(bytes, pos, line)) return bad(what, "Radiance header ends before its blank line");
    if (line.empty()) break;
    if (line[0] == '#') continue;  // a comment
    if (line.rfind("FORMAT=", 0) == 0) {
      const std::string f = line.substr(7);
      if (f != "32-bit_rle_rgbe")
        return bad(what,
                   "Radiance FORMAT=" + core::printable(f, 64) + " is not supported (only 32-bit_rle_rgbe)");
    } else if (line.rfind("EXPOSURE=", 0) == 0) {
      // The picture was multiplied by each EXPOSURE given; the radiance is the texel over their product.
      char* end = nullptr;
      const double e = std::strtod(line.c_str() + 9, &end);
      if (end == line.c_str() + 9 || !std::isfinite(e) || !(e > 0.0))
        return bad(what,
                   "Radiance EXPOSURE=" + core::printable(line.substr(9), 64) + " is not a positive number");
      exposure *= e;
    }
  }
  if (!next_line(bytes, pos, line)) return bad(what, "Radiance picture has no resolution line");
  long long h = 0, w = 0;
  char tail = 0;
  if (std::sscanf(line.c_str(), "-Y %lld +X %lld%c", &h, &w, &tail) != 2)
    return bad(what, "Radiance resolution \"" + core::printable(line, 64) +
                         "\" is not supported (only the standard \"-Y <height> +X <width>\")");
  FT_TRY(check_size(what, w, h, max_texels));
  // The fewest bytes a row can take (flat: 4 per texel; in runs: 4 + per channel 2 per 127 texels), so that a
  // header claiming a huge picture in a short file is refused before anything is allocated.
  const std::uint64_t rle_row = 4 + 4 * 2 * ((static_cast<std::uint64_t>(w) + 126) / 127);
  const std::uint64_t min_row = w >= 8 && w <= 0x7fff ? std::min<std::uint64_t>(rle_row, 4ull * w) : 4ull * w;
  if ((bytes.size() - pos) / min_row < static_cast<std::uint64_t>(h))
    return bad(what, "Radiance picture of " + std::to_string(w) + "x" + std::to_string(h) +
                         " needs at least " + std::to_string(min_row * static_cast<std::uint64_t>(h)) +
                         " bytes of scanlines, the file has " + std::to_string(bytes.size() - pos) +
                         " (truncated?)");
  EnvMap m;
  m.width = static_cast<std::uint32_t>(w);
  m.height = static_cast<std::uint32_t>(h);
  m.rgb.resize(static_cast<std::size_t>(w) * static_cast<std::size_t>(h) * 3);
  const float scale = static_cast<float>(1.0 / exposure);
  std::vector<std::uint8_t> row(static_cast<std::size_t>(w) * 4);  // r g b e per texel
  const auto truncated = [&](long long y) {
    return bad(what, "Radiance scanline " + std::to_string(y) + " of " + std::to_string(h) + " is truncated");
  };
  for (long long y = 0; y < h; ++y) {
    const bool rle = w >= 8 && w <= 0x7fff && pos + 4 <= bytes.size() && bytes[pos] == 2 &&
                     bytes[pos + 1] == 2 && (bytes[pos + 2] & 0x80) == 0;
    if (!rle) {  // flat: r g b e per texel
      if (bytes.size() - pos < row.size()) return truncated(y);
      std::memcpy(row.data(), bytes.data() + pos, row.size());
      pos += row.size();
    } else {
      if ((static_cast<long long>(bytes[pos + 2]) << 8 | bytes[pos + 3]) != w)
        return bad(what, "Radiance scanline " + std::to_string(y) + " gives a width other than " +
                             std::to_string(w));
      pos += 4;
      for (int c = 0; c < 4; ++c) {  // each channel of the row in runs
        long long x = 0;
        while (x < w) {
          if (pos >= bytes.size()) return truncated(y);
          const std::uint8_t n = bytes[pos++];
          if (n > 128) {  // a run of n - 128 copies of the next byte
            const long long count = n - 128;
            if (x + count > w || pos >= bytes.size())
              return x + count > w
                         ? bad(what, "Radiance scanline " + std::to_string(y) + " runs past its width")
                         : truncated(y);
            const std::uint8_t v = bytes[pos++];
            for (long long i = 0; i < count; ++i) row[static_cast<std::size_t>(x + i) * 4 + c] = v;
            x += count;
          } else {  // n literal bytes
            if (n == 0 || x + n > w)
              return bad(what, "Radiance scanline " + std::to_string(y) + " has a run of " +
                                   std::to_string(n) + " that " +
                                   (n == 0 ? "is empty" : "runs past its width"));
            if (bytes.size() - pos < n) return truncated(y);
            for (int i = 0; i < n; ++i) row[static_cast<std::size_t>(x + i) * 4 + c] = bytes[pos++];
            x += n;
          }
        }
      }
    }
    float* out = m.rgb.data() + static_cast<std::size_t>(y) * static_cast<std::size_t>(w) * 3;
    for (long long x = 0; x < w; ++x) {
      const std::uint8_t* t = row.data() + x * 4;
      for (int c = 0; c < 3; ++c) out[x * 3 + c] = rgbe_channel(t[c], t[3]) * scale;
    }
  }
  FT_TRY(check_texels(what, m));  // an EXPOSURE below 1 can overflow a float
  return m;
}

namespace {

/// OpenEXR's input stream over the bytes already read (and hashed): the file is never read a second time.
class MemoryIStream final : public Imf::IStream {
 public:
  MemoryIStream(std::span<const std::uint8_t> bytes, const std::string& name)
      : Imf::IStream(name.c_str()), bytes_(bytes) {}
  bool read(char c[], int n) override {
    if (n < 0 || static_cast<std::uint64_t>(n) > bytes_.size() - pos_)
      throw std::runtime_error("unexpected end of file");  // Imf::IStream's contract: throw at the end
    std::memcpy(c, bytes_.data() + pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::uint64_t>(n);
    return pos_ < bytes_.size();
  }
  std::uint64_t tellg() override { return pos_; }
  void seekg(std::uint64_t pos) override { pos_ = std::min<std::uint64_t>(pos, bytes_.size()); }

 private:
  std::span<const std::uint8_t> bytes_;
  std::uint64_t pos_ = 0;
};

/// Walks the EXR headers (every part's) before OpenEXR reads them: an attribute that declares more bytes than
/// the file has left, or a data window past the limits, is refused here. OpenEXR 3.1 allocates what a header
/// declares before it reads it (a string attribute of 2 GB, a line offset table for 2^31 rows), so a few
/// hostile bytes would otherwise cost gigabytes and seconds (found by the hdr fuzzer).
Status check_exr_headers(std::span<const std::uint8_t> b, const std::string& what, std::uint64_t max_texels) {
  if (b.size() < 8) return bad(what, "EXR file is shorter than its 8-byte preamble");
  const bool multipart = (b[5] & 0x10) != 0;  // version flags (bits 8..31); bit 12: multi-part
  std::size_t pos = 8;
  const auto cstring = [&](std::string& out) {
    out.clear();
    while (pos < b.size() && b[pos] != 0) {
      if (out.size() >= 255) return false;
      out.push_back(static_cast<char>(b[pos++]));
    }
    if (pos >= b.size()) return false;
    ++pos;  // the terminating null
    return true;
  };
  const auto i32 = [&](std::size_t at) {
    std::int32_t v = 0;
    std::memcpy(&v, b.data() + at, 4);
    return v;
  };
  std::string name, type;
  for (int part = 0;; ++part) {
    if (part >= 1024) return bad(what, "EXR file has more than 1024 parts");
    for (;;) {
      if (!cstring(name)) return bad(what, "EXR header of part " + std::to_string(part) + " is truncated");
      if (name.empty()) break;  // the end of this part's header
      if (!cstring(type) || b.size() - pos < 4)
        return bad(what, "EXR header attribute " + core::printable(name, 64) + " is truncated");
      const std::int32_t size = i32(pos);
      pos += 4;
      if (size < 0 || static_cast<std::uint64_t>(size) > b.size() - pos)
        return bad(what, "EXR header attribute " + core::printable(name, 64) + " declares " +
                             std::to_string(size) + " bytes, the file has " + std::to_string(b.size() - pos) +
                             " left");
      if (name == "channels" && type == "chlist") {
        // Each channel: name, null, pixel type (int32), pLinear and 3 reserved bytes, x and y sampling (int32).
        // OpenEXR sizes buffers by the sampling before it checks it against the data window: only full-resolution
        // channels (sampling 1) are read here.
        std::size_t c = pos;
        const std::size_t end = pos + static_cast<std::size_t>(size);
        while (c < end && b[c] != 0) {
          const std::size_t n0 = c;
          while (c < end && b[c] != 0) ++c;
          if (end - c < 17) return bad(what, "EXR channel list is truncated");
          const std::string channel(reinterpret_cast<const char*>(b.data() + n0), c - n0);
          const std::int32_t xs = i32(c + 9), ys = i32(c + 13);
          if (xs != 1 || ys != 1)
            return bad(what, "EXR channel " + core::printable(channel, 64) + " is subsampled (" +
                                 std::to_string(xs) + " x " + std::to_string(ys) +
                                 "): environment maps need full-resolution channels");
          c += 17;
        }
      }
      if (name == "dataWindow" && type == "box2i" && size == 16) {
        const std::int64_t w = std::int64_t{i32(pos + 8)} - i32(pos) + 1,
                           h = std::int64_t{i32(pos + 12)} - i32(pos + 4) + 1;
        FT_TRY(check_size(what, w, h, max_texels));
      }
      pos += static_cast<std::size_t>(size);
    }
    if (!multipart) return {};
    if (pos >= b.size()) return bad(what, "EXR headers are truncated");
    if (b[pos] == 0) return {};  // an empty header ends the list
  }
}

Expected<EnvMap> decode_exr(std::span<const std::uint8_t> bytes, const std::string& what,
                            std::uint64_t max_texels) {
  FT_TRY(check_exr_headers(bytes, what, max_texels));
  EnvMap m;
  try {
    MemoryIStream stream(bytes, what);
    Imf::InputFile file(stream);
    const Imf::Header& h = file.header();
    const auto dw = h.dataWindow();
    const std::int64_t w = std::int64_t{dw.max.x} - dw.min.x + 1, ht = std::int64_t{dw.max.y} - dw.min.y + 1;
    FT_TRY(check_size(what, w, ht, max_texels));
    for (const char* c : {"R", "G", "B"})
      if (!h.channels().findChannel(c))
        return bad(
            what, std::string("EXR environment map has no ") + c + " channel (an RGB or RGBA map is needed)");
    m.width = static_cast<std::uint32_t>(w);
    m.height = static_cast<std::uint32_t>(ht);
    m.rgb.resize(static_cast<std::size_t>(w) * static_cast<std::size_t>(ht) * 3);
    Imf::FrameBuffer fb;
    for (int c = 0; c < 3; ++c)
      fb.insert(std::string(1, "RGB"[c]),
                Imf::Slice::Make(Imf::FLOAT, m.rgb.data() + c, dw, sizeof(float) * 3,
                                 sizeof(float) * 3 * static_cast<std::size_t>(w)));
    file.setFrameBuffer(fb);
    file.readPixels(dw.min.y, dw.max.y);
  } catch (const std::exception& e) {
    return bad(what, std::string("cannot read EXR environment map: ") + e.what());
  }
  FT_TRY(check_texels(what, m));
  return m;
}

}  // namespace

Expected<EnvMap> load_env_map(const std::string& path, const std::string& sha256_hex) {
  auto bytes = core::read_file(path, kMaxEnvMapFileBytes);
  if (!bytes) return bytes.status();
  const std::string what = "environment map " + path;
  if (!sha256_hex.empty()) {
    std::string want = sha256_hex;
    std::transform(want.begin(), want.end(), want.begin(), [](unsigned char c) { return std::tolower(c); });
    const std::string got = core::sha256_hex(*bytes);
    if (got != want)
      return bad(what, "sha256 is " + got + ", the scene names " + core::printable(sha256_hex, 80));
  }
  return decode_env_map(*bytes, what);
}

Expected<EnvMap> decode_env_map(std::span<const std::uint8_t> b, const std::string& what,
                                std::uint64_t max_texels) {
  if (b.size() >= 2 && b[0] == '#' && b[1] == '?') return decode_rgbe(b, what, max_texels);
  if (b.size() >= 4 && b[0] == 0x76 && b[1] == 0x2f && b[2] == 0x31 && b[3] == 0x01)
    return decode_exr(b, what, max_texels);
  return bad(what, "not a Radiance .hdr or an OpenEXR file");
}

// ---- Shading tables (docs/design/tracer.md §6.1) -------------------------------------------------------------

namespace {
constexpr double kPiD = 3.14159265358979323846;
}  // namespace

Expected<std::shared_ptr<const EnvLight>> make_env_light(EnvMap map) {
  const std::size_t w = map.width, h = map.height;
  if (w == 0 || h == 0)
    return invalid_argument("environment map: empty (" + std::to_string(w) + "x" + std::to_string(h) + ")");
  if (map.rgb.size() != w * h * 3)
    return invalid_argument("environment map: " + std::to_string(map.rgb.size()) + " floats for " +
                            std::to_string(w) + "x" + std::to_string(h) + " texels (3 per texel expected)");
  auto light = std::make_shared<EnvLight>();
  light->row_cos.resize(h + 1);
  for (std::size_t y = 0; y <= h; ++y)
    light->row_cos[y] = y == 0   ? 1.0f
                        : y == h ? -1.0f
                                 : static_cast<float>(std::cos(kPiD * double(y) / double(h)));
  // Weight of a texel: its Rec. 709 luminance × its solid angle (2π/W)(cos θ_top − cos θ_bottom), computed in
  // double from the same float row edges the sampler uses; a black map falls back to the solid angle alone.
  std::vector<double> weight(w * h);
  double total = 0.0, solid_total = 0.0;
  for (std::size_t y = 0; y < h; ++y) {
    const double solid = 2.0 * kPiD / double(w) * (double(light->row_cos[y]) - double(light->row_cos[y + 1]));
    for (std::size_t x = 0; x < w; ++x) {
      const float* t = &map.rgb[(y * w + x) * 3];
      const double lum = 0.2126729 * t[0] + 0.7151522 * t[1] + 0.0721750 * t[2];  // Y row of M₇₀₉
      weight[y * w + x] = lum * solid;
      total += lum * solid;
      solid_total += solid;
    }
  }
  light->luminance_power = total;
  if (!(total > 0.0)) {
    for (std::size_t y = 0; y < h; ++y) {
      const double solid =
          2.0 * kPiD / double(w) * (double(light->row_cos[y]) - double(light->row_cos[y + 1]));
      for (std::size_t x = 0; x < w; ++x) weight[y * w + x] = solid;
    }
    total = solid_total;
  }
  light->row_cdf.resize(h + 1);
  light->col_cdf.resize(h * (w + 1));
  double run = 0.0;
  light->row_cdf[0] = 0.0f;
  for (std::size_t y = 0; y < h; ++y) {
    double row = 0.0;
    for (std::size_t x = 0; x < w; ++x) row += weight[y * w + x];
    float* cdf = &light->col_cdf[y * (w + 1)];
    double acc = 0.0;
    cdf[0] = 0.0f;
    for (std::size_t x = 0; x < w; ++x) {
      acc += weight[y * w + x];
      // A black row gets a uniform CDF: it is never drawn (its row probability is 0) but stays well formed.
      cdf[x + 1] = x + 1 == w ? 1.0f : static_cast<float>(row > 0.0 ? acc / row : double(x + 1) / double(w));
    }
    run += row;
    light->row_cdf[y + 1] = y + 1 == h ? 1.0f : static_cast<float>(run / total);
  }
  light->map = std::move(map);
  return std::shared_ptr<const EnvLight>(std::move(light));
}

Status load_environment_light(Scene& scene) {
  auto map = load_env_map(scene.environment_map, scene.environment_map_sha256);
  if (!map) return map.status();
  auto light = make_env_light(std::move(map).value());
  if (!light) return light.status().with_context(core::printable(scene.environment_map));
  scene.environment_light = std::move(light).value();
  return {};
}

}  // namespace facetrace::tracer
