/// @file
/// SimulatedExecutor: host-only device with the runtime's built-in ops and a loss switch.
#include "facetrace/runtime/testing/simulated_executor.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "facetrace/core/env.h"
#include "facetrace/runtime/readback_ring.h"
#include "log.h"

namespace facetrace::runtime {
namespace {

/// The simulated device's copies: done at once (device pointers are host pointers here).
class SimCopyEngine final : public CopyEngine {
 public:
  Status create_slot(std::uint32_t) override { return {}; }
  Status enqueue_copy(std::uint32_t, void* dst, const void* src, std::uint64_t bytes, CUstream_st*) override {
    std::memcpy(dst, src, bytes);
    return {};
  }
  int query(std::uint32_t) override { return 0; }
};

class SimExecutor final : public SimulatedExecutor, private SimDevice {
 public:
  SimExecutor(std::shared_ptr<SharedArena> arena, ExecutorOptions options)
      : arena_(std::move(arena)), options_(std::move(options)), ring_(make_ring()) {
    add_builtin_ops();
  }

  ExecutorMode mode() const override { return ExecutorMode::kSimulated; }
  SharedArena& arena() override { return *arena_; }

  void add_op(OpId id, SimOpHandler handler) override {
    auto lock = lock_state();
    ops_[id] = std::move(handler);
  }
  void arm_loss_on_invoke(int n) override {
    auto lock = lock_state();
    loss_countdown_ = n;
  }
  void arm_hang_on_invoke(int n) override {
    auto lock = lock_state();
    hang_countdown_ = n;
  }
  std::chrono::milliseconds last_ring_wait_deadline() const override {
    auto lock = lock_state();
    return last_wait_deadline_;
  }
  void set_restart_fails(bool fails) override {
    auto lock = lock_state();
    restart_fails_ = fails;
  }
  void set_restart_delay(std::chrono::milliseconds d) override {
    auto lock = lock_state();
    restart_delay_ = d;
  }
  void set_no_gpu(bool none) override {
    auto lock = lock_state();
    no_gpu_ = none;
  }
  void set_unsupported(std::string why) override {
    auto lock = lock_state();
    unsupported_ = std::move(why);
  }
  int invokes() const override {
    auto lock = lock_state();
    return invokes_;
  }
  int restarts() const override {
    auto lock = lock_state();
    return restarts_;
  }
  int resident_uploads() const override {
    auto lock = lock_state();
    return resident_uploads_;
  }

 protected:
  Status start_locked() override {
    if (no_gpu_) return {Code::kNotSupported, "no GPU: simulated machine without a GPU"};
    if (auto why = core::env_string("FACETRACE_SIMULATED_GPU_UNSUPPORTED"); why && !why->empty())
      unsupported_ = *why;
    if (!unsupported_.empty()) return unsupported_device(unsupported_);
    info_.name = "Simulated GPU";
    info_.simulated = true;
    info_.cc_major = 9;
    // The simulated machine has one device per CUDA_VISIBLE_DEVICES entry (one when unset); selection as
    // CudaDevice does it: an index, a UUID (any matches), else local_rank mod count.
    const auto visible = core::env_string("CUDA_VISIBLE_DEVICES");
    info_.visible_devices = visible.value_or("");
    int count = 1;
    if (visible) {
      count = visible->empty() ? 0 : 1;
      for (char c : *visible) count += c == ',' ? 1 : 0;
    }
    if (count == 0) return {Code::kNotSupported, "no GPU: no CUDA device is visible (simulated)"};
    FT_TRY(validate_gpu_selector(options_.gpu_device));
    info_.ordinal = 0;
    if (!options_.gpu_device.empty() && options_.gpu_device[0] >= '0' && options_.gpu_device[0] <= '9') {
      info_.ordinal = std::atoi(options_.gpu_device.c_str());
      if (info_.ordinal >= count)
        return unsupported_device("GPU device " + options_.gpu_device + " requested, " +
                                  std::to_string(count) + " visible (simulated)");
    } else if (!options_.gpu_device.empty()) {
      info_.uuid = options_.gpu_device;
    } else if (options_.local_rank >= 0) {
      info_.ordinal = options_.local_rank % count;
    }
    return {};
  }

