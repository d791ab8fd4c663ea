/// @file
/// Activation buffers, the per-thread cache of earlier runs' buffers and the per-thread kernel scratch.
#include "cpu/buffers.h"

#include <algorithm>
#include <new>

namespace facetrace::faces::detail {
namespace {

constexpr std::int64_t kCacheFloats = std::int64_t{16} << 20;  // 64 MiB per thread

// Released activation buffers of finished runs on this thread, reused by the next run.
std::vector<Buf>& buffer_cache() {
  thread_local std::vector<Buf> cache;
  return cache;
}

constexpr std::int64_t kScratchSkew = 16 * 8;  // floats: room for the per-slot offset

struct ScratchBuf {
  float* p = nullptr;
  std::int64_t cap = 0;
  ~ScratchBuf() { ::operator delete (p, std::align_val_t{64}); }
};

}  // namespace

Buf::Buf(std::int64_t n) {
  thread_local std::uint32_t serial = 0;
  const std::int64_t sk = 16 * static_cast<std::int64_t>(1 + (serial++ * 5) % 31);  // floats, 64-byte steps
  void* raw =
      ::operator new (static_cast<std::size_t>(n + sk) * sizeof(float), std::align_val_t{64}, std::nothrow);
  if (!raw) return;  // empty: the caller reports out of memory
  p = static_cast<float*>(raw) + sk;
  cap = n;
  skew = sk;
}

void Buf::release() {
  if (p) ::operator delete (p - skew, std::align_val_t{64});
  p = nullptr;
  cap = 0;
  skew = 0;
}

Activations::Activations(std::size_t values) : vals_(values), free_(std::exchange(buffer_cache(), {})) {}

Activations::~Activations() {
  std::vector<Buf> keep;
  for (auto& v : vals_)
    if (v.p) keep.push_back(std::move(v));
  for (auto& b : free_)
    if (std::find(acquired_.begin(), acquired_.end(), b.p) != acquired_.end()) keep.push_back(std::move(b));
  std::int64_t total = 0;
  std::vector<Buf> kept;
  for (auto& b : keep)
    if (total + b.cap <= kCacheFloats) {
      total += b.cap;
      kept.push_back(std::move(b));
    }
  buffer_cache() = std::move(kept);
}

Buf Activations::acquire(std::int64_t len) {
  std::size_t best = free_.size();
  for (std::size_t q = 0; q < free_.size(); ++q)
    if (free_[q].cap >= len && free_[q].cap <= 2 * len &&
        (best == free_.size() || free_[q].cap < free_[best].cap))
      best = q;
  Buf b;
  if (best < free_.size()) {
    b = std::move(free_[best]);
    free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
  } else {
    b = Buf(std::max<std::int64_t>(len, 1));
    if (!b.p) return b;
  }
  acquired_.push_back(b.p);
  return b;
}

void Activations::release(std::int32_t v) {
  Buf& b = vals_[static_cast<std::size_t>(v)];
  if (b.p) free_.push_back(std::move(b));
}

float* thread_scratch(int slot, std::int64_t n) {
  thread_local ScratchBuf bufs[4];
  ScratchBuf& b = bufs[slot];
  if (b.cap < n) {
    ::operator delete (b.p, std::align_val_t{64});
    b.p = static_cast<float*>(::operator new (static_cast<std::size_t>(n + kScratchSkew) * sizeof(float),
                                              std::align_val_t{64}, std::nothrow));
    b.cap = b.p ? n : 0;
    if (!b.p) return nullptr;
  }
  // each slot starts at a different offset modulo 4 KiB, so a kernel streaming from one slot into another (or
  // into an activation buffer) does not hit 4K-aliasing stalls between its stores and the next loads
  return b.p + 16 * (2 * slot + 1);
}

}  // namespace facetrace::faces::detail
