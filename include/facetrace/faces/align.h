/// @file
/// Face alignment to the 112×112 ArcFace template (docs/design/faces.md §6): least-squares similarity, supersampled warp.
#pragma once

#include <array>
#include <span>

#include "facetrace/core/status.h"
#include "facetrace/faces/detector.h"
#include "facetrace/core/image.h"

namespace facetrace::faces {

/// q = a·p + t with points as complex numbers (a = a_re + i·a_im): rotation + uniform scale, no reflection.
struct Similarity {
  double a_re = 1.0, a_im = 0.0, tx = 0.0, ty = 0.0;
  /// |a|, the scale.
  double scale() const;
  Point apply(Point p) const;
};

/// The ArcFace template scaled to out_w × out_h (112 × 112 gives the published points).
std::array<Point, 5> arcface_template(int out_w = 112, int out_h = 112);

/// Least-squares similarity mapping `from` onto `to` (same length ≥ 2). kInvalidArgument when the points are
/// degenerate (Σ|p′|² ≤ 1e-9), non-finite, or |a| ∉ [0.01, 100].
Expected<Similarity> fit_similarity(std::span<const Point> from, std::span<const Point> to);

/// Warps `photo` so that `photo_to_out` maps it onto an out_w × out_h RGB image: each output pixel averages n × n
/// bilinear samples, n = clamp(⌈1/|a|⌉, 1, 4). Sides 1..4096.
Expected<core::Image> warp_similarity(const core::Image& photo, const Similarity& photo_to_out,
                                      int out_w = 112, int out_h = 112);

/// Aligns a face by its 5 landmarks (photo pixels) to the ArcFace template.
Expected<core::Image> align_face(const core::Image& photo, const std::array<Point, 5>& landmarks,
                                 int out_w = 112, int out_h = 112);

/// Box fallback without landmarks: a square of side max(w,h)·1.5 centred on the box.
Expected<core::Image> crop_box(const core::Image& photo, float x0, float y0, float x1, float y1,
                               int out_w = 112, int out_h = 112);

}  // namespace facetrace::faces
