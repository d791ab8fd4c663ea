/// @file
/// Scene files: JSON ⇄ tracer::Scene (schema in docs/scene-format.md). Parsing never throws; every error
/// names the field path ("planes[3].normal: ...") and, for syntax errors, the line and column.
#pragma once

#include <string>
#include <string_view>

#include "facetrace/core/status.h"
#include "facetrace/tracer/scene.h"

namespace facetrace::tracer {

/// Parses a scene from JSON text. Missing fields take the values of builtin_diamond_scene(); the result is
/// checked with validate_scene(). `source` names the text in messages (a file name, or "<string>").
/// Errors: kInvalidArgument ("<source>: <field path>: <reason>"). Thread-safe.
Expected<Scene> scene_from_json(std::string_view text, std::string_view source = "<string>");

/// Reads and parses a scene file. Errors: kIo (cannot read `path`), kInvalidArgument (as scene_from_json,
/// prefixed with `path`). Thread-safe.
Expected<Scene> load_scene_file(const std::string& path);

/// Options for scene_to_json().
struct SceneJsonOptions {
  int indent = 2;         ///< spaces per level; -1 writes one line
  bool use_names = true;  ///< write "round_brilliant" / a preset name where the value equals one exactly
  /// An HDR environment as {"sha256": …} alone, without the map's path: the scene's identity (the farm's scene
  /// hash, docs/design/farm.md §1), the same on machines that mount the map in different places. Not readable
  /// back (scene_from_json needs the path).
  bool map_by_sha256 = false;
};

/// Serialises a scene to JSON that scene_from_json() reads back to the identical Scene (floats round-trip
/// bit for bit; every field is written). Thread-safe.
std::string scene_to_json(const Scene& scene, const SceneJsonOptions& options = {});

/// Writes scene_to_json(scene) to `path`. Errors: kIo naming the file.
Status save_scene_file(const Scene& scene, const std::string& path, const SceneJsonOptions& options = {});

}  // namespace facetrace::tracer
