/// @file
/// Probe kernels built for architectures other than the build's (tests/gpu/kernel_image_probe_*.cu): their host
/// stubs, for the kernel-image check's GPU test.
#pragma once

namespace facetrace::testing {

/// A kernel compiled to sm_80 SASS only: no image for a device of another major architecture.
const void* probe_kernel_sm80_sass();
/// A kernel compiled to compute_80 PTX only: the driver JIT-compiles it for any newer device.
const void* probe_kernel_compute80_ptx();

}  // namespace facetrace::testing
