/// @file
/// Spectral tables (docs/design/tracer.md §6, §8): CIE 1931 2° colour-matching functions and CIE D65, 5 nm steps,
/// 380–780 nm (81 entries each). The numbers live once in macros; accessors return a global-memory copy on
/// the device and an `inline constexpr` array on the host (constexpr arrays cannot be indexed at run time in
/// device code).
#pragma once

#include "host_device.h"

namespace facetrace::tracer::physics {

inline constexpr int kSpectralTableSize = 81;           // docs/design/tracer.md §8: 5 nm table, 380–780 nm
inline constexpr float kSpectralTableStartNm = 380.0f;  // docs/design/tracer.md §8
inline constexpr float kSpectralTableStepNm = 5.0f;     // docs/design/tracer.md §8

}  // namespace facetrace::tracer::physics

// CIE 1931 2° x̄ (docs/design/tracer.md §8), 380..780 nm step 5.
#define FT_CIE_CMF_X_DATA                                                                                \
  0.001368f, 0.002236f, 0.004243f, 0.007650f, 0.014310f, 0.023190f, 0.043510f, 0.077630f, 0.134380f,     \
      0.214770f, 0.283900f, 0.328500f, 0.348280f, 0.348060f, 0.336200f, 0.318700f, 0.290800f, 0.251100f, \
      0.195360f, 0.142100f, 0.095640f, 0.057950f, 0.032010f, 0.014700f, 0.004900f, 0.002400f, 0.009300f, \
      0.029100f, 0.063270f, 0.109600f, 0.165500f, 0.225750f, 0.290400f, 0.359700f, 0.433450f, 0.512050f, \
      0.594500f, 0.678400f, 0.762100f, 0.842500f, 0.916300f, 0.978600f, 1.026300f, 1.056700f, 1.062200f, \
      1.045600f, 1.002600f, 0.938400f, 0.854450f, 0.751400f, 0.642400f, 0.541900f, 0.447900f, 0.360800f, \
      0.283500f, 0.218700f, 0.164900f, 0.121200f, 0.087400f, 0.063600f, 0.046770f, 0.032900f, 0.022700f, \
      0.015840f, 0.011359f, 0.008111f, 0.005790f, 0.004109f, 0.002899f, 0.002049f, 0.001440f, 0.001000f, \
      0.000690f, 0.000476f, 0.000332f, 0.000235f, 0.000166f, 0.000117f, 0.000083f, 0.000059f, 0.000042f

// CIE 1931 2° ȳ (docs/design/tracer.md §8), 380..780 nm step 5.
#define FT_CIE_CMF_Y_DATA                                                                                \
  0.000039f, 0.000064f, 0.000120f, 0.000217f, 0.000396f, 0.000640f, 0.001210f, 0.002180f, 0.004000f,     \
      0.007300f, 0.011600f, 0.016840f, 0.023000f, 0.029800f, 0.038000f, 0.048000f, 0.060000f, 0.073900f, \
      0.090980f, 0.112600f, 0.139020f, 0.169300f, 0.208020f, 0.258600f, 0.323000f, 0.407300f, 0.503000f, \
      0.608200f, 0.710000f, 0.793200f, 0.862000f, 0.914850f, 0.954000f, 0.980300f, 0.994950f, 1.000000f, \
      0.995000f, 0.978600f, 0.952000f, 0.915400f, 0.870000f, 0.816300f, 0.757000f, 0.694900f, 0.631000f, \
      0.566800f, 0.503000f, 0.441200f, 0.381000f, 0.321000f, 0.265000f, 0.217000f, 0.175000f, 0.138200f, \
      0.107000f, 0.081600f, 0.061000f, 0.044580f, 0.032000f, 0.023200f, 0.017000f, 0.011920f, 0.008210f, \
      0.005723f, 0.004102f, 0.002929f, 0.002091f, 0.001484f, 0.001047f, 0.000740f, 0.000520f, 0.000361f, \
      0.000249f, 0.000172f, 0.000120f, 0.000085f, 0.000060f, 0.000042f, 0.000030f, 0.000021f, 0.000015f

