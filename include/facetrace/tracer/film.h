/// @file
/// Film: per-pixel CIE XYZ sums and sample counts. Additive: any split of the sample range, applied in
/// ascending order, gives the same film bit for bit (docs/design/tracer.md §9 G3).
#pragma once

#include <cstdint>
#include <vector>

namespace facetrace::tracer {

struct Film {
  std::uint32_t width = 0;
  std::uint32_t height = 0;
  std::vector<float> xyz;              ///< 3 floats per pixel, row-major (y·W + x)
  std::vector<std::uint32_t> samples;  ///< samples counted per pixel (non-finite ones included)
  std::uint64_t nonfinite = 0;         ///< samples dropped (contributed 0) because non-finite

  Film() = default;
  Film(std::uint32_t w, std::uint32_t h)
      : width(w), height(h), xyz(std::size_t{w} * h * 3, 0.0f), samples(std::size_t{w} * h, 0) {}
  std::size_t pixels() const { return std::size_t{width} * height; }
};

}  // namespace facetrace::tracer
