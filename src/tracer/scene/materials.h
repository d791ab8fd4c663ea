/// @file
/// Private: the preset catalogue — the lighting presets (docs/design/tracer.md §2) and the built-in materials — and the
/// name matching that its lookups and the scene-file reader share. The public lookups (material_preset,
/// lighting_preset_from_name, ...) are declared in facetrace/tracer/scene.h.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "facetrace/tracer/scene.h"

namespace facetrace::tracer {

/// The lighting preset names in wire order (index = LightingPreset value, docs/design/tracer.md §2).
const std::vector<std::string_view>& lighting_preset_names();

/// A built-in material: its preset name ("cubic_zirconia") and the function that builds it.
struct MaterialPreset {
  std::string_view name;
  Material (*make)();
};

/// The built-in materials, in the order material_preset_names() lists them.
std::span<const MaterialPreset> material_presets();

/// Lower case with '_', '-' and ' ' removed: the key every preset and enum name is matched by.
std::string fold_name(std::string_view s);

/// " (did you mean \"x\"?)" when a name in `known` is close to `got` (edit distance of the folded names), else "".
std::string did_you_mean(std::string_view got, const std::vector<std::string_view>& known);

/// The names joined by ", ".
std::string list_names(const std::vector<std::string_view>& names);

}  // namespace facetrace::tracer
