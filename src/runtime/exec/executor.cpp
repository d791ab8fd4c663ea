/// @file
/// Executor base (residents, collect), options, executor selection, gpud lookup and the GPU probe.
#include "facetrace/runtime/executor.h"

#include <unistd.h>

#include <filesystem>
#include <mutex>

#include "log.h"
#include "facetrace/core/env.h"

namespace facetrace::runtime {

std::string_view executor_mode_name(ExecutorMode m) noexcept {
  switch (m) {
    case ExecutorMode::kInProcess: return "in-process";
    case ExecutorMode::kIsolated: return "isolated";
    case ExecutorMode::kSimulated: return "simulated";
  }
  return "?";
}

std::string_view executor_state_name(ExecutorState s) noexcept {
  switch (s) {
    case ExecutorState::kNotStarted: return "not started";
    case ExecutorState::kReady: return "ready";
    case ExecutorState::kLost: return "lost";
    case ExecutorState::kNone: return "none";
  }
  return "?";
}

ExecutorOptions ExecutorOptions::from_env() {
  ExecutorOptions o;
  o.ring_bytes = static_cast<std::uint64_t>(core::env_int_clamped("FACETRACE_READBACK_BUDGET_MB", 256, 4, 65536))
                 << 20;
  o.transfer_bytes =
      static_cast<std::uint64_t>(core::env_int_clamped("FACETRACE_TRANSFER_ARENA_MB", 256, 4, 65536)) << 20;
  if (auto p = core::env_string("FACETRACE_GPUD")) o.gpud_path = *p;
  o.device = static_cast<int>(core::env_int_clamped("FACETRACE_GPU_DEVICE", -1, -1, 1024));
  return o;
}

Executor::~Executor() = default;

Status Executor::collect(const RingTicket& ticket, std::chrono::milliseconds deadline,
                         const std::function<void(std::span<const std::byte>)>& visitor) {
  auto range = ring_wait(ticket, deadline);
  if (!range) return range.status();
  const auto bytes = arena().view(*range);
  if (bytes.size() != ticket.byte_len)
    return internal_error("collect: the ring reported " + std::to_string(range->size) + " bytes at offset " +
                          std::to_string(range->offset) + " for a ticket of " + std::to_string(ticket.byte_len));
  visitor(bytes);
  return ring_release(ticket);
}

Status Executor::put_resident(const std::string& name, std::span<const std::byte> bytes) {
  {
    std::lock_guard lock(residents_mu_);
    residents_[name].assign(bytes.begin(), bytes.end());
  }
  return upload_resident(name, bytes);
}

Status Executor::drop_resident(const std::string& name) {
  {
    std::lock_guard lock(residents_mu_);
    residents_.erase(name);
  }
  return free_resident(name);
}

std::vector<std::string> Executor::resident_names() const {
  std::lock_guard lock(residents_mu_);
  std::vector<std::string> out;
  for (const auto& [k, v] : residents_) out.push_back(k);
  return out;
}

Status Executor::reupload_residents() {
  std::map<std::string, std::vector<std::byte>> copy;
  {
    std::lock_guard lock(residents_mu_);
    copy = residents_;
  }
  for (const auto& [name, bytes] : copy) FT_TRY(upload_resident(name, bytes).with_context("re-uploading resident '" + name + "'"));
  return {};
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
  }
#ifdef FT_GPUD_BUILD_PATH
  if (usable(FT_GPUD_BUILD_PATH)) return FT_GPUD_BUILD_PATH;
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
