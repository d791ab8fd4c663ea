/// @file
/// FT_HD: the only CUDA-aware macro shared physics code may use (style.md §3).
#pragma once

#if defined(__CUDACC__)
#define FT_HD __host__ __device__ __forceinline__
#else
#define FT_HD inline
#endif
