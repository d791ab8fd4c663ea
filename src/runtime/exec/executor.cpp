/// @file
/// Executor base (the one state machine, residents, collect), options, executor selection, gpud lookup and
/// the GPU probe.
#include "facetrace/runtime/executor.h"

#include <unistd.h>

#include <filesystem>
#include <mutex>

#include "log.h"
#include "facetrace/core/env.h"

namespace facetrace::runtime {

namespace {

/// Per executor mode: its name, and what the not-ready and loss messages call its device.
struct ModeWords {
  ExecutorMode mode;
  std::string_view name, device;
};
constexpr ModeWords kModeWords[] = {
    {ExecutorMode::kInProcess, "in-process", "in-process GPU"},
    {ExecutorMode::kIsolated, "isolated", "GPU child"},
    {ExecutorMode::kSimulated, "simulated", "simulated device"},
};

const ModeWords& mode_words(ExecutorMode m) noexcept {
  static constexpr ModeWords kUnknown{ExecutorMode::kInProcess, "?", "?"};
  for (const auto& w : kModeWords)
    if (w.mode == m) return w;
  return kUnknown;
}

std::string_view device_noun(ExecutorMode m) noexcept { return mode_words(m).device; }

}  // namespace

std::string_view executor_mode_name(ExecutorMode m) noexcept { return mode_words(m).name; }

std::string_view executor_state_name(ExecutorState s) noexcept {
  constexpr std::string_view kNames[] = {"not started", "ready", "lost", "none"};  // enumerator order
  const auto i = static_cast<std::size_t>(s);
  return i < std::size(kNames) ? kNames[i] : "?";
}

ExecutorOptions ExecutorOptions::from_env() {
  ExecutorOptions o;
  o.ring_bytes =
      static_cast<std::uint64_t>(core::env_int_clamped("FACETRACE_READBACK_BUDGET_MB", 256, 4, 65536)) << 20;
  o.transfer_bytes =
      static_cast<std::uint64_t>(core::env_int_clamped("FACETRACE_TRANSFER_ARENA_MB", 256, 4, 65536)) << 20;
  if (auto p = core::env_string("FACETRACE_GPUD")) o.gpud_path = *p;
  o.device = static_cast<int>(core::env_int_clamped("FACETRACE_GPU_DEVICE", -1, -1, 1024));
  return o;
}

Executor::~Executor() = default;

namespace {

const Status& status_of(const Status& st) { return st; }
template <class T>
Status status_of(const Expected<T>& e) {
  return e.status();
}

}  // namespace

void Executor::lose_locked(std::string why) {
  if (state_ == ExecutorState::kLost) return;  // the first reason of a loss is kept
  state_ = ExecutorState::kLost;
  reason_ = std::move(why);
  // A simulated loss is a test's doing, not a device fault: no warning (tests fail on unexpected warnings).
  if (mode() == ExecutorMode::kSimulated) {
    FT_LOG_DEBUG("{} lost: {}", device_noun(mode()), reason_);
  } else {
    FT_LOG_WARN("{} lost: {}", device_noun(mode()), reason_);
  }
}

Status Executor::not_ready_locked() const {
  switch (state_) {
    case ExecutorState::kLost:
      return {Code::kDeviceLost, std::string(device_noun(mode())) + " lost: " + reason_};
    case ExecutorState::kNone: return {Code::kNotSupported, reason_};
    case ExecutorState::kNotStarted:
    case ExecutorState::kReady: break;
  }
  return {Code::kDeclined, std::string(executor_mode_name(mode())) + " executor not started"};
}

template <class Hook>
auto Executor::guarded(Hook&& hook) -> decltype(hook()) {
  std::lock_guard lock(mu_);
  if (state_ != ExecutorState::kReady) return not_ready_locked();
  auto result = hook();
  if (const Status st = status_of(result); st.code() == Code::kDeviceLost) lose_locked(st.what());
  return result;
}

Status Executor::start() {
  std::lock_guard lock(mu_);
  if (state_ == ExecutorState::kReady) return {};
  Status st = start_locked();
  if (st.ok()) {
    state_ = ExecutorState::kReady;
    reason_.clear();
  } else if (st.code() == Code::kDeviceLost) {
    lose_locked(st.what());
  } else if (state_ != ExecutorState::kLost) {
    state_ = ExecutorState::kNone;
    reason_ = st.what();
  }
  return st;
}

Status Executor::restart() {
  std::lock_guard lock(mu_);
  if (state_ == ExecutorState::kReady) return {};
  if (state_ != ExecutorState::kLost) return {Code::kNotSupported, "no GPU to restart: " + reason_};
  FT_TRY(replace_locked());
  state_ = ExecutorState::kReady;
  reason_.clear();
  for (const auto& [name, bytes] : residents_) {
    if (Status st = upload_resident_locked(name, bytes); !st.ok()) {
      if (st.code() == Code::kDeviceLost) lose_locked(st.what());
      return st.with_context("re-uploading resident '" + name + "'");
    }
  }
  return {};
}

ExecutorState Executor::state() const {
  std::lock_guard lock(mu_);
  return state_;
}

std::string Executor::state_reason() const {
  std::lock_guard lock(mu_);
  return reason_;
}

Expected<DeviceInfo> Executor::info() {
  return guarded([&] { return info_locked(); });
}
Expected<OpReply> Executor::invoke(const OpCall& call) {
  return guarded([&] { return invoke_locked(call); });
}
Expected<RingStats> Executor::ring_stats() {
  return guarded([&] { return ring_stats_locked(); });
}
Status Executor::ping() {
  return guarded([&] { return ping_locked(); });
}
Status Executor::inject_fault(FaultKind kind) {
  return guarded([&] { return inject_fault_locked(kind); });
}
Status Executor::upload_resident(const std::string& name, std::span<const std::byte> bytes) {
  return guarded([&] { return upload_resident_locked(name, bytes); });
}
Status Executor::free_resident(const std::string& name) {
  return guarded([&] { return free_resident_locked(name); });
}
Expected<ArenaRange> Executor::ring_wait(const RingTicket& ticket, std::chrono::milliseconds deadline) {
  return guarded([&] { return ring_wait_locked(ticket, deadline); });
}
Status Executor::ring_release(const RingTicket& ticket) {
  return guarded([&] { return ring_release_locked(ticket); });
}

Status Executor::collect(const RingTicket& ticket, std::chrono::milliseconds deadline,
                         const std::function<void(std::span<const std::byte>)>& visitor) {
  auto range = ring_wait(ticket, deadline);
  if (!range) return range.status();
  const auto bytes = arena().view(*range);
  if (bytes.size() != ticket.byte_len)
    return internal_error("collect: the ring reported " + std::to_string(range->size) + " bytes at offset " +
                          std::to_string(range->offset) + " for a ticket of " +
                          std::to_string(ticket.byte_len));
  visitor(bytes);
  return ring_release(ticket);
}

Status Executor::put_resident(const std::string& name, std::span<const std::byte> bytes) {
  {
    std::lock_guard lock(mu_);
    residents_[name].assign(bytes.begin(), bytes.end());
  }
  return upload_resident(name, bytes);
}

Status Executor::drop_resident(const std::string& name) {
  {
    std::lock_guard lock(mu_);
    residents_.erase(name);
  }
  return free_resident(name);
}

std::vector<std::string> Executor::resident_names() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [k, v] : residents_) out.push_back(k);
  return out;
}

