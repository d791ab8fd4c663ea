/// @file
/// The runtime's built-in ops (CUDA builds): the test workload (fill ramp, sums) and a device spin.
#include <string>

#include "common/cuda_check.cuh"
#include "facetrace/runtime/op.h"
#include "log.h"
#include "runtime/runtime_kernels.h"

namespace facetrace::runtime {
namespace {

Status fill_ramp(DeviceContext& ctx, const OpArgs& a) {
  FillRampArgs f;
  FT_TRY(a.args_as(f));
  if (f.count == 0) return invalid_argument("fill_ramp: count 0");
  const std::uint64_t bytes = f.count * sizeof(float);
  // Two buffers alternate so the chunk in flight (its copy may still run) is never overwritten.
  auto buf = ctx.scratch(f.buffer % 2 == 0 ? "ramp.0" : "ramp.1", bytes);
  if (!buf) return buf.status();
  FT_TRY(launch_fill_ramp(static_cast<float*>(buf->data), f.first, f.count, f.base, f.step, ctx.stream()));
  auto ticket = ctx.ring().record_copy(buf->data, bytes, ctx.stream());
  if (!ticket) return ticket.status();
  a.reply.tickets.push_back(*ticket);
  return {};
}

Status sum_device(DeviceContext& ctx, const float* dev, std::uint64_t count, const OpArgs& a) {
  auto out = ctx.scratch("sum.out", sizeof(double));
  if (!out) return out.status();
  FT_CUDA_TRY(cudaMemsetAsync(out->data, 0, sizeof(double), ctx.stream()));
  FT_TRY(launch_sum_floats(dev, count, static_cast<double*>(out->data), ctx.stream()));
  double host = 0.0;
  FT_CUDA_TRY(cudaMemcpyAsync(&host, out->data, sizeof(double), cudaMemcpyDeviceToHost, ctx.stream()));
  FT_CUDA_TRY(cudaStreamSynchronize(ctx.stream()));
  a.reply.put(host);
  return {};
}

Status sum_floats(DeviceContext& ctx, const OpArgs& a) {
  const std::uint64_t count = a.in.size() / sizeof(float);
  if (count == 0) {
    a.reply.put(0.0);
    return {};
  }
  auto in = ctx.scratch("sum.in", count * sizeof(float));
  if (!in) return in.status();
  FT_CUDA_TRY(
      cudaMemcpyAsync(in->data, a.in.data(), count * sizeof(float), cudaMemcpyHostToDevice, ctx.stream()));
  return sum_device(ctx, static_cast<const float*>(in->data), count, a);
}

Status resident_sum(DeviceContext& ctx, const OpArgs& a) {
  const std::string name(reinterpret_cast<const char*>(a.args.data()), a.args.size());
  auto r = ctx.resident(name);
  if (!r) return r.status();
  return sum_device(ctx, static_cast<const float*>(r->data), r->bytes / sizeof(float), a);
}

Status spin(DeviceContext& ctx, const OpArgs& a) {
  std::uint32_t ms = 0;
  FT_TRY(a.args_as(ms));
  FT_TRY(launch_spin(ms, ctx.stream()));
  FT_CUDA_TRY(cudaStreamSynchronize(ctx.stream()));
  return {};
}

}  // namespace

void register_builtin_ops(OpRegistry& r) {
  const struct {
    OpId id;
    const char* name;
    Status (*handler)(DeviceContext&, const OpArgs&);
  } builtins[] = {{ops::kFillRamp, "fill_ramp", fill_ramp},
                  {ops::kSumFloats, "sum_floats", sum_floats},
                  {ops::kSpin, "spin", spin},
                  {ops::kResidentSum, "resident_sum", resident_sum}};
  for (const auto& b : builtins) {
    // Only a clash of ids fails here (a provider that took a runtime id): that op stays the other one's.
    if (Status st = r.add(b.id, b.name, b.handler); !st.ok())
      FT_LOG_ERROR("built-in ops: {}", st.to_string());
  }
}

}  // namespace facetrace::runtime
