/// @file
/// HDR environment maps, the input side (docs/design/tracer.md §6.1): an equirectangular map of linear RGB
/// radiance read from a Radiance `.hdr` (RGBE) or an OpenEXR file, checked against the sha256 the scene names.
/// make_env_light adds the importance-sampling tables the CPU tracer shades with (texel spectra and NEE live in
/// the shared physics, src/tracer/physics/hdr_environment.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "facetrace/core/status.h"

namespace facetrace::tracer {

/// Limits (docs/limits.md): the file, and each side and the texel count of the decoded map.
constexpr std::uint64_t kMaxEnvMapFileBytes = 1ull << 30;  ///< 1 GiB
constexpr std::uint32_t kMaxEnvMapSide = 32768;
constexpr std::uint64_t kMaxEnvMapTexels = 1ull << 26;  ///< 67 108 864 (768 MiB of float RGB)

/// A decoded map: `rgb` row-major from the file's top row, three floats per texel, every value finite and ≥ 0,
/// linear Rec. 709 radiance. Texel (x, y) covers azimuth 2π·[x, x+1)/W from +Z towards +X and polar angle
/// π·[y, y+1)/H from +Y (docs/design/tracer.md §6.1).
struct EnvMap {
  std::uint32_t width = 0, height = 0;
  std::vector<float> rgb;
};

/// Decodes a Radiance RGBE picture (`#?RADIANCE` or `#?RGBE`, `FORMAT=32-bit_rle_rgbe`, the standard `-Y H +X W`
/// orientation; flat or run-length-encoded scanlines). A texel (r, g, b, e) is m·2^(e−136) per channel, 0 where
/// e = 0 (Ward's rgbe.c), divided by the product of the header's EXPOSURE values. `what` names the source in
/// messages. Errors: kInvalidArgument naming `what` and the problem (not a Radiance file, a header line, an
/// unsupported format or orientation, a size past the limits or larger than the bytes could hold, a truncated
/// or corrupt scanline and its row).
Expected<EnvMap> decode_rgbe(std::span<const std::uint8_t> bytes, const std::string& what,
                             std::uint64_t max_texels = kMaxEnvMapTexels);

/// Decodes `bytes` by their magic: Radiance (`#?`, decode_rgbe) or OpenEXR (0x762f3101: the R, G, B channels of
/// its first part, any pixel type, read as float). `max_texels` lowers the texel limit (the fuzz target's).
/// Errors: kInvalidArgument naming `what` (an unknown format, a decode error, a map past the limits, a NaN,
/// infinite or negative texel and where).
Expected<EnvMap> decode_env_map(std::span<const std::uint8_t> bytes, const std::string& what,
                                std::uint64_t max_texels = kMaxEnvMapTexels);

/// Reads the map at `path`: a regular file of at most kMaxEnvMapFileBytes whose sha256 (hex, either case) must
/// equal `sha256_hex` when that is not empty, then decode_env_map(). Errors: kIo (unreadable, naming the path
/// and the OS error), kInvalidArgument (too large, a sha256 mismatch naming both hashes, or decode_env_map's).
Expected<EnvMap> load_env_map(const std::string& path, const std::string& sha256_hex);

/// A map ready to shade (docs/design/tracer.md §6.1): the decoded texels and the tables that importance-sample
/// them in proportion to luminance × solid angle. Built once per map by make_env_light and shared, immutable,
/// by every copy of a scene (Scene::environment_light); thread-safe to read.
struct EnvLight {
  EnvMap map;
  std::vector<float> row_cdf;  ///< height + 1 entries from 0 to 1: the marginal CDF over rows
  std::vector<float> col_cdf;  ///< height × (width + 1): each row's conditional CDF over its columns
  std::vector<float> row_cos;  ///< height + 1: cos θ of the row edges, cos(π·y/height)
  double luminance_power = 0;  ///< ∫ Y(ω) dω over the sphere (Rec. 709 luminance × sr), from the texels
};

/// Builds the sampling tables of `map` (texels as decode_env_map leaves them). A map that is black everywhere is
/// sampled uniformly in solid angle. Errors: kInvalidArgument (an empty map, or `rgb` not 3·width·height floats).
Expected<std::shared_ptr<const EnvLight>> make_env_light(EnvMap map);

struct Scene;

/// Reads scene.environment_map, checked against scene.environment_map_sha256 (load_env_map), and attaches it
/// with its tables as scene.environment_light: what the scene reader does for `"environment": {"hdr": …}`, for
/// programs that build a Scene themselves. Errors: those of load_env_map and make_env_light.
Status load_environment_light(Scene& scene);

}  // namespace facetrace::tracer
