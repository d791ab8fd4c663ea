/// @file
/// SimulatedExecutor: host-only device with the runtime's built-in ops and a loss switch.
#include "facetrace/runtime/testing/simulated_executor.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <thread>

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

  Status start() override {
    std::lock_guard lock(mu_);
    if (no_gpu_) {
      state_ = ExecutorState::kNone;
      reason_ = "no GPU: simulated machine without a GPU";
      return {Code::kNotSupported, reason_};
    }
    state_ = ExecutorState::kReady;
    info_.name = "Simulated GPU";
    info_.simulated = true;
    info_.cc_major = 9;
    return {};
  }

  Status restart() override {
    std::chrono::milliseconds delay{0};
    {
      std::lock_guard lock(mu_);
      delay = restart_delay_;
    }
    std::this_thread::sleep_for(delay);
    {
      std::lock_guard lock(mu_);
      if (state_ == ExecutorState::kReady) return {};
      if (state_ != ExecutorState::kLost) return {Code::kNotSupported, "no GPU to restart: " + reason_};
      if (restart_fails_) return {Code::kDeviceLost, "simulated: the replacement device could not start"};
      ++restarts_;
      state_ = ExecutorState::kReady;
      reason_.clear();
      slots_.clear();
      device_residents_.clear();
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
  Expected<DeviceInfo> info() override {
    std::lock_guard lock(mu_);
    if (state_ != ExecutorState::kReady) return not_ready_locked();
    return info_;
  }
  SharedArena& arena() override { return *arena_; }

  Expected<OpReply> invoke(const OpCall& call) override {
    SimOpHandler handler;
    {
      std::lock_guard lock(mu_);
      if (state_ != ExecutorState::kReady) return not_ready_locked();
      ++invokes_;
      if (loss_countdown_ > 0 && --loss_countdown_ == 0) {
        lose_locked("simulated device loss (armed on invoke " + std::to_string(invokes_) + ")");
        return Status(Code::kDeviceLost, reason_);
      }
      auto it = ops_.find(call.op);
      if (it == ops_.end()) return Status(Code::kNotSupported, "simulated: op " + std::to_string(call.op) + " is not registered");
      handler = it->second;
    }
    OpReply reply;
    const auto in = arena_->view(call.in);
    const auto out = arena_->view(call.out);
    if ((call.in.size != 0 && in.empty()) || (call.out.size != 0 && out.empty()))
      return invalid_argument("op arena range outside the arena");
    OpArgs args{call.args, in, out, reply};
    if (Status st = handler(*this, args); !st.ok()) {
      if (st.code() == Code::kDeviceLost) {
        std::lock_guard lock(mu_);
        lose_locked(st.what());
      }
      return st;
    }
    return reply;
  }

  Expected<RingStats> ring_stats() override {
    std::lock_guard lock(mu_);
    RingStats s = stats_;
    s.in_flight = slots_.size();
    s.budget_bytes = arena_->ring_bytes();
    s.max_slots_per_class = 256;
    return s;
  }

  Status ping() override {
    std::lock_guard lock(mu_);
    if (state_ != ExecutorState::kReady) return not_ready_locked();
    return {};
  }

  Status inject_fault(FaultKind kind) override {
    std::lock_guard lock(mu_);
    if (state_ != ExecutorState::kReady) return not_ready_locked();
    lose_locked(kind == FaultKind::kIllegalAddress ? "simulated illegal address (fault injection)"
                                                   : "simulated device loss (fault injection)");
    return {Code::kDeviceLost, reason_};
  }

  void add_op(OpId id, SimOpHandler handler) override {
    std::lock_guard lock(mu_);
    ops_[id] = std::move(handler);
  }
  void arm_loss_on_invoke(int n) override {
    std::lock_guard lock(mu_);
    loss_countdown_ = n;
  }
  void set_restart_fails(bool fails) override {
    std::lock_guard lock(mu_);
    restart_fails_ = fails;
  }
  void set_restart_delay(std::chrono::milliseconds d) override {
    std::lock_guard lock(mu_);
    restart_delay_ = d;
  }
  void set_no_gpu(bool none) override {
    std::lock_guard lock(mu_);
    no_gpu_ = none;
  }
  int invokes() const override {
    std::lock_guard lock(mu_);
    return invokes_;
  }
  int restarts() const override {
    std::lock_guard lock(mu_);
    return restarts_;
  }
  int resident_uploads() const override {
    std::lock_guard lock(mu_);
    return resident_uploads_;
  }

 protected:
  Status upload_resident(const std::string& name, std::span<const std::byte> bytes) override {
    std::lock_guard lock(mu_);
    if (state_ != ExecutorState::kReady) return not_ready_locked();
    device_residents_[name].assign(bytes.begin(), bytes.end());
    ++resident_uploads_;
    return {};
  }
  Status free_resident(const std::string& name) override {
    std::lock_guard lock(mu_);
    device_residents_.erase(name);
    return {};
  }
  Expected<ArenaRange> ring_wait(const RingTicket& t, std::chrono::milliseconds) override {
    std::lock_guard lock(mu_);
    if (state_ != ExecutorState::kReady) return not_ready_locked();
    auto it = slots_.find(t.slot);
    if (it == slots_.end() || it->second.size != t.byte_len)
      return invalid_argument("stale ticket: simulated slot " + std::to_string(t.slot) + " was already collected");
    return it->second;
  }
  Status ring_release(const RingTicket& t) override {
    std::lock_guard lock(mu_);
    if (slots_.erase(t.slot) == 0)
      return invalid_argument("stale ticket: simulated slot " + std::to_string(t.slot) + " was already collected");
    return {};
  }

 private:
  // SimDevice
  Expected<RingTicket> emit(std::span<const std::byte> bytes) override {
    auto cls = ReadbackRing::size_class(bytes.size());
    if (!cls) return cls.status();
    std::lock_guard lock(mu_);
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
    std::lock_guard lock(mu_);
    auto it = device_residents_.find(std::string(name));
    if (it == device_residents_.end()) return invalid_argument("no resident named '" + std::string(name) + "'");
    return std::span<const std::byte>(it->second);
  }

  Status not_ready_locked() const {
    if (state_ == ExecutorState::kLost) return {Code::kDeviceLost, "simulated device lost: " + reason_};
    if (state_ == ExecutorState::kNone) return {Code::kNotSupported, reason_};
    return {Code::kDeclined, "simulated executor not started"};
  }
  void lose_locked(std::string why) {
    state_ = ExecutorState::kLost;
    reason_ = std::move(why);
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
  mutable std::mutex mu_;
  ExecutorState state_ = ExecutorState::kNotStarted;
  std::string reason_;
  DeviceInfo info_;
  std::map<OpId, SimOpHandler> ops_;
  std::map<std::uint32_t, ArenaRange> slots_;
  std::map<std::string, std::vector<std::byte>> device_residents_;
  std::uint32_t next_slot_ = 0;
  RingStats stats_;
  int invokes_ = 0, restarts_ = 0, resident_uploads_ = 0, loss_countdown_ = 0;
  bool restart_fails_ = false, no_gpu_ = false;
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
