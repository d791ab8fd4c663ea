/// @file
/// FT_HD: the only CUDA-aware macros shared physics code may use (docs/design/style.md §3).
#pragma once

#if defined(__CUDACC__)
#define FT_HD __host__ __device__ __forceinline__
/// A large FT_HD function kept out of line on the device: one copy of its code however many call sites, so a
/// megakernel that calls it from several branches still fits the instruction cache (benchmarks/NOTES.md,
/// uniaxial kernel). Inline on the host.
#define FT_HD_OUTLINE __host__ __device__ __noinline__
#else
#define FT_HD inline
#define FT_HD_OUTLINE inline
#endif

/// Fully unroll the next loop in device code (its bound is a compile-time constant), so per-channel arrays
/// stay in registers instead of local memory. No effect on host code.
#if defined(__CUDA_ARCH__)
#define FT_UNROLL _Pragma("unroll")
/// Unroll a run-time-bounded loop 2× in device code, so loads of the next iteration issue early (the slab
/// test; the factor was chosen by measurement, benchmarks/NOTES.md).
#define FT_UNROLL2 _Pragma("unroll 2")
/// The tracer's per-channel loops in device code: rolled when FT_TRACER_ROLLED is defined (one copy of each
/// channel's code; the channel arrays live in local memory), fully unrolled otherwise (arrays in registers).
#if defined(FT_TRACER_ROLLED)
#define FT_CHANNELS _Pragma("unroll 1")
#else
#define FT_CHANNELS _Pragma("unroll")
#endif
#else
#define FT_UNROLL
#define FT_UNROLL2
#define FT_CHANNELS
#endif

/// Index of the lowest set bit of v ≠ 0 (a channel worklist's next channel).
#if defined(__CUDA_ARCH__)
#define FT_LOWEST_BIT(v) (__ffs(static_cast<int>(v)) - 1)
#else
#define FT_LOWEST_BIT(v) __builtin_ctz(v)
#endif
