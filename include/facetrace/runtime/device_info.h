/// @file
/// DeviceInfo: what `facetrace info` and the backends report about the GPU.
#pragma once

#include <cstdint>
#include <string>

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
};

}  // namespace facetrace::runtime
