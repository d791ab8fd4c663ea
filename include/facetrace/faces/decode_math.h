/// @file
/// The one exponential of the YuNet decode (docs/design/faces.md §5), shared by the CPU detector and the GPU
/// post-processing so both give the same bits. Plain C++ (no CUDA header); under nvcc the function is also a
/// device function.
///
/// Why not std::exp / expf: the CPU's float std::exp is the C library's expf (glibc picks an FMA or a non-FMA
/// build at run time) and CUDA's expf has its own last-ulp errors, so the two round differently for some inputs
/// and a box edge then differs by an ulp. This version uses only IEEE-754 double additions, multiplications and
/// conversions (no library call, no FMA: in device code every step is an explicit round-to-nearest intrinsic,
/// on the host each is its own statement and the build compiles ISO C++ without FMA contraction), so the result
/// is a pure function of the input on every machine. Its error before the final rounding is a few double ulps,
/// so it is almost always the correctly rounded expf.
#pragma once

#if defined(__CUDACC__)
#define FT_DECODE_HD __host__ __device__ inline
#else
#define FT_DECODE_HD inline
#endif

namespace facetrace::faces {

namespace decode_detail {
#if defined(__CUDA_ARCH__)
FT_DECODE_HD double mul(double a, double b) { return __dmul_rn(a, b); }
FT_DECODE_HD double add(double a, double b) { return __dadd_rn(a, b); }
#else
FT_DECODE_HD double mul(double a, double b) { return a * b; }
FT_DECODE_HD double add(double a, double b) { return a + b; }
#endif
}  // namespace decode_detail

/// e^x rounded to float, for x in [-80, 80] (YuNet clamps its size logits to [-10, 10]); NaN gives NaN.
/// Range reduction x = k·ln2 + r with ln2 split in two (the high part has 32 significant bits, so k·ln2_hi is
/// exact), e^r by its Taylor series to degree 13 in Horner form (|r| ≤ ln2/2: truncation below 2^-56), then
/// an exact scaling by 2^k.
FT_DECODE_HD float decode_expf(float x) {
  using decode_detail::add;
  using decode_detail::mul;
  if (!(x == x)) return x;
  const double xd = x < -80.0f ? -80.0 : (x > 80.0f ? 80.0 : static_cast<double>(x));
  constexpr double kInvLn2 = 1.4426950408889634;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // 0x3fe62e42fee00000
  constexpr double kLn2Lo = 1.90821492927058770002e-10;  // 0x3dea39ef35793c76
  const double t = mul(xd, kInvLn2);
  const int k = static_cast<int>(t < 0.0 ? add(t, -0.5) : add(t, 0.5));  // round half away from zero
  const double kd = k;
  const double r = add(add(xd, -mul(kd, kLn2Hi)), -mul(kd, kLn2Lo));
  // 1/i! for i = 13 down to 0, each the double nearest the exact fraction.
  constexpr double kInvFact[14] = {1.6059043836821613e-10,
                                   2.08767569878681e-09,
                                   2.505210838544172e-08,
                                   2.755731922398589e-07,
                                   2.7557319223985893e-06,
                                   2.48015873015873e-05,
                                   0.0001984126984126984,
                                   0.001388888888888889,
                                   0.008333333333333333,
                                   0.041666666666666664,
                                   0.16666666666666666,
                                   0.5,
                                   1.0,
                                   1.0};
  double p = kInvFact[0];
  for (int i = 1; i < 14; ++i) p = add(mul(p, r), kInvFact[i]);
  const double step = k < 0 ? 0.5 : 2.0;
  for (int i = 0, n = k < 0 ? -k : k; i < n; ++i) p = mul(p, step);
  return static_cast<float>(p);
}

}  // namespace facetrace::faces
