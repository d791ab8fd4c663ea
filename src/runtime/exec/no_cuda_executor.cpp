/// @file
/// The in-process executor of a build without CUDA: start() reports "built without CUDA" (state kNone), so
/// the base never calls another hook. Also the copy-engine factory and the device enumeration such a build
/// links against.
#include "exec/exec_internal.h"
#include "facetrace/runtime/executor.h"

namespace facetrace::runtime {
namespace {

class NoCudaExecutor final : public Executor {
 public:
  explicit NoCudaExecutor(std::shared_ptr<SharedArena> arena) : arena_(std::move(arena)) {}

  ExecutorMode mode() const override { return ExecutorMode::kInProcess; }
  SharedArena& arena() override { return *arena_; }

 protected:
  Status start_locked() override { return {Code::kNotSupported, "built without CUDA"}; }
  // Unreachable: the base calls these only after a successful start.
  Status replace_locked() override { return unreachable(); }
  Expected<DeviceInfo> info_locked() override { return unreachable(); }
  Expected<OpReply> invoke_locked(const OpCall&) override { return unreachable(); }
  Expected<RingStats> ring_stats_locked() override { return unreachable(); }
  Status inject_fault_locked(FaultKind) override { return unreachable(); }
  Status upload_resident_locked(const std::string&, std::span<const std::byte>) override {
    return unreachable();
  }
  Status free_resident_locked(const std::string&) override { return unreachable(); }
  Expected<ArenaRange> ring_wait_locked(const RingTicket&, std::chrono::milliseconds) override {
    return unreachable();
  }
  Status ring_release_locked(const RingTicket&) override { return unreachable(); }

 private:
  static Status unreachable() { return internal_error("in-process executor: built without CUDA"); }
  std::shared_ptr<SharedArena> arena_;
};

}  // namespace

std::unique_ptr<Executor> make_in_process_executor(std::shared_ptr<SharedArena> arena, ExecutorOptions) {
  return std::make_unique<NoCudaExecutor>(std::move(arena));
}

std::unique_ptr<CopyEngine> make_cuda_copy_engine() { return nullptr; }

Expected<std::vector<DeviceListing>> enumerate_cuda_devices() {
  return Status(Code::kNotSupported, "built without CUDA");
}

}  // namespace facetrace::runtime
