/// @file
/// Executor base (the one state machine, residents, collect), options, executor selection, gpud lookup and
/// the GPU probe.
#include "facetrace/runtime/executor.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <mutex>
#include <sstream>

#include "exec/exec_internal.h"
#ifdef FT_HAVE_CUDA
#include "runtime/runtime_kernels.h"
#endif
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
  constexpr std::string_view kNames[] = {"not started", "ready", "lost", "none",
                                         "not supported"};  // enumerator order
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
  if (auto p = core::env_string("FACETRACE_GPUD_SOCKET")) o.gpud_socket = *p;
  if (auto d = core::env_string("FACETRACE_GPU_DEVICE")) o.gpu_device = *d;
  o.local_rank = static_cast<int>(core::env_int_clamped("FACETRACE_GPU_LOCAL_RANK", -1, -1, 1 << 20));
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
    case ExecutorState::kNone:
    case ExecutorState::kUnsupported: return {Code::kNotSupported, reason_};
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
    state_ = is_unsupported_device(st) ? ExecutorState::kUnsupported : ExecutorState::kNone;
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
    const fs::path installed =
        (self.parent_path() / FT_GPUD_RELATIVE_TO_BIN / "facetrace-gpud").lexically_normal();
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

Status unsupported_device(const std::string& why) {
  return {Code::kNotSupported, std::string(kUnsupportedPrefix) + why};
}

bool is_unsupported_device(const Status& st) noexcept {
  return st.code() == Code::kNotSupported && st.what().starts_with(kUnsupportedPrefix);
}

namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}
bool is_uuid_selector(std::string_view s) {
  return (s.starts_with("GPU-") || s.starts_with("MIG-")) && s.size() > 4;
}
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}
/// CUDA_VISIBLE_DEVICES split at commas, entries trimmed; an empty value lists nothing.
std::vector<std::string> split_visible(std::string_view v) {
  std::vector<std::string> out;
  if (trim(v).empty()) return out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = v.find(',', start);
    out.emplace_back(trim(v.substr(start, comma == std::string_view::npos ? v.npos : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

Status validate_gpu_selector(std::string_view selector) {
  if (selector.empty() || all_digits(selector) || is_uuid_selector(selector)) {
    if (all_digits(selector) && selector.size() > 6)
      return invalid_argument("GPU device '" + std::string(selector) + "': index out of range");
    return {};
  }
  return invalid_argument(
      "GPU device '" + std::string(selector) +
      "': expected a device index (0, 1, ...) or a GPU-/MIG- UUID as nvidia-smi -L prints it");
}

Expected<ChildDeviceSelection> select_child_device(std::string_view selector,
                                                   std::optional<std::string_view> inherited) {
  FT_TRY(validate_gpu_selector(selector));
  ChildDeviceSelection sel;
  if (selector.empty()) return sel;
  if (!inherited) {  // nothing inherited: the selector is the whole list
    sel.visible_devices = std::string(selector);
    return sel;
  }
  const std::vector<std::string> entries = split_visible(*inherited);
  const std::string shown = "CUDA_VISIBLE_DEVICES=" + std::string(*inherited);
  if (all_digits(selector)) {
    const std::size_t i = std::stoul(std::string(selector));
    if (i >= entries.size())
      return unsupported_device("GPU device " + std::string(selector) + " requested, but " + shown +
                                " lists " + std::to_string(entries.size()) +
                                (entries.size() == 1 ? " device" : " devices"));
    sel.visible_devices = entries[i];
    return sel;
  }
  // A UUID: CUDA accepts unique prefixes, so either may be the longer spelling.
  bool any_index = false;
  for (const auto& e : entries) {
    if (!is_uuid_selector(e)) any_index = true;
    if (is_uuid_selector(e) && (e.starts_with(selector) || selector.starts_with(e))) {
      sel.visible_devices = e.size() > selector.size() ? e : std::string(selector);
      return sel;
    }
  }
  if (!any_index) return unsupported_device("GPU " + std::string(selector) + " is not among " + shown);
  sel.match_uuid = std::string(selector);  // indices inherited: only CUDA (in the child) can map the UUID
  return sel;
}

std::string format_cuda_architectures(std::string_view cmake_list) {
  std::vector<std::string> sass, ptx;
  for (std::string_view rest = cmake_list; !rest.empty();) {
    const std::size_t semi = rest.find_first_of(";,");
    std::string_view a = trim(rest.substr(0, semi));
    rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
    if (a.empty()) continue;
    bool real = true, virt = true;
    if (a.ends_with("-real")) {
      virt = false;
      a.remove_suffix(5);
    } else if (a.ends_with("-virtual")) {
      real = false;
      a.remove_suffix(8);
    }
    if (real) sass.push_back("sm_" + std::string(a));
    if (virt) ptx.push_back("compute_" + std::string(a));
  }
  std::string out;
  for (const auto& v : {sass, ptx})
    for (const auto& a : v) out += (out.empty() ? "" : ", ") + a;
  return out.empty() ? std::string("none") : out;
}

std::string built_cuda_architectures() {
#ifndef FT_HAVE_CUDA
  return "none";
#elif defined(FT_CUDA_ARCHS)  // CMakeLists.txt's ft_cuda_archs: "sm_80 sm_86 ... compute_120"
  std::string list = FT_CUDA_ARCHS;
  if (list.empty() || list.find("native") != std::string::npos || list.find("all") != std::string::npos)
    return cuda_arch_list_compiled();
  std::string out;
  for (std::size_t start = 0; start < list.size();) {
    const std::size_t space = list.find(' ', start);
    const std::string a = list.substr(start, space == std::string::npos ? std::string::npos : space - start);
    if (!a.empty()) out += (out.empty() ? "" : ", ") + a;
    if (space == std::string::npos) break;
    start = space + 1;
  }
  return out;
#elif defined(FT_CUDA_ARCHITECTURES)
  const std::string_view list = FT_CUDA_ARCHITECTURES;
  if (list != "native" && list != "all" && list != "all-major") return format_cuda_architectures(list);
  return cuda_arch_list_compiled();
#else
  return cuda_arch_list_compiled();
#endif
}

std::string encode_device_listing(const Expected<std::vector<DeviceListing>>& devices) {
  auto clean = [](std::string s) {
    std::replace(s.begin(), s.end(), '\t', ' ');
    std::replace(s.begin(), s.end(), '\n', ' ');
    return s;
  };
  if (!devices)
    return "error\t" + std::to_string(static_cast<int>(devices.status().code())) + "\t" +
           clean(devices.status().what()) + "\n";
  std::string out;
  for (const auto& d : *devices)
    out += std::to_string(d.index) + "\t" + clean(d.uuid) + "\t" + clean(d.pci_bus_id) + "\t" +
           std::to_string(d.cc_major) + "\t" + std::to_string(d.cc_minor) + "\t" +
           std::to_string(d.total_memory) + "\t" + clean(d.status) + "\t" + clean(d.name) + "\n";
  return out;
}

Expected<std::vector<DeviceListing>> decode_device_listing(std::string_view text) {
  std::vector<DeviceListing> out;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> f;
    std::size_t start = 0;
    for (std::size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1)
      f.push_back(line.substr(start, tab - start));
    f.push_back(line.substr(start));
    if (f.size() == 3 && f[0] == "error") {
      int code = 0;
      std::from_chars(f[1].data(), f[1].data() + f[1].size(), code);
      if (code <= 0 || code > static_cast<int>(Code::kInternal)) code = static_cast<int>(Code::kInternal);
      return Status(static_cast<Code>(code), f[2]);
    }
    if (f.size() != 8 || !all_digits(f[0]) || !all_digits(f[3]) || !all_digits(f[4]) || !all_digits(f[5]))
      return internal_error("facetrace-gpud --list-devices printed a malformed line: '" + line + "'");
    DeviceListing d;
    d.index = std::stoi(f[0]);
    d.uuid = f[1];
    d.pci_bus_id = f[2];
    d.cc_major = std::stoi(f[3]);
    d.cc_minor = std::stoi(f[4]);
    d.total_memory = std::stoull(f[5]);
    d.status = f[6];
    d.name = f[7];
    out.push_back(std::move(d));
  }
  return out;
}

Expected<std::vector<DeviceListing>> list_devices() {
#ifndef FT_HAVE_CUDA
  return Status(Code::kNotSupported, "built without CUDA");
#else
  if (executor_mode_from_env() == ExecutorMode::kInProcess) return enumerate_cuda_devices();
  return list_devices_through_gpud(ExecutorOptions::from_env());
#endif
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
