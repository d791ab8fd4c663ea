/// @file
/// FT_HD: the only CUDA-aware macros shared physics code may use (style.md §3).
#pragma once

#if defined(__CUDACC__)
#define FT_HD __host__ __device__ __forceinline__
#else
#define FT_HD inline
#endif

/// Fully unroll the next loop in device code (its bound is a compile-time constant), so per-channel arrays
/// stay in registers instead of local memory. No effect on host code.
#if defined(__CUDA_ARCH__)
#define FT_UNROLL _Pragma("unroll")
/// Unroll a run-time-bounded loop 4× in device code, so loads of later iterations issue early.
#define FT_UNROLL4 _Pragma("unroll 4")
/// Keep the next loop rolled in device code: one copy of a large, rarely run body (smaller kernel code).
#define FT_NO_UNROLL _Pragma("unroll 1")
#else
#define FT_NO_UNROLL
#define FT_UNROLL
#define FT_UNROLL4
#endif
