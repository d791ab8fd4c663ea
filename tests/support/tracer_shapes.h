/// @file
/// Test support: small stones for the tracer's unit tests (docs/design/tracer.md §4 planes).
#pragma once

#include <vector>

#include "facetrace/tracer/scene.h"

namespace facetrace::tracer::test {

/// A cube of edge 1.2 about the origin with every face frosted: every bounce at it is a frosted one (NEE tests).
inline std::vector<Plane> frosted_cube() {
  std::vector<Plane> planes;
  for (int axis = 0; axis < 3; ++axis)
    for (float sign : {1.0f, -1.0f}) {
      Plane p;
      p.normal[0] = p.normal[1] = p.normal[2] = 0.0f;
      p.normal[axis] = sign;
      p.d = -0.6f;
      p.finish = Finish::kFrosted;
      planes.push_back(p);
    }
  return planes;
}

}  // namespace facetrace::tracer::test
