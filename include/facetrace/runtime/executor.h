/// @file
/// Executor: where GPU work runs. InProcessExecutor uses CUDA in this process; IsolatedExecutor (the default)
/// drives a `facetrace-gpud` child over a socketpair plus a shared arena and replaces it after a loss;
/// SimulatedExecutor runs host functions and has a loss switch, for CPU-only tests (docs/design/runtime.md §6).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "facetrace/core/status.h"
#include "facetrace/runtime/arena.h"
#include "facetrace/runtime/device_info.h"
#include "facetrace/runtime/op.h"
#include "facetrace/runtime/readback_ring.h"
#include "facetrace/runtime/testing/fault.h"

namespace facetrace::runtime {

/// Which executor.
enum class ExecutorMode : std::uint8_t { kInProcess, kIsolated, kSimulated };
/// "in-process", "isolated", "simulated".
std::string_view executor_mode_name(ExecutorMode m) noexcept;

/// Executor lifecycle.
enum class ExecutorState : std::uint8_t {
  kNotStarted,
  kReady,
  kLost,  ///< a device loss: sticky error, child death, or a deadline passed
  kNone,  ///< no GPU here (no device, no driver, built without CUDA, child could not start); never retried
  kUnsupported,  ///< a GPU is there but this build cannot use it (no kernel image for its architecture, a driver
                 ///< older than the CUDA runtime, a GPU selector naming no visible device); never retried
};
/// "not started", "ready", "lost", "none", "not supported".
std::string_view executor_state_name(ExecutorState s) noexcept;

/// One op invocation.
struct OpCall {
  OpId op = 0;
  std::span<const std::byte> args;            ///< small inline arguments (≤ 32 KiB)
  ArenaRange in{};                            ///< arena input region (may be empty)
  ArenaRange out{};                           ///< arena output region (may be empty)
  std::chrono::milliseconds deadline{30000};  ///< watchdog: passing it is a device loss
};

/// Options shared by all executors.
struct ExecutorOptions {
  std::uint64_t ring_bytes = 256ull << 20;      ///< readback budget (FACETRACE_READBACK_BUDGET_MB)
  std::uint64_t transfer_bytes = 256ull << 20;  ///< transfer region (FACETRACE_TRANSFER_ARENA_MB)
  std::string gpud_path;                        ///< empty: FACETRACE_GPUD, next to this executable, build dir
  /// Isolated only: the socket of a warm `facetrace-gpud --serve` (FACETRACE_GPUD_SOCKET; docs/runtime.md "A
  /// warm GPU server"), attached to instead of starting a child when it is free and no device is selected.
  std::string gpud_socket;
  std::chrono::milliseconds start_deadline{30000};    ///< child start-up (CUDA init + arena registration)
  std::chrono::milliseconds control_deadline{10000};  ///< ping, info, residents, ring commands
  /// FACETRACE_GPU_DEVICE (`--gpu-device`): an index into the devices this process may see (an inherited
  /// CUDA_VISIBLE_DEVICES is indexed into, never replaced) or a GPU-/MIG- UUID; empty: no choice.
  std::string gpu_device;
  /// FACETRACE_GPU_LOCAL_RANK (set by facetrace-mpi): without gpu_device, the device local_rank mod the visible
  /// count is taken (one GPU per rank on a multi-GPU node); -1: none.
  int local_rank = -1;
  bool simulate_child = false;  ///< isolated only: the child serves a SimulatedExecutor (no CUDA; tests)

  /// Defaults with the FACETRACE_* overrides applied (warnings on bad values).
  static ExecutorOptions from_env();
};

/// The executor interface. Calls are serialised internally (one command at a time); all members are
/// thread-safe. After kDeviceLost every call fails with kDeviceLost until restart() succeeds.
///
/// The state machine (docs/design/runtime.md §6) lives here, once: the state, its reason, the one mutex, start, restart
/// and the ready check before every command. An implementation supplies the device through the `*_locked`
/// hooks below; the base calls them with its mutex held and, except start_locked and replace_locked, only
/// while the state is kReady. A hook's kDeviceLost result marks the executor lost with that result's message.
class Executor {
 public:
  virtual ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  virtual ExecutorMode mode() const = 0;
  /// Brings the device up. kNotSupported "no GPU: …" (state kNone) when there is none; kDeviceLost when
  /// the process is poisoned (in-process).
  Status start();
  /// Replaces a lost device (isolated: reap and spawn a new child; in-process: only after a simulated loss)
  /// and re-uploads every resident. kNotSupported when there never was a device; a failed replacement leaves
  /// the state kLost. Callers apply RecoveryPolicy first.
  Status restart();
  ExecutorState state() const;
  /// Why the state is kLost or kNone ("" otherwise).
  std::string state_reason() const;
  /// The device (cached at start).
  Expected<DeviceInfo> info();
  /// The shared arena (exists from construction; survives restarts).
  virtual SharedArena& arena() = 0;

