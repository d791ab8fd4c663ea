/// @file
/// SimulatedExecutor: an Executor whose "device" is host code, with a loss switch — the CPU-only test bed for
/// everything above the executor (backend, recovery, turnstile, protocol server).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "facetrace/runtime/executor.h"

namespace facetrace::runtime {

/// The simulated device an op handler sees. Handlers run inside Executor::invoke with the executor's lock held,
/// so a handler must not call the executor's own members (emit and resident are the device).
class SimDevice {
 public:
  virtual ~SimDevice() = default;
  /// Copies `bytes` into a simulated ring slot in the arena's ring region and returns its ticket.
  virtual Expected<RingTicket> emit(std::span<const std::byte> bytes) = 0;
  /// A resident's bytes; kInvalidArgument when absent.
  virtual Expected<std::span<const std::byte>> resident(std::string_view name) = 0;
};

/// A simulated op.
using SimOpHandler = std::function<Status(SimDevice&, const OpArgs&)>;

class SimulatedExecutor : public Executor {
 public:
  /// Registers (or replaces) a simulated op.
  virtual void add_op(OpId id, SimOpHandler handler) = 0;
  /// The next `n`-th invoke (1 = the next one) reports a device loss instead of running; 0 disarms.
  virtual void arm_loss_on_invoke(int n) = 0;
  /// The next `n`-th invoke (1 = the next one) hangs: its ring slots never complete, so waiting on them takes the
  /// whole deadline and then reports a device loss, as a hung GPU would; 0 disarms.
  virtual void arm_hang_on_invoke(int n) = 0;
  /// The deadline of the latest ring wait (0 before any), for tests of the hang deadline.
  virtual std::chrono::milliseconds last_ring_wait_deadline() const = 0;
  /// Makes restart() fail (as if the new child could not start).
  virtual void set_restart_fails(bool fails) = 0;
  /// Makes restart() sleep first (a slow child start-up).
  virtual void set_restart_delay(std::chrono::milliseconds d) = 0;
  /// Makes start() report "no GPU" (a machine that never had one).
  virtual void set_no_gpu(bool none) = 0;
  /// Makes start() report "not supported: <why>" (state kUnsupported: a GPU this build cannot use); "" undoes
  /// it. FACETRACE_SIMULATED_GPU_UNSUPPORTED=<why> does the same for a simulated child (facetrace-gpud
  /// --simulate). Start-up also simulates one device per CUDA_VISIBLE_DEVICES entry and applies
  /// ExecutorOptions::gpu_device / local_rank to them (DeviceInfo::ordinal, uuid, visible_devices).
  virtual void set_unsupported(std::string why) = 0;
  /// Counters for tests.
  virtual int invokes() const = 0;
  virtual int restarts() const = 0;
  virtual int resident_uploads() const = 0;
};

}  // namespace facetrace::runtime
