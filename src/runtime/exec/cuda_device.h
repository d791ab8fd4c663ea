/// @file
/// Private, CUDA builds only: CudaDevice, the DeviceContext of a process that owns CUDA (in-process executor,
/// facetrace-gpud): device set-up, arena registration, compute stream, ring, scratch and resident buffers.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "facetrace/runtime/arena.h"
#include "facetrace/runtime/executor.h"
#include "facetrace/runtime/op.h"

namespace facetrace::runtime {

/// ok when `kernel` (a __global__ function's host stub) has an image the current device can load;
/// "not supported: no kernel image for sm_XY (built for <built_for>)" (kNotSupported) when it has none, or a
/// driver-too-old refusal when only PTX the driver cannot compile is there. Clears the (non-sticky) error.
Status check_kernel_image(const void* kernel, int cc_major, int cc_minor, const std::string& built_for);
/// "not supported: driver too old (CUDA runtime 13.0 needs driver >= 580; the installed driver supports
/// CUDA 12.4)" for cudaRuntimeGetVersion / cudaDriverGetVersion encodings.
Status driver_too_old_status(int runtime_version, int driver_version);

class CudaDevice final : public DeviceContext {
 public:
  /// Initialises CUDA on the device ExecutorOptions::gpu_device / local_rank select (else 0), checks that this
  /// build has a kernel image for it, registers the whole arena (cudaHostRegisterPortable) and creates the
  /// stream and ring. kNotSupported "no GPU: …" without a device or driver; kNotSupported "not supported: …"
  /// (state kUnsupported) for no kernel image, a driver older than the runtime, or a selector naming no device.
  static Expected<std::unique_ptr<CudaDevice>> create(std::shared_ptr<SharedArena> arena,
                                                      const ExecutorOptions& options);
  ~CudaDevice() override;

  CUstream_st* stream() override { return stream_; }
  ReadbackRing& ring() override { return *ring_; }
  Expected<DeviceSpan> scratch(std::string_view name, std::uint64_t bytes) override;
  Expected<DeviceSpan> resident(std::string_view name) override;
  const DeviceInfo& info() const override { return info_; }

  /// The info plus cuDNN / cuBLAS versions (loaded on first use with dlopen).
  DeviceInfo info_with_libraries();
  Status put_resident(const std::string& name, std::span<const std::byte> bytes);
  Status drop_resident(const std::string& name);

 private:
  CudaDevice() = default;
  std::shared_ptr<SharedArena> arena_;
  DeviceInfo info_;
  bool libraries_probed_ = false;
  bool registered_ = false;
  CUstream_st* stream_ = nullptr;
  std::unique_ptr<ReadbackRing> ring_;
  std::map<std::string, DeviceSpan, std::less<>> scratch_;
  std::map<std::string, DeviceSpan, std::less<>> residents_;
};

}  // namespace facetrace::runtime
