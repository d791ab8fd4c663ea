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

class CudaDevice final : public DeviceContext {
 public:
  /// Initialises CUDA on `options.device` (or 0), registers the whole arena (cudaHostRegisterPortable) and
  /// creates the stream and ring. kNotSupported "no GPU: …" without a device or driver.
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
