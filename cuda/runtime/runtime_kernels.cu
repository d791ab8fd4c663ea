/// @file
/// The runtime's own kernels: fill/sum (test workload), spin (hang tests), bad write (fault injection).
#include "runtime/runtime_kernels.h"
#include "common/cuda_check.cuh"

namespace facetrace::runtime {
namespace {

/// Thread i writes out[i]; grid-stride. Deterministic.
__global__ void fill_ramp_kernel(float* out, std::uint64_t first, std::uint64_t count, float base,
                                 float step) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < count;
       i += std::uint64_t{gridDim.x} * blockDim.x)
    out[i] = base + step * static_cast<float>(first + i);
}

/// Grid-stride partial sums in double, block reduction in shared memory, one atomicAdd per block
/// (order of block additions is not fixed: the result is exact for the integer-valued test inputs).
__global__ void sum_floats_kernel(const float* in, std::uint64_t count, double* out) {
  __shared__ double part[256];
  double s = 0.0;
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < count;
       i += std::uint64_t{gridDim.x} * blockDim.x)
    s += in[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, part[0]);
}

/// One thread spins on the global timer.
__global__ void spin_kernel(std::uint64_t ns) {
  std::uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

/// Never launched: its image (or its absence) for the current device is what the start-up check asks about.
__global__ void probe_kernel(int* p) {
  if (p != nullptr) *p = 1;
}

/// One thread stores through a pointer no allocation covers.
__global__ void bad_write_kernel(int* p) { *p = 42; }

unsigned grid_for(std::uint64_t n) {
  const std::uint64_t g = (n + 255) / 256;
  return static_cast<unsigned>(g > 4096 ? 4096 : (g == 0 ? 1 : g));
}

}  // namespace

Status launch_fill_ramp(float* out, std::uint64_t first, std::uint64_t count, float base, float step,
                        CUstream_st* stream) {
  if (out == nullptr || count == 0) return invalid_argument("fill_ramp: empty output");
  fill_ramp_kernel<<<grid_for(count), 256, 0, stream>>>(out, first, count, base, step);
  FT_CUDA_LAUNCH_CHECK("fill_ramp_kernel<<<>>>", stream);
  return {};
}

Status launch_sum_floats(const float* in, std::uint64_t count, double* out, CUstream_st* stream) {
  if (count == 0) return {};
  sum_floats_kernel<<<grid_for(count), 256, 0, stream>>>(in, count, out);
  FT_CUDA_LAUNCH_CHECK("sum_floats_kernel<<<>>>", stream);
  return {};
}

Status launch_spin(std::uint32_t ms, CUstream_st* stream) {
  spin_kernel<<<1, 1, 0, stream>>>(std::uint64_t{ms} * 1000000ull);
  FT_CUDA_LAUNCH_CHECK("spin_kernel<<<>>>", stream);
  return {};
}

Status launch_bad_write(CUstream_st* stream) {
  bad_write_kernel<<<1, 1, 0, stream>>>(reinterpret_cast<int*>(std::uintptr_t{0x10}));
  FT_CUDA_LAUNCH_CHECK("bad_write_kernel<<<>>>", stream);
  return {};
}

const void* probe_kernel_address() { return reinterpret_cast<const void*>(&probe_kernel); }

std::string cuda_arch_list_compiled() {
#if defined(__CUDA_ARCH_LIST__)
#define FT_STRINGIFY2(...) #__VA_ARGS__
#define FT_STRINGIFY(...) FT_STRINGIFY2(__VA_ARGS__)
  const std::string list = FT_STRINGIFY(__CUDA_ARCH_LIST__);  // "800,900"
  std::string out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = list.find(',', start);
    const std::string v = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (v.size() > 1) out += (out.empty() ? "compute_" : ", compute_") + v.substr(0, v.size() - 1);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out.empty() ? std::string("unknown") : out;
#else
  return "unknown";
#endif
}

}  // namespace facetrace::runtime
