/// @file
/// Test support: the one comparison harness for numeric tests (structure.md, example 5). Each check returns a
/// gtest AssertionResult whose failure message names how many elements failed, the worst index with its values
/// and the summary errors (max abs, max rel, NMSE), so `EXPECT_TRUE(all_close(got, want, tol))` says what broke.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <sstream>
#include <vector>

namespace facetrace::testing {

/// Per-element bound |got − want| ≤ abs + rel·scale, where scale is |want| unless the caller passes one (e.g.
/// Σ|terms| of a dot product, so cancellation does not make the bound vanish).
struct Tolerance {
  double abs = 0.0;
  double rel = 0.0;
};

/// Summary errors of got against want (want taken as exact).
struct ErrorStats {
  std::size_t n = 0;
  double max_abs = 0.0;   ///< max |got − want|
  double max_rel = 0.0;   ///< max |got − want| / |want| over want ≠ 0
  double nmse = 0.0;      ///< Σ(got − want)² / Σ want² (ggml's max_nmse_err); 0 when both are all zero
  std::size_t worst = 0;  ///< index of the largest |got − want|
};

namespace detail {

template <class G, class W>
ErrorStats error_stats(std::span<const G> got, std::span<const W> want) {
  ErrorStats s;
  s.n = std::min(got.size(), want.size());
  double num = 0.0, den = 0.0;
  bool nan_seen = false;  // the first NaN difference is the worst
  for (std::size_t i = 0; i < s.n; ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    const double d = std::abs(g - w);
    if (d != d) {
      if (!nan_seen) nan_seen = true, s.max_abs = d, s.worst = i;
    } else if (!nan_seen && d > s.max_abs) {
      s.max_abs = d, s.worst = i;
    }
    if (w != 0.0) s.max_rel = std::max(s.max_rel, d / std::abs(w));
    num += (g - w) * (g - w);
    den += w * w;
  }
  s.nmse = den > 0.0 ? num / den : (num > 0.0 ? INFINITY : 0.0);
  return s;
}

inline void describe(std::ostream& os, const ErrorStats& s) {
  os << "max abs err " << s.max_abs << " (at " << s.worst << "), max rel err " << s.max_rel << ", nmse "
     << s.nmse;
}

template <class G, class W>
::testing::AssertionResult all_close(std::span<const G> got, std::span<const W> want, Tolerance tol,
                                     std::span<const double> scale) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << "size mismatch: got " << got.size() << " values, want " << want.size();
  if (!scale.empty() && scale.size() != want.size())
    return ::testing::AssertionFailure() << "scale holds " << scale.size() << " values for " << want.size();
  std::size_t bad = 0, worst = 0;
  double worst_excess = -1.0, worst_allowed = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    const double sc = scale.empty() ? std::abs(w) : scale[i];
    const double allowed = tol.abs + tol.rel * sc;
    const double d = std::abs(g - w);
    if (d <= allowed) continue;  // false for NaN
    ++bad;
    const double excess = d != d ? INFINITY : d - allowed;
    if (excess > worst_excess) worst_excess = excess, worst = i, worst_allowed = allowed;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(9);
  os << bad << " of " << got.size() << " values outside |got - want| <= " << tol.abs << " + " << tol.rel
     << (scale.empty() ? "*|want|" : "*scale") << "; worst at index " << worst << ": got "
     << static_cast<double>(got[worst]) << ", want " << static_cast<double>(want[worst]) << ", allowed "
     << worst_allowed << "; ";
  describe(os, error_stats(got, want));
  return ::testing::AssertionFailure() << os.str();
}

}  // namespace detail

/// Every element within `tol` (see Tolerance); `scale` (optional, one per element) replaces |want| in the bound.
inline ::testing::AssertionResult all_close(std::span<const float> got, std::span<const double> want,
                                            Tolerance tol, std::span<const double> scale = {}) {
  return detail::all_close(got, want, tol, scale);
}
inline ::testing::AssertionResult all_close(std::span<const float> got, std::span<const float> want,
                                            Tolerance tol, std::span<const double> scale = {}) {
  return detail::all_close(got, want, tol, scale);
}

/// NMSE of got against want at most `max_nmse` (ggml's per-op test criterion).
inline ::testing::AssertionResult nmse_below(std::span<const float> got, std::span<const double> want,
                                             double max_nmse) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << "size mismatch: got " << got.size() << " values, want " << want.size();
  const ErrorStats s = detail::error_stats(got, want);
  if (s.nmse <= max_nmse) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os << "nmse " << s.nmse << " > " << max_nmse << "; ";
  detail::describe(os, s);
  return ::testing::AssertionFailure() << os.str();
}

/// The same bits in every element (so −0 ≠ +0 and a NaN equals only the same NaN): for a result that must not
/// change when only the schedule (threads, fusion, batching) does.
inline ::testing::AssertionResult bit_identical(std::span<const float> got, std::span<const float> want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << "size mismatch: got " << got.size() << " values, want " << want.size();
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    std::uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    if (a != b && bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(9);
  os << bad << " of " << got.size() << " values differ in their bits; first at index " << first << ": got "
     << got[first] << ", want " << want[first] << "; ";
  detail::describe(os, detail::error_stats(got, want));
  return ::testing::AssertionFailure() << os.str();
}

}  // namespace facetrace::testing
