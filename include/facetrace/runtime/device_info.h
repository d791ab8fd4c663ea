/// @file
/// DeviceInfo: what `facetrace info` and the backends report about the GPU.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace facetrace::runtime {

/// Facts about the device an executor drives. Versions are CUDA's integer encodings (12080 = 12.8); 0 when
/// unknown or the library is not installed.
struct DeviceInfo {
  std::string name;                ///< "NVIDIA H200"
  int cc_major = 0, cc_minor = 0;  ///< compute capability
  std::uint64_t total_memory = 0;  ///< bytes
  std::uint64_t free_memory = 0;   ///< bytes, at start-up
  int multiprocessors = 0;
  int async_engines = 0;  ///< cudaDevAttrAsyncEngineCount (3 on the H200)
  int driver_version = 0;
  int runtime_version = 0;
  int cudnn_version = 0;   ///< cudnnGetVersion() of the installed library (e.g. 91000 = 9.10.0)
  int cublas_version = 0;  ///< major*10000 + minor*100 + patch
  bool simulated = false;  ///< a SimulatedExecutor (no CUDA at all)
  int ordinal = 0;         ///< the device's index among those its process sees
  std::string uuid;        ///< "GPU-…"; "" when unknown
  std::string visible_devices;  ///< CUDA_VISIBLE_DEVICES of the process that drives it ("" when unset)
};

/// The CUDA architectures this build carries code for, e.g. "sm_80, sm_86, sm_89, sm_90, sm_100, sm_120,
/// compute_120" (SASS as sm_XY, PTX as compute_XY); "none" in a build without CUDA.
std::string built_cuda_architectures();
/// A CMake CUDA_ARCHITECTURES list ("80-real;90-real;90-virtual", ';' or ',' separated; a bare "86" is both)
/// in that form: SASS entries first, then PTX. "none" for an empty list.
std::string format_cuda_architectures(std::string_view cmake_list);

}  // namespace facetrace::runtime
