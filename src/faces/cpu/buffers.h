/// @file
/// Private: the CPU interpreter's memory: 64-byte aligned activation buffers, the per-run set of them with the
/// per-thread cache of earlier runs, and the per-thread kernel scratch.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace facetrace::faces::detail {

/// A 64-byte aligned activation buffer (no zero fill). Buffers start at 64-byte offsets that differ between
/// buffers modulo 4 KiB (planes are often whole multiples of 4 KiB, and a kernel reading one buffer while writing
/// another at the same offset stalls on 4K aliasing). Move-only. Allocation never throws: a buffer that could not be
/// allocated is empty (p null).
struct Buf {
  float* p = nullptr;
  std::int64_t cap = 0;
  std::int64_t skew = 0;
  Buf() = default;
  explicit Buf(std::int64_t n);
  Buf(Buf&& o) noexcept
      : p(std::exchange(o.p, nullptr)), cap(std::exchange(o.cap, 0)), skew(std::exchange(o.skew, 0)) {}
  Buf& operator=(Buf&& o) noexcept {
    if (this != &o) {
      release();
      p = std::exchange(o.p, nullptr);
      cap = std::exchange(o.cap, 0);
      skew = std::exchange(o.skew, 0);
    }
    return *this;
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  ~Buf() { release(); }
  void release();
};

/// The activation buffers of one run of a program (one per value). Released buffers are reused best-fit within
/// [len, 2·len]; the set starts from this thread's cache of earlier runs and, when destroyed, gives the buffers
/// this run used back to it (no page faults, no zero fill on the next run; at most 64 MiB per thread, so batch
/// runs keep one cache per worker). Not thread-safe: one per run.
class Activations {
 public:
  explicit Activations(std::size_t values);
  ~Activations();
  Activations(const Activations&) = delete;
  Activations& operator=(const Activations&) = delete;

  /// A buffer of at least len floats (contents undefined); empty (p null) when out of memory.
  Buf acquire(std::int64_t len);
  /// Value v's buffer becomes b.
  void set(std::int32_t v, Buf b) { vals_[static_cast<std::size_t>(v)] = std::move(b); }
  /// Value v's data (null before it is set).
  float* data(std::int32_t v) const { return vals_[static_cast<std::size_t>(v)].p; }
  /// Value v's buffer goes back to the free list (no-op when it has none).
  void release(std::int32_t v);

 private:
  std::vector<Buf> vals_;
  std::vector<Buf> free_;
  std::vector<const float*> acquired_;  // buffers this run used: back to the cache at the end
};

/// A per-thread scratch buffer of at least n floats (64-byte aligned), reused between calls on the thread. The
/// `slot` (0..3) picks one of a few independent buffers. Valid until the next call with the same slot on this thread.
/// Null when out of memory (never throws, so kernels can call it inside a parallel loop).
float* thread_scratch(int slot, std::int64_t n);

}  // namespace facetrace::faces::detail