  Status replace_locked() override {
    std::this_thread::sleep_for(restart_delay_);  // a slow child start-up, as the isolated executor's spawn
    if (restart_fails_) return {Code::kDeviceLost, "simulated: the replacement device could not start"};
    ++restarts_;
    ring_ = make_ring();  // the old device's tickets are unknown to the new one
    hung_.clear();
    device_residents_.clear();
    return {};
  }

  Expected<DeviceInfo> info_locked() override { return info_; }

  /// Runs the handler with the executor's lock held: its SimDevice calls (emit, resident) take no lock.
  Expected<OpReply> invoke_locked(const OpCall& call) override {
    ++invokes_;
    if (loss_countdown_ > 0 && --loss_countdown_ == 0)
      return Status(Code::kDeviceLost,
                    "simulated device loss (armed on invoke " + std::to_string(invokes_) + ")");
    auto it = ops_.find(call.op);
    if (it == ops_.end())
      return Status(Code::kNotSupported, "simulated: op " + std::to_string(call.op) + " is not registered");
    OpReply reply;
    const auto in = arena_->view(call.in);
    const auto out = arena_->view(call.out);
    if ((call.in.size != 0 && in.empty()) || (call.out.size != 0 && out.empty()))
      return invalid_argument("op arena range outside the arena");
    OpArgs args{call.args, in, out, reply};
    FT_TRY(it->second(*this, args));
    if (hang_countdown_ > 0 && --hang_countdown_ == 0)
      for (const RingTicket& t : reply.tickets) hung_.insert(t.generation);
    return reply;
  }

  Expected<RingStats> ring_stats_locked() override { return ring_->stats(); }

  Status inject_fault_locked(FaultKind kind) override {
    return {Code::kDeviceLost, kind == FaultKind::kIllegalAddress
                                   ? "simulated illegal address (fault injection)"
                                   : "simulated device loss (fault injection)"};
  }

  Status upload_resident_locked(const std::string& name, std::span<const std::byte> bytes) override {
    device_residents_[name].assign(bytes.begin(), bytes.end());
    ++resident_uploads_;
    return {};
  }
  Status free_resident_locked(const std::string& name) override {
    device_residents_.erase(name);
    return {};
  }
  Expected<ArenaRange> ring_wait_locked(const RingTicket& t, std::chrono::milliseconds deadline) override {
    last_wait_deadline_ = deadline;
    if (hung_.count(t.generation) != 0) {
      std::this_thread::sleep_for(deadline);  // the lock stays held: a hung device serves nobody
      return Status(Code::kDeviceLost, "simulated hang: ring slot " + std::to_string(t.slot) +
                                           " did not complete before its deadline of " +
                                           std::to_string(deadline.count()) + " ms");
    }
    FT_TRY(ring_->wait(t, std::chrono::steady_clock::now() + deadline));
    auto off = ring_->host_offset(t);
    if (!off) return off.status();
    return ArenaRange{*off, t.byte_len};  // the ring region starts at arena offset 0
  }
  Status ring_release_locked(const RingTicket& t) override {
    return ring_->with_mapped(t, [](std::span<const std::byte>) {});
  }

 private:
  // SimDevice: called only by op handlers, inside invoke_locked (the lock is held).
  // The production ring (its size classes, free lists and reclaiming) over the arena's ring region, so the CPU
  // tests meet the ring the GPU child uses (docs/design/runtime.md §1–§2).
  Expected<RingTicket> emit(std::span<const std::byte> bytes) override {
    return ring_->record_copy(bytes.data(), bytes.size(), nullptr);
  }
  Expected<std::span<const std::byte>> resident(std::string_view name) override {
    auto it = device_residents_.find(std::string(name));
    if (it == device_residents_.end())
      return invalid_argument("no resident named '" + std::string(name) + "'");
    return std::span<const std::byte>(it->second);
  }

