/// @file
/// FT_HD: the only CUDA-aware macros shared physics code may use (style.md §3).
#pragma once

#if defined(__CUDACC__)
#define FT_HD __host__ __device__ __forceinline__
/// Fully unroll the next loop on the device (its bound is a compile-time constant), so per-channel arrays
/// stay in registers instead of local memory. No effect on the host build.
#define FT_UNROLL _Pragma("unroll")
#else
#define FT_HD inline
#define FT_UNROLL
#endif
