/// @file
/// libFuzzer target: HDR environment maps (tracer::decode_env_map, docs/design/tracer.md §6.1): the Radiance RGBE
/// reader and OpenEXR through its library, from the bytes as load_env_map() gets them after the sha256 check. A
/// map that decodes must have the size it says and only finite texels ≥ 0. Maps of more than 2^18 texels are
/// refused by the lowered limit (the full limit's allocation would only slow the fuzzer down).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "facetrace/tracer/env_map.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  facetrace::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto m = facetrace::tracer::decode_env_map(std::span<const std::uint8_t>(data, size), "fuzz.hdr", 1u << 18);
  if (!m.ok()) return 0;
  facetrace::fuzz::check(m->width >= 1 && m->height >= 1, "a decoded map has a size");
  facetrace::fuzz::check(m->rgb.size() == std::size_t{m->width} * m->height * 3,
                         "rgb holds width x height texels");
  for (float v : m->rgb) facetrace::fuzz::check(std::isfinite(v) && v >= 0.0f, "texels finite and >= 0");
  return 0;
}
