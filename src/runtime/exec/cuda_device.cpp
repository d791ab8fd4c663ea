/// @file
/// CudaDevice: the DeviceContext of the process that owns CUDA.
#include "exec/cuda_device.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>
#include <vector>

#include "log.h"
#include "common/cuda_check.cuh"
#include "exec/exec_internal.h"
#include "facetrace/runtime/cuda_errors.h"
#include "runtime/runtime_kernels.h"

namespace facetrace::runtime {
namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

/// Faults `bytes` at `base` in (allocating the memfd's pages and their page-table entries) without changing
/// a byte, so that cudaHostRegister afterwards only pins them. MADV_POPULATE_WRITE needs Linux 5.14; older
/// kernels read one byte per page.
void prefault_slice(std::byte* base, std::uint64_t bytes) {
#ifdef MADV_POPULATE_WRITE
  if (::madvise(base, bytes, MADV_POPULATE_WRITE) == 0) return;
#endif
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  unsigned sink = 0;
  for (std::uint64_t off = 0; off < bytes; off += page)
    sink += static_cast<unsigned>(*reinterpret_cast<volatile const unsigned char*>(base + off));
  static_cast<void>(sink);
}

/// The arena's pages faulted in by up to four threads (page allocation is the slow part and scales), while
/// CUDA initialises on the calling thread (docs/design/runtime.md §6).
void prefault(std::byte* base, std::uint64_t bytes) {
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t pages = (bytes + page - 1) / page;
  const std::uint64_t n = std::clamp<std::uint64_t>(std::thread::hardware_concurrency(), 1, 4);
  const std::uint64_t per = (pages + n - 1) / n * page;
  std::vector<std::jthread> threads;
  for (std::uint64_t off = per; off < bytes; off += per)
    threads.emplace_back(prefault_slice, base + off, std::min(per, bytes - off));
  prefault_slice(base, std::min(per, bytes));
}

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

std::string cuda_version_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

/// The oldest Linux driver branch that runs a CUDA runtime of this major version (minor-version
/// compatibility within a major; CUDA 13.0 needs driver ≥ 580, docs/runtime.md "Device selection").
const char* minimum_driver_for(int runtime_version) {
  switch (runtime_version / 1000) {
    case 11: return "450";
    case 12: return "525";
    case 13: return "580";
    default: return "the one released with it";
  }
}

/// Why CUDA refuses to start on this machine, for the errors that mean "this driver cannot run this
/// build"; nullopt for any other error.
std::optional<Status> driver_refusal(cudaError_t e) {
  int rt = 0, drv = 0;
  static_cast<void>(cudaRuntimeGetVersion(&rt));  // both work without a device and without a driver
  static_cast<void>(cudaDriverGetVersion(&drv));
  switch (e) {
    case cudaErrorInsufficientDriver:
      if (drv == 0)
        return Status(Code::kNotSupported, "no GPU: no NVIDIA driver is installed (the CUDA runtime finds none)");
      return driver_too_old_status(rt, drv);
    case cudaErrorSystemDriverMismatch:
      return unsupported_device(
          "the NVIDIA kernel module and the user-space driver library differ in version "
          "(cudaErrorSystemDriverMismatch): reload the module or reboot");
    case cudaErrorCompatNotSupportedOnDevice:
      return unsupported_device(
          "the CUDA forward-compatibility driver does not support this GPU "
          "(cudaErrorCompatNotSupportedOnDevice): install driver >= " +
          std::string(minimum_driver_for(rt)));
    default: return std::nullopt;
  }
}

std::string uuid_text(const cudaUUID_t& u) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  char s[64];
  std::snprintf(s, sizeof s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
  return s;
}

std::string visible_devices_env() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v ? v : "";
}

/// The device to use among `count`: ExecutorOptions::gpu_device (an index, or a UUID matched against each
/// device), else local_rank mod count, else 0.
Expected<int> choose_device(const ExecutorOptions& options, int count) {
  const std::string& sel = options.gpu_device;
  const std::string where =
      visible_devices_env().empty() ? std::string() : " (CUDA_VISIBLE_DEVICES=" + visible_devices_env() + ")";
  if (!sel.empty()) {
    FT_TRY(validate_gpu_selector(sel));
    if (sel[0] >= '0' && sel[0] <= '9') {
      const int i = std::atoi(sel.c_str());
      if (i >= count)
        return unsupported_device("GPU device " + sel + " requested, " + std::to_string(count) + " visible" +
                                  where);
      return i;
    }
    for (int i = 0; i < count; ++i) {
      cudaDeviceProp p{};
      FT_CUDA_TRY(cudaGetDeviceProperties(&p, i));
      if (uuid_text(p.uuid).starts_with(sel)) return i;
    }
    return unsupported_device("GPU " + sel + " is not among the " + std::to_string(count) +
                              " visible devices" + where);
  }
  if (options.local_rank >= 0) return options.local_rank % count;
  return 0;
}

}  // namespace

Status driver_too_old_status(int runtime_version, int driver_version) {
  return unsupported_device("driver too old (CUDA runtime " + cuda_version_text(runtime_version) +
                            " needs driver ≥ " + minimum_driver_for(runtime_version) +
                            "; the installed driver supports CUDA " + cuda_version_text(driver_version) +
                            ")");
}

