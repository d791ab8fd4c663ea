/// @file
/// GpuBackend: decline-and-fall-back GPU access shared by every GPU workload (docs/design/tracer.md §10.3–10.6).
/// Requests run in turns of kChunksPerTurn chunks through a FIFO Turnstile, accumulate into pooled scratch
/// seeded with the caller's buffer, and reach the caller's buffer only on Done. A device loss declines the
/// request (the caller redoes it on the CPU) and starts the RecoveryPolicy. The chunk logic itself comes from
/// a Workload (the host-side seam; ops are the device-side seam, op.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "facetrace/core/status.h"
#include "facetrace/runtime/executor.h"
#include "facetrace/runtime/recovery_policy.h"
#include "facetrace/runtime/turnstile.h"

namespace facetrace::runtime {

/// How a request ended (docs/design/tracer.md §10.4).
enum class Outcome : std::uint8_t {
  kDone,       ///< the scratch was committed to the caller's buffer
  kDeclined,   ///< caller's buffer untouched; redo the whole request on the CPU
  kCancelled,  ///< caller's buffer untouched; nothing to redo
};
/// "Done", "Declined", "Cancelled".
std::string_view outcome_name(Outcome o) noexcept;

/// One request's chunk logic, supplied by the workload (the tracer, the face networks, the test ramp).
/// The backend calls, in order: can_run → scratch_bytes/seed_scratch → per turn { begin_turn → up to
/// kChunksPerTurn × run_chunk → drain } → commit (Done only). Every non-ok Status from a hook ends the
/// request: kDeviceLost marks the backend lost, anything else declines only this request. Hooks run on the
/// calling thread while it holds the turn; they talk to the device only through `ex`.
class Workload {
 public:
  virtual ~Workload() = default;
  /// Can this request run on this device at all? Non-ok (e.g. kDeclined "needs Tier 3") declines it before
  /// any GPU work.
  virtual Status can_run(const DeviceInfo& /*device*/) { return {}; }
  /// Size of the host scratch the request accumulates into (usually the caller's buffer size).
  virtual std::size_t scratch_bytes() const = 0;
  /// Prepares the scratch so that results continue the caller's current values (running sums continue sample
  /// by sample): copy them in, or — when every element is overwritten by exactly one chunk — read them per chunk.
  virtual void seed_scratch(std::span<std::byte> scratch) = 0;
  /// Start of each turn: (re-)upload per-request device state (another request may have replaced it).
  virtual Status begin_turn(Executor& /*ex*/) { return {}; }
  /// Runs the next chunk (it may stay in flight: at most one) and adds finished results into `scratch`.
  /// Returns true while chunks remain to be issued after this one; false once the last chunk is issued (it
  /// may still be in flight: drain() collects it — in a batch, after the next item's first chunk is queued).
  virtual Expected<bool> run_chunk(Executor& ex, std::span<std::byte> scratch) = 0;
  /// Waits for the chunk in flight, if any; adds it into `scratch` unless `discard` (cancellation).
  virtual Status drain(Executor& /*ex*/, std::span<std::byte> /*scratch*/, bool /*discard*/) { return {}; }
  /// Done: writes the scratch into the caller's buffer. Called exactly once, only on Done.
  virtual void commit(std::span<const std::byte> scratch) = 0;
};

/// Callback of accumulate_batch: (item index, outcome), called exactly once per item, in input order.
using BatchCallback = std::function<void(std::size_t, Outcome)>;

/// What the backend is doing. kUnsupported: a GPU is there but this build cannot use it (the executor's
/// kUnsupported: no kernel image for its architecture, a driver too old for the CUDA runtime, a GPU selector
/// naming no visible device); like kNone it never retries, but it is a deployment error worth a warning.
enum class BackendState : std::uint8_t { kReady, kLost, kNone, kUnsupported };

class ChunkStream;
class ScratchPool;

/// The shared GPU. Thread-safe: many threads call accumulate concurrently; the turnstile orders them.
class GpuBackend {
 public:
  /// Starts the executor chosen by FACETRACE_GPU_ISOLATION. Never fails: a machine without a usable GPU gives
  /// a backend whose every call declines (logged at info, reason in unavailable_reason()).
  static std::unique_ptr<GpuBackend> acquire();
  /// A backend around `executor` (started here if not started yet) with a policy clock (tests: ManualClock).
  static std::unique_ptr<GpuBackend> with_executor(std::unique_ptr<Executor> executor,
                                                   const Clock& clock = SteadyClock::instance(),
                                                   RecoveryConfig config = RecoveryConfig::from_env());
  /// Never touches a GPU: every call declines with `why`.
  static std::unique_ptr<GpuBackend> disabled(std::string why = "GPU backend disabled");
  ~GpuBackend();
  GpuBackend(const GpuBackend&) = delete;
  GpuBackend& operator=(const GpuBackend&) = delete;

