/// @file
/// Device build of the shared physics (src/tracer/physics) plus a probe kernel over (x, y, s) tuples.
#include <cuda_runtime.h>

#include <string>

#include "tracer/physics/transport.h"
#include "tracer/physics_probe.h"

namespace facetrace::tracer {
namespace {

/// One thread per tuple; planes are read from global memory; output out[i] = trace_sample(tuple i).
/// Deterministic: each tuple is a pure function of its inputs.
__global__ void physics_probe_kernel(physics::TraceParams params, const physics::GpuPlane* planes,
                                     const PhysicsProbeTuple* tuples, std::uint32_t count,
                                     physics::SampleXyz* out) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const PhysicsProbeTuple t = tuples[i];
  out[i] = physics::trace_sample(params, planes, t.x, t.y, t.s);
}

Status cuda_failure(cudaError_t err, const char* call, int line) {
  const Code code = (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) ? Code::kDeclined
                                                                                     : Code::kInternal;
  return Status(code, std::string(call) + " failed: " + cudaGetErrorString(err) + " (" + __FILE__ + ":" +
                          std::to_string(line) + ")");
}

#define FT_PROBE_TRY(call)                                             \
  do {                                                                 \
    if (const cudaError_t ft_err_ = (call); ft_err_ != cudaSuccess) {  \
      return cuda_failure(ft_err_, #call, __LINE__);                   \
    }                                                                  \
  } while (false)

/// Device allocations of one probe call, freed on every exit path.
struct ProbeBuffers {
  physics::GpuPlane* planes = nullptr;
  PhysicsProbeTuple* tuples = nullptr;
  physics::SampleXyz* out = nullptr;
  ProbeBuffers() = default;
  ProbeBuffers(const ProbeBuffers&) = delete;
  ProbeBuffers& operator=(const ProbeBuffers&) = delete;
  ~ProbeBuffers() {
    if (out) cudaFree(out);
    if (tuples) cudaFree(tuples);
    if (planes) cudaFree(planes);
  }
};

}  // namespace

Status launch_physics_probe(const physics::TraceParams& params, const physics::GpuPlane* planes,
                            const PhysicsProbeTuple* tuples, std::uint32_t count, physics::SampleXyz* out) {
  if (params.plane_count > physics::kMaxPlanes || (params.plane_count && !planes) || (count && (!tuples || !out))) {
    return invalid_argument("launch_physics_probe: bad plane or tuple buffers");
  }
  if (count == 0) return {};
  ProbeBuffers d;
  const std::size_t plane_bytes = sizeof(physics::GpuPlane) * (params.plane_count ? params.plane_count : 1);
  FT_PROBE_TRY(cudaMalloc(&d.planes, plane_bytes));
  FT_PROBE_TRY(cudaMalloc(&d.tuples, sizeof(PhysicsProbeTuple) * count));
  FT_PROBE_TRY(cudaMalloc(&d.out, sizeof(physics::SampleXyz) * count));
  if (params.plane_count) {
    FT_PROBE_TRY(cudaMemcpy(d.planes, planes, sizeof(physics::GpuPlane) * params.plane_count,
                            cudaMemcpyHostToDevice));
  }
  FT_PROBE_TRY(cudaMemcpy(d.tuples, tuples, sizeof(PhysicsProbeTuple) * count, cudaMemcpyHostToDevice));
  const unsigned block = 64;
  const unsigned grid = (count + block - 1) / block;
  physics_probe_kernel<<<grid, block>>>(params, d.planes, d.tuples, count, d.out);
  FT_PROBE_TRY(cudaGetLastError());
  FT_PROBE_TRY(cudaMemcpy(out, d.out, sizeof(physics::SampleXyz) * count, cudaMemcpyDeviceToHost));
  return {};
}

}  // namespace facetrace::tracer
