/// @file
/// Similarity fit and supersampled bilinear warp (docs/design/faces.md §6).
#include "facetrace/faces/align.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace facetrace::faces {
namespace {

// docs/design/faces.md §6: the ArcFace 112 × 112 template.
constexpr double kTemplate[5][2] = {
    {38.2946, 51.6963}, {73.5318, 51.5014}, {56.0252, 71.7366}, {41.5493, 92.3655}, {70.7299, 92.2041}};

}  // namespace

double Similarity::scale() const { return std::hypot(a_re, a_im); }

Point Similarity::apply(Point p) const {
  return {static_cast<float>(a_re * p.x - a_im * p.y + tx), static_cast<float>(a_im * p.x + a_re * p.y + ty)};
}

std::array<Point, 5> arcface_template(int out_w, int out_h) {
  std::array<Point, 5> t;
  for (std::size_t i = 0; i < 5; ++i)
    t[i] = {static_cast<float>(kTemplate[i][0] * out_w / 112.0),
            static_cast<float>(kTemplate[i][1] * out_h / 112.0)};
  return t;
}

Expected<Similarity> fit_similarity(std::span<const Point> from, std::span<const Point> to) {
  if (from.size() != to.size() || from.size() < 2)
    return invalid_argument("fit_similarity: need ≥ 2 point pairs");
  double pmx = 0, pmy = 0, qmx = 0, qmy = 0;
  for (std::size_t i = 0; i < from.size(); ++i) {
    if (!std::isfinite(from[i].x) || !std::isfinite(from[i].y) || !std::isfinite(to[i].x) ||
        !std::isfinite(to[i].y))
      return invalid_argument("fit_similarity: non-finite point");
    pmx += from[i].x, pmy += from[i].y, qmx += to[i].x, qmy += to[i].y;
  }
  const double n = static_cast<double>(from.size());
  pmx /= n, pmy /= n, qmx /= n, qmy /= n;
  // a = Σ conj(p′)·q′ / Σ|p′|²
  double re = 0, im = 0, norm = 0;
  for (std::size_t i = 0; i < from.size(); ++i) {
    const double px = from[i].x - pmx, py = from[i].y - pmy, qx = to[i].x - qmx, qy = to[i].y - qmy;
    re += px * qx + py * qy;
    im += px * qy - py * qx;
    norm += px * px + py * py;
  }
  if (!(norm > 1e-9)) return invalid_argument("fit_similarity: degenerate points");
  Similarity s;
  s.a_re = re / norm, s.a_im = im / norm;
  s.tx = qmx - (s.a_re * pmx - s.a_im * pmy);
  s.ty = qmy - (s.a_im * pmx + s.a_re * pmy);
  const double a = s.scale();
  if (!std::isfinite(a) || !std::isfinite(s.tx) || !std::isfinite(s.ty))
    return invalid_argument("fit_similarity: non-finite result");
  if (a < 0.01 || a > 100.0)
    return invalid_argument("fit_similarity: scale " + std::to_string(a) + " outside [0.01, 100]");
  return s;
}

Expected<core::Image> warp_similarity(const core::Image& photo, const Similarity& m, int out_w, int out_h) {
  if (out_w < 1 || out_h < 1 || out_w > 4096 || out_h > 4096)
    return invalid_argument("warp: output side outside 1..4096");
  if (photo.width < 1 || photo.height < 1 ||
      photo.rgb.size() != static_cast<std::size_t>(photo.width) * photo.height * 3)
    return invalid_argument("warp: malformed photo");
  const double a2 = m.a_re * m.a_re + m.a_im * m.a_im;
  if (!(a2 > 0) || !std::isfinite(a2)) return invalid_argument("warp: singular similarity");
  // inverse: p = conj(a)·(q − t)/|a|²
  const double ir = m.a_re / a2, ii = -m.a_im / a2;
  const int ns = std::clamp(static_cast<int>(std::ceil(1.0 / std::sqrt(a2))), 1, 4);
  core::Image out;
  out.width = out_w, out.height = out_h;
  out.rgb.resize(static_cast<std::size_t>(out_w) * out_h * 3);
  const int W = photo.width, H = photo.height;
  auto px = [&](int x, int y, int c) {
    x = std::clamp(x, 0, W - 1), y = std::clamp(y, 0, H - 1);
    return static_cast<double>(
        photo.rgb[(static_cast<std::size_t>(y) * W + x) * 3 + static_cast<std::size_t>(c)]);
  };
  for (int oy = 0; oy < out_h; ++oy)
    for (int ox = 0; ox < out_w; ++ox) {
      double acc[3] = {0, 0, 0};
      for (int sy = 0; sy < ns; ++sy)
        for (int sx = 0; sx < ns; ++sx) {
          const double qx = ox + (sx + 0.5) / ns - 0.5 - m.tx, qy = oy + (sy + 0.5) / ns - 0.5 - m.ty;
          double x = ir * qx - ii * qy, y = ii * qx + ir * qy;
          x = std::clamp(x, -1.0, static_cast<double>(W));
          y = std::clamp(y, -1.0, static_cast<double>(H));
          const int x0 = static_cast<int>(std::floor(x)), y0 = static_cast<int>(std::floor(y));
          const double fx = x - x0, fy = y - y0;
          for (int c = 0; c < 3; ++c)
            acc[c] += (1 - fy) * ((1 - fx) * px(x0, y0, c) + fx * px(x0 + 1, y0, c)) +
                      fy * ((1 - fx) * px(x0, y0 + 1, c) + fx * px(x0 + 1, y0 + 1, c));
        }
      for (int c = 0; c < 3; ++c)
        out.rgb[(static_cast<std::size_t>(oy) * out_w + ox) * 3 + static_cast<std::size_t>(c)] =
            static_cast<std::uint8_t>(std::clamp(std::lround(acc[c] / (ns * ns)), 0L, 255L));
    }
  return out;
}

Expected<core::Image> align_face(const core::Image& photo, const std::array<Point, 5>& landmarks, int out_w,
                                 int out_h) {
  const auto t = arcface_template(out_w, out_h);
  auto s = fit_similarity(landmarks, t);
  if (!s) return s.status().with_context("align_face");
  return warp_similarity(photo, *s, out_w, out_h);
}

Expected<core::Image> crop_box(const core::Image& photo, float x0, float y0, float x1, float y1, int out_w,
                               int out_h) {
  const double w = x1 - x0, h = y1 - y0;
  const double side = std::max(w, h) * 1.5;
  if (!(side > 0) || !std::isfinite(side)) return invalid_argument("crop_box: empty box");
  const double scale = std::min(out_w, out_h) / side;
  const double cx = (x0 + x1) / 2.0, cy = (y0 + y1) / 2.0;
  Similarity s;
  s.a_re = scale, s.a_im = 0;
  s.tx = out_w / 2.0 - scale * cx;
  s.ty = out_h / 2.0 - scale * cy;
  return warp_similarity(photo, s, out_w, out_h);
}

}  // namespace facetrace::faces
