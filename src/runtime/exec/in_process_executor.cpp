/// @file
/// InProcessExecutor (CUDA builds): CUDA in this process. After a sticky error it stays lost for the life of
/// the process. The state machine is the Executor base's; this file is the device behind its hooks.
#include "common/cuda_check.cuh"
#include "exec/cuda_device.h"
#include "facetrace/runtime/cuda_errors.h"
#include "facetrace/runtime/executor.h"
#include "log.h"
#include "runtime/runtime_kernels.h"

namespace facetrace::runtime {
namespace {

class InProcessExecutor final : public Executor {
 public:
  InProcessExecutor(std::shared_ptr<SharedArena> arena, ExecutorOptions options)
      : arena_(std::move(arena)), options_(std::move(options)) {}

  ExecutorMode mode() const override { return ExecutorMode::kInProcess; }
  SharedArena& arena() override { return *arena_; }

 protected:
  Status start_locked() override {
    if (process_cuda_poisoned()) return {Code::kDeviceLost, poisoned_message()};
    if (!arena_) return {Code::kNotSupported, "no shared arena"};
    auto dev = CudaDevice::create(arena_, options_);
    if (!dev) return dev.status();
    device_ = std::move(*dev);
    FT_LOG_INFO("in-process GPU executor on {}", device_->info().name);
    return {};
  }

  Status replace_locked() override {
    // Only a simulated loss can be undone in this process; a sticky error poisons it for good.
    if (!simulated_loss_ || process_cuda_poisoned()) return {Code::kDeviceLost, poisoned_message()};
    simulated_loss_ = false;
    return {};
  }

  Expected<DeviceInfo> info_locked() override { return device_->info_with_libraries(); }

  Expected<OpReply> invoke_locked(const OpCall& call) override {
    const OpHandler* handler = OpRegistry::global().find(call.op);
    if (handler == nullptr)
      return Status(Code::kNotSupported,
                    OpRegistry::global().name(call.op) + " is not registered in this process");
    const auto in = arena_->view(call.in);
    const auto out = arena_->view(call.out);
    if ((call.in.size != 0 && in.empty()) || (call.out.size != 0 && out.empty()))
      return invalid_argument("op arena range outside the arena");
    OpReply reply;
    OpArgs args{call.args, in, out, reply};
    if (Status st = noted((*handler)(*device_, args)); !st.ok())
      return st.with_context(OpRegistry::global().name(call.op));
    if (device_->ring().lost()) return Status(Code::kDeviceLost, device_->ring().lost_reason());
    return reply;
  }

  Expected<RingStats> ring_stats_locked() override { return device_->ring().stats(); }

  Status inject_fault_locked(FaultKind kind) override {
    if (kind == FaultKind::kSimulatedLoss) {
      simulated_loss_ = true;
      return {Code::kDeviceLost, "simulated device loss (fault injection)"};
    }
    Status st = launch_bad_write(device_->stream());
    if (st.ok()) {
      const cudaError_t e = cudaStreamSynchronize(device_->stream());
      st = e == cudaSuccess ? internal_error("injected bad write did not fault")
                            : cuda_status(static_cast<int>(e), "cudaStreamSynchronize after bad_write_kernel",
                                          __FILE__, __LINE__);
    }
    return noted(std::move(st));
  }

  Status upload_resident_locked(const std::string& name, std::span<const std::byte> bytes) override {
    return noted(device_->put_resident(name, bytes));
  }
  Status free_resident_locked(const std::string& name) override {
    return noted(device_->drop_resident(name));
  }

  Expected<ArenaRange> ring_wait_locked(const RingTicket& t, std::chrono::milliseconds deadline) override {
    if (Status st = device_->ring().wait(t, std::chrono::steady_clock::now() + deadline); !st.ok())
      return noted(std::move(st));
    auto off = device_->ring().host_offset(t);
    if (!off) return off.status();
    return ArenaRange{*off, t.byte_len};  // the ring region starts at arena offset 0
  }
  Status ring_release_locked(const RingTicket& t) override {
    return noted(device_->ring().with_mapped(t, [](std::span<const std::byte>) {}));
  }

 private:
  static std::string poisoned_message() {
    return "CUDA in this process is poisoned by a sticky error (" + process_poison_reason() +
           "); the in-process executor cannot recover: restart the process or use "
           "FACETRACE_GPU_ISOLATION=process";
  }
  /// Passes `st` through; loses the executor first when `st` is a loss (the message without the caller's
  /// context) or another thread's sticky error poisoned this process.
  Status noted(Status st) {
    if (st.code() == Code::kDeviceLost)
      lose_locked(st.what());
    else if (process_cuda_poisoned())
      lose_locked(process_poison_reason());
    return st;
  }

  std::shared_ptr<SharedArena> arena_;
  ExecutorOptions options_;
  bool simulated_loss_ = false;
  std::unique_ptr<CudaDevice> device_;
};

}  // namespace

std::unique_ptr<Executor> make_in_process_executor(std::shared_ptr<SharedArena> arena,
                                                   ExecutorOptions options) {
  return std::make_unique<InProcessExecutor>(std::move(arena), std::move(options));
}

}  // namespace facetrace::runtime