  /// Runs a registered op. kDeviceLost marks the executor lost; other codes fail this call only.
  Expected<OpReply> invoke(const OpCall& call);
  /// Waits (under `deadline`) until a ticket from an OpReply is READY, lends its bytes (in place in the
  /// arena when isolated) to `visitor`, and frees the slot. A deadline that passes is a device loss.
  Status collect(const RingTicket& ticket, std::chrono::milliseconds deadline,
                 const std::function<void(std::span<const std::byte>)>& visitor);
  /// The device ring's counters.
  Expected<RingStats> ring_stats();
  /// One empty round trip (measures command latency).
  Status ping();
  /// Fault injection (docs/design/runtime.md §7). kIllegalAddress returns kDeviceLost once the fault fired.
  Status inject_fault(FaultKind kind);

  /// Uploads `bytes` as the named device buffer `name` (replacing one of the same name) and remembers a copy
  /// so that restart() re-uploads it. Ops read it through DeviceContext::resident(name).
  Status put_resident(const std::string& name, std::span<const std::byte> bytes);
  /// Forgets and frees a resident.
  Status drop_resident(const std::string& name);
  /// Names of the remembered residents.
  std::vector<std::string> resident_names() const;

 protected:
  Executor() = default;
  /// The executor's one mutex, for state an implementation keeps outside the hooks (test knobs, counters).
  /// Never call a public member while holding it.
  [[nodiscard]] std::unique_lock<std::mutex> lock_state() const { return std::unique_lock(mu_); }
  /// Marks the executor lost (the first reason of a loss is kept); warns unless simulated. Lock held.
  void lose_locked(std::string why);

  /// Brings the device up; ok makes the state kReady, kDeviceLost kLost, anything else kNone.
  virtual Status start_locked() = 0;
  /// Replaces the lost device (the residents are re-uploaded afterwards); a failure leaves the state kLost.
  virtual Status replace_locked() = 0;
  virtual Expected<DeviceInfo> info_locked() = 0;
  virtual Expected<OpReply> invoke_locked(const OpCall& call) = 0;
  virtual Expected<RingStats> ring_stats_locked() = 0;
  virtual Status ping_locked() { return {}; }
  virtual Status inject_fault_locked(FaultKind kind) = 0;
  virtual Status upload_resident_locked(const std::string& name, std::span<const std::byte> bytes) = 0;
  virtual Status free_resident_locked(const std::string& name) = 0;
  /// Waits until READY; returns the arena range of the bytes.
  virtual Expected<ArenaRange> ring_wait_locked(const RingTicket& ticket,
                                                std::chrono::milliseconds deadline) = 0;
  /// Frees the slot.
  virtual Status ring_release_locked(const RingTicket& ticket) = 0;

 private:
  friend class ExecutorServer;  // facetrace-gpud's side of the protocol serves these commands one by one
  /// The guarded forms of the resident and ring hooks (collect, put_resident and the server use them).
  Status upload_resident(const std::string& name, std::span<const std::byte> bytes);
  Status free_resident(const std::string& name);
  Expected<ArenaRange> ring_wait(const RingTicket& ticket, std::chrono::milliseconds deadline);
  Status ring_release(const RingTicket& ticket);
  /// Runs `hook` under the lock if the state is kReady (else the not-ready Status); a kDeviceLost result
  /// marks the executor lost.
  template <class Hook>
  auto guarded(Hook&& hook) -> decltype(hook());
  /// kDeviceLost / kNotSupported / kDeclined for a state other than kReady. Lock held.
  Status not_ready_locked() const;

