/// @file
/// libFuzzer target: scene JSON (tracer::scene_from_json). Any text must give a Scene or a clear error, never a
/// crash; an accepted scene must serialise and read back to the same JSON (the round trip scene_json.h promises).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "facetrace/tracer/scene_json.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  facetrace::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace facetrace;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto scene = tracer::scene_from_json(text, "fuzz");
  if (!scene) {
    fuzz::check(!scene.status().what().empty(), "a refused scene names the problem");
    return 0;
  }
  const std::string once = tracer::scene_to_json(*scene);
  auto again = tracer::scene_from_json(once, "round trip");
  fuzz::check(again.ok(), "scene_to_json output reads back");
  fuzz::check(tracer::scene_to_json(*again) == once, "the scene JSON round trip is exact");
  return 0;
}