// CIE 1931 2° z̄ (docs/design/tracer.md §8), 380..780 nm step 5.
#define FT_CIE_CMF_Z_DATA                                                                                \
  0.006450f, 0.010550f, 0.020050f, 0.036210f, 0.067850f, 0.110200f, 0.207400f, 0.371300f, 0.645600f,     \
      1.039050f, 1.385600f, 1.622960f, 1.747060f, 1.782600f, 1.772110f, 1.744100f, 1.669200f, 1.528100f, \
      1.287640f, 1.041900f, 0.812950f, 0.616200f, 0.465180f, 0.353300f, 0.272000f, 0.212300f, 0.158200f, \
      0.111700f, 0.078250f, 0.057250f, 0.042160f, 0.029840f, 0.020300f, 0.013400f, 0.008750f, 0.005750f, \
      0.003900f, 0.002750f, 0.002100f, 0.001800f, 0.001650f, 0.001400f, 0.001100f, 0.001000f, 0.000800f, \
      0.000600f, 0.000340f, 0.000240f, 0.000190f, 0.000100f, 0.000050f, 0.000030f, 0.000020f, 0.000010f, \
      0.000000f, 0.000000f, 0.000000f, 0.000000f, 0.000000f, 0.000000f, 0.000000f, 0.000000f, 0.000000f, \
      0.000000f, 0.000000f, 0.000000f, 0.000000f, 0.000000f, 0.000000f, 0.000000f, 0.000000f, 0.000000f, \
      0.000000f, 0.000000f, 0.000000f, 0.000000f, 0.000000f, 0.000000f, 0.000000f, 0.000000f, 0.000000f

// CIE D65 relative spectral power, 100 at 560 nm (docs/design/tracer.md §6), 380..780 nm step 5.
#define FT_CIE_D65_DATA                                                                                  \
  49.9755f, 52.3118f, 54.6482f, 68.7015f, 82.7549f, 87.1204f, 91.486f, 92.4589f, 93.4318f, 90.057f,      \
      86.6823f, 95.7736f, 104.865f, 110.936f, 117.008f, 117.41f, 117.812f, 116.336f, 114.861f, 115.392f, \
      115.923f, 112.367f, 108.811f, 109.082f, 109.354f, 108.578f, 107.802f, 106.296f, 104.79f, 106.239f, \
      107.689f, 106.047f, 104.405f, 104.225f, 104.046f, 102.023f, 100.0f, 98.1671f, 96.3342f, 96.0611f,  \
      95.788f, 92.2368f, 88.6856f, 89.3459f, 90.0062f, 89.8026f, 89.5991f, 88.6489f, 87.6987f, 85.4936f, \
      83.2886f, 83.4939f, 83.6992f, 81.863f, 80.0268f, 80.1207f, 80.2146f, 81.2462f, 82.2778f, 80.281f,  \
      78.2842f, 74.0027f, 69.7213f, 70.6652f, 71.6091f, 72.979f, 74.349f, 67.9765f, 61.604f, 65.7448f,   \
      69.8856f, 72.4863f, 75.087f, 69.3398f, 63.5927f, 55.0054f, 46.4182f, 56.6118f, 66.8054f, 65.0941f, \
      63.3828f

namespace facetrace::tracer::physics {
namespace detail {
#if defined(__CUDA_ARCH__)
// Global (read-only, L1-cached) rather than __constant__: lanes of a warp index the tables at different
// wavelengths, and the constant cache serialises a warp's distinct addresses.
static __device__ const float kCmfX[kSpectralTableSize] = {FT_CIE_CMF_X_DATA};
static __device__ const float kCmfY[kSpectralTableSize] = {FT_CIE_CMF_Y_DATA};
static __device__ const float kCmfZ[kSpectralTableSize] = {FT_CIE_CMF_Z_DATA};
static __device__ const float kD65[kSpectralTableSize] = {FT_CIE_D65_DATA};
#else
inline constexpr float kCmfX[kSpectralTableSize] = {FT_CIE_CMF_X_DATA};
inline constexpr float kCmfY[kSpectralTableSize] = {FT_CIE_CMF_Y_DATA};
inline constexpr float kCmfZ[kSpectralTableSize] = {FT_CIE_CMF_Z_DATA};
inline constexpr float kD65[kSpectralTableSize] = {FT_CIE_D65_DATA};
#endif
}  // namespace detail

/// CIE 1931 2° x̄ table (81 entries, 380–780 nm step 5).
FT_HD const float* cmf_x_table() { return detail::kCmfX; }
/// CIE 1931 2° ȳ table.
FT_HD const float* cmf_y_table() { return detail::kCmfY; }
/// CIE 1931 2° z̄ table.
FT_HD const float* cmf_z_table() { return detail::kCmfZ; }
/// CIE D65 table (100 at 560 nm).
FT_HD const float* d65_table() { return detail::kD65; }

}  // namespace facetrace::tracer::physics