  mutable std::mutex mu_;
  ExecutorState state_ = ExecutorState::kNotStarted;
  std::string reason_;
  std::map<std::string, std::vector<std::byte>> residents_;  ///< what restart() re-uploads
};

/// CUDA in this process. After a sticky error it stays lost for the life of the process and says so.
std::unique_ptr<Executor> make_in_process_executor(ExecutorOptions options = ExecutorOptions::from_env());
/// As above over an existing arena (facetrace-gpud uses this with the parent's memfd).
std::unique_ptr<Executor> make_in_process_executor(std::shared_ptr<SharedArena> arena,
                                                   ExecutorOptions options);

/// Spawns facetrace-gpud (posix_spawn) and never initialises CUDA in this process.
std::unique_ptr<Executor> make_isolated_executor(ExecutorOptions options = ExecutorOptions::from_env());

/// Host-only simulated device for CPU tests. Built-in ops behave like the CUDA ones (fill ramp, sum, spin,
/// resident sum); tests add their own with SimulatedExecutor::add_op.
class SimulatedExecutor;
std::unique_ptr<SimulatedExecutor> make_simulated_executor(ExecutorOptions options = {});
std::unique_ptr<SimulatedExecutor> make_simulated_executor(std::shared_ptr<SharedArena> arena,
                                                           ExecutorOptions options);

/// Selected by FACETRACE_GPU_ISOLATION=process|off (default process).
ExecutorMode executor_mode_from_env();
/// make_isolated_executor or make_in_process_executor per executor_mode_from_env().
std::unique_ptr<Executor> make_executor_from_env();

/// Where facetrace-gpud is: ExecutorOptions::gpud_path, else FACETRACE_GPUD, else next to this executable, else
/// <exe>/../libexec/facetrace/ (an installed program), else the path set_installed_gpud_path registered, else the
/// build tree's copy, else the configured install prefix's. Empty when none exists.
std::string find_gpud(const ExecutorOptions& options);

/// Registers the facetrace-gpud of an installed package: the package's CMake config compiles a call into every
/// program that links facetrace::runtime (README "Install"), so such a program needs no FACETRACE_GPUD.
void set_installed_gpud_path(std::string path);

/// nullopt when this process can run GPU work; otherwise why not ("built without CUDA", "no GPU: …",
/// "not supported: …", "facetrace-gpud not found …"). Asks a short-lived child when isolated (never initialises
/// CUDA here). Cached after the first call. Thread-safe.
std::optional<std::string> gpu_unavailable_reason();

/// Prefix of every kUnsupported reason: "not supported: no kernel image for sm_86 (built for sm_90)".
inline constexpr std::string_view kUnsupportedPrefix = "not supported: ";
/// Status(kNotSupported, "not supported: " + why): a start() failure that makes the state kUnsupported.
Status unsupported_device(const std::string& why);
/// True for a Status made by unsupported_device.
bool is_unsupported_device(const Status& st) noexcept;

/// kInvalidArgument naming the value unless `selector` is "", a device index (0, 1, …) or a GPU-/MIG- UUID.
Status validate_gpu_selector(std::string_view selector);

/// How an isolated executor starts its child on the device that ExecutorOptions::gpu_device selects.
struct ChildDeviceSelection {
  /// The child's CUDA_VISIBLE_DEVICES: one entry of the inherited list (or the selector itself when nothing
  /// was inherited); nullopt leaves the inherited value as it is.
  std::optional<std::string> visible_devices;
  /// A UUID the child looks for among the devices it sees (the inherited list holds indices, so the parent,
  /// which never initialises CUDA, cannot map it); empty: none.
  std::string match_uuid;
};
/// Narrows `inherited` (CUDA_VISIBLE_DEVICES of this process, nullopt when unset) to the device `selector`
/// names, by string only (never calls CUDA). kInvalidArgument for a malformed selector; kNotSupported
/// "not supported: …" for an index past the inherited list or a UUID absent from a list of UUIDs.
Expected<ChildDeviceSelection> select_child_device(std::string_view selector,
                                                   std::optional<std::string_view> inherited);

/// One device as `facetrace info --list-devices` shows it.
struct DeviceListing {
  int index = 0;           ///< ordinal among the devices this process sees (what --gpu-device N selects)
  std::string uuid;        ///< "GPU-…" (cudaDeviceProp::uuid)
  std::string pci_bus_id;  ///< "0000:4E:00.0"
  std::string name;
  int cc_major = 0, cc_minor = 0;
  std::uint64_t total_memory = 0;  ///< bytes
  std::string status;              ///< "ready", or "not supported: no kernel image for sm_86 (built for …)"
};
/// Every device the GPU child would see (CUDA_VISIBLE_DEVICES applies), each checked for a kernel image. Runs
/// `facetrace-gpud --list-devices` when isolated (never initialises CUDA here), enumerates in this process when
/// FACETRACE_GPU_ISOLATION=off. kNotSupported "no GPU: …" / "not supported: …" without any device or driver.
Expected<std::vector<DeviceListing>> list_devices();

}  // namespace facetrace::runtime
