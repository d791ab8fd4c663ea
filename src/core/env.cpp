/// @file
/// Environment-variable helpers.
#include "facetrace/core/env.h"

#include <charconv>
#include <cstdlib>
#include <string_view>

#include "facetrace/core/text.h"
#include "log.h"

namespace facetrace::core {
namespace {

/// `v` clamped to [lo, hi], warning (with the variable's name) when it was outside.
template <class T>
T clamp_with_warning(const char* name, T v, T lo, T hi) {
  if (v < lo) {
    FT_LOG_WARN("{}={} is below the minimum {}; using {}", name, v, lo, lo);
    return lo;
  }
  if (v > hi) {
    FT_LOG_WARN("{}={} is above the maximum {}; using {}", name, v, hi, hi);
    return hi;
  }
  return v;
}

}  // namespace

std::optional<std::string> env_string(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::int64_t env_int_clamped(const char* name, std::int64_t def, std::int64_t lo, std::int64_t hi) {
  const auto s = env_string(name);
  if (!s) return def;
  std::int64_t v = 0;
  const char* b = s->data();
  const char* e = b + s->size();
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p != e) {
    FT_LOG_WARN("{}='{}' is not an integer; using the default {}", name, printable(*s), def);
    return def;
  }
  return clamp_with_warning(name, v, lo, hi);
}

double env_double_clamped(const char* name, double def, double lo, double hi) {
  const auto s = env_string(name);
  if (!s) return def;
  char* end = nullptr;
  const double v = std::strtod(s->c_str(), &end);
  if (end == s->c_str() || *end != '\0' || !(v == v)) {
    FT_LOG_WARN("{}='{}' is not a number; using the default {}", name, printable(*s), def);
    return def;
  }
  return clamp_with_warning(name, v, lo, hi);
}

}  // namespace facetrace::core
