/// @file
/// CudaDevice: the DeviceContext of the process that owns CUDA.
#include "exec/cuda_device.h"

#include <dlfcn.h>

#include "log.h"
#include "common/cuda_check.cuh"

namespace facetrace::runtime {
namespace {

int cudnn_version() {
  for (const char* lib : {"libcudnn.so.9", "libcudnn.so"}) {
    if (void* h = ::dlopen(lib, RTLD_LAZY | RTLD_LOCAL)) {
      using Fn = std::size_t (*)();
      if (auto f = reinterpret_cast<Fn>(::dlsym(h, "cudnnGetVersion"))) return static_cast<int>(f());
    }
  }
  return 0;
}

int cublas_version() {
  for (const char* lib : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
    if (void* h = ::dlopen(lib, RTLD_LAZY | RTLD_LOCAL)) {
      using Fn = int (*)(int, int*);  // cublasGetProperty(libraryPropertyType, int*)
      if (auto f = reinterpret_cast<Fn>(::dlsym(h, "cublasGetProperty"))) {
        int major = 0, minor = 0, patch = 0;
        if (f(0, &major) == 0 && f(1, &minor) == 0 && f(2, &patch) == 0)
          return major * 10000 + minor * 100 + patch;
      }
    }
  }
  return 0;
}

}  // namespace

Expected<std::unique_ptr<CudaDevice>> CudaDevice::create(std::shared_ptr<SharedArena> arena,
                                                         const ExecutorOptions& options) {
  std::unique_ptr<CudaDevice> d(new CudaDevice());
  d->arena_ = std::move(arena);
  int count = 0;
  FT_CUDA_TRY(cudaGetDeviceCount(&count));
  if (count == 0) return Status(Code::kNotSupported, "no GPU: no CUDA device is visible");
  const int dev = options.device >= 0 ? options.device : 0;
  if (dev >= count)
    return Status(Code::kNotSupported, "no GPU: device " + std::to_string(dev) + " requested, " +
                                           std::to_string(count) + " visible");
  FT_CUDA_TRY(cudaSetDevice(dev));
  FT_CUDA_TRY(cudaFree(nullptr));
  cudaDeviceProp p{};
  FT_CUDA_TRY(cudaGetDeviceProperties(&p, dev));
  d->info_.name = p.name;
  d->info_.cc_major = p.major;
  d->info_.cc_minor = p.minor;
  d->info_.total_memory = p.totalGlobalMem;
  d->info_.multiprocessors = p.multiProcessorCount;
  FT_CUDA_TRY(cudaDeviceGetAttribute(&d->info_.async_engines, cudaDevAttrAsyncEngineCount, dev));
  std::size_t free_b = 0, total_b = 0;
  FT_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
  d->info_.free_memory = free_b;
  FT_CUDA_TRY(cudaDriverGetVersion(&d->info_.driver_version));
  FT_CUDA_TRY(cudaRuntimeGetVersion(&d->info_.runtime_version));
  if (const cudaError_t e = cudaHostRegister(d->arena_->base(), d->arena_->size(), cudaHostRegisterPortable);
      e != cudaSuccess) {
    const Status st = cuda_status(static_cast<int>(e), "cudaHostRegister(arena)", __FILE__, __LINE__);
    if (st.code() == Code::kDeviceLost || st.code() == Code::kNotSupported) return st;
    // Still correct, only slower: copies into pageable memory are staged by the driver.
    FT_LOG_WARN("could not page-lock the {}-byte shared arena ({}); readback runs unpinned and slower",
                d->arena_->size(), st.what());
  } else {
    d->registered_ = true;
  }
  cudaStream_t s = nullptr;
  FT_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  d->stream_ = s;
  RingOptions ro;
  ro.budget_bytes = d->arena_->ring_bytes();
  ro.max_slots_per_class = ReadbackRing::slots_from_env();
  d->ring_ = std::make_unique<ReadbackRing>(d->arena_->ring_region(), ro, make_cuda_copy_engine());
  return d;
}

CudaDevice::~CudaDevice() {
  ring_.reset();  // logs the stats; the engine skips CUDA calls once the process is poisoned
  if (process_cuda_poisoned())
    return;  // never call CUDA again after a sticky error (docs/design/runtime.md §4)
  if (stream_ != nullptr) FT_CUDA_IGNORE(cudaStreamSynchronize(stream_));
  for (auto& [n, b] : scratch_) FT_CUDA_IGNORE(cudaFree(b.data));
  for (auto& [n, b] : residents_) FT_CUDA_IGNORE(cudaFree(b.data));
  if (stream_ != nullptr) FT_CUDA_IGNORE(cudaStreamDestroy(stream_));
  if (registered_) FT_CUDA_IGNORE(cudaHostUnregister(arena_->base()));
}

DeviceInfo CudaDevice::info_with_libraries() {
  if (!libraries_probed_) {
    info_.cudnn_version = cudnn_version();
    info_.cublas_version = cublas_version();
    libraries_probed_ = true;
  }
  return info_;
}

Expected<DeviceSpan> CudaDevice::scratch(std::string_view name, std::uint64_t bytes) {
  auto it = scratch_.find(name);
  if (it != scratch_.end() && it->second.bytes >= bytes) return it->second;
  if (it != scratch_.end()) {
    FT_CUDA_TRY(cudaStreamSynchronize(stream_));
    FT_CUDA_TRY(cudaFree(it->second.data));
    scratch_.erase(it);
  }
  void* p = nullptr;
  FT_CUDA_TRY(cudaMalloc(&p, bytes));
  DeviceSpan s{p, bytes};
  scratch_.emplace(std::string(name), s);
  return s;
}

Expected<DeviceSpan> CudaDevice::resident(std::string_view name) {
  auto it = residents_.find(name);
  if (it == residents_.end()) return invalid_argument("no resident named '" + std::string(name) + "'");
  return it->second;
}

Status CudaDevice::put_resident(const std::string& name, std::span<const std::byte> bytes) {
  FT_TRY(drop_resident(name));
  void* p = nullptr;
  FT_CUDA_TRY(cudaMalloc(&p, bytes.empty() ? 1 : bytes.size()));
  residents_[name] = DeviceSpan{p, bytes.size()};
  if (!bytes.empty()) {
    FT_CUDA_TRY(cudaMemcpyAsync(p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream_));
    FT_CUDA_TRY(cudaStreamSynchronize(stream_));
  }
  return {};
}

Status CudaDevice::drop_resident(const std::string& name) {
  auto it = residents_.find(name);
  if (it == residents_.end()) return {};
  FT_CUDA_TRY(cudaStreamSynchronize(stream_));
  FT_CUDA_TRY(cudaFree(it->second.data));
  residents_.erase(it);
  return {};
}

}  // namespace facetrace::runtime