Status check_kernel_image(const void* kernel, int cc_major, int cc_minor, const std::string& built_for) {
  cudaFuncAttributes attr{};
  const cudaError_t e = cudaFuncGetAttributes(&attr, kernel);
  if (e == cudaSuccess) return {};
  static_cast<void>(cudaGetLastError());  // not sticky: clear it so the next call does not report it
  const std::string sm = "sm_" + std::to_string(cc_major) + std::to_string(cc_minor);
  if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidKernelImage)
    return unsupported_device("no kernel image for " + sm + " (built for " + built_for + ")");
  if (e == cudaErrorUnsupportedPtxVersion) {
    int rt = 0;
    static_cast<void>(cudaRuntimeGetVersion(&rt));
    return unsupported_device("driver too old to compile this build's PTX for " + sm + " (CUDA runtime " +
                              cuda_version_text(rt) + " needs driver ≥ " + minimum_driver_for(rt) +
                              "; built for " + built_for + ")");
  }
  if (auto refused = driver_refusal(e)) return *refused;
  return cuda_status(static_cast<int>(e), "cudaFuncGetAttributes(probe_kernel)", __FILE__, __LINE__);
}

Expected<std::vector<DeviceListing>> enumerate_cuda_devices() {
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    if (auto refused = driver_refusal(e)) return *refused;
    return cuda_status(static_cast<int>(e), "cudaGetDeviceCount", __FILE__, __LINE__);
  }
  std::vector<DeviceListing> out;
  const std::string built = built_cuda_architectures();
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    FT_CUDA_TRY(cudaGetDeviceProperties(&p, i));
    DeviceListing d;
    d.index = i;
    d.uuid = uuid_text(p.uuid);
    char pci[32];
    std::snprintf(pci, sizeof pci, "%08X:%02X:%02X.0", p.pciDomainID, p.pciBusID, p.pciDeviceID);
    d.pci_bus_id = pci;
    d.name = p.name;
    d.cc_major = p.major;
    d.cc_minor = p.minor;
    d.total_memory = p.totalGlobalMem;
    FT_CUDA_TRY(cudaSetDevice(i));
    const Status img = check_kernel_image(probe_kernel_address(), p.major, p.minor, built);
    if (img.code() == Code::kDeviceLost) return img;
    d.status = img.ok() ? std::string("ready") : img.what();
    out.push_back(std::move(d));
  }
  return out;
}

Expected<std::unique_ptr<CudaDevice>> CudaDevice::create(std::shared_ptr<SharedArena> arena,
                                                         const ExecutorOptions& options) {
  std::unique_ptr<CudaDevice> d(new CudaDevice());
  d->arena_ = std::move(arena);
  const auto t_fault = std::chrono::steady_clock::now();
  std::jthread faulting([base = d->arena_->base(), bytes = d->arena_->size(), t_fault] {
    prefault(base, bytes);
    FT_LOG_DEBUG("start-up: faulted the {} MB arena in {:.1f} ms", bytes >> 20, ms_since(t_fault));
  });
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    if (auto refused = driver_refusal(e)) return *refused;
    if (e == cudaErrorNoDevice && !visible_devices_env().empty())
      return Status(Code::kNotSupported,
                    "no GPU: no CUDA device is visible (CUDA_VISIBLE_DEVICES=" + visible_devices_env() + ")");
    return cuda_status(static_cast<int>(e), "cudaGetDeviceCount", __FILE__, __LINE__);
  }
  if (count == 0) return Status(Code::kNotSupported, "no GPU: no CUDA device is visible");
  FT_LOG_DEBUG("start-up: the CUDA driver initialised in {:.1f} ms", ms_since(t_fault));
  auto chosen = choose_device(options, count);
  if (!chosen) return chosen.status();
  const int dev = *chosen;
  const auto t_ctx = std::chrono::steady_clock::now();
  FT_CUDA_TRY(cudaSetDevice(dev));
  if (const cudaError_t e = cudaFree(nullptr); e != cudaSuccess) {
    if (auto refused = driver_refusal(e)) return *refused;
    return cuda_status(static_cast<int>(e), "cudaFree(nullptr)", __FILE__, __LINE__);
  }
  FT_LOG_DEBUG("start-up: CUDA context on device {} in {:.1f} ms", dev, ms_since(t_ctx));
  cudaDeviceProp p{};
  FT_CUDA_TRY(cudaGetDeviceProperties(&p, dev));
  // A build without code for this GPU would fail every launch: say so once, at start (docs/runtime.md).
  FT_TRY(check_kernel_image(probe_kernel_address(), p.major, p.minor, built_cuda_architectures()));
  d->info_.ordinal = dev;
  d->info_.uuid = uuid_text(p.uuid);
  d->info_.visible_devices = visible_devices_env();
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
  faulting.join();
  const auto t_reg = std::chrono::steady_clock::now();
  if (const cudaError_t e = cudaHostRegister(d->arena_->base(), d->arena_->size(), cudaHostRegisterPortable);
      e != cudaSuccess) {
    const Status st = cuda_status(static_cast<int>(e), "cudaHostRegister(arena)", __FILE__, __LINE__);
    if (st.code() == Code::kDeviceLost || st.code() == Code::kNotSupported) return st;
    // Still correct, only slower: copies into pageable memory are staged by the driver.
    FT_LOG_WARN("could not page-lock the {}-byte shared arena ({}); readback runs unpinned and slower",
                d->arena_->size(), st.what());
  } else {
    d->registered_ = true;
    FT_LOG_DEBUG("start-up: page-locked the {} MB arena in {:.1f} ms", d->arena_->size() >> 20, ms_since(t_reg));
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