  /// Runs one request in turns (a stream of one item: the loop of accumulate_batch). Checks `cancel` (may be
  /// null) before every chunk and once more after the last one. Declines without touching anything when
  /// disabled, without a GPU, or lost (after trying try_recover()).
  Outcome accumulate(Workload& work, const std::atomic<bool>* cancel = nullptr);
  /// As above; when the outcome is kDeclined, `why` says why: code kDeviceLost when the device was (or had
  /// been, and is not yet back) lost, kNotSupported when there is no usable GPU, any other code when the
  /// workload or the device refused this request alone. Untouched otherwise.
  Outcome accumulate(Workload& work, const std::atomic<bool>* cancel, Status* why);
  /// Runs `items` as one chunk stream, keeping the turn while nobody else waits and yielding after
  /// kChunksPerTurn chunks once someone does. `on_done` fires exactly once per item, in input order. An item
  /// whose can_run fails is declined alone; a device loss declines every item not yet reported; cancellation
  /// cancels the current item and all later ones (the last item also when it arrives during its last chunk).
  void accumulate_batch(std::span<Workload* const> items, const std::atomic<bool>* cancel,
                        const BatchCallback& on_done);
  /// As above; every item reported kDeclined gets its reason in why[index] (accumulate's `why` rules).
  /// `why` has one element per item.
  void accumulate_batch(std::span<Workload* const> items, const std::atomic<bool>* cancel,
                        const BatchCallback& on_done, std::span<Status> why);

  BackendState state() const;
  /// True while the device is lost (every call declines until a recovery succeeds).
  bool is_lost() const { return lost_.load(std::memory_order_acquire); }
  /// The reason of the latest loss (kept after a recovery); nullopt before any loss.
  std::optional<std::string> last_lost_reason() const;
  /// "NVIDIA H200 (sm_90, isolated)"; nullopt when disabled, without a GPU, or while lost.
  std::optional<std::string> adapter_label() const;
  /// Why there is no GPU at all (disabled / none / not supported: "not supported: no kernel image for sm_86
  /// (built for sm_90, compute_90)"); nullopt when there is or was one.
  std::optional<std::string> unavailable_reason() const;
  /// Brings a lost device back if the policy allows now and no other thread is trying; true when usable on
  /// return (false for a backend that never had a GPU: it never retries). Never blocks behind another recovery.
  bool try_recover();
  /// Starts try_recover() on a background thread when the device is lost, the policy allows an attempt now and
  /// no recovery runs yet; returns at once, so the caller keeps the CPU busy while the replacement starts (the
  /// render loop's CPU lane, docs/design/tracer.md §10.7). The destructor waits for that thread.
  void start_recovery();
  /// True while start_recovery()'s thread runs.
  bool recovering_in_background() const { return background_recovery_.load(std::memory_order_acquire); }
  /// Successful replacements of a lost device so far (try_recover returning true after a loss): a workload that
  /// keeps state on the device (face networks' checks) compares it to notice a new device.
  std::uint64_t recoveries() const { return recoveries_.load(std::memory_order_acquire); }
  /// Replacements tried so far (successful or not): for the isolated executor, GPU children spawned after a loss.
  std::uint64_t recovery_attempts() const { return recovery_attempts_.load(std::memory_order_acquire); }
  /// Every device loss so far, counted by its reason (as last_lost_reason() gives it); for --metrics-file.
  std::map<std::string, std::uint64_t> losses_by_reason() const;

  /// The executor (nullptr when disabled); for info, residents and fault injection. Do not call invoke()
  /// outside a turn: use accumulate.
  Executor* executor() { return executor_.get(); }
  /// The device, cached at start (nullopt when none).
  std::optional<DeviceInfo> device_info() const;
  const RecoveryPolicy& recovery() const { return policy_; }
  Turnstile& turnstile() { return turnstile_; }
  /// Scratch buffers currently pooled (≤ 2).
  std::size_t pooled_scratch() const;

 private:
  GpuBackend(std::unique_ptr<Executor> executor, const Clock& clock, RecoveryConfig config);
  void start_executor();
  friend class ChunkStream;  // the one chunk loop (backend/chunk_stream.h) runs on these members
  void note_error(const Status& st, const char* what);
  void mark_lost(std::string reason);

  std::unique_ptr<Executor> executor_;
  Turnstile turnstile_;
  RecoveryPolicy policy_;
  std::atomic<bool> lost_{false};
  std::atomic<bool> recovering_{false};
  std::atomic<std::uint64_t> recoveries_{0};
  std::atomic<std::uint64_t> recovery_attempts_{0};
  bool never_had_gpu_ = true;
  bool unsupported_ = false;  ///< never_had_gpu_ because the GPU is not supported by this build
  std::string none_reason_;
  std::mutex recovery_thread_mu_;  // recovery_thread_
  std::thread recovery_thread_;    // start_recovery()
  std::atomic<bool> background_recovery_{false};
  std::unique_ptr<ScratchPool> scratch_;  // requests lease their scratch here (backend/scratch_lease.h)
  mutable std::mutex mu_;                 // last_lost_reason_, losses_, info_
  std::optional<std::string> last_lost_reason_;
  std::map<std::string, std::uint64_t> losses_;  // by reason
  std::optional<DeviceInfo> info_;
};

/// The process-wide backend (GpuBackend::acquire on first use), shared by renders and face networks so that they
/// take turns on one device and one GPU child. Thread-safe; lives until exit.
GpuBackend& shared_backend();

/// How long a device wait expected to take `expected` may take before the device counts as hung (a lost device,
/// docs/design/tracer.md §10.2): kHangFactor × expected, at least kHangFloor.
std::chrono::milliseconds hang_deadline(std::chrono::duration<double, std::milli> expected);
inline constexpr double kHangFactor = 10.0;                   // docs/design/tracer.md §10.2
inline constexpr std::chrono::milliseconds kHangFloor{1000};  // docs/design/tracer.md §10.2

/// At most this many scratch buffers stay pooled between requests.
inline constexpr std::size_t kMaxPooledScratch = 2;  // docs/design/tracer.md §10.3

}  // namespace facetrace::runtime
