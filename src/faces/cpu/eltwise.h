/// @file
/// Private: the element-wise, pooling, resize, transpose and GEMV kernels of the CPU interpreter (docs/design/faces.md §2, §3),
/// and the helpers that split element-wise work across threads.
#pragma once

#include <algorithm>
#include <cstdint>

#include "facetrace/core/parallel.h"
#include "facetrace/faces/program.h"

namespace facetrace::faces::detail {

/// True when every value of x[0..n) is finite.
bool all_finite(const float* x, std::int64_t n);

/// One channel of a MaxPool (in: h×w, out: oh×ow); running max in window order.
void maxpool_channel(const MaxPoolOp& m, const float* in, float* out);

/// out = a ∘ b with the op's broadcast strides.
void binary(const BinaryOp& op, const float* a, const float* b, float* y);

/// y = x permuted as `op` says.
void transpose(const TransposeOp& op, const float* x, float* y);

/// y = α·x·W + β·bias (bias may be null), summed in double in ascending order.
void gemv(const GemvOp& op, const float* x, const float* w, const float* bias, float* y, int threads);

/// y[i] = max(x[i], 0) (as x > 0 ? x : 0) over n values.
void relu_range(const float* __restrict x, float* __restrict y, std::int64_t n);
/// y[i] = min(max(x[i], lo), hi) over n values.
void clip_range(const float* __restrict x, float* __restrict y, std::int64_t n, float lo, float hi);

/// The Unary op over len values.
void unary(const UnaryOp& u, const float* x, float* y, std::int64_t len, int threads);
/// y = x·sc[c] + sh[c].
void channel_affine(const ChannelAffineOp& a, const float* x, const float* sc, const float* sh, float* y,
                    int threads);
/// y = x ≥ 0 ? x : sl[c]·x.
void channel_prelu(const ChannelPreluOp& pr, const float* x, const float* sl, float* y, int threads);
/// Every channel of a MaxPool.
void maxpool(const MaxPoolOp& m, const float* x, float* y, int threads);
/// Integer nearest up-scale of every channel.
void resize_nearest(const ResizeOp& r, const float* x, float* y, int threads);
/// y[c] = mean of channel c, summed in double.
void global_average(const GlobalAverageOp& g, const float* x, float* y);

/// A nearest Resize fused with the element-wise Binary (no broadcasting) that is its only reader: the up-scaled
/// tensor is never stored. x: the Resize input, o: the Binary's other operand, side: the Binary operand the Resize
/// feeds (0 or 1). The same values as the two steps run apart. False when an output is not finite.
bool resize_binary(const ResizeOp& r, BinaryKind kind, int side, const float* x, const float* o, float* y,
                   int threads);

// Element-wise work above this many floats is split across threads.
constexpr std::int64_t kParallelGrain = 1 << 15;

// Runs fn(begin, end) over [0, n) in chunks (threads across chunks when n is large).
template <class F>
void chunked(std::int64_t n, int threads, F&& fn) {
  if (threads == 1 || n < 2 * kParallelGrain) {
    fn(std::int64_t{0}, n);
    return;
  }
  const std::int64_t chunks = (n + kParallelGrain - 1) / kParallelGrain;
  core::parallel_for(chunks, threads,
                     [&](std::int64_t c) { fn(c * kParallelGrain, std::min(n, (c + 1) * kParallelGrain)); });
}

// Runs fn(i) for i in [0, n) where each index covers `work` floats; threads only when the total is large.
template <class F>
void per_index(std::int64_t n, std::int64_t work, int threads, F&& fn) {
  if (threads == 1 || n * work < 2 * kParallelGrain || n < 2) {
    for (std::int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  core::parallel_for(n, threads, fn);
}

}  // namespace facetrace::faces::detail
