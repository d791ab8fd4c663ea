/// @file
/// Private: the interpreter's cache-blocked SGEMM for convolutions, C = act(bias + A·B), with B read in place (a
/// plain matrix) or packed on the fly (im2col). Each C element is summed by one thread, bias first and then k in
/// ascending order, so results do not depend on the thread count.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace facetrace::faces::detail {

/// An activation fused into a conv epilogue. kRelu is x > 0 ? x : 0; kClip is min(max(x, lo), hi) with the
/// comparisons of std::min/std::max (so results equal a separate Unary step bit for bit).
struct Activation {
  enum class Kind : std::uint8_t { kNone, kRelu, kClip };
  Kind kind = Kind::kNone;
  float lo = 0.0f, hi = 0.0f;
};

/// Applies `act` to one value (the scalar reference of the vector epilogues).
inline float apply_activation(const Activation& act, float v) {
  switch (act.kind) {
    case Activation::Kind::kNone: return v;
    case Activation::Kind::kRelu: return v > 0.0f ? v : 0.0f;
    case Activation::Kind::kClip: {
      const float t = v < act.lo ? act.lo : v;
      return act.hi < t ? act.hi : t;
    }
  }
  return v;
}

/// What a kernel found: every value finite, some value not finite (before the activation), or no memory for its
/// scratch (its output is then incomplete). The kernels never throw; the interpreter turns these into Status.
enum class KernelResult : std::uint8_t { kOk = 0, kNonFinite = 1, kOutOfMemory = 2 };

/// The worse of two results (out of memory over non-finite over ok).
inline KernelResult worst(KernelResult a, KernelResult b) { return a > b ? a : b; }

/// Collects the results of a parallel loop's tasks. Thread-safe.
class ResultFlags {
 public:
  void add(KernelResult r) {
    if (r != KernelResult::kOk) bits_.fetch_or(static_cast<std::uint8_t>(r), std::memory_order_relaxed);
  }
  KernelResult get() const {
    const unsigned b = bits_.load(std::memory_order_relaxed);
    return b & 2u ? KernelResult::kOutOfMemory : b ? KernelResult::kNonFinite : KernelResult::kOk;
  }

 private:
  std::atomic<std::uint8_t> bits_{0};
};

/// The K block of the SGEMM: BSource::pack is called with kc ≤ kMaxPackRows.
inline constexpr std::int64_t kMaxPackRows = 256;

/// Supplies B (k × n) by packing a block into NR-column panels: dst[p·kc·nr + kk·nr + jj] = B[k0+kk][n0+p·nr+jj],
/// zero beyond n.
class BSource {
 public:
  virtual ~BSource() = default;
  virtual void pack(std::int64_t k0, std::int64_t kc, std::int64_t n0, std::int64_t nc, float* dst,
                    int nr) const = 0;
  /// A row-major matrix the micro-kernel may read in place (with direct_ldb()), or null.
  virtual const float* direct() const { return nullptr; }
  virtual std::int64_t direct_ldb() const { return 0; }
};

/// B as a row-major matrix with leading dimension ldb.
class MatrixB final : public BSource {
 public:
  MatrixB(const float* b, std::int64_t n, std::int64_t ldb) : b_(b), n_(n), ldb_(ldb) {}
  void pack(std::int64_t k0, std::int64_t kc, std::int64_t n0, std::int64_t nc, float* dst,
            int nr) const override;
  const float* direct() const override { return b_; }
  std::int64_t direct_ldb() const override { return ldb_; }

 private:
  const float* b_;
  std::int64_t n_, ldb_;
};

/// B = im2col of `cin` channels of an h×w input for a kh×kw kernel (k = cin·kh·kw rows, n = oh·ow columns).
class Im2colB final : public BSource {
 public:
  Im2colB(const float* x, std::int64_t h, std::int64_t w, std::int64_t kh, std::int64_t kw, std::int64_t sh,
          std::int64_t sw, std::int64_t pt, std::int64_t pl, std::int64_t oh, std::int64_t ow)
      : x_(x), h_(h), w_(w), kh_(kh), kw_(kw), sh_(sh), sw_(sw), pt_(pt), pl_(pl), oh_(oh), ow_(ow) {}
  void pack(std::int64_t k0, std::int64_t kc, std::int64_t n0, std::int64_t nc, float* dst,
            int nr) const override;

 private:
  const float* x_;
  std::int64_t h_, w_, kh_, kw_, sh_, sw_, pt_, pl_, oh_, ow_;
};

/// C (m × n, leading dimension ldc) = act(bias + A·B): A is m × k row-major (lda, read in place), bias [m] or null
/// (zero). kNonFinite when some value before the activation is not finite; kOutOfMemory when a thread's packing
/// scratch could not be allocated.
KernelResult sgemm_bias_act(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
                            const float* bias, const BSource& b, float* c, std::int64_t ldc,
                            const Activation& act, int threads);

/// Name of the micro-kernel in use ("avx2-fma 6x16" or "sse2 4x8").
const char* sgemm_kernel_name();

}  // namespace facetrace::faces::detail
