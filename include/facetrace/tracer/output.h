/// @file
/// Tracer output (docs/design/tracer.md §11): the display path (average, luminance-only ACES, gamut walk, sRGB curve,
/// 8-bit PNG) and the linear EXR of raw XYZ sums plus per-pixel sample counts (additive across renders).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "facetrace/core/status.h"
#include "facetrace/tracer/film.h"

namespace facetrace::tracer {

// ---- display primitives (docs/design/tracer.md §11.1), exposed for tests ---------------------------------------------

/// ACES filmic curve on luminance: f(Y) = Y(2.51Y + 0.03)/(Y(2.43Y + 0.59) + 0.14). f(0) = 0.
double aces_curve(double y);

/// CIE XYZ (D65-relative) → linear sRGB (IEC 61966-2-1 primaries, D65 white).
void xyz_to_linear_srgb(const double xyz[3], double rgb[3]);

/// Out-of-gamut handling: moves the chromaticity radially toward D65 white in xyY, at constant Y, to the
/// first point where every linear sRGB channel is ≥ 0; writes those channels to `rgb` (exact zeros at the
/// boundary; not yet clipped above 1). In-gamut colours are unchanged. Y ≤ 0 gives black.
void gamut_walk_srgb(const double xyz[3], double rgb[3]);

/// The exact sRGB transfer curve: 12.92x for x ≤ 0.0031308, else 1.055x^(1/2.4) − 0.055.
double srgb_encode(double linear);

/// ⌊x·255 + 0.5⌋ of x clamped to [0, 1].
std::uint8_t quantise8(double encoded);

/// One pixel of the display path: average XYZ (sum / n) → ACES on Y → gamut walk → clip → sRGB → 8 bit.
/// n = 0 gives opaque black. Writes RGBA (alpha 255).
void display_pixel(const float xyz_sum[3], std::uint32_t n, std::uint8_t rgba[4]);

// ---- images ----------------------------------------------------------------------------------------------

/// An 8-bit RGBA image, row-major, 4 bytes per pixel.
struct Rgba8Image {
  std::uint32_t width = 0;
  std::uint32_t height = 0;
  std::vector<std::uint8_t> rgba;
};

/// Applies display_pixel() to every pixel of `film`. A film whose buffers do not match its size gives black.
Rgba8Image tonemap_film(const Film& film);

/// Writes an sRGB-tagged RGBA8 PNG with libpng. Errors: kInvalidArgument (size mismatch), kIo naming `path`.
Status write_png(const std::string& path, const Rgba8Image& image);

/// Reads any PNG as RGBA8 (libpng's simplified API). Errors: kIo naming `path`.
Expected<Rgba8Image> read_png(const std::string& path);

// ---- linear EXR (docs/design/tracer.md §11.2) --------------------------------------------------------------------

/// Header facts stored with the sums.
struct ExrInfo {
  std::uint64_t first_sample = 0;  ///< the sample range [first_sample, first_sample + samples)
  std::uint64_t samples = 0;       ///< samples per pixel in that range ("N in the header")
  std::uint64_t nonfinite = 0;     ///< Film::nonfinite
  std::string scene_json;          ///< optional: the scene, as scene_to_json() wrote it
  double render_seconds = 0;       ///< wall time of the render (a merge: the units' summed render times)
  std::string build;               ///< optional: the build that rendered it (farm::build_id())
};

/// A film read back from an EXR, with its header facts.
struct ExrFilm {
  Film film;
  ExrInfo info;
};

/// Writes `film` as a two-part ZIP-compressed (lossless) scanline EXR (docs/design/tracer.md §11.2):
///  - part 0 "beauty": FLOAT R, G, B, each pixel's average (sum / N) as linear Rec.709, unclipped;
///  - part 1 "sums": FLOAT sums.X, sums.Y, sums.Z holding the raw sums and UINT sums.N the per-pixel sample counts
///    (bit-exact on reading back), with string attributes facetrace.first_sample, facetrace.samples,
///    facetrace.nonfinite (decimal) and facetrace.scene.
/// Both parts carry the typed attributes samplesPerPixel (int), firstSample (double), renderTime (double, s),
/// build (string, when given) and chromaticities (Rec.709 primaries, D65 white). Errors: kInvalidArgument (film
/// buffers inconsistent, samples above 2^31−1), kIo naming `path`.
Status write_exr(const std::string& path, const Film& film, const ExrInfo& info);

/// Reads the sums part of an EXR written by write_exr() (or the single part of an earlier facetrace's, with bare
/// X/Y/Z/N channels). Errors: kIo naming `path` (unreadable, not an EXR, no sums part or channel, data window not
/// starting at 0,0).
Expected<ExrFilm> read_exr(const std::string& path);

}  // namespace facetrace::tracer
