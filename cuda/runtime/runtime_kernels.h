/// @file
/// Launchers of the runtime's own kernels (test workload and fault injection). Plain header: host .cpp code
/// reaches the kernels only through these.
#pragma once

#include <cstdint>
#include <string>

#include "facetrace/core/status.h"

struct CUstream_st;

namespace facetrace::runtime {

/// out[i] = base + step·(first + i), i < count (f32).
Status launch_fill_ramp(float* out, std::uint64_t first, std::uint64_t count, float base, float step,
                        CUstream_st* stream);
/// *out += Σ in[i] in double (out must be zeroed by the caller).
Status launch_sum_floats(const float* in, std::uint64_t count, double* out, CUstream_st* stream);
/// Busy-waits `ms` milliseconds on the device (hang / watchdog tests).
Status launch_spin(std::uint32_t ms, CUstream_st* stream);
/// Writes through an invalid device pointer: a genuine cudaErrorIllegalAddress at the next synchronisation.
Status launch_bad_write(CUstream_st* stream);

/// The host stub of the runtime's probe kernel, compiled for the same architectures as every other kernel
/// (the one list in CMakeLists.txt): the start-up kernel-image check asks cudaFuncGetAttributes about it.
const void* probe_kernel_address();
/// The architectures nvcc compiled this file for (__CUDA_ARCH_LIST__: "compute_80, compute_90"), the
/// fallback of built_cuda_architectures() when CMake's list is symbolic ("native", "all").
std::string cuda_arch_list_compiled();

}  // namespace facetrace::runtime