std::unique_ptr<Executor> make_in_process_executor(ExecutorOptions options) {
  auto arena = SharedArena::create(options.ring_bytes, options.transfer_bytes);
  if (!arena) {
    FT_LOG_ERROR("in-process executor: {}", arena.status().to_string());
    return make_in_process_executor(nullptr, std::move(options));
  }
  return make_in_process_executor(std::move(*arena), std::move(options));
}

ExecutorMode executor_mode_from_env() {
  const auto v = core::env_string("FACETRACE_GPU_ISOLATION");
  if (!v || *v == "process") return ExecutorMode::kIsolated;
  if (*v == "off") return ExecutorMode::kInProcess;
  FT_LOG_WARN("FACETRACE_GPU_ISOLATION='{}' is not process|off; using process", *v);
  return ExecutorMode::kIsolated;
}

std::unique_ptr<Executor> make_executor_from_env() {
  return executor_mode_from_env() == ExecutorMode::kInProcess ? make_in_process_executor()
                                                              : make_isolated_executor();
}

namespace {
std::mutex& installed_gpud_mutex() {
  static std::mutex mu;
  return mu;
}
std::string& installed_gpud_path() {
  static std::string path;
  return path;
}
}  // namespace

void set_installed_gpud_path(std::string path) {
  std::lock_guard lock(installed_gpud_mutex());
  installed_gpud_path() = std::move(path);
}

std::string find_gpud(const ExecutorOptions& options) {
  namespace fs = std::filesystem;
  auto usable = [](const fs::path& p) { return !p.empty() && ::access(p.c_str(), X_OK) == 0; };
  if (!options.gpud_path.empty()) return usable(options.gpud_path) ? options.gpud_path : std::string();
  if (auto e = core::env_string("FACETRACE_GPUD"); e && usable(*e)) return *e;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path beside = self.parent_path() / "facetrace-gpud";
    if (usable(beside)) return beside.string();
#ifdef FT_GPUD_RELATIVE_TO_BIN
    // An installed program: <prefix>/bin/x finds <prefix>/libexec/facetrace/facetrace-gpud (cmake/ft_install.cmake).
    const fs::path installed = (self.parent_path() / FT_GPUD_RELATIVE_TO_BIN / "facetrace-gpud").lexically_normal();
    if (usable(installed)) return installed.string();
#endif
  }
  {
    std::lock_guard lock(installed_gpud_mutex());
    if (usable(installed_gpud_path())) return installed_gpud_path();
  }
#ifdef FT_GPUD_BUILD_PATH
  if (usable(FT_GPUD_BUILD_PATH)) return FT_GPUD_BUILD_PATH;
#endif
#ifdef FT_GPUD_INSTALL_PATH
  if (usable(FT_GPUD_INSTALL_PATH)) return FT_GPUD_INSTALL_PATH;
#endif
  return {};
}

std::optional<std::string> gpu_unavailable_reason() {
#ifndef FT_HAVE_CUDA
  return std::string("built without CUDA");
#else
  static std::once_flag once;
  static std::optional<std::string> reason;
  std::call_once(once, [] {
    ExecutorOptions o = ExecutorOptions::from_env();
    o.ring_bytes = 4ull << 20;
    o.transfer_bytes = 4ull << 20;
    std::unique_ptr<Executor> ex = executor_mode_from_env() == ExecutorMode::kInProcess
                                       ? make_in_process_executor(o)
                                       : make_isolated_executor(o);
    if (Status st = ex->start(); !st.ok()) reason = st.what();
  });
  return reason;
#endif
}

}  // namespace facetrace::runtime
