/// @file
/// Minimal f32 3-vector for the shared physics (host and device). No FMA contraction is written here.
#pragma once

#include <cmath>

#include "host_device.h"

namespace facetrace::tracer::physics {

struct Vec3 {
  float x, y, z;
};
static_assert(sizeof(Vec3) == 12, "Vec3 is three packed floats");

FT_HD Vec3 make_vec3(float x, float y, float z) { return Vec3{x, y, z}; }
FT_HD Vec3 operator+(Vec3 a, Vec3 b) { return Vec3{a.x + b.x, a.y + b.y, a.z + b.z}; }
FT_HD Vec3 operator-(Vec3 a, Vec3 b) { return Vec3{a.x - b.x, a.y - b.y, a.z - b.z}; }
FT_HD Vec3 operator-(Vec3 a) { return Vec3{-a.x, -a.y, -a.z}; }
FT_HD Vec3 operator*(Vec3 a, float s) { return Vec3{a.x * s, a.y * s, a.z * s}; }
FT_HD Vec3 operator*(float s, Vec3 a) { return Vec3{a.x * s, a.y * s, a.z * s}; }
FT_HD float dot(Vec3 a, Vec3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
FT_HD Vec3 cross(Vec3 a, Vec3 b) {
  return Vec3{a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x};
}
FT_HD float length(Vec3 a) { return sqrtf(dot(a, a)); }
FT_HD Vec3 normalize(Vec3 a) { return a * (1.0f / sqrtf(dot(a, a))); }

}  // namespace facetrace::tracer::physics