  std::unique_ptr<ReadbackRing> make_ring() const {
    return std::make_unique<ReadbackRing>(arena_->ring_region(),
                                          RingOptions{arena_->ring_bytes(), 256},
                                          std::make_unique<SimCopyEngine>());
  }

  void add_builtin_ops() {
    ops_[ops::kFillRamp] = [this](SimDevice& dev, const OpArgs& a) -> Status {
      FillRampArgs f;
      FT_TRY(a.args_as(f));
      if (f.count == 0) return invalid_argument("fill_ramp: count 0");
      if (f.count > arena_->ring_bytes() / sizeof(float))  // before the allocation: the count is the caller's
        return Status(Code::kOutOfMemory, "RingFull: fill_ramp count " + std::to_string(f.count) +
                                              " exceeds the simulated ring region");
      std::vector<float> v(f.count);
      for (std::uint64_t i = 0; i < f.count; ++i) v[i] = f.base + f.step * static_cast<float>(f.first + i);
      auto t = dev.emit(std::as_bytes(std::span(v)));
      if (!t) return t.status();
      a.reply.tickets.push_back(*t);
      return {};
    };
    ops_[ops::kSumFloats] = [](SimDevice&, const OpArgs& a) -> Status {
      double s = 0;
      for (std::size_t i = 0; i < a.in.size() / sizeof(float); ++i) {  // the range may start at any byte
        float f;
        std::memcpy(&f, a.in.data() + i * sizeof f, sizeof f);
        s += f;
      }
      a.reply.put(s);
      return {};
    };
    ops_[ops::kSpin] = [](SimDevice&, const OpArgs& a) -> Status {
      std::uint32_t ms = 0;
      FT_TRY(a.args_as(ms));
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      return {};
    };
    ops_[ops::kSimCrash] = [](SimDevice&, const OpArgs&) -> Status { std::_Exit(9); };
    ops_[ops::kResidentSum] = [](SimDevice& dev, const OpArgs& a) -> Status {
      auto r = dev.resident(std::string_view(reinterpret_cast<const char*>(a.args.data()), a.args.size()));
      if (!r) return r.status();
      double s = 0;
      const auto* f = reinterpret_cast<const float*>(r->data());
      for (std::size_t i = 0; i < r->size() / sizeof(float); ++i) s += f[i];
      a.reply.put(s);
      return {};
    };
  }

  std::shared_ptr<SharedArena> arena_;
  ExecutorOptions options_;
  // Guarded by the executor's lock (lock_state, or held around the hooks).
  DeviceInfo info_;
  std::map<OpId, SimOpHandler> ops_;
  std::unique_ptr<ReadbackRing> ring_;
  std::map<std::string, std::vector<std::byte>> device_residents_;
  int invokes_ = 0, restarts_ = 0, resident_uploads_ = 0, loss_countdown_ = 0, hang_countdown_ = 0;
  std::set<std::uint32_t> hung_;  // arm_hang_on_invoke: the generations of the tickets that never complete
  std::chrono::milliseconds last_wait_deadline_{0};
  bool restart_fails_ = false, no_gpu_ = false;
  std::string unsupported_;  ///< non-empty: start() reports "not supported: <this>"
  std::chrono::milliseconds restart_delay_{0};
};

}  // namespace

std::unique_ptr<SimulatedExecutor> make_simulated_executor(std::shared_ptr<SharedArena> arena,
                                                           ExecutorOptions options) {
  return std::make_unique<SimExecutor>(std::move(arena), std::move(options));
}

std::unique_ptr<SimulatedExecutor> make_simulated_executor(ExecutorOptions options) {
  if (options.ring_bytes > (64ull << 20)) options.ring_bytes = 16ull << 20;
  if (options.transfer_bytes > (64ull << 20)) options.transfer_bytes = 16ull << 20;
  auto arena = SharedArena::create(options.ring_bytes, options.transfer_bytes);
  if (!arena) {
    FT_LOG_ERROR("simulated executor: {}", arena.status().to_string());
    return nullptr;
  }
  return make_simulated_executor(std::move(*arena), std::move(options));
}

}  // namespace facetrace::runtime
