/// @file
/// SimulatedExecutor: host-only device with the runtime's built-in ops and a loss switch.
#include "facetrace/runtime/testing/simulated_executor.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>

#include "facetrace/core/env.h"
#include "log.h"

namespace facetrace::runtime {
namespace {

class SimExecutor final : public SimulatedExecutor, private SimDevice {
 public:
  SimExecutor(std::shared_ptr<SharedArena> arena, ExecutorOptions options)
      : arena_(std::move(arena)), options_(std::move(options)) {
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
    slots_.clear();
    hung_slots_.clear();
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
      for (const RingTicket& t : reply.tickets) hung_slots_.insert(t.slot);
    return reply;
  }

  Expected<RingStats> ring_stats_locked() override {
    RingStats s = stats_;
    s.in_flight = slots_.size();
    s.budget_bytes = arena_->ring_bytes();
    s.max_slots_per_class = 256;
    return s;
  }

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
    if (hung_slots_.count(t.slot) != 0) {
      std::this_thread::sleep_for(deadline);  // the lock stays held: a hung device serves nobody
      return Status(Code::kDeviceLost, "simulated hang: ring slot " + std::to_string(t.slot) +
                                           " did not complete before its deadline of " +
                                           std::to_string(deadline.count()) + " ms");
    }
    auto it = slots_.find(t.slot);
    if (it == slots_.end() || it->second.size != t.byte_len) return stale(t);
    return it->second;
  }
  Status ring_release_locked(const RingTicket& t) override {
    if (slots_.erase(t.slot) == 0) return stale(t);
    return {};
  }

 private:
  // SimDevice: called only by op handlers, inside invoke_locked (the lock is held).
  Expected<RingTicket> emit(std::span<const std::byte> bytes) override {
    auto cls = ReadbackRing::size_class(bytes.size());
    if (!cls) return cls.status();
    // First fit over the ring region, 4096-aligned.
    std::vector<ArenaRange> used;
    for (const auto& [id, r] : slots_) used.push_back(r);
    std::sort(used.begin(), used.end(), [](auto& a, auto& b) { return a.offset < b.offset; });
    std::uint64_t off = 0;
    for (const auto& r : used) {
      if (off + *cls <= r.offset) break;
      off = std::max(off, (r.offset + r.size + 4095) / 4096 * 4096);
    }
    if (off + *cls > arena_->ring_bytes()) {
      ++stats_.stalls;
      return Status(Code::kOutOfMemory, "RingFull: simulated ring region is full; collect tickets");
    }
    const std::uint32_t slot = next_slot_++;
    slots_[slot] = ArenaRange{off, bytes.size()};
    std::copy(bytes.begin(), bytes.end(), arena_->base() + off);
    ++stats_.dispatches;
    stats_.peak_in_flight = std::max<std::uint64_t>(stats_.peak_in_flight, slots_.size());
    return RingTicket{*cls, slot, 1, bytes.size()};
  }
  Expected<std::span<const std::byte>> resident(std::string_view name) override {
    auto it = device_residents_.find(std::string(name));
    if (it == device_residents_.end())
      return invalid_argument("no resident named '" + std::string(name) + "'");
    return std::span<const std::byte>(it->second);
  }

  static Status stale(const RingTicket& t) {
    return invalid_argument("stale ticket: simulated slot " + std::to_string(t.slot) +
                            " was already collected");
  }

  void add_builtin_ops() {
    ops_[ops::kFillRamp] = [](SimDevice& dev, const OpArgs& a) -> Status {
      FillRampArgs f;
      FT_TRY(a.args_as(f));
      if (f.count == 0) return invalid_argument("fill_ramp: count 0");
      std::vector<float> v(f.count);
      for (std::uint64_t i = 0; i < f.count; ++i) v[i] = f.base + f.step * static_cast<float>(f.first + i);
      auto t = dev.emit(std::as_bytes(std::span(v)));
      if (!t) return t.status();
      a.reply.tickets.push_back(*t);
      return {};
    };
    ops_[ops::kSumFloats] = [](SimDevice&, const OpArgs& a) -> Status {
      double s = 0;
      const auto* f = reinterpret_cast<const float*>(a.in.data());
      for (std::size_t i = 0; i < a.in.size() / sizeof(float); ++i) s += f[i];
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
  std::map<std::uint32_t, ArenaRange> slots_;
  std::map<std::string, std::vector<std::byte>> device_residents_;
  std::uint32_t next_slot_ = 0;
  RingStats stats_;
  int invokes_ = 0, restarts_ = 0, resident_uploads_ = 0, loss_countdown_ = 0, hang_countdown_ = 0;
  std::set<std::uint32_t> hung_slots_;  // arm_hang_on_invoke
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
