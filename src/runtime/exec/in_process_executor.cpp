/// @file
/// InProcessExecutor: CUDA in this process. After a sticky error it stays lost for the life of the process.
#include <mutex>

#include "log.h"
#include "facetrace/runtime/cuda_errors.h"
#include "facetrace/runtime/executor.h"

#ifdef FT_HAVE_CUDA
#include "exec/cuda_device.h"
#include "common/cuda_check.cuh"
#include "runtime/runtime_kernels.h"
#endif

namespace facetrace::runtime {
namespace {

class InProcessExecutor final : public Executor {
 public:
  InProcessExecutor(std::shared_ptr<SharedArena> arena, ExecutorOptions options)
      : arena_(std::move(arena)), options_(std::move(options)) {}
  ~InProcessExecutor() override = default;

  ExecutorMode mode() const override { return ExecutorMode::kInProcess; }

  Status start() override {
    std::lock_guard lock(mu_);
    if (state_ == ExecutorState::kReady) return {};
#ifndef FT_HAVE_CUDA
    state_ = ExecutorState::kNone;
    reason_ = "built without CUDA";
    return {Code::kNotSupported, reason_};
#else
    if (process_cuda_poisoned()) {
      lose_locked(poisoned_message());
      return {Code::kDeviceLost, reason_};
    }
    if (!arena_) {
      state_ = ExecutorState::kNone;
      reason_ = "no shared arena";
      return {Code::kNotSupported, reason_};
    }
    auto dev = CudaDevice::create(arena_, options_);
    if (!dev) {
      if (dev.status().code() == Code::kDeviceLost) {
        lose_locked(dev.status().what());
      } else {
        state_ = ExecutorState::kNone;
        reason_ = dev.status().what();
      }
      return dev.status();
    }
    device_ = std::move(*dev);
    state_ = ExecutorState::kReady;
    FT_LOG_INFO("in-process GPU executor on {}", device_->info().name);
    return {};
#endif
  }

  Status restart() override {
    {
      std::lock_guard lock(mu_);
      if (state_ == ExecutorState::kReady) return {};
      if (state_ != ExecutorState::kLost) return {Code::kNotSupported, "no GPU to restart: " + reason_};
      if (!simulated_loss_ || process_cuda_poisoned())
        return {Code::kDeviceLost, poisoned_message()};
      state_ = ExecutorState::kReady;
      simulated_loss_ = false;
      reason_.clear();
    }
    return reupload_residents();
  }

  ExecutorState state() const override {
    std::lock_guard lock(mu_);
    return state_;
  }
  std::string state_reason() const override {
    std::lock_guard lock(mu_);
    return reason_;
  }
  SharedArena& arena() override { return *arena_; }

  Expected<DeviceInfo> info() override {
    std::lock_guard lock(mu_);
    FT_TRY(ready_locked());
#ifdef FT_HAVE_CUDA
    return device_->info_with_libraries();
#else
    return internal_error("unreachable");
#endif
  }

  Expected<OpReply> invoke(const OpCall& call) override {
    std::lock_guard lock(mu_);
    FT_TRY(ready_locked());
#ifdef FT_HAVE_CUDA
    const OpHandler* handler = OpRegistry::global().find(call.op);
    if (handler == nullptr)
      return Status(Code::kNotSupported, OpRegistry::global().name(call.op) + " is not registered in this process");
    const auto in = arena_->view(call.in);
    const auto out = arena_->view(call.out);
    if ((call.in.size != 0 && in.empty()) || (call.out.size != 0 && out.empty()))
      return invalid_argument("op arena range outside the arena");
    OpReply reply;
    OpArgs args{call.args, in, out, reply};
    Status st = (*handler)(*device_, args);
    if (!st.ok()) {
      note_locked(st);
      return st.with_context(OpRegistry::global().name(call.op));
    }
    if (device_->ring().lost()) {
      lose_locked(device_->ring().lost_reason());
      return Status(Code::kDeviceLost, reason_);
    }
    return reply;
#else
    (void)call;
    return internal_error("unreachable");
#endif
  }

  Expected<RingStats> ring_stats() override {
    std::lock_guard lock(mu_);
#ifdef FT_HAVE_CUDA
    if (device_) return device_->ring().stats();
#endif
    FT_TRY(ready_locked());
    return RingStats{};
  }

  Status ping() override {
    std::lock_guard lock(mu_);
    return ready_locked();
  }

