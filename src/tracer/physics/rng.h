/// @file
/// Deterministic sampling identity (docs/design/tracer.md §9): hash, sample seed, radical inverses with per-pixel
/// rotations, per-bounce stream draws. Integer parts are bit-exact on host and device.
#pragma once

#include <cstdint>
#include <cmath>

#include "host_device.h"

namespace facetrace::tracer::physics {

// Rotation constants of the per-pixel Cranley–Patterson shifts (docs/design/tracer.md §9).
inline constexpr std::uint32_t kRotationX = 0xA511E9B3u;     // docs/design/tracer.md §9
inline constexpr std::uint32_t kRotationY = 0x63D81B23u;     // docs/design/tracer.md §9
inline constexpr std::uint32_t kRotationHero = 0x1B873593u;  // docs/design/tracer.md §9

// Sample-seed multipliers (docs/design/tracer.md §9 "Sample identity").
inline constexpr std::uint32_t kSeedPixelMul = 0x9E3779B9u;   // docs/design/tracer.md §9
inline constexpr std::uint32_t kSeedSampleMul = 0x85EBCA6Bu;  // docs/design/tracer.md §9

// Per-bounce streams (docs/design/tracer.md §9 stream table). The first four are the spec's; the rest are
// facetrace's own distinct odd constants, frozen by the Tier 1 goldens.
inline constexpr std::uint32_t kStreamFresnel = 0x9E3779B1u;       // docs/design/tracer.md §9
inline constexpr std::uint32_t kStreamRoulette = 0x517CC1B7u;      // docs/design/tracer.md §9
inline constexpr std::uint32_t kStreamBirefringent = 0x2545F491u;  // docs/design/tracer.md §9
inline constexpr std::uint32_t kStreamModeCoupling = 0xCC9E2D51u;  // docs/design/tracer.md §9
inline constexpr std::uint32_t kStreamFrostedDir1 = 0x27D4EB2Fu;   // docs/design/tracer.md §9 (facetrace)
inline constexpr std::uint32_t kStreamFrostedDir2 = 0x165667B1u;   // docs/design/tracer.md §9 (facetrace)
inline constexpr std::uint32_t kStreamHgDistance = 0xD3A2646Du;    // docs/design/tracer.md §9 (facetrace)
inline constexpr std::uint32_t kStreamHgDirection = 0xFD7046C5u;   // docs/design/tracer.md §9 (facetrace)
inline constexpr std::uint32_t kStreamHgDirection2 =
    0x2C1B3C6Du;                                          // docs/design/tracer.md §9 (facetrace): HG φ
inline constexpr std::uint32_t kStreamNee = 0xB55A4F09u;  // docs/design/tracer.md §9 (facetrace)
inline constexpr std::uint32_t kStreamNeeColumn = 0x7FEB352Du;    // docs/design/tracer.md §9 (facetrace)
inline constexpr std::uint32_t kStreamBiaxialMode = 0x68E31DA5u;  // docs/design/tracer.md §9 (facetrace)

/// The u32 finaliser hash (docs/design/tracer.md §9): x·=0x85EBCA6B; x^=x≫13; x·=0xC2B2AE35; x^=x≫16.
FT_HD std::uint32_t hash_u32(std::uint32_t x) {
  x *= 0x85EBCA6Bu;  // docs/design/tracer.md §9
  x ^= x >> 13;
  x *= 0xC2B2AE35u;  // docs/design/tracer.md §9
  x ^= x >> 16;
  return x;
}

/// Seed of sample s of global pixel p = y·W + x (docs/design/tracer.md §9); s is absolute, u32 arithmetic wraps.
FT_HD std::uint32_t sample_seed(std::uint32_t pixel, std::uint32_t s) {
  return hash_u32((pixel * kSeedPixelMul) ^ (s * kSeedSampleMul));
}

/// Bit reversal of a u32 (portable; identical on host and device).
FT_HD std::uint32_t bit_reverse_u32(std::uint32_t v) {
  v = ((v >> 1) & 0x55555555u) | ((v & 0x55555555u) << 1);
  v = ((v >> 2) & 0x33333333u) | ((v & 0x33333333u) << 2);
  v = ((v >> 4) & 0x0F0F0F0Fu) | ((v & 0x0F0F0F0Fu) << 4);
  v = ((v >> 8) & 0x00FF00FFu) | ((v & 0x00FF00FFu) << 8);
  return (v >> 16) | (v << 16);
}

/// Per-pixel rotation bitrev(hash(p ⊕ C))/2³² in f32 (docs/design/tracer.md §9). May round up to 1.0f.
FT_HD float pixel_rotation(std::uint32_t pixel, std::uint32_t c) {
  return static_cast<float>(bit_reverse_u32(hash_u32(pixel ^ c))) * 2.3283064365386963e-10f;  // 2^-32
}

/// Radical inverse Φ_b(s) (docs/design/tracer.md §9, facetrace): integer digit reversal with a u64 numerator and
/// denominator, then one final (double, correctly rounded) division, rounded to f32. Result in [0, 1).
FT_HD float radical_inverse(std::uint32_t base, std::uint32_t s) {
  std::uint64_t num = 0;
  std::uint64_t den = 1;
  while (s != 0) {
    const std::uint32_t q = s / base;
    num = num * base + (s - q * base);
    den *= base;
    s = q;
  }
  const float r = static_cast<float>(static_cast<double>(num) / static_cast<double>(den));
  return r < 1.0f ? r : 0x1.fffffep-1f;
}

/// frac(x) for x ≥ 0 in f32; exact for x in [0, 2].
FT_HD float frac01(float x) { return x - floorf(x); }

/// Per-bounce uniform for one stream (docs/design/tracer.md §9): u = f32(h)/f32(2³²−1), h = hash(seed ⊕ hash(bounce ⊕
/// STREAM)). In f32 the divisor is 2³², so u ∈ [0, 1] and u can equal 1.
FT_HD float stream_uniform(std::uint32_t seed, std::uint32_t bounce, std::uint32_t stream) {
  const std::uint32_t h = hash_u32(seed ^ hash_u32(bounce ^ stream));
  return static_cast<float>(h) / static_cast<float>(0xFFFFFFFFu);
}

/// The camera-sample numbers of (pixel, s): jitter in [−0.5, 0.5) and the hero uniform (docs/design/tracer.md §9).
struct PixelSample {
  float jx, jy, u_hero;
};
static_assert(sizeof(PixelSample) == 12, "PixelSample layout");

FT_HD PixelSample pixel_sample(std::uint32_t pixel, std::uint32_t s) {
  PixelSample out;
  out.jx = frac01(radical_inverse(2, s) + pixel_rotation(pixel, kRotationX)) - 0.5f;
  out.jy = frac01(radical_inverse(3, s) + pixel_rotation(pixel, kRotationY)) - 0.5f;
  out.u_hero = frac01(radical_inverse(5, s) + pixel_rotation(pixel, kRotationHero));
  return out;
}

}  // namespace facetrace::tracer::physics
