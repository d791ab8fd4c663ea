/// @file
/// The workload seam on the device side: ops. An op is a registered function that runs inside the process
/// that owns CUDA (the GPU child, or this process for the in-process executor) and is invoked by id with
/// small inline arguments, arena regions for bulk input/output, and a deadline. The tracer and the face
/// networks add their own ops here; the executor protocol never changes for them (docs/runtime.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "facetrace/core/status.h"
#include "facetrace/runtime/device_info.h"
#include "facetrace/runtime/readback_ring.h"

struct CUstream_st;  // cudaStream_t without <cuda_runtime.h>

namespace facetrace::runtime {

/// Op identifiers. Ranges: 0x0000'0000–0x0000'FFFF runtime (below), 0x0001'xxxx tracer, 0x0002'xxxx faces.
using OpId = std::uint32_t;

/// Built-in ops of the runtime (test workload and fault injection).
namespace ops {
inline constexpr OpId kFillRamp = 0x0001;     ///< args FillRampArgs; result copied into one ring slot
inline constexpr OpId kSumFloats = 0x0002;    ///< in: floats; reply: one double (sum)
inline constexpr OpId kSpin = 0x0003;         ///< args: u32 milliseconds of device busy-wait (hang tests)
inline constexpr OpId kResidentSum = 0x0004;  ///< args: resident name; reply: double sum of its floats
inline constexpr OpId kSimCrash = 0x0005;  ///< simulated executor only: the process exits at once (EOF tests)
}  // namespace ops

/// Arguments of ops::kFillRamp: v[i] = base + step·(first + i) for i in [0, count), as f32.
struct FillRampArgs {
  std::uint64_t first = 0;
  std::uint64_t count = 0;
  float base = 0.0f;
  float step = 0.0f;
  std::uint32_t buffer =
      0;  ///< 0 or 1: device buffer to fill (alternate so the chunk in flight stays intact)
  std::uint32_t reserved = 0;
};

/// A device buffer view.
struct DeviceSpan {
  void* data = nullptr;
  std::uint64_t bytes = 0;
};

/// What an op may use: the stream, named device buffers and the readback ring. Implemented by the CUDA device
/// of the in-process executor and of facetrace-gpud. Used only on the thread that runs the op.
class DeviceContext {
 public:
  virtual ~DeviceContext() = default;
  /// The compute stream (non-blocking; never the legacy default stream).
  virtual CUstream_st* stream() = 0;
  /// The readback ring; slots live in the shared arena when isolated.
  virtual ReadbackRing& ring() = 0;
  /// A persistent named device buffer of at least `bytes` (grown on demand; contents undefined after growth).
  /// Lost with the device; not re-uploaded (use residents for that). kOutOfMemory / kDeviceLost.
  virtual Expected<DeviceSpan> scratch(std::string_view name, std::uint64_t bytes) = 0;
  /// A buffer uploaded with Executor::put_resident (re-uploaded automatically after a respawn);
  /// kInvalidArgument when absent.
  virtual Expected<DeviceSpan> resident(std::string_view name) = 0;
  /// The device.
  virtual const DeviceInfo& info() const = 0;
};

/// What an op returns besides its Status: small inline bytes and ring tickets to collect.
struct OpReply {
  std::vector<std::byte> bytes;     ///< ≤ kMaxInlineBytes
  std::vector<RingTicket> tickets;  ///< results waiting in ring slots (Executor::collect)
  static constexpr std::size_t kMaxInlineBytes = 32 * 1024;

  /// Appends a trivially copyable value to `bytes`.
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const std::size_t n = bytes.size();
    bytes.resize(n + sizeof(T));
    std::memcpy(bytes.data() + n, &v, sizeof(T));
  }
  /// Reads a value at `offset` of `bytes`; false when too short.
  template <class T>
  bool get(T& v, std::size_t offset = 0) const {
    static_assert(std::is_trivially_copyable_v<T>);
    if (offset + sizeof(T) > bytes.size()) return false;
    std::memcpy(&v, bytes.data() + offset, sizeof(T));
    return true;
  }
};

/// One op invocation as the handler sees it. `in`/`out` are host views into the shared arena (page-locked,
/// so cudaMemcpyAsync to/from them is a DMA).
struct OpArgs {
  std::span<const std::byte> args;
  std::span<std::byte> in;
  std::span<std::byte> out;
  OpReply& reply;

  /// Reads `args` as one trivially copyable struct; kInvalidArgument when the size differs.
  template <class T>
  Status args_as(T& v) const {
    static_assert(std::is_trivially_copyable_v<T>);
    if (args.size() != sizeof(T))
      return invalid_argument("op args are " + std::to_string(args.size()) + " bytes, expected " +
                              std::to_string(sizeof(T)));
    std::memcpy(&v, args.data(), sizeof(T));
    return {};
  }
};

/// An op handler. Returns kDeviceLost for sticky CUDA errors (FT_CUDA_TRY does this), kDeclined for
/// "cannot run this here", kOutOfMemory, kInvalidArgument. Must not block past the command deadline.
using OpHandler = std::function<Status(DeviceContext&, const OpArgs&)>;

/// The table OpId → handler. Thread-safe. The process-wide instance is what the in-process executor and
/// facetrace-gpud dispatch through; areas add their ops with a provider function (idempotent).
class OpRegistry {
 public:
  using Provider = void (*)(OpRegistry&);
  /// The process-wide registry, holding the runtime's built-in ops (CUDA builds).
  static OpRegistry& global();
  /// Registers `handler` under `id`; kInvalidArgument when `id` is taken.
  Status add(OpId id, std::string name, OpHandler handler);
  /// Calls `provider(*this)` once per provider pointer (later calls are no-ops).
  void add_provider(Provider provider);
  /// The handler, or nullptr.
  const OpHandler* find(OpId id) const;
  /// "fill_ramp" etc., or "op 0x…" when unknown.
  std::string name(OpId id) const;
  /// Registered ids, ascending.
  std::vector<OpId> ids() const;

 private:
  struct Entry {
    std::string name;
    OpHandler handler;
  };
  mutable std::mutex mu_;
  std::map<OpId, Entry> ops_;
  std::vector<Provider> providers_;
};

}  // namespace facetrace::runtime