  Status inject_fault(FaultKind kind) override {
    std::lock_guard lock(mu_);
    FT_TRY(ready_locked());
    if (kind == FaultKind::kSimulatedLoss) {
      simulated_loss_ = true;
      lose_locked("simulated device loss (fault injection)");
      return {Code::kDeviceLost, reason_};
    }
#ifdef FT_HAVE_CUDA
    Status st = launch_bad_write(device_->stream());
    if (st.ok()) {
      const cudaError_t e = cudaStreamSynchronize(device_->stream());
      st = e == cudaSuccess ? internal_error("injected bad write did not fault")
                            : cuda_status(static_cast<int>(e), "cudaStreamSynchronize after bad_write_kernel",
                                          __FILE__, __LINE__);
    }
    note_locked(st);
    return st;
#else
    return internal_error("unreachable");
#endif
  }

 protected:
  Status upload_resident(const std::string& name, std::span<const std::byte> bytes) override {
    std::lock_guard lock(mu_);
    FT_TRY(ready_locked());
#ifdef FT_HAVE_CUDA
    Status st = device_->put_resident(name, bytes);
    note_locked(st);
    return st;
#else
    (void)name, (void)bytes;
    return internal_error("unreachable");
#endif
  }
  Status free_resident(const std::string& name) override {
    std::lock_guard lock(mu_);
    FT_TRY(ready_locked());
#ifdef FT_HAVE_CUDA
    Status st = device_->drop_resident(name);
    note_locked(st);
    return st;
#else
    (void)name;
    return internal_error("unreachable");
#endif
  }
  Expected<ArenaRange> ring_wait(const RingTicket& t, std::chrono::milliseconds deadline) override {
    std::lock_guard lock(mu_);
    FT_TRY(ready_locked());
#ifdef FT_HAVE_CUDA
    Status st = device_->ring().wait(t, std::chrono::steady_clock::now() + deadline);
    if (!st.ok()) {
      note_locked(st);
      return st;
    }
    auto off = device_->ring().host_offset(t);
    if (!off) return off.status();
    return ArenaRange{*off, t.byte_len};  // the ring region starts at arena offset 0
#else
    (void)t, (void)deadline;
    return internal_error("unreachable");
#endif
  }
  Status ring_release(const RingTicket& t) override {
    std::lock_guard lock(mu_);
    FT_TRY(ready_locked());
#ifdef FT_HAVE_CUDA
    Status st = device_->ring().with_mapped(t, [](std::span<const std::byte>) {});
    note_locked(st);
    return st;
#else
    (void)t;
    return internal_error("unreachable");
#endif
  }

 private:
  static std::string poisoned_message() {
    return "CUDA in this process is poisoned by a sticky error (" + process_poison_reason() +
           "); the in-process executor cannot recover: restart the process or use FACETRACE_GPU_ISOLATION=process";
  }
  Status ready_locked() const {
    if (state_ == ExecutorState::kReady) return {};
    if (state_ == ExecutorState::kLost) return {Code::kDeviceLost, "in-process GPU lost: " + reason_};
    if (state_ == ExecutorState::kNone) return {Code::kNotSupported, reason_};
    return {Code::kDeclined, "in-process executor not started"};
  }
  void lose_locked(std::string why) {
    if (state_ != ExecutorState::kLost) FT_LOG_WARN("in-process GPU lost: {}", why);
    state_ = ExecutorState::kLost;
    reason_ = std::move(why);
  }
  void note_locked(const Status& st) {
    if (st.code() == Code::kDeviceLost || process_cuda_poisoned())
      lose_locked(st.code() == Code::kDeviceLost ? st.what() : process_poison_reason());
  }

  std::shared_ptr<SharedArena> arena_;
  ExecutorOptions options_;
  mutable std::mutex mu_;
  ExecutorState state_ = ExecutorState::kNotStarted;
  std::string reason_;
  bool simulated_loss_ = false;
#ifdef FT_HAVE_CUDA
  std::unique_ptr<CudaDevice> device_;
#endif
};

}  // namespace

std::unique_ptr<Executor> make_in_process_executor(std::shared_ptr<SharedArena> arena, ExecutorOptions options) {
  return std::make_unique<InProcessExecutor>(std::move(arena), std::move(options));
}

std::unique_ptr<Executor> make_in_process_executor(ExecutorOptions options) {
  auto arena = SharedArena::create(options.ring_bytes, options.transfer_bytes);
  if (!arena) {
    FT_LOG_ERROR("in-process executor: {}", arena.status().to_string());
    return make_in_process_executor(nullptr, std::move(options));
  }
  return make_in_process_executor(std::move(*arena), std::move(options));
}

#ifndef FT_HAVE_CUDA
std::unique_ptr<CopyEngine> make_cuda_copy_engine() { return nullptr; }
#endif

}  // namespace facetrace::runtime
